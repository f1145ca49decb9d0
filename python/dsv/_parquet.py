"""The row groups of a version's Parquet files, and their split between workers.

The plan of a reader of rows (``dsv.torch.ParquetRowDataset``, and engines that read a
version's Parquet files in parallel): every row group of every Parquet file ``include``
selects, from the files' footers alone (each footer is a ranged read of the end of its file
through dsv; no column data is read), and a split of those row groups into ``parts`` disjoint
shares balanced by rows or bytes, the same on every machine.

Needs ``pyarrow`` (imported when first used).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, NamedTuple, Optional, Sequence, Union

from .errors import InvalidParquet

# Files whose footers row_groups reads at once.
_FOOTER_THREADS = 16

__all__ = ["RowGroup", "row_groups", "assign", "open_parquet"]

Include = Union[str, Sequence[str], None]


class RowGroup(NamedTuple):
    """One row group of a Parquet file of a version."""

    path: str
    """The file's path in the version."""
    index: int
    """The row group's index in the file (from 0), as ``ParquetFile.read_row_group`` takes it."""
    rows: int
    """Its number of rows."""
    bytes: int
    """Its size in the file: the compressed size of its column chunks, in bytes."""


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(f"reading the rows of Parquet files needs pyarrow (pip install pyarrow): {e}") from None
    return pq


def open_parquet(version: Any, path: str) -> Any:
    """``pyarrow.parquet.ParquetFile`` over file ``path`` of ``version``, read through
    ``version.open`` (ranged reads: only the footer now, the row groups asked for later).
    Raises :class:`dsv.InvalidParquet` when the file is not a Parquet file (a dsv error
    naming the file, not pyarrow's), and dsv's errors for the path (``PathNotFound``, ...)."""
    pq = _pyarrow_parquet()
    import pyarrow as pa

    source = version.open(path)
    try:
        return pq.ParquetFile(source)
    except (pa.ArrowException, OSError, ValueError) as e:
        source.close()
        error = InvalidParquet(
            f"{path} of {version.revision} is not a Parquet file\n"
            f"caused by: {e}\n"
            "hint: select only Parquet files with include= (a glob such as \"**/*.parquet\", or a list of paths)",
            path=path,
        )
        error.causes = [str(e)]
        error.hints = ['select only Parquet files with include= (a glob such as "**/*.parquet", or a list of paths)']
        raise error from None


def row_groups(
    version: Any, include: Include = "**/*.parquet", columns: Optional[Sequence[str]] = None
) -> List[RowGroup]:
    """Every row group of the Parquet files of ``version`` that ``include`` selects (a glob,
    or a list of globs or paths, as ``Version.files`` takes it), in path order, then row
    group order: read from the files' footers only (16 files at a time, on threads: from a
    remote, the footers' fetches overlap). With ``columns``, checks that every file
    has those columns. Raises :class:`dsv.InvalidParquet` when a selected file is not a
    Parquet file, ``ValueError`` when a file lacks one of ``columns``, ``dsv.Error`` when
    ``include`` selects no file (``Version.files``' error), ``dsv.InvalidPattern`` for a glob
    that does not parse."""
    if isinstance(columns, str):
        raise ValueError(f"columns must be a list of column names, not the string {columns!r}")
    paths = version.files(include)
    if not paths:
        raise ValueError(f"no file of {version.revision} matches {include!r}")
    with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, len(paths)), thread_name_prefix="dsv-footer") as pool:
        per_file = list(pool.map(lambda path: _file_row_groups(version, path, columns), paths))
    return [group for groups in per_file for group in groups]


def _file_row_groups(version: Any, path: str, columns: Optional[Sequence[str]]) -> List[RowGroup]:
    """The row groups of file ``path``, from its footer (see :func:`row_groups`)."""
    parquet = open_parquet(version, path)
    try:
        if columns is not None:
            names = parquet.schema_arrow.names
            missing = [c for c in columns if c not in names and c.split(".")[0] not in names]
            if missing:
                raise ValueError(
                    f"{path} of {version.revision} has no column {', '.join(map(repr, missing))}: "
                    f"its columns are {', '.join(names)}"
                )
        metadata = parquet.metadata
        out = []
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            size = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
            out.append(RowGroup(path, index, int(group.num_rows), int(size)))
        return out
    finally:
        parquet.close(force=True)


def assign(groups: Sequence[RowGroup], part: int, parts: int, by: str = "rows") -> List[RowGroup]:
    """The row groups of share ``part`` of ``parts`` (from 0), in the order of ``groups``:
    ``groups`` cut into ``parts`` consecutive runs of about equal total rows (``by="rows"``)
    or bytes (``by="bytes"``). A row group goes to the share that holds its middle row (or
    byte) when the total is cut into equal parts, so the shares are disjoint, cover every
    group once, differ by at most about one row group, and keep neighbouring groups (of one
    file, mostly) together. The same on every machine. A share may be empty when there are
    fewer row groups than shares. Raises ``dsv.InvalidShard`` unless ``0 <= part < parts``,
    ``ValueError`` for another ``by``."""
    from .errors import InvalidShard

    if parts < 1:
        raise InvalidShard(f"invalid number of parts {parts}: it must be at least 1")
    if not 0 <= part < parts:
        raise InvalidShard(f"invalid part {part} of {parts}: the part counts from 0 and must be less than {parts}")
    if by not in ("rows", "bytes"):
        raise ValueError(f"by must be 'rows' or 'bytes', not {by!r}")
    weights = [g.rows if by == "rows" else g.bytes for g in groups]
    total = sum(weights)
    if total == 0:
        # Nothing to balance (empty groups): deal them out in turn.
        return list(groups[part::parts])
    out = []
    start = 0
    for group, weight in zip(groups, weights):
        # The share holding the group's middle: floor((start + weight / 2) * parts / total).
        share = min(parts - 1, (2 * start + weight) * parts // (2 * total))
        if share == part:
            out.append(group)
        start += weight
    return out
