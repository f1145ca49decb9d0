"""dsv.torch.CombinedDataset: weighted mixtures of dsv iterable datasets, members from two
stores made by the dsv binary (thousands of files of a few bytes, each holding its own path,
so 20,000 samples read in about a second): shares within 1% of the weights, the same samples
on every run, a resumed run equal sample by sample to an unbroken one (in this process and
in 2 DataLoader workers, fork and spawn), the three stop modes, default and bad weights."""

from __future__ import annotations

import collections
import io
import itertools
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import dsv
from conftest import dsv_json, run_dsv
from dsv.torch import CombinedDataset, DataLoader, IterableVersionDataset, TarShardDataset, _CountingCollate

A_FILES = 3000
A2_FILES = 3500
B_FILES = 2000


def write_files(root: Path, prefix: str, count: int) -> None:
    """`count` files of a few bytes under `root`, each holding its own path."""
    for i in range(count):
        path = f"{prefix}/{i % 16:02d}/{i:05d}.txt"
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """Store one: dataset `a`, v1 (3,000 files) and v2 (500 more); store two: dataset `b`
    (2,000 files) and `shards` (4 tar files of 50 samples)."""
    base = tmp_path_factory.mktemp("mixture")
    one, two = base / "one", base / "two"
    for root in (one, two):
        run_dsv("init", str(root))
    data_a = base / "data-a"
    write_files(data_a, "a", A_FILES)
    dsv_json("commit", str(data_a), "--dataset", "a", "-m", "v1", "--tag", "v1", store=one / ".dsv")
    for i in range(A_FILES, A2_FILES):
        path = f"a/{i % 16:02d}/{i:05d}.txt"
        (data_a / path).write_text(path)
    dsv_json("commit", str(data_a), "--dataset", "a", "-m", "v2", "--tag", "v2", store=one / ".dsv")
    data_b = base / "data-b"
    write_files(data_b, "b", B_FILES)
    dsv_json("commit", str(data_b), "--dataset", "b", "-m", "v1", "--tag", "v1", store=two / ".dsv")
    data_s = base / "data-s"
    (data_s / "shards").mkdir(parents=True)
    for shard in range(4):
        with tarfile.open(data_s / "shards" / f"s{shard}.tar", "w") as tar:
            for i in range(50):
                body = f"shard{shard}-{i:03d}".encode()
                info = tarfile.TarInfo(f"shard{shard}-{i:03d}.txt")
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    dsv_json("commit", str(data_s), "--dataset", "shards", "-m", "v1", "--tag", "v1", store=two / ".dsv")
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        return {"one": dsv.Store(str(one / ".dsv")), "two": dsv.Store(str(two / ".dsv"))}
    data_r = base / "data-r"
    data_r.mkdir()
    table = pyarrow.table({"name": [f"row{i:04d}" for i in range(600)]})
    pyarrow.parquet.write_table(table, data_r / "rows.parquet", row_group_size=100)
    dsv_json("commit", str(data_r), "--dataset", "rows", "-m", "v1", "--tag", "v1", store=two / ".dsv")
    return {"one": dsv.Store(str(one / ".dsv")), "two": dsv.Store(str(two / ".dsv"))}


def path_of(path: str, data: bytes) -> str:
    assert data == path.encode(), (path, data)
    return path


def key_of(sample: Dict[str, Any]) -> str:
    return sample["txt"].decode()


def members(stores: Dict[str, Any], **extra: Any) -> List[IterableVersionDataset]:
    """`a@v2` (3,500 files) from store one and `b@v1` (2,000 files) from store two, shuffled."""
    a = IterableVersionDataset(stores["one"].version("a@v2"), shuffle=True, seed=1, transform=path_of, **extra)
    b = IterableVersionDataset(stores["two"].version("b@v1"), shuffle=True, seed=2, transform=path_of, **extra)
    return [a, b]


def source(sample: str) -> str:
    return sample.split("/")[0]


def test_two_versions_mixed_07_03_over_20000_samples_share_repeat_and_resume(stores):
    def make():
        mixture = CombinedDataset(members(stores), weights=[0.7, 0.3], seed=5, stop="cycle", samples_per_epoch=20_000)
        mixture.set_epoch(3)
        return mixture

    first = list(make())
    assert len(first) == 20_000
    shares = collections.Counter(source(s) for s in first)
    assert abs(shares["a"] / 20_000 - 0.7) < 0.01 and abs(shares["b"] / 20_000 - 0.3) < 0.01, shares
    # Identical across runs (new objects, same seed and epoch); another epoch or seed differs.
    assert list(make()) == first
    other_epoch = make()
    other_epoch.set_epoch(4)
    assert list(itertools.islice(other_epoch, 1000)) != first[:1000]
    other_seed = CombinedDataset(members(stores), [0.7, 0.3], seed=6, stop="cycle", samples_per_epoch=20_000)
    other_seed.set_epoch(3)
    assert list(itertools.islice(other_seed, 1000)) != first[:1000]
    # Each member's samples come in its own order, pass after pass (pass p reads member epoch 3 + p).
    a_samples = [s for s in first if source(s) == "a"]
    a = members(stores)[0]
    expected_a = []
    for member_epoch in range(3, 3 + 5):
        expected_a += [a.paths[i] for i in a.order(member_epoch)]
    assert a_samples == expected_a[: len(a_samples)]
    assert len(set(a_samples[:A2_FILES])) == A2_FILES

    # Resumed from a checkpoint at 7,777 samples: the rest equals the unbroken run's.
    mixture = make()
    it = iter(mixture)
    head = [next(it) for _ in range(7_777)]
    state = mixture.state_dict()
    assert state["consumed"] == [7_777] and state["samples_seen"] == 7_777 and state["epoch"] == 3
    assert sum(state["member_draws"][0]) == 7_777
    assert state["member_draws"][0][0] == sum(1 for s in head if source(s) == "a")
    resumed = make()
    resumed.set_epoch(0)
    resumed.load_state_dict(state)
    assert head + list(resumed) == first
    assert list(resumed) == first, "the next pass over the epoch is whole"


@pytest.mark.parametrize("stop", ["shortest", "longest"])
def test_stop_modes_end_the_epoch_as_documented(stores, stop):
    mixture = CombinedDataset(members(stores), weights=[0.5, 0.5], stop=stop)
    out = list(mixture)
    counts = collections.Counter(source(s) for s in out)
    if stop == "shortest":
        # b (2,000 files) runs out first: the epoch ends at the first draw of b after that.
        assert counts["b"] == B_FILES and counts["a"] < A2_FILES
        assert len(set(out)) == len(out)
    else:
        # Every sample of each member exactly once; after b ran out only a is drawn.
        assert sorted(out) == sorted(members(stores)[0].paths + members(stores)[1].paths)
        last_b = max(i for i, s in enumerate(out) if source(s) == "b")
        assert all(source(s) == "a" for s in out[last_b + 1 :]) and last_b + 1 < len(out)
    # Resume at a point after b ran out (longest) or near the end (shortest): exact.
    cut = len(out) - 300
    again = CombinedDataset(members(stores), weights=[0.5, 0.5], stop=stop)
    it = iter(again)
    head = [next(it) for _ in range(cut)]
    state = again.state_dict()
    if stop == "longest":
        assert state["exhausted"] == [[-1, B_FILES]] and state["member_draws"] == [[cut - B_FILES, B_FILES]]
    resumed = CombinedDataset(members(stores), weights=[0.5, 0.5], stop=stop)
    resumed.load_state_dict(state)
    assert head + list(resumed) == out


def test_weights_default_to_the_members_sizes_and_zero_weights_are_never_drawn(stores):
    mixture = CombinedDataset(members(stores), stop="longest")
    assert mixture.weights == [A2_FILES / (A2_FILES + B_FILES), B_FILES / (A2_FILES + B_FILES)]
    out = list(mixture)
    # Proportional: both members run out near the end together.
    first_end = min(max(i for i, s in enumerate(out) if source(s) == m) for m in "ab")
    assert first_end > 0.95 * len(out)
    only_b = list(CombinedDataset(members(stores), weights=[0, 2], stop="longest"))
    assert sorted(only_b) == sorted(members(stores)[1].paths)


@pytest.mark.parametrize(
    "weights, message",
    [
        ([0.7, -0.3], "weight 1 is -0.3: a weight cannot be negative"),
        ([1.0], "weights has 1 value\\(s\\) for 2 member\\(s\\)"),
        ([0, 0.0], "the weights are all zero"),
        ([float("nan"), 1], "each weight must be a finite number"),
        ("0.7", "weights must be a list of numbers"),
    ],
)
def test_bad_weights_are_refused_with_a_clear_message(stores, weights, message):
    with pytest.raises(ValueError, match=message):
        CombinedDataset(members(stores), weights=weights)


def test_bad_arguments_are_refused_with_a_clear_message(stores):
    with pytest.raises(ValueError, match="stop='cycle' needs samples_per_epoch="):
        CombinedDataset(members(stores), stop="cycle")
    with pytest.raises(ValueError, match="samples_per_epoch applies to stop='cycle' only"):
        CombinedDataset(members(stores), samples_per_epoch=10)
    with pytest.raises(ValueError, match="stop must be one of"):
        CombinedDataset(members(stores), stop="first")
    with pytest.raises(ValueError, match="at least one dataset"):
        CombinedDataset([])
    with pytest.raises(TypeError, match="member 1 is a list"):
        CombinedDataset([members(stores)[0], [1, 2]])
    shards = TarShardDataset(stores["two"].version("shards@v1"), "shards/*.tar")
    with pytest.raises(ValueError, match="member 1 \\(TarShardDataset\\) does not know its number of samples"):
        CombinedDataset([members(stores)[0], shards])
    a, b = members(stores)
    with pytest.raises(ValueError, match="the members disagree on rank and world size"):
        CombinedDataset([IterableVersionDataset(a.version, rank=0, world_size=2), b], weights=[1, 1])
    # A state of another mixture is refused.
    state = CombinedDataset(members(stores), weights=[0.7, 0.3]).state_dict()
    with pytest.raises(ValueError, match="its weights is"):
        CombinedDataset(members(stores), weights=[0.6, 0.4]).load_state_dict(state)
    with pytest.raises(ValueError, match="its seed is"):
        CombinedDataset(members(stores), weights=[0.7, 0.3], seed=1).load_state_dict(state)


def test_ranks_each_mix_their_own_shares(stores):
    out = []
    for rank in range(2):
        mixture = CombinedDataset(members(stores, rank=rank, world_size=2), weights=[0.6, 0.4], stop="longest")
        assert mixture.rank == rank and mixture.world_size == 2
        mine = list(mixture)
        assert sorted(mine) == sorted(
            p for m in members(stores, rank=rank, world_size=2) for p in (m.paths[i] for i in m.rank_order())
        )
        out += mine
    assert sorted(out) == sorted(members(stores)[0].paths + members(stores)[1].paths)


def counted_run(mixture: CombinedDataset, stop_after: int = -1, **loader: Any) -> List[str]:
    """Iterates `mixture` through a torch DataLoader, telling it what the loop consumed per
    worker as dsv.torch.DataLoader does for a TarShardDataset; stops after `stop_after`
    batches (its state is then the checkpoint)."""
    base = torch.utils.data.DataLoader(mixture, **loader)
    base.collate_fn = _CountingCollate(base.collate_fn, True)
    consumed = mixture._start(max(1, base.num_workers))
    mixture._consumed = list(consumed)
    out: List[str] = []
    for step, item in enumerate(base, start=1):
        consumed[item.worker] += item.samples
        mixture._consumed = list(consumed)
        out += item.batch
        if step == stop_after:
            return out
    mixture._finish_epoch()
    return out


def test_two_dataloader_workers_mix_their_shares_and_resume_exactly(stores):
    """Fork workers, then spawn workers (they start slower: two loaders only)."""
    loader = dict(batch_size=64, num_workers=2)

    def make():
        mixture = CombinedDataset(members(stores), weights=[0.7, 0.3], seed=3, stop="longest")
        mixture.set_epoch(2)
        return mixture

    full = counted_run(make(), **loader)
    # Every sample of both members once, over the two workers; the same on another run.
    assert sorted(full) == sorted(members(stores)[0].paths + members(stores)[1].paths)
    assert [s for batch in DataLoader(make(), **loader) for s in batch] == full
    # A checkpoint after 50 batches (25 of each worker: the loader asks the workers in turn,
    # and a resumed loader asks worker 0 first).
    mixture = make()
    head = counted_run(mixture, stop_after=50, **loader)
    state = mixture.state_dict()
    assert state["workers"] == 2 and state["consumed"] == [25 * 64, 25 * 64]
    assert [sum(draws) for draws in state["member_draws"]] == [25 * 64, 25 * 64]
    resumed = make()
    resumed.load_state_dict(state)
    assert head + counted_run(resumed, **loader) == full
    # Spawn workers: the same resume.
    resumed = make()
    resumed.load_state_dict(state)
    assert head + counted_run(resumed, multiprocessing_context="spawn", **loader) == full
    # Resuming needs the same worker split.
    other = make()
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="resume with num_workers=2"):
        counted_run(other, batch_size=64, num_workers=3)


def test_a_tar_shard_member_cycles_and_resumes_through_workers(stores):
    """A member that is not an IterableVersionDataset: its passes restart in each worker and a
    resume replays its stream."""

    def make():
        shards = TarShardDataset(stores["two"].version("shards@v1"), "shards/*.tar", shuffle=True, buffer_size=20,
                                 transform=key_of)
        b = members(stores)[1]
        return CombinedDataset([shards, b], weights=[0.5, 0.5], stop="cycle", samples_per_epoch=1_000)

    loader = dict(batch_size=10, num_workers=2)
    full = counted_run(make(), **loader)
    assert len(full) == 1_000
    tar_samples = [s for s in full if s.startswith("shard")]
    # 200 tar samples per pass: more than 2 passes; each worker's passes differ in order.
    assert len(tar_samples) > 450 and len(set(tar_samples)) == 200
    mixture = make()
    head = counted_run(mixture, stop_after=38, **loader)
    resumed = make()
    resumed.load_state_dict(mixture.state_dict())
    assert head + counted_run(resumed, **loader) == full


def test_persistent_workers_follow_set_epoch(stores):
    def epoch_of(epoch):
        mixture = CombinedDataset(members(stores), weights=[0.5, 0.5], stop="cycle", samples_per_epoch=2_000)
        mixture.set_epoch(epoch)
        return counted_run(mixture, batch_size=100, num_workers=2)

    mixture = CombinedDataset(members(stores), weights=[0.5, 0.5], stop="cycle", samples_per_epoch=2_000)
    loader = DataLoader(mixture, batch_size=100, num_workers=2, persistent_workers=True)
    for epoch in (0, 1, 0):
        mixture.set_epoch(epoch)
        assert [s for batch in loader for s in batch] == epoch_of(epoch)
    assert epoch_of(0) != epoch_of(1)


def test_weights_may_be_numpy_numbers(stores):
    numpy = pytest.importorskip("numpy")
    mixture = CombinedDataset(members(stores), weights=numpy.array([7, 3]))
    assert mixture.weights == [0.7, 0.3]


def test_a_parquet_row_member_weighs_its_rows_and_resumes(stores):
    pytest.importorskip("pyarrow")
    from dsv.torch import ParquetRowDataset

    def make():
        rows = ParquetRowDataset(stores["two"].version("rows@v1"), shuffle=True, transform=lambda row: row["name"])
        return CombinedDataset([rows, members(stores)[1]], stop="longest")

    mixture = make()
    assert mixture.weights == [600 / 2600, 2000 / 2600]
    full = list(mixture)
    assert sorted(full) == sorted([f"row{i:04d}" for i in range(600)] + members(stores)[1].paths)
    it = iter(mixture)
    head = [next(it) for _ in range(1234)]
    resumed = make()
    resumed.load_state_dict(mixture.state_dict())
    assert head + list(resumed) == full


def test_dsv_dataloader_keeps_a_mixtures_position_with_workers(stores):
    def make():
        return CombinedDataset(members(stores), weights=[0.7, 0.3], stop="longest")

    full = [s for batch in DataLoader(make(), batch_size=64, num_workers=2) for s in batch]
    mixture = make()
    head: List[str] = []
    for step, batch in enumerate(DataLoader(mixture, batch_size=64, num_workers=2), start=1):
        head += batch
        if step == 10:
            break
    state = mixture.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [s for batch in DataLoader(resumed, batch_size=64, num_workers=2) for s in batch] == full


def tar_and_b(stores: Dict[str, Any], **extra: Any) -> List[Any]:
    """`shards@v1` (4 tar shards of 50 samples) and `b@v1` (2,000 files), shuffled."""
    shards = TarShardDataset(stores["two"].version("shards@v1"), "shards/*.tar", shuffle=True, buffer_size=20,
                             transform=key_of, **extra)
    return [shards, members(stores, **extra)[1]]


def every_sample(stores: Dict[str, Any], kind: str) -> List[str]:
    if kind == "files":
        return sorted(members(stores)[0].paths + members(stores)[1].paths)
    tar = [f"shard{shard}-{i:03d}" for shard in range(4) for i in range(50)]
    return sorted(tar + members(stores)[1].paths)


@pytest.mark.parametrize("kind", ["files", "tar"])
def test_elastic_resume_from_2_to_3_ranks_reads_every_remaining_sample_once(stores, kind):
    """Two ranks read part of epoch 1 (unequal parts), three ranks resume from the list of both
    states: every sample of the epoch exactly once in all; the next epoch at 3 ranks whole."""
    make_members = members if kind == "files" else tar_and_b

    def make(rank: int, world: int) -> CombinedDataset:
        mixture = CombinedDataset(make_members(stores, rank=rank, world_size=world), weights=[0.6, 0.4], seed=4,
                                  stop="longest")
        mixture.set_epoch(1)
        return mixture

    before, states = [], []
    for rank, count in ((0, 700), (1, 411)):
        mixture = make(rank, 2)
        before += list(itertools.islice(iter(mixture), count))
        states.append(mixture.state_dict())
    assert [s["samples_seen"] for s in states] == [700, 411]
    after: List[str] = []
    resumed = []
    for rank in range(3):
        mixture = make(rank, 3)
        mixture.set_epoch(0)
        mixture.load_state_dict(states)
        assert mixture.epoch == 1
        mine = list(mixture)
        # Deterministic: a second object resumed from the same states reads the same.
        again = make(rank, 3)
        again.load_state_dict(states)
        assert list(again) == mine
        after += mine
        resumed.append(mixture)
    assert len(before) + len(after) == len(every_sample(stores, kind))
    assert sorted(before + after) == every_sample(stores, kind)
    # The next epoch, at 3 ranks: every sample once, in another order than epoch 1.
    following = []
    for mixture in resumed:
        mixture.set_epoch(2)
        following += list(mixture)
    assert sorted(following) == every_sample(stores, kind)
    # Only the rank's own state of another world size: a clear error.
    with pytest.raises(ValueError, match="needs the states of all 2 ranks"):
        make(0, 3).load_state_dict(states[0])


@pytest.mark.parametrize("kind", ["files", "tar"])
def test_elastic_resume_from_2_to_3_workers_reads_every_remaining_sample_once(stores, kind):
    """A loader of 2 workers stops after 7 batches; one of 3 workers resumes from the list of
    the (one) rank's states: every sample of the epoch exactly once in all."""
    make_members = members if kind == "files" else tar_and_b

    def make() -> CombinedDataset:
        mixture = CombinedDataset(make_members(stores), weights=[0.5, 0.5], seed=9, stop="longest")
        mixture.set_epoch(3)
        return mixture

    mixture = make()
    head = counted_run(mixture, stop_after=7, batch_size=32, num_workers=2)
    state = mixture.state_dict()
    assert state["consumed"] == [4 * 32, 3 * 32]
    resumed = make()
    resumed.load_state_dict([state])
    rest = counted_run(resumed, batch_size=32, num_workers=3)
    assert len(head) + len(rest) == len(every_sample(stores, kind))
    assert sorted(head + rest) == every_sample(stores, kind)
    # The next epoch, with 3 workers: every sample once.
    resumed.set_epoch(4)
    assert sorted(counted_run(resumed, batch_size=32, num_workers=3)) == every_sample(stores, kind)
    # The same through dsv.torch.DataLoader (it counts each worker's batches): 2 workers, then 3.
    mixture = make()
    head = []
    for step, batch in enumerate(DataLoader(mixture, batch_size=32, num_workers=2), start=1):
        head += batch
        if step == 5:
            break
    resumed = make()
    resumed.load_state_dict([mixture.state_dict()])
    rest = [s for batch in DataLoader(resumed, batch_size=32, num_workers=3) for s in batch]
    assert len(head) + len(rest) == len(every_sample(stores, kind))
    assert sorted(head + rest) == every_sample(stores, kind)


@pytest.mark.parametrize("stop", ["cycle", "shortest"])
def test_elastic_resume_of_cycle_and_shortest_and_a_checkpoint_in_the_resumed_epoch(stores, stop):
    """cycle: the budget left (3,000 minus what 2 ranks consumed) is split between 3 ranks;
    shortest: no sample read twice. A checkpoint in the resumed epoch resumes exactly at its
    size, and not at yet another one."""
    extra = dict(samples_per_epoch=3_000) if stop == "cycle" else {}

    def make(rank: int, world: int) -> CombinedDataset:
        mixture = CombinedDataset(members(stores, rank=rank, world_size=world), weights=[0.3, 0.7], seed=2,
                                  stop=stop, **extra)
        mixture.set_epoch(5)
        return mixture

    before, states = [], []
    for rank in range(2):
        mixture = make(rank, 2)
        before += list(itertools.islice(iter(mixture), 500 + rank))
        states.append(mixture.state_dict())
    after, inner = [], []
    for rank in range(3):
        mixture = make(rank, 3)
        mixture.load_state_dict(states)
        it = iter(mixture)
        head = list(itertools.islice(it, 100))
        inner.append(mixture.state_dict())
        rest = list(it)
        assert "elastic" in inner[-1] and inner[-1]["samples_seen"] == 100
        again = make(rank, 3)
        again.load_state_dict(inner[-1])
        assert list(again) == rest, "a checkpoint in the resumed epoch resumes exactly"
        after += head + rest
    if stop == "cycle":
        assert len(before) + len(after) == 3_000
    else:
        assert len(set(before + after)) == len(before) + len(after)
    with pytest.raises(ValueError, match="already resumed at another size"):
        make(0, 2).load_state_dict(inner)
