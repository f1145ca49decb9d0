"""dsv.torch.ParquetRowDataset: the rows of a version's Parquet files as a torch dataset, read
from a remote-only version in a directory with no store (and from a local store): every row
once over ranks x DataLoader workers, equal to the tables written; a shuffle that depends on
(seed, epoch) alone; resume mid-epoch; column projection; a file that is not Parquet refused
with a dsv error; planning reads footers only and iterating only the row groups yielded (byte
ranges recorded; bytes on the wire from a remote). Row groups are the unit of the split
(conftest's files: 20 rows a group)."""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import random
import shutil
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch

import dsv
import dsv._parquet
from conftest import dsv_json, engine_tables, need, run_dsv, s3_env, write_engine_version
from dsv._parquet import RowGroup, assign, row_groups
from dsv.torch import DataLoader, ParquetRowDataset

Row = Tuple[str, str, int]


@pytest.fixture(autouse=True)
def engines() -> None:
    need("pyarrow")
    need("pandas")


def expected_rows(version: int = 1) -> List[Row]:
    """The rows of conftest's tables, in path order (part-0 first)."""
    out = []
    for _, frame in sorted(engine_tables(version).items()):
        for date, country, confirmed in zip(frame["date"], frame["country"], frame["confirmed"]):
            out.append((str(date), str(country), int(confirmed)))
    return out


def as_row(sample: Dict[str, Any]) -> Row:
    assert set(sample) == {"date", "country", "confirmed"}, sample
    return (sample["date"], sample["country"], sample["confirmed"])


def loader_rows(loader) -> List[Row]:
    """The rows of a DataLoader's batches (default collate: strings as lists, ints as a tensor)."""
    out = []
    for batch in loader:
        confirmed = batch["confirmed"]
        assert isinstance(confirmed, torch.Tensor)
        out += list(zip(batch["date"], batch["country"], confirmed.tolist()))
    return out


@pytest.fixture
def remote_v1(engine_remote, no_store):
    """covid@v1 through `dsv.open_remote` in a directory with no store: the data only on S3."""
    return dsv.open_remote(engine_remote["url"]).version("covid@v1")


@pytest.fixture(scope="module")
def local_v1(tmp_path_factory):
    """covid@v1 committed to a local store."""
    need("pyarrow")
    base = tmp_path_factory.mktemp("rows-local")
    write_engine_version(base / "covid", 1)
    run_dsv("init", str(base))
    dsv_json("commit", str(base / "covid"), "--dataset", "covid", "-m", "v1", "--tag", "v1", store=base / ".dsv")
    return dsv.Store(base).version("covid@v1")


def test_plan_is_the_footers_row_groups(remote_v1, local_v1):
    """The plan: every row group of the Parquet files (4 files of 50 rows: 20, 20, 10), in path order."""
    for version in (remote_v1, local_v1):
        groups = row_groups(version)
        assert [(g.path, g.index, g.rows) for g in groups] == [
            (f"parquet/part-{p}.parquet", i, rows) for p in range(4) for i, rows in enumerate((20, 20, 10))
        ]
        assert all(g.bytes > 0 for g in groups)
        ds = ParquetRowDataset(version)
        assert ds.groups == groups and ds.num_rows == 200


def test_assign_is_disjoint_balanced_and_nested():
    groups = [RowGroup(f"f{i // 3}", i % 3, rows, rows * 10) for i, rows in enumerate([20, 20, 10] * 4 + [7, 100, 3])]
    total = sum(g.rows for g in groups)
    for parts in (1, 2, 3, 4, 5, 8, 20):
        shares = [assign(groups, p, parts) for p in range(parts)]
        # Disjoint, covering, in the given order, consecutive runs.
        assert sum(shares, []) == groups, parts
        # Balanced: each share within one (largest) group of the even cut.
        for share in shares:
            assert abs(sum(g.rows for g in share) - total / parts) <= 100, (parts, share)
    # A rank's workers' shares together are the rank's share, whatever the number of workers.
    for world in (1, 2, 3):
        for workers in (1, 2, 3):
            for rank in range(world):
                nested = sum((assign(groups, rank * workers + w, world * workers) for w in range(workers)), [])
                assert nested == assign(groups, rank, world), (world, workers, rank)
    assert sum((assign(groups, p, 3, by="bytes") for p in range(3)), []) == groups
    with pytest.raises(dsv.InvalidShard):
        assign(groups, 2, 2)
    with pytest.raises(ValueError, match="'rows' or 'bytes'"):
        assign(groups, 0, 2, by="files")


@pytest.mark.parametrize("where", ["remote", "local"])
def test_every_row_once_over_ranks_and_workers(where, request):
    """2 ranks x 2 DataLoader worker processes (spawn for the remote-only version in a
    directory with no store: the workers rebuild the version from its pickle): each row of the
    tables exactly once, values equal."""
    version = request.getfixturevalue("remote_v1" if where == "remote" else "local_v1")
    context = "spawn" if where == "remote" else "fork"
    expected = expected_rows(1)
    rows, per_rank = [], []
    for rank in range(2):
        ds = ParquetRowDataset(version, rank=rank, world_size=2)
        got = loader_rows(DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context=context))
        assert len(got) == ds.rank_rows()
        per_rank.append(len(got))
        rows += got
    assert collections.Counter(rows) == collections.Counter(expected)
    assert per_rank == [100, 100]
    # One rank, no workers: the rows in path order; a plain torch DataLoader gives them too.
    assert [as_row(r) for r in ParquetRowDataset(version)] == expected
    plain = torch.utils.data.DataLoader(ParquetRowDataset(version, shuffle=True), batch_size=7, num_workers=2)
    assert sorted(loader_rows(plain)) == sorted(expected)
    # Pickled (as a worker gets it), it reads the same rows.
    again = pickle.loads(pickle.dumps(ParquetRowDataset(version, rank=1, world_size=2)))
    assert [as_row(r) for r in again] == expected[100:]
    if where == "remote":
        assert not list(Path.cwd().iterdir()), "nothing was written to the store-less directory"


def test_shuffle_is_a_function_of_seed_and_epoch(remote_v1):
    expected = expected_rows(1)

    def epoch_rows(seed: int, epoch: int, workers: int = 0) -> List[Row]:
        ds = ParquetRowDataset(remote_v1, shuffle=True, seed=seed)
        ds.set_epoch(epoch)
        if workers:
            return loader_rows(DataLoader(ds, batch_size=10, num_workers=workers))
        return [as_row(r) for r in ds]

    first = epoch_rows(3, 0)
    assert sorted(first) == sorted(expected) and first != expected
    assert epoch_rows(3, 0) == first
    assert epoch_rows(3, 1) != first and sorted(epoch_rows(3, 1)) == sorted(expected)
    assert epoch_rows(4, 0) != first
    # The row group order changes with the epoch, and the rows inside a group are mixed too.
    ds = ParquetRowDataset(remote_v1, shuffle=True, seed=3)
    assert ds.group_order(0) != ds.group_order(1) and sorted(ds.group_order(0)) == ds.groups
    head = ds.group_order(0)[0]
    in_group = [r for r in first[: head.rows]]
    plain = [r for r in expected if r[1] == f"country-{head.path[-9]}"][head.index * 20 : head.index * 20 + head.rows]
    assert sorted(in_group) == sorted(plain) and in_group != plain
    # With workers: the same twice, another the next epoch.
    with_workers = epoch_rows(3, 2, workers=2)
    assert sorted(with_workers) == sorted(expected)
    assert epoch_rows(3, 2, workers=2) == with_workers and epoch_rows(3, 3, workers=2) != with_workers
    # Persistent workers follow set_epoch and load_state_dict.
    ds = ParquetRowDataset(remote_v1, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in (2, 3):
        ds.set_epoch(epoch)
        epochs.append(loader_rows(loader))
    assert epochs == [with_workers, epoch_rows(3, 3, workers=2)]
    ds.load_state_dict({**ds.state_dict(), "epoch": 2, "workers": 2, "consumed": [30, 20]})
    rest = loader_rows(loader)
    assert collections.Counter(rest) == collections.Counter(with_workers) - collections.Counter(with_workers[:50])


def test_state_dict_resumes_mid_epoch(remote_v1):
    def make(**extra: Any) -> ParquetRowDataset:
        ds = ParquetRowDataset(remote_v1, shuffle=True, seed=2, rank=1, world_size=2, **extra)
        ds.set_epoch(5)
        return ds

    full = [as_row(r) for r in make()]
    assert len(full) == make().rank_rows()
    # In the training process: 37 rows, then a fresh dataset resumes after them.
    ds = make()
    it = iter(ds)
    head = [as_row(next(it)) for _ in range(37)]
    state = ds.state_dict()
    assert state["epoch"] == 5 and state["consumed"] == [37] and state["samples_seen"] == 37
    left, number = 37, 0
    for group in ds.rank_groups():
        if left < group.rows:
            break
        left, number = left - group.rows, number + 1
    assert state["positions"] == [[number, left]]
    resumed = make()
    resumed.load_state_dict(state)
    rest = [as_row(r) for r in resumed]
    assert head + rest == full and len(rest) == len(full) - 37
    assert [as_row(r) for r in resumed] == full, "the next pass over the epoch is whole"

    # Through dsv.torch.DataLoader with two worker processes: it counts each worker's batches.
    loader_full = loader_rows(DataLoader(make(), batch_size=8, num_workers=2))
    assert sorted(loader_full) == sorted(full)
    for stop in (6, 5):
        ds = make()
        seen: List[Row] = []
        for step, batch in enumerate(DataLoader(ds, batch_size=8, num_workers=2), start=1):
            seen += list(zip(batch["date"], batch["country"], batch["confirmed"].tolist()))
            if step == stop:
                state = ds.state_dict()
                break
        assert state["workers"] == 2 and state["consumed"] == [8 * (stop - stop // 2), 8 * (stop // 2)]
        assert seen == loader_full[: 8 * stop]
        again = make()
        again.load_state_dict(state)
        remaining = loader_rows(DataLoader(again, batch_size=8, num_workers=2))
        # Each remaining row once; after an even number of batches (the workers take turns), in
        # the order of the uninterrupted epoch too.
        assert collections.Counter(seen + remaining) == collections.Counter(full)
        if stop % 2 == 0:
            assert seen + remaining == loader_full
    # Resuming needs the same worker split; a state of another order is refused.
    other = make()
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="num_workers=2"):
        list(DataLoader(other, batch_size=8, num_workers=3))
    with pytest.raises(ValueError, match="seed"):
        ParquetRowDataset(remote_v1, shuffle=True, seed=9, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        ParquetRowDataset(remote_v1, shuffle=True, seed=2, rank=1, world_size=3).load_state_dict(state)

    # Batches of rows (batch_rows): the state counts batches; the resume is exact too.
    def batched() -> ParquetRowDataset:
        return make(batch_rows=16)

    batches = list(batched())
    assert all(set(b) == {"date", "country", "confirmed"} for b in batches)
    assert [len(b["date"]) for b in batches[:-1]] == [16] * (len(batches) - 1)
    flat = [r for b in batches for r in zip(b["date"], b["country"], b["confirmed"])]
    assert flat == full
    ds = batched()
    it = iter(ds)
    next(it), next(it)
    state = ds.state_dict()
    assert state["consumed"] == [2] and state["batch_rows"] == 16
    resumed = batched()
    resumed.load_state_dict(state)
    assert [r for b in resumed for r in zip(b["date"], b["country"], b["confirmed"])] == full[32:]


def test_columns_projection_and_transform(remote_v1, local_v1):
    expected = expected_rows(1)
    for version in (remote_v1, local_v1):
        ds = ParquetRowDataset(version, columns=["confirmed", "country"])
        rows = list(ds)
        assert all(list(r) == ["confirmed", "country"] for r in rows)
        assert [(r["country"], r["confirmed"]) for r in rows] == [(c, n) for _, c, n in expected]
        # A transform gets each row.
        ds = ParquetRowDataset(version, columns=["confirmed"], transform=lambda row: row["confirmed"] * 2)
        assert list(ds) == [2 * n for _, _, n in expected]
    with pytest.raises(ValueError, match="has no column 'deaths'"):
        ParquetRowDataset(remote_v1, columns=["confirmed", "deaths"])
    with pytest.raises(ValueError, match="list of column names"):
        ParquetRowDataset(remote_v1, columns="confirmed")


def test_a_file_that_is_not_parquet_gives_a_dsv_error(remote_v1, tmp_path):
    with pytest.raises(dsv.InvalidParquet, match=r"data/part-0\.csv of covid@v1 is not a Parquet file") as caught:
        ParquetRowDataset(remote_v1, include=["parquet/*.parquet", "data/part-0.csv"])
    error = caught.value
    assert isinstance(error, dsv.Error) and isinstance(error, ValueError)
    assert error.path == "data/part-0.csv" and error.hints and error.causes
    assert error.__cause__ is None and error.__suppress_context__, "no pyarrow traceback chained"
    with pytest.raises(dsv.Error, match="no file of covid@.* matches"):
        ParquetRowDataset(remote_v1, include="nothing/**")
    # A local store whose '.parquet' file is text.
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.parquet").write_text("date,country\n2020-01-01,x\n")
    run_dsv("init", str(tmp_path))
    dsv_json("commit", str(data), "--dataset", "notes", "-m", "text", store=tmp_path / ".dsv")
    with pytest.raises(dsv.InvalidParquet, match="notes.parquet of notes is not a Parquet file"):
        ParquetRowDataset(dsv.Store(tmp_path).version("notes"))


class _RecordingFile:
    """A version's file object that records the byte ranges read from it."""

    def __init__(self, inner: Any, ranges: List[Tuple[str, int, int]]) -> None:
        self._inner = inner
        self._ranges = ranges

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _record(self, start: int, data_length: int) -> None:
        if data_length:
            self._ranges.append((self._inner.name, start, start + data_length))

    def read(self, size: int = -1) -> bytes:
        start = self._inner.tell()
        data = self._inner.read(size)
        self._record(start, len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        start = self._inner.tell()
        n = self._inner.readinto(buffer)
        self._record(start, n or 0)
        return n

    def readall(self) -> bytes:
        return self.read(-1)


class _RecordingVersion:
    """A version whose `open` hands out recording file objects (everything else is the version's)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.ranges: List[Tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open(self, path: str) -> _RecordingFile:
        return _RecordingFile(self._inner.open(path), self.ranges)


# pyarrow reads a footer with one read of (up to) the last 64 KiB of the file.
FOOTER_READ = 64 * 1024


@pytest.fixture(scope="module")
def wide_v1(tmp_path_factory):
    """Dataset `wide`: 2 Parquet files of 4 row groups of 20 rows, each group about 200 KB
    (incompressible bytes), so a row group's data lies well outside the footer's read."""
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    base = tmp_path_factory.mktemp("rows-wide")
    data = base / "wide"
    data.mkdir(parents=True)
    for f in range(2):
        ids = list(range(f * 80, f * 80 + 80))
        blobs = [hashlib.blake2b(str(i).encode(), digest_size=64).digest() * 160 for i in ids]
        table = pa.table({"blob": blobs, "id": ids})
        pq.write_table(table, data / f"part-{f}.parquet", row_group_size=20, compression="none")
    run_dsv("init", str(base))
    dsv_json("commit", str(data), "--dataset", "wide", "-m", "wide", store=base / ".dsv")
    return dsv.Store(base).version("wide")


def test_plans_from_footers_and_reads_only_the_row_groups_it_yields(wide_v1):
    """Planning reads each file's footer, no row group's data; iterating a share (and resuming
    past whole row groups) reads the data of the row groups it yields, no others."""
    version = wide_v1
    sizes = {path: version.stat(path)["size"] for path in version.files()}
    spans: Dict[Tuple[str, int], Tuple[int, int]] = {}
    for group in row_groups(version):
        metadata = dsv._parquet.open_parquet(version, group.path).metadata.row_group(group.index)
        columns = [metadata.column(c) for c in range(metadata.num_columns)]
        start = min(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in columns)
        spans[(group.path, group.index)] = (start, start + sum(c.total_compressed_size for c in columns))
    assert len(spans) == 8 and all(hi - lo > 3 * FOOTER_READ for lo, hi in spans.values())

    def touched(ranges: List[Tuple[str, int, int]]) -> set:
        """The row groups whose data the reads overlap, leaving out reads of a file's footer."""
        data_reads = [(p, a, b) for p, a, b in ranges if a < sizes[p] - FOOTER_READ]
        return {key for key, (lo, hi) in spans.items() for p, a, b in data_reads if p == key[0] and a < hi and b > lo}

    recording = _RecordingVersion(version)
    ds = ParquetRowDataset(recording, columns=["id", "blob"], shuffle=True, seed=1, rank=1, world_size=2)
    assert recording.ranges, "the footers were read through the version"
    assert all(a >= sizes[p] - FOOTER_READ for p, a, _ in recording.ranges), "planning read row group data"
    recording.ranges.clear()
    ids = [row["id"] for row in ds]
    mine = {(g.path, g.index) for g in ds.rank_groups()}
    assert len(mine) == 4 and len(ids) == 80
    assert touched(recording.ranges) == mine
    # A resume past the first two row groups does not read them.
    skipped = ds.rank_groups()[:2]
    ds.load_state_dict({**ds.state_dict(), "consumed": [41]})
    recording.ranges.clear()
    assert [row["id"] for row in ds] == ids[41:]
    assert touched(recording.ranges) == mine - {(g.path, g.index) for g in skipped}


@pytest.fixture(scope="module")
def wide_remote(tmp_path_factory, s3_proxy):
    """Dataset `wide`: 2 Parquet files of 4 row groups of 3 MB (incompressible), pushed
    to the S3 server through the counting proxy by a store that is then deleted."""
    pa = need("pyarrow")
    pq = need("pyarrow.parquet")
    os.environ.update(s3_env(s3_proxy.url))
    base = tmp_path_factory.mktemp("rows-wide-origin")
    data = base / "wide"
    data.mkdir(parents=True)
    for f in range(2):
        ids = list(range(f * 40, f * 40 + 40))
        blob = [random.Random(i).randbytes(300_000) for i in ids]
        pq.write_table(pa.table({"blob": blob, "id": ids}), data / f"part-{f}.parquet", row_group_size=10,
                       compression="none", use_dictionary=False)
    run_dsv("init", str(base))
    store = base / ".dsv"
    dsv_json("commit", str(data), "--dataset", "wide", "-m", "wide", "--tag", "v1", store=store)
    url = f"s3://dsv-test/rows-{uuid.uuid4().hex[:12]}"
    run_dsv("remote", "add", "origin", url, store=store)
    run_dsv("push", "wide", store=store)
    packed = sum(p.stat().st_size for p in (store / "packs").glob("*.pack"))
    shutil.rmtree(base)
    return {"url": url, "packed_bytes": packed}


def test_a_remote_only_version_fetches_only_the_row_groups_read(wide_remote, s3_proxy, no_store):
    """From a remote-only version, planning and reading one rank's half of the row groups
    downloads about half of the data, not the files whole."""
    s3_proxy.reset()
    version = dsv.open_remote(wide_remote["url"]).version("wide@v1")
    ds = ParquetRowDataset(version, columns=["id", "blob"], rank=1, world_size=2)
    planned = s3_proxy.down
    assert planned < wide_remote["packed_bytes"] / 8, (planned, wide_remote["packed_bytes"])
    ids = [row["id"] for row in ds]
    assert sorted(ids) == list(range(40, 80))
    assert [g.path for g in ds.rank_groups()] == ["part-1.parquet"] * 4
    down = s3_proxy.down
    print(f"packed {wide_remote['packed_bytes']} B; planning downloaded {planned} B, planning and reading half {down} B")
    assert down < wide_remote["packed_bytes"] * 0.7, (down, wide_remote["packed_bytes"])
