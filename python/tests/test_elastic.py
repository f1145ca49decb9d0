"""Elastic resume (issue 37): a job stopped mid-epoch at one world size / number of DataLoader
workers resumes at another and reads every remaining sample of the epoch exactly once, the
next epoch split as usual at the new size. Ranks are simulated with explicit rank=/world_size=
(the split does not need torch.distributed); workers are real DataLoader worker processes."""

from __future__ import annotations

import collections
import io
import json
import tarfile
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

import dsv
from conftest import dsv_json, need, run_dsv, write_engine_version
from dsv.torch import (
    DataLoader,
    IterableVersionDataset,
    ParquetRowDataset,
    TarShardDataset,
    VersionDataset,
    VersionSampler,
)

# -- IterableVersionDataset -------------------------------------------------------------------


@pytest.fixture()
def version(local_store):
    return dsv.Store(local_store["base"]).version("mnist@v1")


def iterable(version, rank: int, world: int, **extra) -> IterableVersionDataset:
    ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=rank, world_size=world, **extra)
    ds.set_epoch(2)
    return ds


def paths_of(batch) -> List[str]:
    return list(batch[0])


def read_some(ds, steps: int, workers: int, batch_size: int = 4):
    """Reads `steps` batches of `ds` through dsv.torch.DataLoader (all with steps=None);
    returns (paths read, ds.state_dict() then, as a checkpoint stores it)."""
    seen: List[str] = []
    for step, batch in enumerate(DataLoader(ds, batch_size=batch_size, num_workers=workers), start=1):
        seen += paths_of(batch)
        if step == steps:
            break
    return seen, json.loads(json.dumps(ds.state_dict()))


def epoch_order(version) -> List[str]:
    """The epoch's global order (world size 1, no padding)."""
    one = iterable(version, 0, 1)
    return [one.paths[i] for i in one.order()]


def test_iterable_world_2_to_3_and_workers_2_to_3_reads_each_remaining_sample_once(version):
    unbroken = [p for r in range(2) for b in DataLoader(iterable(version, r, 2), batch_size=4, num_workers=2)
                for p in paths_of(b)]
    everything = epoch_order(version)
    assert sorted(unbroken) == sorted(everything)

    # Ranks stop at different points (3 and 5 batches), with two workers each.
    first: List[str] = []
    states = []
    for rank, steps in ((0, 3), (1, 5)):
        seen, state = read_some(iterable(version, rank, 2), steps, workers=2)
        first += seen
        states.append(state)
    assert [s["samples_seen"] for s in states] == [12, 20]

    # Resume at world size 3 with three workers: every rank loads all the old ranks' states.
    second: Dict[int, List[str]] = {}
    for rank in range(3):
        ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=rank, world_size=3)
        ds.load_state_dict(states)
        assert ds.epoch == 2
        second[rank] = [p for b in DataLoader(ds, batch_size=4, num_workers=3) for p in paths_of(b)]
    counts = collections.Counter(first + [p for r in range(3) for p in second[r]])
    assert counts == collections.Counter(unbroken), "every sample of the epoch exactly once"
    # The order: the remaining samples in the epoch's order, rank r taking every 3rd from r.
    remaining = [p for p in everything if p not in set(first)]
    for rank in range(3):
        assert second[rank] == remaining[rank::3]

    # The next epoch is split as usual at the new size.
    ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=1, world_size=3)
    ds.load_state_dict(states)
    list(ds)
    ds.set_epoch(3)
    fresh = IterableVersionDataset(version, shuffle=True, seed=5, rank=1, world_size=3)
    fresh.set_epoch(3)
    assert [p for p, _ in ds] == [p for p, _ in fresh]


@pytest.mark.parametrize("old,new", [(3, 2), (1, 4)])
def test_iterable_other_world_sizes_and_a_second_preemption(version, old, new):
    everything = epoch_order(version)
    first: List[str] = []
    states = []
    for rank in range(old):
        ds = iterable(version, rank, old)
        it = iter(ds)
        first += [next(it)[0] for _ in range(7 + 3 * rank)]
        states.append(ds.state_dict())
    # Resumed at `new` ranks (no workers); preempted again, then resumed at `old` ranks.
    second: List[str] = []
    states2 = []
    for rank in range(new):
        ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=rank, world_size=new)
        ds.load_state_dict(states)
        it = iter(ds)
        second += [next(it)[0] for _ in range(5)]
        states2.append(json.loads(json.dumps(ds.state_dict())))
    assert all(len(s["history"]) == 1 for s in states2)
    third: List[str] = []
    for rank in range(old):
        ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=rank, world_size=old)
        ds.load_state_dict(states2)
        third += [p for p, _ in ds]
    assert collections.Counter(first + second + third) == collections.Counter(everything)


def test_iterable_equal_per_rank_pads_the_remaining_samples(version):
    """With equal_per_rank the remaining samples are padded (repeating the first of them) to
    a multiple of the new world size: every rank reads as many, each remaining sample at
    least once, and no more than new world size - 1 repeats."""
    n = len(version.files())
    states, first = [], []
    for rank, steps in ((0, 9), (1, 10)):
        ds = iterable(version, rank, 2, equal_per_rank=True)
        it = iter(ds)
        first += [next(it)[0] for _ in range(steps)]
        states.append(ds.state_dict())
    reads = []
    for rank in range(3):
        ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=rank, world_size=3, equal_per_rank=True)
        ds.load_state_dict(states)
        reads.append([p for p, _ in ds])
    remaining = n - len(set(first))
    assert len({len(r) for r in reads}) == 1, "every rank the same number"
    assert len(reads[0]) == -(-remaining // 3)
    seen = collections.Counter(p for r in reads for p in r)
    assert set(seen) | set(first) == set(version.files()) and not set(seen) & set(first)
    assert sum(seen.values()) - len(seen) == 3 * len(reads[0]) - remaining < 3


def test_iterable_an_elastic_resume_needs_every_ranks_state(version):
    states = [iterable(version, r, 2).state_dict() for r in range(2)]
    ds = IterableVersionDataset(version, shuffle=True, seed=5, rank=0, world_size=3)
    with pytest.raises(ValueError, match="all 2 ranks"):
        ds.load_state_dict(states[0])
    with pytest.raises(ValueError, match="disagree"):
        ds.load_state_dict([states[0], dict(states[1], epoch=7)])
    with pytest.raises(ValueError, match="seed"):
        IterableVersionDataset(version, shuffle=True, seed=6, rank=0, world_size=3).load_state_dict(states)


# -- VersionDataset with dsv.torch.VersionSampler -------------------------------------------


def sampled(version, rank: int, world: int, steps=None, state=None, workers: int = 2):
    """Paths read through dsv.torch.DataLoader over a VersionDataset with a VersionSampler of
    rank/world (`steps` batches, or all, after loading `state`), and the sampler's state then."""
    ds = VersionDataset(version)
    sampler = VersionSampler(ds, shuffle=True, seed=5, rank=rank, world_size=world)
    sampler.set_epoch(2)
    if state is not None:
        sampler.load_state_dict(state)
    seen: List[str] = []
    for step, batch in enumerate(DataLoader(ds, batch_size=4, sampler=sampler, num_workers=workers), start=1):
        seen += paths_of(batch)
        if step == steps:
            break
    return seen, json.loads(json.dumps(sampler.state_dict()))


def test_version_sampler_resumes_exactly_and_elastically(version):
    everything = epoch_order(version)
    unbroken = {r: sampled(version, r, 2)[0] for r in range(2)}
    # The same order and split as IterableVersionDataset.
    assert unbroken[1] == [p for p, _ in iterable(version, 1, 2)]
    first: List[str] = []
    states = []
    for rank, steps in ((0, 4), (1, 2)):
        seen, state = sampled(version, rank, 2, steps=steps)
        assert seen == unbroken[rank][: 4 * steps] and state["samples_seen"] == 4 * steps, "exact with workers"
        first += seen
        states.append(state)
    # Same world size: exactly where it stopped.
    assert sampled(version, 0, 2, state=states[0])[0] == unbroken[0][16:]
    # World size 2 -> 3 and workers 2 -> 3: each remaining sample once, in the epoch's order.
    second = {r: sampled(version, r, 3, state=states, workers=3)[0] for r in range(3)}
    remaining = [p for p in everything if p not in set(first)]
    for rank in range(3):
        assert second[rank] == remaining[rank::3]
    assert collections.Counter(first + [p for r in range(3) for p in second[r]]) == collections.Counter(everything)


# -- TarShardDataset --------------------------------------------------------------------------

# Samples per shard: uneven, 19 shards, 200 samples.
SHARD_SIZES = [13, 7, 20, 9, 16, 11, 5, 8, 12, 10, 6, 14, 9, 7, 11, 10, 8, 15, 9]


@pytest.fixture(scope="module")
def tar_version(tmp_path_factory):
    """Dataset `tars` (tag v1): WebDataset shards `shards/s-NN.tar` of `KEY.txt` + `KEY.cls`."""
    base = tmp_path_factory.mktemp("elastic-tars")
    data = base / "data"
    (data / "shards").mkdir(parents=True)
    number = 0
    for n, size in enumerate(SHARD_SIZES):
        with tarfile.open(data / "shards" / f"s-{n:02d}.tar", "w", format=tarfile.PAX_FORMAT) as tf:
            for _ in range(size):
                for ext, body in (("txt", f"sample {number}".encode()), ("cls", str(number % 10).encode())):
                    info = tarfile.TarInfo(f"{number:05d}.{ext}")
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
                number += 1
    run_dsv("init", str(base), store=None)
    store = base / ".dsv"
    dsv_json("commit", str(data), "--dataset", "tars", "-m", "shards", "--tag", "v1", store=store)
    return dsv.Store(base).version("tars@v1")


ALL_KEYS = [f"{i:05d}" for i in range(sum(SHARD_SIZES))]


def tars(version, rank: int, world: int) -> TarShardDataset:
    ds = TarShardDataset(version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=rank, world_size=world)
    ds.set_epoch(1)
    return ds


def keys_through(ds, workers: int, steps=None, batch_size: int = 3):
    """Keys read through dsv.torch.DataLoader (`steps` batches, or all), and the state then."""
    keys: List[str] = []
    for step, batch in enumerate(DataLoader(ds, batch_size=batch_size, num_workers=workers), start=1):
        keys += batch["__key__"]
        if step == steps:
            break
    return keys, json.loads(json.dumps(ds.state_dict()))


def check_samples(keys: Sequence[str]) -> None:
    counts = collections.Counter(keys)
    assert sorted(counts) == ALL_KEYS, "every sample of the epoch"
    assert max(counts.values()) == 1, f"read twice: {[k for k, c in counts.items() if c > 1]}"


@pytest.mark.filterwarnings("ignore:dsv.torch.TarShardDataset")
def test_tar_world_2_to_3_and_workers_2_to_3_reads_each_remaining_sample_once(tar_version):
    unbroken = [k for r in range(2) for k in keys_through(tars(tar_version, r, 2), workers=2)[0]]
    check_samples(unbroken)
    first: List[str] = []
    states = []
    for rank, steps in ((0, 6), (1, 9)):
        keys, state = keys_through(tars(tar_version, rank, 2), workers=2, steps=steps)
        first += keys
        states.append(state)
    assert states[1]["consumed"] == [15, 12]
    second: List[str] = []
    for rank in range(3):
        ds = TarShardDataset(tar_version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=rank,
                             world_size=3)
        ds.load_state_dict(states)
        keys, state = keys_through(ds, workers=3)
        assert state["base"] is not None and state["world_size"] == 3
        second += keys
    check_samples(first + second)
    assert set(first) < set(unbroken) and len(first) == 45

    # The next epoch is whole, split as usual at world size 3.
    ds = TarShardDataset(tar_version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=2, world_size=3)
    ds.load_state_dict(states)
    keys_through(ds, workers=0)
    ds.set_epoch(2)
    fresh = TarShardDataset(tar_version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=2, world_size=3)
    fresh.set_epoch(2)
    assert [s["__key__"] for s in ds] == [s["__key__"] for s in fresh]


@pytest.mark.filterwarnings("ignore:dsv.torch.TarShardDataset")
@pytest.mark.parametrize("old,new", [(3, 2), (1, 4)])
def test_tar_other_world_sizes_and_a_second_preemption(tar_version, old, new):
    first: List[str] = []
    states = []
    for rank in range(old):
        ds = tars(tar_version, rank, old)
        it = iter(ds)
        first += [next(it)["__key__"] for _ in range(10 + 7 * rank)]
        states.append(ds.state_dict())
    second: List[str] = []
    states2 = []
    for rank in range(new):
        ds = TarShardDataset(tar_version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=rank,
                             world_size=new)
        ds.load_state_dict(states)
        it = iter(ds)
        second += [next(it)["__key__"] for _ in range(6)]
        states2.append(json.loads(json.dumps(ds.state_dict())))
    third: List[str] = []
    for rank in range(old):
        ds = TarShardDataset(tar_version, "shards/*.tar", shuffle=True, seed=3, buffer_size=12, rank=rank,
                             world_size=old)
        ds.load_state_dict(states2)
        third += [s["__key__"] for s in ds]
    check_samples(first + second + third)


@pytest.mark.filterwarnings("ignore:dsv.torch.TarShardDataset")
def test_tar_num_workers_0_to_2_and_2_to_3_at_one_world_size(tar_version):
    # num_workers=0 -> 2 (one rank: its own state is the state of all ranks).
    ds = tars(tar_version, 0, 1)
    it = iter(ds)
    first = [next(it)["__key__"] for _ in range(33)]
    state = ds.state_dict()
    again = tars(tar_version, 0, 1)
    again.load_state_dict(state)
    rest, _ = keys_through(again, workers=2)
    check_samples(first + rest)

    # Two ranks, 2 workers -> 3 at the same world size: the list of both ranks' states.
    first, states = [], []
    for rank in range(2):
        keys, state = keys_through(tars(tar_version, rank, 2), workers=2, steps=4 + rank)
        first += keys
        states.append(state)
    rest = []
    for rank in range(2):
        ds = tars(tar_version, rank, 2)
        ds.load_state_dict(states)
        rest += keys_through(ds, workers=3)[0]
    check_samples(first + rest)
    # Without the other ranks' states another number of workers is refused, as before.
    ds = tars(tar_version, 1, 2)
    ds.load_state_dict(states[1])
    with pytest.raises(ValueError, match="num_workers=2"):
        keys_through(ds, workers=3)
    # And another world size needs them all.
    with pytest.raises(ValueError, match="all 2 ranks"):
        tars(tar_version, 0, 3).load_state_dict(states[0])


# -- ParquetRowDataset ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows_version(tmp_path_factory):
    """conftest's covid@v1 tables (row groups of 20 rows) committed to a local store."""
    need("pyarrow")
    need("pandas")
    base = tmp_path_factory.mktemp("elastic-rows")
    write_engine_version(base / "covid", 1)
    run_dsv("init", str(base))
    dsv_json("commit", str(base / "covid"), "--dataset", "covid", "-m", "v1", "--tag", "v1", store=base / ".dsv")
    return dsv.Store(base).version("covid@v1")


def rows_of(samples) -> List[tuple]:
    return [(s["date"], s["country"], s["confirmed"]) for s in samples]


def parquet(version, rank: int, world: int) -> ParquetRowDataset:
    ds = ParquetRowDataset(version, shuffle=True, seed=4, rank=rank, world_size=world)
    ds.set_epoch(1)
    return ds


@pytest.mark.filterwarnings("ignore:dsv.torch.ParquetRowDataset")
def test_parquet_rows_world_2_to_3_and_workers_0_to_2(rows_version):
    everything = rows_of(parquet(rows_version, 0, 1))
    assert len(set(everything)) == len(everything)
    first, states = [], []
    for rank, count in ((0, 33), (1, 51)):
        ds = parquet(rows_version, rank, 2)
        it = iter(ds)
        first += rows_of(next(it) for _ in range(count))
        states.append(json.loads(json.dumps(ds.state_dict())))
    second = []
    for rank in range(3):
        ds = ParquetRowDataset(rows_version, shuffle=True, seed=4, rank=rank, world_size=3)
        ds.load_state_dict(states)
        assert ds.state_dict()["base"]["partial"], "row groups read in part are kept"
        for batch in DataLoader(ds, batch_size=5, num_workers=2):
            second += list(zip(batch["date"], batch["country"], batch["confirmed"].tolist()))
    assert collections.Counter(first + second) == collections.Counter(everything)


def test_an_elastic_state_loaded_after_persistent_workers_started_is_refused(version):
    states = []
    for rank in range(2):
        ds = iterable(version, rank, 2)
        it = iter(ds)
        [next(it) for _ in range(6)]
        states.append(ds.state_dict())
    ds = iterable(version, 0, 3)
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    list(loader)  # the workers start with no elastic plan
    ds.load_state_dict(states)
    with pytest.raises(RuntimeError, match="make the DataLoader after load_state_dict"):
        list(loader)
    expected = [ds.paths[i] for i in ds.rank_order()]
    fresh = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    assert [p for b in fresh for p in paths_of(b)] == expected


def test_tar_without_shuffle_the_order_after_an_elastic_resume_is_defined(tar_version):
    """Unshuffled, the resumed order is defined: the shards not finished, in shard order,
    split between the new ranks as whole shards are, each without its samples read before."""
    shard_keys, start = [], 0
    for size in SHARD_SIZES:
        shard_keys.append(ALL_KEYS[start : start + size])
        start += size
    first: List[str] = []
    states = []
    for rank, count in ((0, 40), (1, 20)):
        ds = TarShardDataset(tar_version, "shards/*.tar", rank=rank, world_size=2)
        it = iter(ds)
        keys = [next(it)["__key__"] for _ in range(count)]
        # Unshuffled, a rank reads its shards (every 2nd from its rank) one after another.
        assert keys == [k for keys_ in shard_keys[rank::2] for k in keys_][:count]
        first += keys
        states.append(ds.state_dict())
    read = set(first)
    left = [[k for k in keys_ if k not in read] for keys_ in shard_keys]
    pieces = [keys_ for keys_ in left if keys_]
    for rank in range(3):
        ds = TarShardDataset(tar_version, "shards/*.tar", rank=rank, world_size=3)
        ds.load_state_dict(states)
        assert [s["__key__"] for s in ds] == [k for keys_ in pieces[rank::3] for k in keys_]
