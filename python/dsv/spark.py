"""Spark over a dsv version: a PySpark 4 Python data source (format ``"dsv"``) whose
partitions are dsv's shards, read on executors that need no store.

::

    from pyspark.sql import SparkSession
    import dsv.spark
    spark = SparkSession.builder.getOrCreate()
    spark.dataSource.register(dsv.spark.VersionDataSource)
    df = (spark.read.format("dsv").option("remote", "s3://bucket/datasets")
          .option("format", "parquet").option("include", "parquet/**").load("covid@v1"))

Options (all strings, names case-insensitive):

- the path (``load("covid@v1")``, or option ``revision``): the revision; ``covid`` is the
  head when the DataFrame is made.
- ``remote`` (a remote's URL), ``cache`` (the node-local cache directory, default
  ``DSV_CACHE``, else ``~/.cache/dsv``), ``remote_option.KEY`` (the remote's settings, as
  ``dsv remote add --option KEY=VALUE``), or ``store`` (a store's path, or a URL taken as
  ``remote``); with none, ``DSV_STORE`` / ``DSV_REMOTE`` of the Python workers'
  environment, else the store found from their working directory.
- ``include``: the files to read, a glob (``parquet/**``) or a JSON list of globs
  (default: every file).
- ``format``: ``binary`` (default; one row per file, schema ``path STRING, bytes BINARY``)
  or ``parquet`` (the rows of the Parquet files; the schema is the first selected file's,
  read from its footer when the DataFrame is made).
- ``columns``: comma-separated column names to read (``parquet``; for ``binary`` a subset
  of ``path,bytes``).
- ``numPartitions``: the number of partitions (dsv shards); default
  ``min(files, max(CPUs of the planning process, total bytes / 128 MiB))``.

**One version per DataFrame.** The revision is resolved once, when the DataFrame is made
(``DataSource.schema``, or ``reader`` when a schema was given); the resolved
``DATASET@ID`` travels in the pickled data source and reader to every executor, so every
partition reads that version, even if the remote's head moves before or during the job.
(With a schema given by ``spark.read.schema(...)``, Spark never calls ``schema``: each
action then resolves the revision when it plans; name a tag or an id for a fixed version.)
Partition ``i`` of ``n`` reads ``version.shard(i, n)`` of the selected files (balanced by
bytes, disjoint, the same on every machine); ``read`` yields ``pyarrow.RecordBatch``
objects in the schema Spark expects (Arrow all the way, no per-row Python objects).

Errors: ``ValueError`` for a missing revision, an unknown ``format``, an unknown column
or a bad ``numPartitions``; the ``dsv.Error`` classes (``dsv.UnknownRevision``,
``dsv.NoStore``, ``dsv.RemoteError``) from resolving the revision, which Spark reports
wrapped in its own Python data source error.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Union

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType
except ImportError as e:  # PySpark missing, or older than 4.0 (no Python data sources)
    raise ImportError(f"dsv.spark needs PySpark 4 or newer with pyarrow (pip install 'pyspark>=4' pyarrow): {e}") from e

from ._engine import open_store, pinned_name, resolve

__all__ = ["VersionDataSource", "VersionReader", "ShardPartition"]

_FORMATS = ("binary", "parquet")
_BINARY_SCHEMA = "path STRING, bytes BINARY"
_PARTITION_BYTES = 128 << 20
_BATCH_BYTES = 64 << 20


def _where(options: Any) -> Dict[str, Any]:
    """``open_store``'s arguments from the data source's options."""
    remote_options = {
        key[len("remote_option.") :]: value for key, value in options.items() if key.lower().startswith("remote_option.")
    }
    return {
        "remote": options.get("remote") or None,
        "cache": options.get("cache") or None,
        "remote_options": remote_options or None,
        "store": options.get("store") or None,
    }


def _include(options: Any) -> Union[str, List[str], None]:
    text = options.get("include")
    if not text:
        return None
    if text.lstrip().startswith("["):
        return [str(g) for g in json.loads(text)]
    return text


def _columns(options: Any) -> Optional[List[str]]:
    text = options.get("columns")
    if not text:
        return None
    return [c.strip() for c in text.split(",") if c.strip()]


class ShardPartition(InputPartition):
    """Partition ``rank`` of ``world``: the paths of dsv shard ``rank/world``."""

    def __init__(self, rank: int, world: int, paths: List[str]) -> None:
        super().__init__((rank, world))
        self.rank = rank
        self.world = world
        self.paths = paths


class VersionDataSource(DataSource):
    """The ``"dsv"`` Python data source (see the module's text for its options).
    ``spark.dataSource.register(VersionDataSource)`` makes ``spark.read.format("dsv")``
    find it."""

    @classmethod
    def name(cls) -> str:
        return "dsv"

    def _revision(self) -> str:
        revision = self.options.get("path") or self.options.get("revision")
        if not revision:
            raise ValueError("name a revision: spark.read.format('dsv')...load('covid@v1')")
        return revision

    def _format(self) -> str:
        format = (self.options.get("format") or "binary").lower()
        if format not in _FORMATS:
            raise ValueError(f"unknown format {format!r}: the dsv data source reads one of {', '.join(_FORMATS)}")
        return format

    def _pin(self) -> str:
        """``DATASET@ID`` of the revision, resolved on first call (then kept: it travels
        with the pickled data source)."""
        pinned = getattr(self, "pinned", None)
        if pinned is None:
            pinned = self.pinned = pinned_name(resolve(self._revision(), **_where(self.options)))
        return pinned

    def schema(self) -> Union[StructType, str]:
        """``path STRING, bytes BINARY`` for ``binary``; for ``parquet``, the first selected
        file's schema (from its footer), projected to ``columns``. Resolves the revision."""
        format = self._format()
        pinned = self._pin()
        columns = _columns(self.options)
        if format == "binary":
            if columns is None:
                return _BINARY_SCHEMA
            unknown = [c for c in columns if c not in ("path", "bytes")]
            if unknown:
                raise ValueError(f"format 'binary' has columns ['path', 'bytes'], not {unknown}")
            return ", ".join(f"{c} {'STRING' if c == 'path' else 'BINARY'}" for c in columns)
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        version = open_store(**_where(self.options)).version(pinned)
        paths = version.files(include=_include(self.options))
        if not paths:
            raise ValueError(f"{self._revision()} has no file matching include={_include(self.options)!r}")
        with version.open(paths[0]) as f:
            arrow = pq.ParquetFile(f).schema_arrow
        if columns is not None:
            unknown = [c for c in columns if c not in arrow.names]
            if unknown:
                raise ValueError(f"{paths[0]} has columns {arrow.names}, not {unknown}")
            arrow = pa.schema([arrow.field(c) for c in columns])
        return from_arrow_schema(arrow)

    def reader(self, schema: StructType) -> "VersionReader":
        return VersionReader(
            pinned=self._pin(),
            where=_where(self.options),
            include=_include(self.options),
            format=self._format(),
            schema=schema,
            partitions=self.options.get("numPartitions"),
        )


class VersionReader(DataSourceReader):
    """Reads version ``pinned`` (``DATASET@ID``), one partition per dsv shard. Pickled to
    the executors: it holds strings only, and each executor process opens its store once."""

    def __init__(
        self,
        *,
        pinned: str,
        where: Dict[str, Any],
        include: Union[str, List[str], None],
        format: str,
        schema: StructType,
        partitions: Optional[str],
    ) -> None:
        self.pinned = pinned
        self.where = where
        self.include = include
        self.format = format
        self.schema = schema
        self.partition_count: Optional[int] = None
        if partitions is not None:
            try:
                self.partition_count = int(partitions)
            except ValueError:
                self.partition_count = 0
            if self.partition_count < 1:
                raise ValueError(f"numPartitions is a count of at least 1, not {partitions!r}")

    def _version(self) -> Any:
        return open_store(**self.where).version(self.pinned)

    def partitions(self) -> List[InputPartition]:
        """One partition per dsv shard of the selected files."""
        version = self._version()
        paths = version.files(include=self.include)
        if not paths:
            return []
        count = self.partition_count
        if count is None:
            selected = set(paths)
            total = sum(e["size"] for e in version.walk("") if e["type"] == "file" and e["path"] in selected)
            count = max(os.cpu_count() or 1, math.ceil(total / _PARTITION_BYTES))
        count = max(1, min(count, len(paths)))
        out: List[InputPartition] = []
        for rank in range(count):
            shard = version.shard(rank, count, include=self.include)
            if shard:
                out.append(ShardPartition(rank, count, shard))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's rows as ``pyarrow.RecordBatch`` objects in Spark's schema."""
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        version = self._version()
        paths = getattr(partition, "paths", None)
        if paths is None:
            return
        if self.format == "binary":
            yield from _binary_batches(version, paths, target)
            return
        import pyarrow.parquet as pq

        for path in paths:
            with version.open(path) as f:
                parquet = pq.ParquetFile(f)
                for group in range(parquet.metadata.num_row_groups):
                    table = parquet.read_row_group(group, columns=target.names)
                    # Unsafe: nanoseconds truncate to Spark's microseconds, as Spark's own
                    # Parquet reader does (the types map one to one, nothing else narrows).
                    yield from table.select(target.names).cast(target, safe=False).to_batches()


def _binary_batches(version: Any, paths: List[str], target: Any) -> Iterator[Any]:
    import pyarrow as pa

    rows: Dict[str, List[Any]] = {"path": [], "bytes": []}
    held = 0

    def batch() -> Any:
        arrays = [pa.array(rows[f.name], f.type) for f in target]
        return pa.RecordBatch.from_arrays(arrays, schema=target)

    for path in paths:
        data = version.read(path) if "bytes" in target.names else b""
        rows["path"].append(path)
        rows["bytes"].append(data)
        held += len(data)
        if held >= _BATCH_BYTES:
            yield batch()
            rows, held = {"path": [], "bytes": []}, 0
    if rows["path"]:
        yield batch()
