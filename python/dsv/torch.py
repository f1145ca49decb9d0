"""PyTorch datasets over a dsv version: no checkout, no conversion step.

- :class:`VersionDataset`: map-style (``len(ds)``, ``ds[i]``), for a ``DataLoader`` with any
  sampler (``DistributedSampler`` included).
- :class:`VersionSampler`: a sampler for a :class:`VersionDataset` with the order, rank split
  and resumable (also elastic) state of :class:`IterableVersionDataset`.
- :class:`IterableVersionDataset`: an ``IterableDataset`` that splits the version between
  ranks (``torch.distributed``) and ``DataLoader`` workers itself, shuffles deterministically
  per epoch, can give every rank the same number of samples, and records its progress in a
  state dict to resume mid-epoch without repeats or skips, also at another world size or
  number of workers (elastic resume).
- :class:`TarShardDataset`: an ``IterableDataset`` over the members of tar files of the
  version (WebDataset layout: the files of one sample share a key), read in place through
  ranged reads: shards split between ranks and workers, a seeded shuffle buffer, resumable.
- :class:`ParquetRowDataset`: an ``IterableDataset`` over the rows of the version's Parquet
  files, row groups as the unit of the split between ranks and workers and of resuming;
  reads only the row groups it yields.
- :class:`CombinedDataset`: a weighted mixture of the iterable datasets above (any versions,
  stores or remotes), deterministic per (seed, epoch), resumable.
- :class:`DataLoader`: ``torch.utils.data.DataLoader`` that tells an
  ``IterableVersionDataset``, a ``TarShardDataset``, a ``ParquetRowDataset`` or a
  ``CombinedDataset`` what the
  training loop has consumed, so its ``state_dict()`` is exact with worker processes too.

A sample of the first two is ``transform(path, data)`` (``data``: the file's bytes), or
``(path, data)`` without a transform; a ``TarShardDataset`` sample is a dict (see there), a
``ParquetRowDataset`` sample a row as a dict ``{column: value}``.
Reads go through the store's read engine: files only on a remote are fetched on first read
and kept in the store, once for every rank and worker on the machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import multiprocessing.context
import os
import random
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.utils.data

from . import _dsv
from ._parquet import RowGroup, assign, open_parquet, row_groups
from ._tar import Pending, TarShard, samples
from . import lineage as _lineage
from .errors import InvalidShard, NotAFile

__all__ = [
    "VersionDataset",
    "VersionSampler",
    "IterableVersionDataset",
    "TarShardDataset",
    "ParquetRowDataset",
    "CombinedDataset",
    "DataLoader",
]

Include = Union[str, Sequence[str], None]
Transform = Callable[[str, bytes], Any]


def _sample(transform: Optional[Transform], path: str, data: bytes) -> Any:
    return (path, data) if transform is None else transform(path, data)



def _pickled_state(dataset: Any) -> Dict[str, Any]:
    """What a dataset whose position lives in shared memory pickles as. Pickled in the main
    process when spawn workers start, the rank is read here, where torch.distributed is
    initialized (a worker has no process group). Shared memory travels only to a child
    process being started; a child of a training process (a rank started by another
    process) publishes its position first, so its workers read this process's."""
    dataset._resolve()
    if multiprocessing.context.get_spawning_popen() is None:
        state = dict(dataset.__dict__)
        state["_shared"] = None
        return state
    if torch.utils.data.get_worker_info() is None:
        dataset._publish()
    return dict(dataset.__dict__)


def _unpickled(dataset: Any, state: Dict[str, Any], shared: Callable[[], Any]) -> None:
    """Restores ``state`` into ``dataset``; shared memory of its own (``shared()``) when none
    travelled with it, holding its position."""
    dataset.__dict__.update(state)
    if dataset._shared is None:
        dataset._shared = shared()
        dataset._publish()


def _start_positions(dataset: Any, rank: Optional[int], world_size: Optional[int], shared: Any) -> None:
    """The position fields of ``TarShardDataset`` and ``ParquetRowDataset`` at epoch 0, with
    ``shared`` (its memory for the workers); then resolves the rank and publishes."""
    dataset.epoch = 0
    dataset._explicit = (rank, world_size) if rank is not None else None
    dataset._rank_world = dataset._explicit or (0, 1)
    # Per worker stream, its samples of epoch `_resume_epoch` consumed before a load_state_dict.
    dataset._resume_epoch = -1
    dataset._resume = []
    # Per worker stream, its samples of the current epoch consumed, as far as this process knows.
    dataset._consumed = [0]
    # Elastic resume: what earlier steps of epoch `_resume_epoch` read (shards or row groups
    # done, and per one read in part what of it was read), or None; `_progress_base`: that of
    # the pass `_consumed` counts; `_loaded`: the loaded states of all ranks, kept to resume
    # with another number of workers.
    dataset._base = None
    dataset._progress_base = None
    dataset._loaded = None
    dataset._plan_id = 0
    dataset._shared = shared
    dataset._resolve()
    dataset._publish()


def _apply_cache_limit(version: Any, cache_limit: Union[int, str, None]) -> None:
    """``cache_limit=`` of the datasets: the store's cache limit (``dsv cache limit``), set on
    the store the version is read from (a setting of that store, kept for every later reader:
    bytes, or a size such as ``"10GiB"``). ``None`` leaves the store's setting as it is."""
    if cache_limit is not None:
        version.store.set_cache_limit(cache_limit)


class VersionDataset(torch.utils.data.Dataset):
    """Map-style dataset of a version's files (those ``include`` selects), in path order:
    ``ds[i]`` reads the ``i``-th file and returns ``transform(path, data)``, or
    ``(path, data)`` without a transform.

    Works with any sampler (``RandomSampler``, ``DistributedSampler``) and with worker
    processes (fork or spawn): the version is reopened in each worker on first read.
    """

    # `ds.lineage(epoch=None, samples_seen=None, ...)`: the `dsv.lineage/1` record of what
    # this dataset read (`dsv.lineage.record`).
    lineage = _lineage.lineage_method

    def __init__(
        self,
        version: _dsv.Version,
        include: Include = None,
        transform: Optional[Transform] = None,
        cache_limit: Union[int, str, None] = None,
    ) -> None:
        _apply_cache_limit(version, cache_limit)
        self.version = version
        self.include = include
        self.transform = transform
        self.paths: List[str] = version.files(include)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        path = self.paths[index]
        return _sample(self.transform, path, self.version.read(path))


_FIRST_WINDOW = 64
_LARGEST_WINDOW = 4096
# Consecutive windows that needed nothing after which the prefetcher stops checking.
_IDLE_WINDOWS = 3


class _Prefetcher:
    """Fetches the data of the files a reader is about to read, when it is only on a remote,
    in windows ahead of the reads, on a background thread: the first window is small (the
    first batch comes quickly), each next one twice as large, up to 4,096 files. Each window
    is one ``Version.prefetch`` (one round of parallel requests, without the GIL); a read
    waits for its window, so no file is fetched alone. With the data here a window costs one
    catalog lookup per file and contacts nothing, and after three such windows in a row the
    prefetcher stops (a file still missing is then fetched by its read). A failure is left to
    the reads: they fetch what they need themselves, and raise what they meet."""

    def __init__(self, version: Any, paths: List[str], first: int) -> None:
        self.ends: List[int] = []
        end, size = 0, max(1, first)
        while end < len(paths):
            end = min(end + size, len(paths))
            self.ends.append(end)
            size = min(size * 2, _LARGEST_WINDOW)
        self.done = [threading.Event() for _ in self.ends]
        self.window = 0
        # Reads below this number need no wait (their windows are fetched).
        self.ready = 0
        self.stopped = False
        if self.ends:
            self.thread = threading.Thread(target=self._run, args=(version, paths), daemon=True, name="dsv-prefetch")
            self.thread.start()

    def _run(self, version: Any, paths: List[str]) -> None:
        start, idle = 0, 0
        for window, end in enumerate(self.ends):
            if self.stopped or idle >= _IDLE_WINDOWS:
                break
            try:
                fetched = version.prefetch(paths[start:end])
            except Exception:
                # The reads fetch by themselves and raise what they meet.
                fetched = 1
            # Windows of files already here, one after another: the data is here (the reads
            # would still fetch a file that is not); stop checking.
            idle = idle + 1 if fetched == 0 else 0
            self.done[window].set()
            start = end
        for event in self.done:
            event.set()

    def wait(self, index: int) -> None:
        """Waits until the window holding read number ``index`` is fetched."""
        if index < self.ready:
            # Known fetched: no lock taken (this runs once per sample).
            return
        while self.window < len(self.ends) and index >= self.ends[self.window]:
            self.window += 1
        if self.window < len(self.ends):
            self.done[self.window].wait()
            self.ready = self.ends[self.window]
        else:
            self.ready = self.ends[-1] if self.ends else 0

    def stop(self) -> None:
        self.stopped = True


def _distributed() -> Optional[Tuple[int, int]]:
    """(rank, world size) of an initialized default process group, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _check_rank_args(rank: Optional[int], world_size: Optional[int]) -> None:
    """A dataset's ``rank=`` and ``world_size=``: both or neither, and a valid pair."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    if rank is not None and world_size is not None:
        _check_rank(rank, world_size)


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise InvalidShard(f"invalid world size {world_size}: it must be at least 1")
    if not 0 <= rank < world_size:
        raise InvalidShard(
            f"invalid rank {rank} of world size {world_size}: the rank counts from 0 and must be less than the world size"
        )


class _SharedPosition:
    """Where iteration starts, in memory shared with ``DataLoader`` workers: the epoch, the
    epoch of a loaded resume position and that position, the rank and the world size. The main
    process writes it (``set_epoch``, ``load_state_dict``, the end of an epoch); a worker reads
    it each time its iteration starts, so persistent workers (``persistent_workers=True``)
    follow the main process's epoch. Fork workers share the pages; spawn and forkserver
    workers receive the memory's descriptor when they start (multiprocessing's inheritance).
    A dataset pickled any other way (``pickle.dumps``, ``copy.deepcopy``) gets a memory of its
    own, filled from its fields.

    The memory belongs to the process that made it (``owner``): only that process writes it.
    A training process that received the dataset from another one (a rank started by
    ``torch.multiprocessing.spawn`` or forked by a launcher) makes memory of its own before
    its first write, so ranks never write one another's position."""

    FIELDS = 6

    def __init__(self) -> None:
        self.values = multiprocessing.RawArray("q", self.FIELDS)
        self.owner = os.getpid()

    def write(self, epoch: int, resume_epoch: int, resume: int, rank: int, world: int, plan: int = 0) -> None:
        self.values[:] = [epoch, resume_epoch, resume, rank, world, plan]

    def read(self) -> Tuple[int, int, int, int, int, int]:
        epoch, resume_epoch, resume, rank, world, plan = self.values[:]
        return epoch, resume_epoch, resume, rank, world, plan


def _plan_id(plan: Any) -> int:
    """A number naming an elastic resume plan (0: none), the same in every process."""
    if not plan:
        return 0
    digest = hashlib.blake2b(json.dumps(plan, sort_keys=True).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2 or 1


def _check_plan(dataset: Any, plan: int) -> None:
    """In a worker: refuses to read with another elastic plan than the main process's (an
    elastic state loaded after persistent workers started)."""
    if plan != getattr(dataset, "_plan_id", 0):
        raise RuntimeError(
            f"dsv.torch.{type(dataset).__name__}: an elastic resume position was loaded after this DataLoader's "
            "persistent workers started: make the DataLoader after load_state_dict"
        )


def _as_states(state: Any) -> List[Dict[str, Any]]:
    """``state`` (one rank's state dict, or a list of them) as a non-empty list of dicts."""
    states = [state] if isinstance(state, dict) else list(state)
    if not states or not all(isinstance(s, dict) for s in states):
        raise ValueError("a state is a dict from state_dict(), or a list of them (one per rank)")
    return states


def _all_ranks(states: List[Dict[str, Any]], world: int) -> bool:
    """Whether ``states`` are those of ranks 0 .. world - 1, each once."""
    return sorted(int(s.get("rank", -1)) for s in states) == list(range(world))


def _split(remaining: List[int], world: int, pad: bool) -> List[List[int]]:
    """``remaining`` split between ``world`` ranks, rank ``r`` taking every ``world``-th item
    from ``r``; with ``pad`` the list is first repeated (from its start) to a multiple of
    ``world`` items, so every rank gets the same number."""
    if pad and remaining:
        total = math.ceil(len(remaining) / world) * world
        remaining = (remaining * math.ceil(total / len(remaining)))[:total]
    return [remaining[r::world] for r in range(world)]


def _remaining(n: int, history: List[Dict[str, Any]], pad: bool) -> List[int]:
    """The positions ``0 .. n - 1`` of an epoch's order that the steps of ``history`` left
    unread, ascending. A step ``{"world_size": W, "seen": [s_0, ..]}``: the positions left by
    the steps before it were split between ``W`` ranks (:func:`_split`) and rank ``r`` read
    the first ``s_r`` of its share."""
    remaining = list(range(n))
    for step in history:
        shares = _split(remaining, int(step["world_size"]), pad)
        done = set()
        for share, seen in zip(shares, step["seen"]):
            done.update(share[: int(seen)])
        remaining = [p for p in remaining if p not in done]
    return remaining


def _check_history(history: Any) -> List[Dict[str, Any]]:
    if not isinstance(history, list):
        raise ValueError(f"the state's history {history!r} is malformed")
    out = []
    for step in history:
        try:
            world = int(step["world_size"])
            seen = [int(s) for s in step["seen"]]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"the state's history step {step!r} is malformed") from None
        if world < 1 or len(seen) != world or min(seen) < 0:
            raise ValueError(f"the state's history step {step!r} is malformed")
        out.append({"world_size": world, "seen": seen})
    return out


class IterableVersionDataset(torch.utils.data.IterableDataset):
    """A version's files (those ``include`` selects) as an ``IterableDataset`` for
    distributed training.

    Order: the files in path order, or with ``shuffle=True`` a permutation that depends only
    on (version id, ``seed``, epoch) — the same on every machine and every run
    (``set_epoch(e)`` picks the epoch, as with ``DistributedSampler``).

    Ranks: rank ``r`` of ``W`` takes every ``W``-th file of that order starting at ``r``
    (``DistributedSampler``'s split), so each file is read by exactly one rank per epoch.
    ``rank`` and ``world_size`` come from ``torch.distributed`` when it is initialized (when
    the dataset is made, at ``set_epoch`` and when iterated in the main process), else from the
    arguments (default 0 of 1). With ``equal_per_rank=True`` every rank gets the same number
    of samples, ``ceil(N / W)``, by repeating the first few files of the order (as
    ``DistributedSampler`` pads), so DDP ranks never wait on each other at the end of an epoch.

    Workers: in a ``DataLoader`` with ``num_workers > 0`` each worker takes its share of the
    rank's files. With ``batch_size`` set (or with :class:`dsv.torch.DataLoader`, which sets
    it), the share is whole batches, worker ``w`` taking batches ``w, w + n, ...``: the order
    the loader hands batches over (it asks the workers in turn) is then exactly the rank's
    order, which is what makes ``state_dict()`` exact with workers.

    Persistent workers (``persistent_workers=True``) follow ``set_epoch`` and
    ``load_state_dict``: the epoch and resume position live in memory shared with the workers.

    Resuming: ``state_dict()`` records the epoch and how many of this rank's samples the
    training loop has consumed in it; ``load_state_dict(state)`` makes the next pass over that
    epoch start right after them.

    Elastic resume: a job may resume at another world size (the number of workers never
    matters here). Give every new rank the list of the state dicts of all the old ranks
    (``load_state_dict(states)``): the samples of the epoch no old rank had read, in the
    epoch's order, are split between the new ranks (rank ``r`` of ``W`` taking every
    ``W``-th from ``r``), so each is read once in all; the step is kept in the state
    (``history``), so a second preemption in the same epoch resumes elastically again, and
    the next epoch is split as usual. With ``equal_per_rank=True`` the remaining samples are
    padded to a multiple of the new world size by repeating the first of them: every rank
    reads as many, at most ``W - 1`` samples twice.

    A sample is ``transform(path, data)``, or ``(path, data)`` without a transform.
    """

    # `ds.lineage(epoch=None, samples_seen=None, ...)`: the `dsv.lineage/1` record of what
    # this dataset read (`dsv.lineage.record`).
    lineage = _lineage.lineage_method

    def __init__(
        self,
        version: _dsv.Version,
        include: Include = None,
        shuffle: bool = False,
        seed: int = 0,
        equal_per_rank: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        transform: Optional[Transform] = None,
        batch_size: Optional[int] = None,
        cache_limit: Union[int, str, None] = None,
    ) -> None:
        super().__init__()
        _apply_cache_limit(version, cache_limit)
        _check_rank_args(rank, world_size)
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.version = version
        self.include = include
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.equal_per_rank = bool(equal_per_rank)
        self.transform = transform
        self.batch_size = batch_size
        self.paths: List[str] = version.files(include)
        self.epoch = 0
        self._explicit = (rank, world_size) if rank is not None else None
        self._rank_world = self._explicit or (0, 1)
        # Samples of epoch `_resume_epoch` consumed before a load_state_dict.
        self._resume_epoch = -1
        self._resume = 0
        # This rank's samples of the current epoch consumed, as far as this process knows.
        self._consumed = 0
        # Elastic resume: the steps (world size, samples each rank read) that read part of
        # epoch `_resume_epoch` before, at other world sizes; `_progress`: those of the pass
        # `_consumed` counts (what state_dict reports).
        self._history: List[Dict[str, Any]] = []
        self._progress: List[Dict[str, Any]] = []
        self._plan_id = 0
        self._shared = _SharedPosition()
        self._resolve()
        self._publish()

    def _publish(self) -> None:
        """Writes where iteration starts to the memory the workers read (main process)."""
        if self._shared.owner != os.getpid():
            # Another training process's memory (this one is a rank it started): ours instead.
            self._shared = _SharedPosition()
        rank, world = self._rank_world
        self._shared.write(self.epoch, self._resume_epoch, self._resume, rank, world, self._plan_id)

    def _adopt(self) -> None:
        """In a worker: takes the main process's epoch, resume position, rank and world size."""
        epoch, resume_epoch, resume, rank, world, plan = self._shared.read()
        self.epoch, self._resume_epoch, self._resume = epoch, resume_epoch, resume
        self._rank_world = (rank, world)
        if resume_epoch == epoch:
            _check_plan(self, plan)

    # -- rank, world size and order -------------------------------------------------------

    def _resolve(self) -> Tuple[int, int]:
        """Rank and world size, read from torch.distributed in the main process."""
        if self._explicit is None and torch.utils.data.get_worker_info() is None:
            found = _distributed()
            if found is not None and found != self._rank_world:
                _check_rank(*found)
                self._rank_world = found
                self._publish()
        return self._rank_world

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._resolve()[0]

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._resolve()[1]

    def order(self, epoch: Optional[int] = None) -> List[int]:
        """The whole order of epoch ``epoch`` (default: the current one) before the split
        between ranks, as indexes into ``paths``, padded when ``equal_per_rank``."""
        epoch = self.epoch if epoch is None else epoch
        n = len(self.paths)
        if self.shuffle:
            key = f"{self.version.id}\0{self.seed}\0{epoch}"
            order = _dsv.permutation(n, key)
        else:
            order = list(range(n))
        world = self._rank_world[1]
        if self.equal_per_rank and n > 0:
            total = math.ceil(n / world) * world
            order = (order * math.ceil(total / n))[:total]
        return order

    def rank_order(self, epoch: Optional[int] = None) -> List[int]:
        """The indexes into ``paths`` this rank reads in epoch ``epoch``, in order: its share
        of ``order(epoch)``, or, in an epoch resumed elastically (a state of another world
        size loaded), its share of the samples of the epoch not read before."""
        epoch = self.epoch if epoch is None else epoch
        history = self._history if epoch == self._resume_epoch else []
        return self._rank_order(epoch, history)

    def _rank_order(self, epoch: int, history: List[Dict[str, Any]]) -> List[int]:
        rank, world = self._resolve()
        if not history:
            return self.order(epoch)[rank::world]
        n = len(self.paths)
        if self.shuffle:
            base = _dsv.permutation(n, f"{self.version.id}\0{self.seed}\0{epoch}")
        else:
            base = list(range(n))
        positions = _split(_remaining(n, history, self.equal_per_rank), world, self.equal_per_rank)[rank]
        return [base[p] for p in positions]

    def __len__(self) -> int:
        """The number of samples this rank reads per epoch."""
        rank, world = self._resolve()
        n = len(self.paths)
        if self.equal_per_rank:
            return math.ceil(n / world) if n else 0
        return len(range(rank, n, world))

    # -- epochs and progress --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (the shuffle's order). Call it before each epoch, in the main
        process, as with ``DistributedSampler``. A resume position loaded for another epoch
        is dropped."""
        self._resolve()
        if epoch != self.epoch:
            self._consumed = 0
            self._progress = []
        self.epoch = int(epoch)
        self._publish()

    def state_dict(self, samples_seen: Optional[int] = None) -> Dict[str, Any]:
        """Progress to save in a checkpoint: the epoch and how many of this rank's samples of
        it the training loop has consumed (``samples_seen``). Without ``samples_seen`` the count
        this object kept is used: exact when it was iterated in this process
        (``num_workers=0``) or through :class:`dsv.torch.DataLoader`; with a plain
        ``DataLoader`` and workers, pass the count (batches consumed x batch size) and give the
        dataset the loader's ``batch_size``."""
        rank, world = self._resolve()
        seen = self._consumed if samples_seen is None else int(samples_seen)
        share = len(self._rank_order(self.epoch, self._progress)) if self._progress else len(self)
        if not 0 <= seen <= share:
            raise ValueError(f"samples_seen must be between 0 and {share}, not {seen}")
        return {
            **self._order_key(),
            "world_size": world,
            "rank": rank,
            "epoch": self.epoch,
            "samples_seen": seen,
            "history": [dict(step) for step in self._progress],
        }

    def _order_key(self) -> Dict[str, Any]:
        """What the epoch's global order depends on: a state dict resumes only where all of
        it matches."""
        return {
            "version": self.version.id,
            "files": len(self.paths),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "equal_per_rank": self.equal_per_rank,
        }

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continues from ``state``: the epoch it names, and its next iteration starts after
        the samples already seen.

        ``state`` is this rank's ``state_dict()``, or the list of the state dicts of all
        ranks (gathered with ``torch.distributed.all_gather_object``). Of the same world size,
        the rank's own state is used: it goes on exactly where it stopped. Of another world
        size (elastic resume), the list of all the old ranks' states is needed: the samples
        of the epoch no rank had read are split between the ranks now (rank ``r`` of ``W``
        taking every ``W``-th of them, in the epoch's order, from ``r``), so each is read
        once in all; the next epoch is split as usual. Raises ``ValueError`` when a state is
        of another version, file selection, seed, shuffle or ``equal_per_rank`` (its order
        would differ), when the states disagree (epoch, world size, history), or when a state
        of another world size comes without those of all its ranks."""
        rank, world = self._resolve()
        states = _as_states(state)
        expected = self._order_key()
        for one in states:
            for key, value in expected.items():
                if one.get(key) != value:
                    raise ValueError(
                        f"the state is of another order: its {key} is {one.get(key)!r}, this dataset's is {value!r}"
                    )
        first = states[0]
        for one in states[1:]:
            for key in ("epoch", "world_size", "history"):
                if one.get(key, []) != first.get(key, []):
                    raise ValueError(f"the states disagree: their {key} differs ({first.get(key)!r}, {one.get(key)!r})")
        saved_world = int(first["world_size"])
        history = _check_history(first.get("history", []))
        if saved_world == world:
            mine = first if len(states) == 1 else next((s for s in states if s.get("rank") == rank), None)
            if mine is None:
                raise ValueError(f"the states hold none of rank {rank}")
            seen = int(mine["samples_seen"])
        else:
            if not _all_ranks(states, saved_world):
                raise ValueError(
                    f"the state's world_size is {saved_world} and this dataset's is {world}: an elastic resume needs "
                    f"the states of all {saved_world} ranks, as a list (gather them with "
                    "torch.distributed.all_gather_object when saving)"
                )
            by_rank = sorted(states, key=lambda s: int(s["rank"]))
            history = history + [
                {"world_size": saved_world, "seen": [int(s["samples_seen"]) for s in by_rank]}
            ]
            history = _check_history(history)
            seen = 0
        epoch = int(first["epoch"])
        share = len(self._rank_order(epoch, history))
        if not 0 <= seen <= share:
            raise ValueError(f"the state's samples_seen {seen} is out of range")
        self.epoch = epoch
        self._resume_epoch = self.epoch
        self._resume = seen
        self._consumed = seen
        self._history = history
        self._progress = history
        self._plan_id = _plan_id(history)
        self._publish()

    # -- iteration ------------------------------------------------------------------------

    def _start(self) -> int:
        """Where this pass starts in the rank's order (a loaded resume position)."""
        resuming = self._resume_epoch == self.epoch
        self._progress = self._history if resuming else []
        return self._resume if resuming else 0

    def _worker_share(self, remaining: List[int]) -> List[int]:
        info = torch.utils.data.get_worker_info()
        if info is None or info.num_workers <= 1:
            return remaining
        block = self.batch_size or 1
        workers = info.num_workers
        return [
            index
            for start in range(info.id * block, len(remaining), workers * block)
            for index in remaining[start : start + block]
        ]

    def __iter__(self) -> Iterator[Any]:
        in_main = torch.utils.data.get_worker_info() is None
        if not in_main:
            self._adopt()
        self._resolve()
        start = self._start()
        remaining = self.rank_order()[start:]
        mine = [self.paths[i] for i in self._worker_share(remaining)]
        read = self.version.read
        transform = self.transform
        prefetcher = _Prefetcher(self.version, mine, first=self.batch_size or _FIRST_WINDOW)
        try:
            for count, path in enumerate(mine):
                prefetcher.wait(count)
                sample = _sample(transform, path, read(path))
                if in_main:
                    self._consumed = start + count + 1
                yield sample
        finally:
            prefetcher.stop()
        if in_main:
            self._finish_epoch()

    def _finish_epoch(self) -> None:
        """The epoch was read to its end: a later pass over it starts from the beginning."""
        if self._resume_epoch == self.epoch:
            self._resume_epoch = -1
            self._resume = 0
            self._history = []
            self._plan_id = 0
            self._publish()

    def __getstate__(self) -> Dict[str, Any]:
        return _pickled_state(self)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        _unpickled(self, state, _SharedPosition)


class VersionSampler(torch.utils.data.Sampler):
    """A sampler of a :class:`VersionDataset` (indexes into its ``paths``) with the order and
    split of :class:`IterableVersionDataset`: path order, or with ``shuffle=True`` a
    permutation of (version id, ``seed``, epoch); rank ``r`` of ``W`` takes every ``W``-th
    index from ``r`` (``rank``/``world_size`` from ``torch.distributed`` when it is
    initialized, else the arguments, default 0 of 1); ``equal_per_rank=True`` pads as
    ``DistributedSampler`` does. Give it to the loader as ``sampler=``; call ``set_epoch(e)``
    before each epoch.

    Resuming: ``state_dict()`` records the epoch and the rank's samples the training loop has
    consumed (exact through :class:`dsv.torch.DataLoader`, which counts the batches the loop
    took, and without a loader); ``load_state_dict(state)`` makes the next pass over that
    epoch start after them. Elastic resume: at another world size give every rank the list
    of all the old ranks' states: the indexes no rank had read are split between the new
    ranks, each read once in all (see :meth:`IterableVersionDataset.load_state_dict`). The
    state has the same format as an :class:`IterableVersionDataset`'s."""

    def __init__(
        self,
        dataset: VersionDataset,
        shuffle: bool = True,
        seed: int = 0,
        equal_per_rank: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
    ) -> None:
        _check_rank_args(rank, world_size)
        self.dataset = dataset
        self.version = dataset.version
        self.paths = dataset.paths
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.equal_per_rank = bool(equal_per_rank)
        self.epoch = 0
        self._explicit = (rank, world_size) if rank is not None else None
        self._rank_world = self._explicit or (0, 1)
        self._resume_epoch = -1
        self._resume = 0
        self._consumed = 0
        self._history: List[Dict[str, Any]] = []
        self._progress: List[Dict[str, Any]] = []
        self._plan_id = 0
        self._resolve()

    def _publish(self) -> None:
        """Nothing to share: a sampler runs in the training process only."""

    _resolve = IterableVersionDataset._resolve
    rank = IterableVersionDataset.rank
    world_size = IterableVersionDataset.world_size
    order = IterableVersionDataset.order
    rank_order = IterableVersionDataset.rank_order
    _rank_order = IterableVersionDataset._rank_order
    __len__ = IterableVersionDataset.__len__
    set_epoch = IterableVersionDataset.set_epoch
    state_dict = IterableVersionDataset.state_dict
    _order_key = IterableVersionDataset._order_key
    load_state_dict = IterableVersionDataset.load_state_dict
    _start = IterableVersionDataset._start
    _finish_epoch = IterableVersionDataset._finish_epoch

    def _position(self) -> int:
        """Where the next pass starts in the rank's order, without starting it."""
        return self._resume if self._resume_epoch == self.epoch else 0

    def __iter__(self) -> Iterator[int]:
        self._resolve()
        start = self._start()
        for count, index in enumerate(self.rank_order()[start:], start=start + 1):
            # A loader takes indexes ahead of the loop: dsv.torch.DataLoader corrects this.
            self._consumed = count
            yield index
        self._finish_epoch()


# -- tar shards -------------------------------------------------------------------------------

# The most DataLoader workers (per rank) whose positions a TarShardDataset's state records.
_MAX_WORKERS = 256
# Samples a shuffle buffer holds before it hands the first one out (it then grows to its size).
_BUFFER_INITIAL = 100
TarTransform = Callable[[Dict[str, Any]], Any]


class _SharedTarPosition(_SharedPosition):
    """:class:`_SharedPosition` of a :class:`TarShardDataset`: the epoch, the epoch of a
    loaded resume position, the rank, the world size, and the resume position itself: the
    number of worker streams it was saved with and the samples of each stream consumed."""

    FIELDS = 6 + _MAX_WORKERS

    def write(  # type: ignore[override]
        self, epoch: int, resume_epoch: int, rank: int, world: int, resume: Sequence[int], plan: int = 0
    ) -> None:
        self.values[:6] = [epoch, resume_epoch, rank, world, plan, len(resume)]
        self.values[6 : 6 + len(resume)] = list(resume)

    def read(self) -> Tuple[int, int, int, int, List[int], int]:  # type: ignore[override]
        values = self.values[:]
        epoch, resume_epoch, rank, world, plan, workers = values[:6]
        return epoch, resume_epoch, rank, world, values[6 : 6 + workers], plan


# A piece of an epoch's tar work: a shard (its index in `TarShardDataset.shards`) and the
# ordinals (0 for its first sample) of its samples read before, to leave out.
Piece = Tuple[int, frozenset]


def _ranges(numbers: Any) -> List[List[int]]:
    """Sorted ``numbers`` as ``[start, end)`` ranges."""
    out: List[List[int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n:
            out[-1][1] = n + 1
        else:
            out.append([n, n + 1])
    return out


def _check_base(base: Any, shards: int) -> Optional[Dict[str, Any]]:
    """A state's ``base`` (what an earlier, elastic, step of the epoch read), checked."""
    if base is None:
        return None
    try:
        done = sorted(int(i) for i in base["done"])
        partial = [[int(i), [[int(a), int(b)] for a, b in ranges]] for i, ranges in base["partial"]]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"the state's base {base!r} is malformed") from None
    indexes = done + [i for i, _ in partial]
    if len(set(indexes)) != len(indexes) or any(not 0 <= i < shards for i in indexes):
        raise ValueError(f"the state's base {base!r} is malformed")
    if any(not 0 <= a < b for _, ranges in partial for a, b in ranges):
        raise ValueError(f"the state's base {base!r} is malformed")
    return {"done": done, "partial": sorted(partial)}


def _pick(buffer: List[Any], rng: random.Random) -> Any:
    # rng.random() is the one draw Python promises to keep the same across its versions.
    k = int(rng.random() * len(buffer))
    buffer[k], buffer[-1] = buffer[-1], buffer[k]
    return buffer.pop()


def _shuffled(items: Iterator[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """WebDataset's shuffle buffer: items go into a buffer and come out at random; it hands
    the first one out once it holds ``min(size, 100)`` and then grows (two in, one out) to
    ``size``."""
    buffer: List[Any] = []
    initial = min(size, _BUFFER_INITIAL)
    for item in items:
        buffer.append(item)
        if len(buffer) < size:
            extra = next(items, None)
            if extra is not None:
                buffer.append(extra)
        if len(buffer) >= initial:
            yield _pick(buffer, rng)
    while buffer:
        yield _pick(buffer, rng)


class TarShardDataset(torch.utils.data.IterableDataset):
    """The samples of tar shards of a version (WebDataset layout) as an ``IterableDataset``,
    read in place: each shard is streamed through ranged reads of the version (a 1 MiB window
    at a time, never the whole shard in memory, nothing extracted), its headers parsed as
    ``tarfile`` parses them (ustar, GNU long names, pax), every size checked against the
    shard's size. A malformed shard raises :class:`dsv.InvalidTar` naming it.

    ``shards``: a glob over the version's paths (``"shards/*.tar"``, path order) or a list of
    paths (in that order).

    Samples: consecutive members sharing a key (the member's path up to the first ``.`` of its
    last component) make one dict ``{"__key__": key, "__shard__": shard path, ext: bytes,
    ...}``, the extension (after that ``.``, lower-cased) naming each member's bytes:
    ``000123.png`` and ``000123.cls`` give ``{"__key__": "000123", "png": ..., "cls": ...}``.
    Members without such an extension, and non-file members, are skipped, as WebDataset does.
    A sample is ``transform(sample)``, or the dict without a transform.

    Order and split: each epoch the shards are put in an order (with ``shuffle=True`` a
    permutation that depends only on (version id, ``seed``, epoch)); rank ``r`` of ``W``
    takes every ``W``-th shard of it from ``r``, and DataLoader worker ``w`` of ``n`` every
    ``n``-th of the rank's shards from ``w``. Each worker reads its shards in turn, so every
    sample is read exactly once per epoch across all ranks and workers. With fewer shards
    than ranks x workers some workers (or ranks) get no shard and read nothing (a warning
    says so): use at least that many shards, ideally a multiple, of similar sizes.
    ``rank``/``world_size`` come from ``torch.distributed`` as for
    :class:`IterableVersionDataset`.

    Shuffle: with ``shuffle=True`` each worker also passes its samples through a buffer of
    ``buffer_size`` samples (WebDataset's ``shuffle``) driven by a generator seeded with
    (version id, seed, epoch, world size, rank, worker, workers): the order is the same for
    the same (seed, epoch) and loader settings, and differs between epochs.

    Resuming: ``state_dict()`` records the epoch and, per worker, how many samples of its
    stream the training loop has consumed; ``load_state_dict(state)`` makes each worker of the
    next pass over that epoch replay its stream up to that point (reading headers, not the
    data of samples it skips) and go on from there, so no sample is repeated or skipped. The
    counts are exact through :class:`dsv.torch.DataLoader` (it counts the batches of each
    worker the loop took) or with ``num_workers=0``.

    Elastic resume: with another world size or number of workers, give every new rank the
    list of the state dicts of all the old ranks (``load_state_dict(states)``). Each old
    worker's stream is replayed (headers read, no data) to find the samples it consumed;
    finished shards are dropped, partly read ones keep the ordinals of the samples read from
    them (``base`` in the state), and the remaining shards are split between the ranks and
    workers now as whole shards are, each leaving out its samples read before: every
    remaining sample is read once in all, and the next epoch is split as usual. With only
    the rank's own state, resume with the same number of workers.
    """

    # `ds.lineage(epoch=None, samples_seen=None, ...)`: the `dsv.lineage/1` record of what
    # this dataset read (`dsv.lineage.record`).
    lineage = _lineage.lineage_method

    def __init__(
        self,
        version: _dsv.Version,
        shards: Union[str, Sequence[str]],
        shuffle: bool = False,
        seed: int = 0,
        buffer_size: int = 1000,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        transform: Optional[TarTransform] = None,
        cache_limit: Union[int, str, None] = None,
    ) -> None:
        super().__init__()
        _apply_cache_limit(version, cache_limit)
        _check_rank_args(rank, world_size)
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, not {buffer_size}")
        if isinstance(shards, str):
            paths = version.files(shards)
            if not paths:
                raise ValueError(f"no file of {version.revision} matches {shards!r}")
        else:
            paths = [str(p) for p in shards]
            if len(set(paths)) != len(paths):
                raise ValueError("a shard is listed twice")
            for path in paths:
                kind = version.stat(path)["type"]
                if kind != "file":
                    raise NotAFile(f"{path} is a {kind}, not a tar file")
        self.version = version
        self.shards: List[str] = paths
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.buffer_size = int(buffer_size)
        self.transform = transform
        # Tar: `_base` holds the shards done and, per shard read in part, the ordinals of its
        # samples read.
        _start_positions(self, rank, world_size, _SharedTarPosition())

    def _publish(self) -> None:
        """Writes where iteration starts to the memory the workers read (main process)."""
        if self._shared.owner != os.getpid():
            self._shared = _SharedTarPosition()
        rank, world = self._rank_world
        self._shared.write(self.epoch, self._resume_epoch, rank, world, self._resume, getattr(self, "_plan_id", 0))

    def _adopt(self) -> None:
        """In a worker: takes the main process's epoch, resume position, rank and world size."""
        self.epoch, self._resume_epoch, rank, world, self._resume, plan = self._shared.read()
        self._rank_world = (rank, world)
        if self._resume_epoch == self.epoch:
            _check_plan(self, plan)

    _resolve = IterableVersionDataset._resolve
    rank = IterableVersionDataset.rank
    world_size = IterableVersionDataset.world_size

    # -- order ----------------------------------------------------------------------------

    def shard_order(self, epoch: Optional[int] = None) -> List[str]:
        """The shards in the order of epoch ``epoch`` (default: the current one), before the
        split between ranks."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return list(self.shards)
        key = f"{self.version.id}\0{self.seed}\0{epoch}\0shards"
        return [self.shards[i] for i in _dsv.permutation(len(self.shards), key)]

    def rank_shards(self, epoch: Optional[int] = None) -> List[str]:
        """The shards this rank reads in epoch ``epoch``, in order."""
        rank, world = self._resolve()
        return self.shard_order(epoch)[rank::world]

    def worker_shards(self, worker: int, num_workers: int, epoch: Optional[int] = None) -> List[str]:
        """The shards DataLoader worker ``worker`` of ``num_workers`` reads (0 of 1 without
        workers)."""
        return self.rank_shards(epoch)[worker::max(1, num_workers)]

    def _pieces(self, epoch: int, base: Optional[Dict[str, Any]]) -> List[Piece]:
        """The work of epoch ``epoch`` in the epoch's shard order, before the split between
        ranks: every shard, or with ``base`` those not done, each with its samples read
        before."""
        if self.shuffle:
            order = _dsv.permutation(len(self.shards), f"{self.version.id}\0{self.seed}\0{epoch}\0shards")
        else:
            order = list(range(len(self.shards)))
        if base is None:
            return [(i, frozenset()) for i in order]
        done = set(base["done"])
        partial = {i: frozenset(n for a, b in ranges for n in range(a, b)) for i, ranges in base["partial"]}
        return [(i, partial.get(i, frozenset())) for i in order if i not in done]

    def _worker_pieces(
        self, pieces: List[Piece], rank: int, world: int, worker: int, workers: int
    ) -> List[Piece]:
        return pieces[rank::world][worker::workers]

    def _rng(
        self, epoch: int, world: int, rank: int, worker: int, workers: int, base: Optional[Dict[str, Any]]
    ) -> random.Random:
        """The generator of a worker's shuffle buffer."""
        key = f"{self.version.id}\0{self.seed}\0{epoch}\0{world}\0{rank}\0{worker}\0{workers}"
        if base is not None:
            key += f"\0{_plan_id(base)}"
        return random.Random(key)

    # -- epochs and progress --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (the shard order and the shuffle). Call it before each epoch, in
        the main process. A resume position loaded for another epoch is dropped."""
        self._resolve()
        if epoch != self.epoch:
            self._consumed = [0] * len(self._consumed)
            self._progress_base = None
        self.epoch = int(epoch)
        self._publish()

    def _order_key(self) -> Dict[str, Any]:
        """What the epoch's global order depends on: a state dict resumes only where all of
        it matches."""
        listing = hashlib.blake2b("\0".join(self.shards).encode(), digest_size=16).hexdigest()
        return {
            "version": self.version.id,
            "shards": len(self.shards),
            "shard_list": listing,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "buffer_size": self.buffer_size,
        }

    def state_dict(self) -> Dict[str, Any]:
        """Progress to save in a checkpoint: the epoch, and per worker stream (one without
        workers) the samples of it the training loop has consumed (``consumed``;
        ``samples_seen`` is their sum). Exact when the dataset is iterated in this process or
        through :class:`dsv.torch.DataLoader`; a plain ``DataLoader`` with workers does not
        tell the dataset what it consumed, so its state restarts the epoch (no sample is
        skipped; those already seen come again)."""
        rank, world = self._resolve()
        consumed = [int(c) for c in self._consumed]
        return {
            **self._order_key(),
            "world_size": world,
            "rank": rank,
            "epoch": self.epoch,
            "workers": len(consumed),
            "consumed": consumed,
            "samples_seen": sum(consumed),
            "base": self._progress_base,
        }

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continues from ``state``: the epoch it names, and its next pass over that epoch
        starts, in each worker, after the samples already consumed.

        ``state`` is this rank's ``state_dict()``, or the list of the state dicts of all
        ranks (gathered with ``torch.distributed.all_gather_object``). With the same world
        size and number of workers each rank goes on exactly where it stopped (its own state
        is enough). With another world size (checked here) or number of workers (checked when
        iteration starts), the list of all the old ranks' states is needed (elastic resume):
        each old worker's stream is replayed (headers read, no data) to find the samples it
        had consumed, and the rest of the epoch, the shards not finished, each without the
        samples read from it before, is split between the ranks and workers now as whole
        shards are, so each remaining sample is read once in all. Raises ``ValueError`` when
        a state is of another version, shard list, seed, shuffle or buffer size (its order
        would differ), when the states disagree, or when the states of all ranks are needed
        and missing."""
        rank, world = self._resolve()
        states = _as_states(state)
        expected = self._order_key()
        for one in states:
            for key, value in expected.items():
                if one.get(key) != value:
                    raise ValueError(
                        f"the state is of another order: its {key} is {one.get(key)!r}, this dataset's is {value!r}"
                    )
            consumed = [int(c) for c in one["consumed"]]
            if len(consumed) != int(one["workers"]) or not 1 <= len(consumed) <= _MAX_WORKERS or min(consumed) < 0:
                raise ValueError(f"the state's consumed counts {consumed!r} are malformed")
        first = states[0]
        for one in states[1:]:
            for key in ("epoch", "world_size", "workers", "base"):
                if one.get(key) != first.get(key):
                    raise ValueError(f"the states disagree: their {key} differs ({first.get(key)!r}, {one.get(key)!r})")
        saved_world = int(first["world_size"])
        base = self._check_base(first.get("base"))
        complete = _all_ranks(states, saved_world)
        self.epoch = int(first["epoch"])
        self._resume_epoch = self.epoch
        self._loaded = [dict(s, base=base) for s in states] if complete else None
        if saved_world == world:
            mine = first if len(states) == 1 else next((s for s in states if s.get("rank") == rank), None)
            if mine is None or mine.get("rank", rank) != rank:
                got = "none" if mine is None else mine.get("rank")
                raise ValueError(f"the state is of another order: its rank is {got!r}, this dataset's is {rank!r}")
            consumed = [int(c) for c in mine["consumed"]]
            self._base = base
            self._resume = consumed
            self._consumed = list(consumed)
        else:
            if not complete:
                raise ValueError(
                    f"the state's world_size is {saved_world} and this dataset's is {world}: an elastic resume needs "
                    f"the states of all {saved_world} ranks, as a list (gather them with "
                    "torch.distributed.all_gather_object when saving)"
                )
            self._merge(states, base)
        self._progress_base = self._base
        self._plan_id = _plan_id(self._base)
        self._publish()

    def _check_base(self, base: Any) -> Optional[Dict[str, Any]]:
        return _check_base(base, len(self.shards))

    _UNITS = "shards"

    def _merge(self, states: List[Dict[str, Any]], base: Optional[Dict[str, Any]]) -> None:
        """Elastic resume: from the states of all ranks (one epoch, world size and number of
        workers), the samples they consumed, found by replaying each worker's stream (headers
        read, no data), become the base of a new split of the epoch's remaining work."""
        first = states[0]
        epoch, world, workers = int(first["epoch"]), int(first["world_size"]), int(first["workers"])
        pieces = self._pieces(epoch, base)
        read: Dict[int, set] = {i: set(excluded) for i, excluded in pieces}
        sizes: Dict[int, int] = {}
        for state in states:
            rank = int(state["rank"])
            for worker, count in enumerate(int(c) for c in state["consumed"]):
                if count == 0:
                    continue
                mine = self._worker_pieces(pieces, rank, world, worker, workers)
                items = self._items(mine, lambda: False, sizes, prefetch=False)
                if self.shuffle:
                    items = _shuffled(items, self.buffer_size, self._rng(epoch, world, rank, worker, workers, base))
                for produced, (index, ordinal, _) in enumerate(items):
                    if produced >= count:
                        break
                    read[index].add(ordinal)
        done = set(base["done"]) if base else set()
        done |= {i for i, ordinals in read.items() if i in sizes and len(ordinals) >= sizes[i]}
        partial = sorted([i, _ranges(ordinals)] for i, ordinals in read.items() if ordinals and i not in done)
        self._base = {"done": sorted(done), "partial": partial}
        self._resume = []
        self._consumed = [0]

    def _start(self, workers: int) -> List[int]:
        """Per worker stream, the samples to skip in this pass (a loaded resume position).
        A resume position of another number of workers is first made an elastic one (from the
        loaded states of all ranks)."""
        resuming = self._resume_epoch == self.epoch
        resume = self._resume if resuming else []
        if any(resume) and len(resume) != workers:
            if self._loaded is None:
                raise ValueError(
                    f"the resume position was saved by a loader with {len(resume)} worker stream(s) and this one has "
                    f"{workers}: resume with num_workers={len(resume) if len(resume) > 1 else 0} (the worker split of "
                    f"the {self._UNITS} depends on it), or load the states of all ranks (a list) for an elastic resume"
                )
            self._merge(self._loaded, self._base)
            self._loaded = None
            self._plan_id = _plan_id(self._base)
            if torch.utils.data.get_worker_info() is None:
                self._publish()
            resume = []
        self._progress_base = self._base if resuming else None
        return list(resume) if any(resume) else [0] * workers

    def _finish_epoch(self) -> None:
        """The epoch was read to its end: a later pass over it starts from the beginning."""
        if self._resume_epoch == self.epoch:
            self._resume_epoch = -1
            self._resume = []
            self._base = None
            self._loaded = None
            self._plan_id = 0
            self._publish()

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        in_main = info is None
        if not in_main:
            self._adopt()
        rank, world = self._resolve()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        skip = self._start(workers)[worker]
        base = self._base if self._resume_epoch == self.epoch else None
        pieces = self._pieces(self.epoch, base)
        rank_pieces = pieces[rank::world]
        mine = self._worker_pieces(pieces, rank, world, worker, workers)
        if worker == 0 and len(rank_pieces) < workers:
            warnings.warn(
                f"dsv.torch.TarShardDataset: rank {rank} has {len(rank_pieces)} shard(s) for {workers} worker(s): "
                f"{workers - len(rank_pieces)} worker(s) read nothing (give at least ranks x workers shards)",
                stacklevel=2,
            )
        if in_main:
            self._consumed = [skip]
        stream = self._stream(mine, self._rng(self.epoch, world, rank, worker, workers, base), skip)
        for count, sample in enumerate(stream, start=skip + 1):
            if in_main:
                self._consumed = [count]
            yield sample
        if in_main:
            self._finish_epoch()

    def _stream(self, pieces: List[Piece], rng: random.Random, skip: int) -> Iterator[Any]:
        """The samples of ``pieces`` in this worker's order, the first ``skip`` left out: they
        are replayed (headers read, data not) so the shuffle buffer reaches the same state."""
        version = self.version
        replaying = [skip > 0]
        items = self._items(pieces, lambda: not replaying[0])
        if self.shuffle:
            items = _shuffled(items, self.buffer_size, rng)
        transform = self.transform
        for produced, (_, _, item) in enumerate(items):
            if produced < skip:
                continue
            replaying[0] = False
            sample = item.complete(version)
            yield sample if transform is None else transform(sample)

    def _items(
        self,
        pieces: List[Piece],
        with_data: Callable[[], bool],
        sizes: Optional[Dict[int, int]] = None,
        prefetch: bool = True,
    ) -> Iterator[Tuple[int, int, Pending]]:
        """The samples of ``pieces``, one shard after another, each as (shard index, ordinal
        in its shard, sample), those a piece leaves out skipped (their data not read). While
        one shard is read the next is fetched into the store (when its data is only on a
        remote) on a background thread. A shard read to its end puts its number of samples
        in ``sizes``."""
        for number, (index, excluded) in enumerate(pieces):
            with TarShard(self.version, self.shards[index]) as shard:
                if prefetch and number + 1 < len(pieces):
                    _prefetch_later(self.version, self.shards[pieces[number + 1][0]])
                ordinal = [0]
                for item in samples(shard, lambda: with_data() and ordinal[0] not in excluded):
                    this = ordinal[0]
                    ordinal[0] += 1
                    if this not in excluded:
                        yield index, this, item
                if sizes is not None:
                    sizes[index] = ordinal[0]

    def __getstate__(self) -> Dict[str, Any]:
        return _pickled_state(self)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        _unpickled(self, state, _SharedTarPosition)


# -- rows of Parquet files --------------------------------------------------------------------

RowTransform = Callable[[Dict[str, Any]], Any]


class ParquetRowDataset(torch.utils.data.IterableDataset):
    """The rows of a version's Parquet files as an ``IterableDataset``: no conversion to
    another format first. A sample is one row, a dict ``{column: value}`` of Python values
    (``columns`` selects and orders them), or ``transform(row)``; with ``batch_rows=N`` a
    sample is a batch of ``N`` consecutive rows of the stream instead, a dict ``{column:
    [values]}`` (the last batch of a worker's stream may be shorter), or ``transform(batch)``.

    The unit of work is the row group. The plan, made when the dataset is made, is every row
    group of the Parquet files ``include`` selects (in path order), read from the files'
    footers alone (``dsv._parquet.row_groups``). Iterating reads only the row groups it
    yields (``read_row_group`` through ``Version.open``: ranged reads; the next row group of
    a worker is read on a background thread while the rows of the current one are handed
    out), so from a version whose data is only on a remote only the frames holding those
    groups and the files' footers are fetched (and kept in the store for every process of
    the machine). A selected file that is not Parquet
    raises :class:`dsv.InvalidParquet` naming it; a missing column, ``ValueError``.

    Order and split: each epoch the row groups are put in an order (with ``shuffle=True`` a
    permutation that depends only on (version id, ``seed``, epoch), the same on every
    machine), which is cut into ``world_size x num_workers`` consecutive shares of about equal
    rows (``balance="rows"``, or bytes with ``balance="bytes"``; ``dsv._parquet.assign``):
    DataLoader worker ``w`` of ``n`` of rank ``r`` reads share ``r * n + w``, its row groups
    one after another, each row once per epoch across all ranks and workers. A rank's shares
    together are the same row groups whatever the number of workers. With ``shuffle=True``
    the rows of each row group are also permuted (a permutation of (version id, ``seed``,
    epoch, path, row group)). With fewer row groups than ranks x workers some workers read
    nothing (a warning says so). Ranks may get a few rows more or less than one another (the
    cut is at row group boundaries). ``rank``/``world_size`` come from ``torch.distributed``
    as for :class:`IterableVersionDataset`.

    Resuming: ``state_dict()`` records the epoch and, per worker, how many samples of its
    stream the training loop has consumed (and where that is: row group of its share and row
    offset); ``load_state_dict(state)`` makes each worker of the next pass over that epoch
    skip the row groups it had finished without reading them and go on from the row after
    the last one consumed, so each remaining row comes exactly once. The counts are exact
    through :class:`dsv.torch.DataLoader` or with ``num_workers=0``. ``set_epoch(e)`` picks
    the epoch.

    Elastic resume: with another world size or number of workers, give every new rank the
    list of the state dicts of all the old ranks (``load_state_dict(states)``). Each old
    worker stream had consumed whole row groups of its share and a prefix of the next one:
    the row groups done are dropped, those read in part keep the number of rows read
    (``base`` in the state: ``{"done": [numbers into groups], "partial": [[number, rows]]}``),
    and the rest is cut again into ``world_size x num_workers`` shares by the rows (or
    bytes) left, each row group read in part going on after its rows read before: every
    remaining row is read once in all, and the next epoch is split as usual. With only the
    rank's own state, resume with the same world size and number of workers.

    Needs ``pyarrow``.
    """

    # `ds.lineage(epoch=None, samples_seen=None, ...)`: the `dsv.lineage/1` record of what
    # this dataset read (`dsv.lineage.record`).
    lineage = _lineage.lineage_method

    def __init__(
        self,
        version: _dsv.Version,
        include: Include = "**/*.parquet",
        columns: Optional[Sequence[str]] = None,
        shuffle: bool = False,
        seed: int = 0,
        transform: Optional[RowTransform] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        batch_rows: Optional[int] = None,
        balance: str = "rows",
        cache_limit: Union[int, str, None] = None,
    ) -> None:
        super().__init__()
        _apply_cache_limit(version, cache_limit)
        _check_rank_args(rank, world_size)
        if batch_rows is not None and batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
        if balance not in ("rows", "bytes"):
            raise ValueError(f"balance must be 'rows' or 'bytes', not {balance!r}")
        if isinstance(columns, str):
            raise ValueError(f"columns must be a list of column names, not the string {columns!r}")
        self.version = version
        self.include = include
        self.columns: Optional[List[str]] = None if columns is None else list(columns)
        self.groups: List[RowGroup] = row_groups(version, include, self.columns)
        self.num_rows = sum(g.rows for g in self.groups)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.transform = transform
        self.batch_rows = batch_rows
        self.balance = balance
        # Elastic resume (as TarShardDataset's): `_base` holds the row groups done and, per
        # row group read in part, the rows of it read (a prefix in the epoch's order).
        _start_positions(self, rank, world_size, _SharedTarPosition())

    _publish = TarShardDataset._publish
    _adopt = TarShardDataset._adopt
    _resolve = IterableVersionDataset._resolve
    rank = IterableVersionDataset.rank
    world_size = IterableVersionDataset.world_size

    # -- order ----------------------------------------------------------------------------

    def group_order(self, epoch: Optional[int] = None) -> List[RowGroup]:
        """The row groups in the order of epoch ``epoch`` (default: the current one), before
        the split between ranks."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return list(self.groups)
        key = f"{self.version.id}\0{self.seed}\0{epoch}\0row_groups"
        return [self.groups[i] for i in _dsv.permutation(len(self.groups), key)]

    def rank_groups(self, epoch: Optional[int] = None) -> List[RowGroup]:
        """The row groups this rank reads in epoch ``epoch``, in order (its workers' shares,
        one after another)."""
        rank, world = self._resolve()
        return assign(self.group_order(epoch), rank, world, by=self.balance)

    def worker_groups(self, worker: int, num_workers: int, epoch: Optional[int] = None) -> List[RowGroup]:
        """The row groups DataLoader worker ``worker`` of ``num_workers`` of this rank reads
        in epoch ``epoch``, in order (0 of 0 or 1 without workers)."""
        rank, world = self._resolve()
        workers = max(1, num_workers)
        return assign(self.group_order(epoch), rank * workers + worker, world * workers, by=self.balance)

    def rank_rows(self, epoch: Optional[int] = None) -> int:
        """The number of rows this rank reads in epoch ``epoch``."""
        return sum(g.rows for g in self.rank_groups(epoch))

    # -- epochs and progress --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (the row group order and the shuffle). Call it before each
        epoch, in the main process. A resume position loaded for another epoch is dropped."""
        self._resolve()
        if epoch != self.epoch:
            self._consumed = [0] * len(self._consumed)
            self._progress_base = None
        self.epoch = int(epoch)
        self._publish()

    def _order_key(self) -> Dict[str, Any]:
        """What the epoch's global order depends on: a state dict resumes only where all of
        it matches."""
        plan = "\0".join(f"{g.path}\0{g.index}\0{g.rows}" for g in self.groups)
        return {
            "version": self.version.id,
            "row_groups": len(self.groups),
            "plan": hashlib.blake2b(plan.encode(), digest_size=16).hexdigest(),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "batch_rows": self.batch_rows,
            "balance": self.balance,
        }

    # -- elastic resume -------------------------------------------------------------------

    _UNITS = "row groups"

    def _check_base(self, base: Any) -> Optional[Dict[str, Any]]:
        """A state's ``base``: row groups done (numbers into ``groups``) and ``[number, rows
        read]`` of row groups read in part."""
        if base is None:
            return None
        try:
            done = sorted(int(i) for i in base["done"])
            partial = sorted([int(i), int(r)] for i, r in base["partial"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"the state's base {base!r} is malformed") from None
        numbers = done + [i for i, _ in partial]
        if len(set(numbers)) != len(numbers) or any(not 0 <= i < len(self.groups) for i in numbers):
            raise ValueError(f"the state's base {base!r} is malformed")
        if any(not 0 < r < self.groups[i].rows for i, r in partial):
            raise ValueError(f"the state's base {base!r} is malformed")
        return {"done": done, "partial": partial}

    def _plan(self, epoch: int, base: Optional[Dict[str, Any]], part: int, parts: int) -> List[Tuple[RowGroup, int]]:
        """Share ``part`` of ``parts`` of epoch ``epoch``'s work: its row groups, each with the
        rows of it read before (a prefix in the epoch's order). Without ``base``, the shares
        of ``worker_groups``; with it, the row groups not done, cut by their rows left."""
        if base is None:
            return [(g, 0) for g in assign(self.group_order(epoch), part, parts, by=self.balance)]
        if self.shuffle:
            numbers = _dsv.permutation(len(self.groups), f"{self.version.id}\0{self.seed}\0{epoch}\0row_groups")
        else:
            numbers = list(range(len(self.groups)))
        done = set(base["done"])
        read = dict((i, r) for i, r in base["partial"])
        left = []
        for number in numbers:
            if number in done:
                continue
            group = self.groups[number]
            skip = read.get(number, 0)
            fraction = (group.rows - skip) / group.rows if group.rows else 1.0
            # The number in `index`'s place keeps groups apart (assign returns the tuples).
            left.append(group._replace(index=number, rows=group.rows - skip, bytes=int(group.bytes * fraction)))
        return [(self.groups[g.index], read.get(g.index, 0)) for g in assign(left, part, parts, by=self.balance)]

    def _merge(self, states: List[Dict[str, Any]], base: Optional[Dict[str, Any]]) -> None:
        """Elastic resume: the rows the states of all ranks consumed (each worker stream reads
        its row groups in turn, so it consumed whole row groups and a prefix of one) become
        the base of a new split of the epoch's remaining row groups."""
        first = states[0]
        epoch, world, workers = int(first["epoch"]), int(first["world_size"]), int(first["workers"])
        number = {(g.path, g.index): n for n, g in enumerate(self.groups)}
        done = set(base["done"]) if base else set()
        read = dict((i, r) for i, r in base["partial"]) if base else {}
        for state in states:
            rank = int(state["rank"])
            for worker, count in enumerate(int(c) for c in state["consumed"]):
                rows = count * (self.batch_rows or 1)
                for group, skip in self._plan(epoch, base, rank * workers + worker, world * workers):
                    if rows <= 0:
                        break
                    n = number[(group.path, group.index)]
                    left = group.rows - skip
                    if rows >= left:
                        done.add(n)
                        read.pop(n, None)
                    else:
                        read[n] = skip + rows
                    rows -= left
        self._base = {"done": sorted(done), "partial": sorted([i, r] for i, r in read.items())}
        self._resume = []
        self._consumed = [0]

    def _position(self, worker: int, workers: int, samples: int) -> List[int]:
        """Where worker ``worker``'s stream is after ``samples`` samples: [row group number in
        its share, rows of that group read]."""
        rows = samples * (self.batch_rows or 1)
        rank, world = self._resolve()
        groups = self._plan(self.epoch, self._progress_base, rank * workers + worker, world * workers)
        for number, (group, skip) in enumerate(groups):
            if rows < group.rows - skip:
                return [number, skip + rows]
            rows -= group.rows - skip
        return [len(groups), 0]

    def state_dict(self) -> Dict[str, Any]:
        """Progress to save in a checkpoint: the epoch, and per worker stream (one without
        workers) the samples of it the training loop has consumed (``consumed``;
        ``samples_seen`` is their sum; ``positions``: per worker, [row group number in its
        share, rows of it consumed]). Exact when the dataset is iterated in this process or
        through :class:`dsv.torch.DataLoader`; a plain ``DataLoader`` with workers does not
        tell the dataset what it consumed, so its state restarts the epoch (no row is
        skipped; those already seen come again)."""
        rank, world = self._resolve()
        consumed = [int(c) for c in self._consumed]
        workers = len(consumed)
        return {
            **self._order_key(),
            "world_size": world,
            "rank": rank,
            "epoch": self.epoch,
            "workers": workers,
            "consumed": consumed,
            "positions": [self._position(w, workers, c) for w, c in enumerate(consumed)],
            "samples_seen": sum(consumed),
            "base": self._progress_base,
        }

    load_state_dict = TarShardDataset.load_state_dict
    _start = TarShardDataset._start
    _finish_epoch = TarShardDataset._finish_epoch

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        in_main = info is None
        if not in_main:
            self._adopt()
        rank, world = self._resolve()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        skip = self._start(workers)[worker]
        base = self._base if self._resume_epoch == self.epoch else None
        mine = self._plan(self.epoch, base, rank * workers + worker, world * workers)
        if worker == 0:
            shares = [mine] + [
                self._plan(self.epoch, base, rank * workers + w, world * workers) for w in range(1, workers)
            ]
            idle = sum(1 for share in shares if not share)
            if idle:
                warnings.warn(
                    f"dsv.torch.ParquetRowDataset: rank {rank} has {len(self.rank_groups())} row group(s) for "
                    f"{workers} worker(s): {idle} worker(s) read nothing (give at least ranks x workers row groups)",
                    stacklevel=2,
                )
        if in_main:
            self._consumed = [skip]
        tables = self._tables(mine, skip * (self.batch_rows or 1))
        stream = _rows(tables) if self.batch_rows is None else _batches(tables, self.batch_rows)
        transform = self.transform
        for count, sample in enumerate(stream, start=skip + 1):
            if in_main:
                self._consumed = [count]
            yield sample if transform is None else transform(sample)
        if in_main:
            self._finish_epoch()

    def _tables(self, groups: List[Tuple[RowGroup, int]], skip: int) -> Iterator[Any]:
        """The rows of ``groups`` (each a row group and the rows of it read before) in this
        epoch's order, as one ``pyarrow.Table`` per row group, the first ``skip`` rows left
        out: whole row groups among them are not read. While the rows of one row group are
        handed out, the next one is read on a background thread."""
        todo: List[Tuple[RowGroup, int]] = []
        for group, before in groups:
            if skip >= group.rows - before:
                skip -= group.rows - before
                continue
            todo.append((group, before + skip))
            skip = 0
        reader = _RowGroupReader(self.version, self.columns)
        ahead: Optional[_Ahead] = None
        try:
            for number, (group, skip) in enumerate(todo):
                table = reader.read(group) if ahead is None else ahead.result()
                ahead = _Ahead(reader.read, todo[number + 1][0]) if number + 1 < len(todo) else None
                if self.shuffle:
                    key = f"{self.version.id}\0{self.seed}\0{self.epoch}\0{group.path}\0{group.index}"
                    table = table.take(_dsv.permutation(table.num_rows, key))
                yield table.slice(skip) if skip else table
        finally:
            if ahead is not None:
                ahead.wait()
            reader.close()

    __getstate__ = TarShardDataset.__getstate__
    __setstate__ = TarShardDataset.__setstate__


class _RowGroupReader:
    """Reads row groups of a version's Parquet files, one at a time, keeping the last file
    open (a worker's row groups of one file mostly come one after another)."""

    def __init__(self, version: Any, columns: Optional[List[str]]) -> None:
        self.version = version
        self.columns = columns
        self.path: Optional[str] = None
        self.parquet: Any = None

    def read(self, group: RowGroup) -> Any:
        """Row group ``group`` as a ``pyarrow.Table`` of the selected columns."""
        if group.path != self.path:
            self.close()
            self.parquet = open_parquet(self.version, group.path)
            self.path = group.path
        return self.parquet.read_row_group(group.index, columns=self.columns)

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close(force=True)
        self.path, self.parquet = None, None


class _Ahead:
    """``function(argument)`` run on a background thread; ``result()`` waits for it and
    returns its value or raises its exception."""

    def __init__(self, function: Callable[[Any], Any], argument: Any) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None

        def run() -> None:
            try:
                self.value = function(argument)
            except BaseException as e:  # handed to the reader by result()
                self.error = e
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True, name="dsv-row-group").start()

    def wait(self) -> None:
        self.done.wait()

    def result(self) -> Any:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


def _rows(tables: Iterator[Any]) -> Iterator[Dict[str, Any]]:
    """The rows of ``tables``, each a dict ``{column: value}``."""
    for table in tables:
        yield from table.to_pylist()


def _batches(tables: Iterator[Any], size: int) -> Iterator[Dict[str, List[Any]]]:
    """The rows of ``tables`` in batches of ``size`` rows (the last one may be shorter), each
    a dict ``{column: [values]}``; a batch may span tables. Raises ``ValueError`` when the
    tables' columns differ (files of different schemas: select ``columns``)."""
    batch: Optional[Dict[str, List[Any]]] = None
    count = 0
    for table in tables:
        start = 0
        while start < table.num_rows:
            take = min(size - count, table.num_rows - start)
            piece = table.slice(start, take).to_pydict()
            if batch is None:
                batch = piece
            elif list(piece) != list(batch):
                raise ValueError(
                    f"a batch would mix row groups of different columns ({', '.join(batch)} and "
                    f"{', '.join(piece)}): select the same columns of every file with columns="
                )
            else:
                for name, values in piece.items():
                    batch[name].extend(values)
            count += take
            start += take
            if count == size:
                yield batch
                batch, count = None, 0
    if batch is not None:
        yield batch


def _prefetch_later(version: Any, path: str) -> None:
    """Fetches ``path``'s data into the store on a background thread (nothing when it is
    here); a failure is left to the reads, which fetch what they need and raise what they meet."""

    def run() -> None:
        try:
            version.prefetch([path])
        except Exception:
            pass

    threading.Thread(target=run, daemon=True, name="dsv-prefetch-shard").start()


class _CountedBatch(NamedTuple):
    """A batch with the worker that made it and its number of samples (a namedtuple, so
    ``pin_memory`` pins the batch inside and keeps the type)."""

    worker: int
    samples: int
    batch: Any


class _CountingCollate:
    """Wraps a ``DataLoader``'s ``collate_fn`` (in the workers) to tag each batch with its
    worker and size, which :class:`DataLoader` counts and strips off."""

    def __init__(self, collate: Callable[[Any], Any], batched: bool) -> None:
        self.collate = collate
        self.batched = batched

    def __call__(self, data: Any) -> _CountedBatch:
        info = torch.utils.data.get_worker_info()
        return _CountedBatch(0 if info is None else info.id, len(data) if self.batched else 1, self.collate(data))


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` that keeps the progress of an
    :class:`IterableVersionDataset`, a :class:`TarShardDataset` or a
    :class:`ParquetRowDataset` exact. For the first it gives the dataset its ``batch_size``
    (so workers take whole batches in turn) and counts the samples the loop has consumed; for
    the others it counts, per worker, the samples of the batches the loop has taken (its ``collate_fn`` runs inside a wrapper that tags each
    batch with its worker; the loop gets the batch as ``collate_fn`` made it). Either way
    ``dataset.state_dict()`` needs no argument. Any other dataset works as with the plain
    class. ``persistent_workers=True`` works (workers read the epoch from memory shared with
    the main process).
    """

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        if isinstance(dataset, IterableVersionDataset) and self.batch_size is not None:
            dataset.batch_size = self.batch_size
        if isinstance(dataset, (TarShardDataset, ParquetRowDataset, CombinedDataset)):
            self.collate_fn = _CountingCollate(self.collate_fn, self.batch_size is not None)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        dataset = self.dataset
        sampler = self.sampler if isinstance(self.sampler, VersionSampler) else None
        if sampler is None and self.batch_sampler is not None:
            inner = getattr(self.batch_sampler, "sampler", None)
            sampler = inner if isinstance(inner, VersionSampler) else None
        if sampler is not None:
            yield from self._iter_sampler(sampler)
            return
        if isinstance(dataset, (TarShardDataset, ParquetRowDataset, CombinedDataset)):
            yield from self._iter_tar(dataset)
            return
        if not isinstance(dataset, IterableVersionDataset):
            yield from super().__iter__()
            return
        consumed = dataset._start()
        total = len(dataset.rank_order())
        per_batch = self.batch_size or 1
        for batch in super().__iter__():
            consumed = min(consumed + per_batch, total)
            dataset._consumed = consumed
            yield batch
        dataset._finish_epoch()

    def _iter_sampler(self, sampler: VersionSampler) -> Iterator[Any]:
        """Counts the samples of the batches the loop has taken (the loader draws indexes
        from the sampler ahead of the loop)."""
        consumed = sampler._position()
        total = len(sampler.rank_order())
        per_batch = self.batch_size or 1
        for batch in super().__iter__():
            consumed = min(consumed + per_batch, total)
            sampler._consumed = consumed
            yield batch

    def _iter_tar(self, dataset: Union[TarShardDataset, ParquetRowDataset]) -> Iterator[Any]:
        consumed = dataset._start(max(1, self.num_workers))
        dataset._consumed = list(consumed)
        for item in super().__iter__():
            consumed[item.worker] += item.samples
            dataset._consumed = list(consumed)
            yield item.batch
        dataset._finish_epoch()


# Weighted mixtures, built on the classes above (named in DataLoader's checks: resolved at
# call time, after this import).
from ._mixture import CombinedDataset  # noqa: E402

