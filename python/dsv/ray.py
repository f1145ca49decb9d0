"""Ray Data over a dsv version: one read task per dsv shard, on any node of the cluster.

::

    import ray, dsv.ray
    ds = dsv.ray.read_version("covid@v1", remote="s3://bucket/datasets", format="parquet")
    ds.sum("confirmed")

**One version per job.** The revision (``covid@v1``, or ``covid``: the head) is resolved
once, on the driver, when ``read_version`` is called; the read tasks carry the resolved
``dsv.Version`` (which pickles as its store's arguments and the version id), so every task
reads that version even if the remote's head or tag moves while the job runs. A task on a
node with no store opens the node-local clone of ``remote`` in ``cache`` (``dsv.open_remote``:
one metadata clone per node, file data fetched when first read and shared by the node's
workers).

**Read tasks are dsv's shards.** ``get_read_tasks(parallelism)`` makes
``n = min(parallelism, number of selected files)`` tasks, task ``i`` reading
``version.shard(i, n, include=include)``: balanced by bytes, disjoint, covering each
selected file once, the same assignment on every machine (the CLI's ``--shard I/N``).

Formats (the rows of the dataset):

- ``"binary"``: one row per file, ``{"path": str, "bytes": bytes}`` (as
  ``ray.data.read_binary_files(..., include_paths=True)``), in path order within a task.
- ``"parquet"``: the rows of the Parquet files, read with ``pyarrow.parquet`` through
  ``Version.open``, one block per row group; ``columns`` projects.
- ``"images"``: one row per file, ``{"path": str, "image": numpy uint8 array (height,
  width, channels)}``, decoded with Pillow (``PIL.Image``), converted to RGB.

Ray's own readers work on dsv too, through fsspec (``dsv.fsspec``) wrapped for pyarrow::

    import pyarrow.fs, dsv.fsspec
    fs = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(dsv.fsspec.DsvFileSystem(remote=URL)))
    ray.data.read_parquet("covid@v1/parquet", filesystem=fs)

(paths without the ``dsv://`` prefix, or with it: both are accepted).

Errors: ``ValueError`` for an unknown ``format`` or a column that ``format="binary"`` or
``"images"`` has not; ``dsv.NoStore``, ``dsv.UnknownRevision``, ``dsv.RemoteError`` and
the other ``dsv.Error`` classes from resolving the revision (raised by ``read_version``, on
the driver); a task raises what reading its files raises (``dsv.RemoteError``, or
``pyarrow.ArrowInvalid`` for a file that is not Parquet).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

try:
    import pyarrow as pa
    from ray.data import Dataset, read_datasource
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ImportError as e:
    raise ImportError(f"dsv.ray needs Ray Data and pyarrow (pip install 'ray[data]'): {e}") from e

from ._dsv import Store, Version
from ._engine import pinned_name, resolve

__all__ = ["VersionDatasource", "read_version", "FORMATS"]

FORMATS = ("binary", "parquet", "images")
"""The values ``format`` takes."""

_BINARY_COLUMNS = ("path", "bytes")
_IMAGE_COLUMNS = ("path", "image")
# A binary task yields a block when the files gathered reach this many bytes (Ray's
# default target block size is 128 MiB).
_BLOCK_BYTES = 64 << 20


def _columns_of(format: str, columns: Optional[Sequence[str]]) -> Optional[List[str]]:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: dsv.ray reads one of {', '.join(FORMATS)}")
    if columns is None:
        return None
    columns = [columns] if isinstance(columns, str) else list(columns)
    fixed = {"binary": _BINARY_COLUMNS, "images": _IMAGE_COLUMNS}.get(format)
    if fixed is not None:
        unknown = [c for c in columns if c not in fixed]
        if unknown:
            raise ValueError(f"format {format!r} has columns {list(fixed)}, not {unknown}")
    return columns


class VersionDatasource(Datasource):
    """A Ray ``Datasource`` over the files of one dsv version (see the module's text).

    ``revision`` is resolved when the datasource is made (on the driver); ``version`` is the
    pinned ``dsv.Version`` the read tasks carry. ``include`` selects files (a glob such as
    ``parquet/**``, or a list of them; default: every file). Where the version comes from:
    ``store`` (a ``dsv.Store``, a path, or a remote's URL), else ``remote`` (``cache``,
    ``remote_options``), else ``DSV_STORE`` / ``DSV_REMOTE``, else the store found from the
    working directory.
    """

    def __init__(
        self,
        revision: Union[str, Version],
        *,
        remote: Optional[str] = None,
        cache: Union[str, "os.PathLike[str]", None] = None,
        remote_options: Optional[Dict[str, str]] = None,
        store: Union[Store, str, "os.PathLike[str]", None] = None,
        include: Union[str, Sequence[str], None] = None,
        format: str = "binary",
        columns: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__()
        self.format = format
        self.columns = _columns_of(format, columns)
        self.include = include if include is None or isinstance(include, str) else list(include)
        if isinstance(revision, Version):
            self.version = revision
        else:
            self.version = resolve(revision, remote=remote, cache=cache, remote_options=remote_options, store=store)
        self.paths: List[str] = self.version.files(include=self.include)
        selected = set(self.paths)
        self.sizes: Dict[str, int] = {
            e["path"]: e["size"] for e in self.version.walk("") if e["type"] == "file" and e["path"] in selected
        }
        self._ratio: Optional[float] = None

    def get_name(self) -> str:
        return f"dsv({self.version.dataset}@{self.version.id[:12]})"

    def _inmemory_ratio(self) -> float:
        """Bytes in memory per byte of file: 1 for binary and images; for Parquet, the first
        file's uncompressed bytes of the columns read over its size (one footer read on the
        driver)."""
        if self._ratio is None:
            self._ratio = 1.0
            if self.format == "parquet" and self.paths:
                import pyarrow.parquet as pq

                first = self.paths[0]
                with self.version.open(first) as f:
                    meta = pq.ParquetFile(f).metadata
                wanted = None if self.columns is None else set(self.columns)
                uncompressed = 0
                for g in range(meta.num_row_groups):
                    group = meta.row_group(g)
                    for c in range(group.num_columns):
                        chunk = group.column(c)
                        if wanted is None or chunk.path_in_schema.split(".")[0] in wanted:
                            uncompressed += chunk.total_uncompressed_size
                if self.sizes.get(first):
                    self._ratio = max(uncompressed / self.sizes[first], 0.1)
        return self._ratio

    def estimate_inmemory_data_size(self) -> Optional[int]:
        """The selected files' bytes (for Parquet, scaled by the first file's ratio of
        uncompressed bytes of the columns read to stored bytes; for images, the encoded
        bytes: decoded images are larger)."""
        return int(sum(self.sizes.values()) * self._inmemory_ratio())

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: Optional[int] = None,
        data_context: Any = None,
    ) -> List[ReadTask]:
        """``min(parallelism, files)`` tasks, task ``i`` of ``n`` reading dsv shard
        ``i/n`` of the selected files (at least one task when there is a file)."""
        if not self.paths:
            return []
        count = max(1, min(int(parallelism), len(self.paths)))
        ratio = self._inmemory_ratio()
        tasks = []
        for rank in range(count):
            paths = self.version.shard(rank, count, include=self.include)
            if not paths:
                continue
            file_bytes = sum(self.sizes[p] for p in paths)
            metadata = BlockMetadata(
                num_rows=None if self.format == "parquet" else len(paths),
                size_bytes=int(math.ceil(file_bytes * ratio)),
                input_files=[f"dsv://{pinned_name(self.version)}/{p}" for p in paths],
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    _reader(self.version, paths, self.format, self.columns),
                    metadata,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


def _reader(version: Version, paths: List[str], format: str, columns: Optional[List[str]]) -> Any:
    # A closure over picklable values only: the Version (its store's arguments and id).
    read = {"binary": _read_binary, "parquet": _read_parquet, "images": _read_images}[format]
    return lambda: read(version, paths, columns)


def _select(table: pa.Table, columns: Optional[List[str]]) -> pa.Table:
    return table if columns is None else table.select(columns)


def _read_binary(version: Version, paths: List[str], columns: Optional[List[str]]) -> Iterator[pa.Table]:
    names: List[str] = []
    datas: List[bytes] = []
    held = 0
    for path in paths:
        data = version.read(path)
        names.append(path)
        datas.append(data)
        held += len(data)
        if held >= _BLOCK_BYTES:
            yield _select(pa.table({"path": pa.array(names, pa.string()), "bytes": pa.array(datas, pa.binary())}), columns)
            names, datas, held = [], [], 0
    if names:
        yield _select(pa.table({"path": pa.array(names, pa.string()), "bytes": pa.array(datas, pa.binary())}), columns)


def _read_parquet(version: Version, paths: List[str], columns: Optional[List[str]]) -> Iterator[pa.Table]:
    import pyarrow.parquet as pq

    for path in paths:
        with version.open(path) as f:
            parquet = pq.ParquetFile(f)
            for group in range(parquet.metadata.num_row_groups):
                yield parquet.read_row_group(group, columns=columns)


def _read_images(version: Version, paths: List[str], columns: Optional[List[str]]) -> Iterator[Any]:
    import io

    import numpy as np
    from PIL import Image
    from ray.data.block import BlockAccessor

    images = []
    for path in paths:
        with Image.open(io.BytesIO(version.read(path))) as image:
            images.append(np.asarray(image.convert("RGB")))
    batch: Dict[str, Any] = {"path": np.array(paths, dtype=object), "image": images}
    if len({a.shape for a in images}) == 1:
        batch["image"] = np.stack(images)
    if columns is not None:
        batch = {c: batch[c] for c in columns}
    yield BlockAccessor.batch_to_block(batch)


def read_version(
    revision: Union[str, Version],
    *,
    remote: Optional[str] = None,
    cache: Union[str, "os.PathLike[str]", None] = None,
    remote_options: Optional[Dict[str, str]] = None,
    store: Union[Store, str, "os.PathLike[str]", None] = None,
    include: Union[str, Sequence[str], None] = None,
    format: str = "binary",
    columns: Optional[Sequence[str]] = None,
    override_num_blocks: Optional[int] = None,
    **ray_kwargs: Any,
) -> Dataset:
    """A Ray ``Dataset`` of version ``revision`` (``covid@v1``; ``covid``: the head now),
    resolved once here, on the driver: every read task reads that version.

    ``remote`` (with ``cache``, ``remote_options``) or ``store`` say where it comes from;
    ``include`` selects files (a glob or a list of globs); ``format`` is ``"binary"`` (rows
    ``{"path", "bytes"}``), ``"parquet"`` (the files' rows; ``columns`` projects) or
    ``"images"`` (rows ``{"path", "image"}``, uint8 arrays height x width x 3).
    ``override_num_blocks`` fixes the number of read tasks (dsv shards); other keyword
    arguments go to ``ray.data.read_datasource`` (``concurrency``, ``num_cpus``, ...).

    Raises ``ValueError`` (format, columns), and the ``dsv.Error`` classes of resolving the
    revision (``dsv.UnknownRevision``, ``dsv.NoStore``, ``dsv.RemoteError``)."""
    source = VersionDatasource(
        revision,
        remote=remote,
        cache=cache,
        remote_options=remote_options,
        store=store,
        include=include,
        format=format,
        columns=columns,
    )
    return read_datasource(source, override_num_blocks=override_num_blocks, **ray_kwargs)
