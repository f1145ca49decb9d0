"""dsv.torch with real PyTorch: DataLoader workers (fork and spawn), torch.distributed (gloo)
over 2 and 4 processes on a version that lives only on the loopback S3 server."""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler

import dsv
import dist_jobs
from dsv.torch import DataLoader, IterableVersionDataset, VersionDataset


def decode(path: str, data: bytes):
    """A transform: bytes to a tensor (what a decoder would hand the model)."""
    return path, torch.frombuffer(bytearray(data[:16].ljust(16, b"\0")), dtype=torch.uint8)


@pytest.fixture()
def version(local_store):
    return dsv.Store(local_store["base"]).version("mnist@v1")


def paths_of(batches):
    return [p for batch in batches for p in batch[0]]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_map_style_dataset_with_two_workers(version, local_store, context):
    ds = VersionDataset(version, include="train/**", transform=decode)
    assert len(ds) == len(version.files("train/**"))
    path, tensor = ds[3]
    assert tensor.dtype == torch.uint8 and path == version.files("train/**")[3]
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, multiprocessing_context=context)
    seen = paths_of(loader)
    assert seen == version.files("train/**")
    plain = VersionDataset(version)
    assert plain[0] == (plain.paths[0], local_store["files_v1"][plain.paths[0]])


def test_map_style_dataset_under_a_distributed_sampler(version):
    ds = VersionDataset(version)
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=True, seed=1)
        seen += [ds[i][0] for i in sampler]
    assert set(seen) == set(ds.paths) and len(seen) == 3 * math.ceil(len(ds) / 3)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_iterable_dataset_with_two_workers_reads_each_file_once(version, context):
    ds = IterableVersionDataset(version, shuffle=True, seed=7, transform=decode)
    # Spawned workers import torch afresh (seconds each): one pass with them is enough.
    epochs = range(2) if context == "fork" else range(1)
    for loader_class in (torch.utils.data.DataLoader, DataLoader):
        loader = loader_class(ds, batch_size=10, num_workers=2, multiprocessing_context=context)
        for epoch in epochs:
            ds.set_epoch(epoch)
            seen = paths_of(loader)
            assert sorted(seen) == version.files()
    # Through dsv.torch.DataLoader the batches arrive in the dataset's own order.
    ds.set_epoch(1)
    order = [ds.paths[i] for i in ds.rank_order()]
    assert paths_of(DataLoader(ds, batch_size=10, num_workers=2, multiprocessing_context=context)) == order


def test_order_is_a_function_of_version_seed_and_epoch(version, local_store):
    a = IterableVersionDataset(version, shuffle=True, seed=3)
    b = IterableVersionDataset(dsv.Store(local_store["base"]).version("mnist@v1"), shuffle=True, seed=3)
    assert a.order(0) == b.order(0) and a.order(5) == b.order(5)
    assert a.order(0) != a.order(1)
    assert a.order(0) != IterableVersionDataset(version, shuffle=True, seed=4).order(0)
    other = dsv.Store(local_store["base"]).version("mnist@v2")
    assert IterableVersionDataset(other, shuffle=True, seed=3).order(0)[:20] != a.order(0)[:20]
    assert IterableVersionDataset(version).order(0) == list(range(len(version)))
    assert sorted(a.order(0)) == list(range(len(version)))


def test_ranks_split_every_sample_exactly_once(version):
    n = len(version)
    for world in (1, 2, 3, 4, 7):
        seen = []
        for rank in range(world):
            ds = IterableVersionDataset(version, shuffle=True, seed=1, rank=rank, world_size=world)
            mine = [p for p, _ in ds]
            assert len(mine) == len(ds)
            seen += mine
        assert sorted(seen) == version.files(), world
        # Equal counts: the first few of the order are read twice, as DistributedSampler pads.
        counts, padded = [], []
        for rank in range(world):
            ds = IterableVersionDataset(version, shuffle=True, seed=1, equal_per_rank=True, rank=rank, world_size=world)
            mine = [p for p, _ in ds]
            counts.append(len(mine))
            padded += mine
        assert counts == [math.ceil(n / world)] * world
        extra = collections.Counter(padded) - collections.Counter(version.files())
        order = IterableVersionDataset(version, shuffle=True, seed=1).order(0)
        assert sorted(extra.elements()) == sorted(version.files()[i] for i in order[: world * counts[0] - n])


def test_state_dict_resumes_mid_epoch_without_repeats_or_skips(version):
    full = IterableVersionDataset(version, shuffle=True, seed=2, rank=1, world_size=2, transform=decode)
    full.set_epoch(3)
    expected = [p for p, _ in full]
    ds = IterableVersionDataset(version, shuffle=True, seed=2, rank=1, world_size=2, transform=decode)
    ds.set_epoch(3)
    it = iter(ds)
    first = [next(it)[0] for _ in range(17)]
    state = ds.state_dict()
    assert state["epoch"] == 3 and state["samples_seen"] == 17
    state = json.loads(json.dumps(state))  # as a checkpoint stores it
    resumed = IterableVersionDataset(version, shuffle=True, seed=2, rank=1, world_size=2, transform=decode)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)  # the same epoch keeps the resume position
    rest = [p for p, _ in resumed]
    assert first + rest == expected
    # The epoch after it is whole again, and a second pass over epoch 3 too.
    assert len([p for p, _ in resumed]) == len(expected)
    resumed.set_epoch(4)
    assert len([p for p, _ in resumed]) == len(expected)
    # Through a DataLoader with two workers (dsv.torch.DataLoader counts the consumed batches).
    ds = IterableVersionDataset(version, shuffle=True, seed=2, rank=1, world_size=2)
    ds.set_epoch(3)
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    consumed = []
    for step, batch in enumerate(loader, start=1):
        consumed += batch[0]
        if step == 5:
            state = ds.state_dict()
            break
    assert state["samples_seen"] == 20 and consumed == expected[:20]
    again = IterableVersionDataset(version, shuffle=True, seed=2, rank=1, world_size=2)
    again.load_state_dict(state)
    assert consumed + paths_of(DataLoader(again, batch_size=4, num_workers=2)) == expected
    # A state of another order is refused.
    with pytest.raises(ValueError):
        IterableVersionDataset(version, shuffle=True, seed=9, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError):
        IterableVersionDataset(version, shuffle=True, seed=2).load_state_dict(state)


def test_bad_ranks_are_refused(version):
    with pytest.raises(dsv.InvalidShard) as e:
        IterableVersionDataset(version, rank=2, world_size=2)
    assert isinstance(e.value, ValueError) and "rank 2" in str(e.value)
    with pytest.raises(dsv.InvalidShard):
        IterableVersionDataset(version, rank=0, world_size=0)
    with pytest.raises(ValueError):
        IterableVersionDataset(version, rank=0)


# -- torch.distributed over the loopback S3 server ---------------------------------------------


def _job(tmp_path: Path, store: Path, world: int, name: str, **extra):
    out = tmp_path / name
    out.mkdir()
    cfg = {
        "out": str(out),
        "pg_file": str(tmp_path / f"pg-{name}"),
        "store": str(store),
        "revision": "mnist@v1",
        "seed": 11,
        "batch": 8,
        "epochs": 2,
        **extra,
    }
    return out, cfg


def _records(out: Path, world: int):
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]


def _expected_orders(version, world):
    """order_of(epoch, rank): the paths rank `rank` must read in `epoch`, as dist_jobs sets
    the dataset up."""
    ranks = [
        IterableVersionDataset(version, shuffle=True, seed=11, equal_per_rank=True, rank=r, world_size=world)
        for r in range(world)
    ]
    return lambda epoch, rank: [ranks[rank].paths[i] for i in ranks[rank].rank_order(epoch)]


def _check_epochs(records, files, world, order_of, gathered=True):
    n = len(files)
    per_rank = math.ceil(n / world)
    for epoch in ("0", "1"):
        seen = [p for r in records for p in r["epochs"][epoch]]
        counts = [len(r["epochs"][epoch]) for r in records]
        assert counts == [per_rank] * world, "equal counts per rank"
        assert set(seen) == set(files), "every sample each epoch"
        extra = collections.Counter(seen) - collections.Counter(files)
        assert sum(extra.values()) == per_rank * world - n, "only the padding repeats"
        for rank, record in enumerate(records):
            assert record["epochs"][epoch] == order_of(int(epoch), rank)
        if gathered:
            assert all(c == {"0": per_rank, "1": per_rank} for c in records[0]["all_counts"])


def test_distributed_over_s3_four_ranks_download_once(remote_dataset, s3_proxy, tmp_path):
    files = sorted(remote_dataset["files"])
    world = 4
    clone = dsv.clone(remote_dataset["url"], tmp_path / f"clone-{world}")
    local = sum(p.stat().st_size for p in (clone.path / "packs").glob("*.pack"))
    assert local < remote_dataset["packed_bytes"] / 4, "the clone holds no data yet"
    order_of = _expected_orders(clone.version("mnist@v1"), world)

    s3_proxy.reset()
    out, cfg = _job(tmp_path, clone.path, world, f"run-{world}")
    mp.spawn(dist_jobs.run_rank, args=(world, cfg), nprocs=world, join=True)
    records = _records(out, world)
    _check_epochs(records, files, world, order_of)
    # Every rank and worker of the machine shares the store: the data crossed the wire once.
    assert remote_dataset["packed_bytes"] * 0.9 <= s3_proxy.down <= remote_dataset["packed_bytes"] * 1.1 + 512 * 1024, (
        s3_proxy.down,
        remote_dataset["packed_bytes"],
    )
    # A rerun gives the same order, and downloads nothing.
    s3_proxy.reset()
    out2, cfg2 = _job(tmp_path, clone.path, world, f"rerun-{world}")
    mp.spawn(dist_jobs.run_rank, args=(world, cfg2), nprocs=world, join=True)
    assert [r["epochs"] for r in _records(out2, world)] == [r["epochs"] for r in records]
    assert s3_proxy.down < 64 * 1024


def test_distributed_resume_after_a_rank_is_killed_mid_epoch(remote_dataset, s3_proxy, tmp_path):
    """Two ranks (DataLoader workers started with spawn), one killed mid-epoch after a
    checkpoint; the job resumed from the checkpoint reads the rest of the epoch, once."""
    files = sorted(remote_dataset["files"])
    world = 2
    clone = dsv.clone(remote_dataset["url"], tmp_path / "clone")
    s3_proxy.reset()
    out, cfg = _job(tmp_path, clone.path, world, "crash", checkpoint_at=5, kill_rank=1, context="spawn")
    with pytest.raises(mp.ProcessExitedException):
        mp.spawn(dist_jobs.run_rank, args=(world, cfg), nprocs=world, join=True)
    checkpointed = [json.loads((out / f"checkpointed-{r}.json").read_text()) for r in range(world)]
    assert all(len(c) == 5 * cfg["batch"] for c in checkpointed)
    cfg_resume = dict(cfg, resume=True, pg_file=str(tmp_path / "pg-resume"))
    cfg_resume.pop("checkpoint_at")
    mp.spawn(dist_jobs.run_rank, args=(world, cfg_resume), nprocs=world, join=True)
    records = _records(out, world)
    order_of = _expected_orders(clone.version("mnist@v1"), world)

    for rank in range(world):
        # The checkpointed samples and the resumed ones are the epoch, in order, once each.
        assert checkpointed[rank] + records[rank]["epochs"]["0"] == order_of(0, rank)
        records[rank]["epochs"]["0"] = checkpointed[rank] + records[rank]["epochs"]["0"]
    _check_epochs(records, files, world, order_of, gathered=False)
    # The crashed run and the resumed one downloaded each chunk once between them.
    assert s3_proxy.down <= remote_dataset["packed_bytes"] * 1.1 + 512 * 1024


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_follow_set_epoch_and_resume(version, context):
    ds = IterableVersionDataset(version, shuffle=True, seed=5, transform=decode)
    loader = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True, multiprocessing_context=context)
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        # The same workers every epoch, each pass in that epoch's order.
        assert paths_of(loader) == [ds.paths[i] for i in ds.rank_order(epoch)], epoch
    # A resume position loaded between epochs reaches the running workers too.
    ds.set_epoch(4)
    expected = [ds.paths[i] for i in ds.rank_order(4)]
    state = {**ds.state_dict(samples_seen=16)}
    ds.load_state_dict(state)
    assert paths_of(loader) == expected[16:]
    # The plain DataLoader keeps its workers too.
    plain = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True,
                                        multiprocessing_context=context)
    ds.batch_size = 8
    seen = []
    for epoch in (5, 6):
        ds.set_epoch(epoch)
        got = paths_of(plain)
        assert sorted(got) == version.files()
        seen.append(got)
    assert seen[0] != seen[1]


def test_a_pickled_dataset_outside_a_worker_start_gets_memory_of_its_own(version):
    import pickle

    ds = IterableVersionDataset(version, shuffle=True, seed=5)
    ds.set_epoch(3)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.epoch == 3 and [p for p, _ in copy] == [ds.paths[i] for i in ds.rank_order(3)]
    copy.set_epoch(4)
    assert ds.epoch == 3


def _rank_process(ds, rank, out):
    """A training process started with the dataset (as torch.multiprocessing.spawn does)."""
    ds.set_epoch(100 + rank)
    workers_see = paths_of(DataLoader(ds, batch_size=4, num_workers=2))
    out.put((rank, ds._shared.read()[0], workers_see == [ds.paths[i] for i in ds.rank_order(100 + rank)]))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_processes_started_with_the_dataset_never_write_each_others_position(version, context):
    import multiprocessing

    ds = IterableVersionDataset(version, shuffle=True, seed=9, transform=decode)
    ds.set_epoch(7)
    ctx = multiprocessing.get_context(context)
    out = ctx.Queue()
    ranks = [ctx.Process(target=_rank_process, args=(ds, r, out)) for r in range(2)]
    for p in ranks:
        p.start()
    got = sorted(out.get(timeout=120) for _ in ranks)
    for p in ranks:
        p.join(timeout=60)
    # Each rank's workers read that rank's epoch; the starting process's position is its own.
    assert got == [(0, 100, True), (1, 101, True)]
    assert ds._shared.read()[0] == 7 and ds.epoch == 7
