"""Weighted mixtures of dsv iterable datasets: :class:`CombinedDataset`, exported by
``dsv.torch`` (import it from there: this module is loaded at the end of ``dsv.torch``).

How a mixture reads: each DataLoader worker of each rank (the main process without workers)
mixes its own share of every member, the share the member would read by itself in that
worker, drawing which member gives the next sample with a generator seeded by (``seed``,
epoch, world size, rank, worker, number of workers). The draws are the only state the
mixture adds, so a position is one number per worker: the samples the training loop has
consumed from it. A resume replays that many draws (without reading the data of an
``IterableVersionDataset`` member; other members replay their streams) and goes on from
there, sample for sample as an unbroken run.
"""

from __future__ import annotations

import bisect
import copy
import math
import numbers
import multiprocessing
import os
import random
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.utils.data

__all__ = ["CombinedDataset"]

STOPS = ("shortest", "longest", "cycle")
# The most DataLoader workers (per rank) whose positions a mixture's state records.
_MAX_WORKERS = 256


def _torch_module() -> Any:
    """``dsv.torch``, imported when first needed: it imports this module at its end, and a
    spawned DataLoader worker unpickling a mixture imports this module first."""
    from . import torch as dsv_torch

    return dsv_torch


def _weights(datasets: Sequence[Any], weights: Optional[Sequence[float]]) -> List[float]:
    """The members' weights normalized to sum 1: ``weights``, or the members' sizes."""
    t = _torch_module()
    if weights is None:
        sizes = []
        for number, member in enumerate(datasets):
            if isinstance(member, t.IterableVersionDataset):
                sizes.append(float(len(member.paths)))
            elif isinstance(member, t.ParquetRowDataset):
                rows = member.num_rows
                sizes.append(float(rows if member.batch_rows is None else math.ceil(rows / member.batch_rows)))
            else:
                raise ValueError(
                    f"member {number} ({type(member).__name__}) does not know its number of samples before it is "
                    "read: give weights= (one per member)"
                )
        if sum(sizes) == 0:
            raise ValueError("every member is empty: the mixture has nothing to draw from")
        weights = sizes
    else:
        if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
            raise ValueError(f"weights must be a list of numbers, one per member, not {weights!r}")
        weights = list(weights)
        if len(weights) != len(datasets):
            raise ValueError(f"weights has {len(weights)} value(s) for {len(datasets)} member(s): give one per member")
        for number, weight in enumerate(weights):
            if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(float(weight)):
                raise ValueError(f"weight {number} is {weight!r}: each weight must be a finite number")
            if weight < 0:
                raise ValueError(f"weight {number} is {weight!r}: a weight cannot be negative")
        if sum(weights) <= 0:
            raise ValueError("the weights are all zero: at least one member must have a positive weight")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


def _blocks(items: List[Any], worker: int, workers: int, block: int) -> List[Any]:
    """Worker ``worker``'s share of ``items`` when ``workers`` take blocks of ``block`` in turn
    (an ``IterableVersionDataset``'s split between DataLoader workers)."""
    if workers <= 1:
        return list(items)
    return [
        item for start in range(worker * block, len(items), workers * block) for item in items[start : start + block]
    ]


def _share(total: int, parts: int, part: int) -> int:
    """Part ``part`` of ``total`` cut into ``parts`` as equal as can be (the first ones one more)."""
    return total // parts + (1 if part < total % parts else 0)


class _SharedMixture:
    """Memory shared between the main process and its DataLoader workers (see
    ``dsv.torch._SharedPosition`` for how it travels and who owns it): what the main process
    writes (epoch, epoch of a loaded resume position, rank, world size, the position's number
    of worker streams, per worker the draws to replay and per worker and member the count at
    which the member was found exhausted in it, -1 for not) and what workers write (per worker
    and member the count at which the member was found exhausted in this pass, so that the
    main process can replay the draws a checkpoint names)."""

    HEAD = 5

    def __init__(self, members: int) -> None:
        self.members = members
        self.values = multiprocessing.RawArray("q", self.HEAD + _MAX_WORKERS + 2 * _MAX_WORKERS * members)
        self.owner = os.getpid()
        for row in range(_MAX_WORKERS):
            self.write_found(row, [-1] * members)
            self._write_rows(self.HEAD + _MAX_WORKERS, row, [-1] * members)

    def _write_rows(self, base: int, row: int, values: Sequence[int]) -> None:
        start = base + row * self.members
        self.values[start : start + self.members] = list(values)

    def write(
        self,
        epoch: int,
        resume_epoch: int,
        rank: int,
        world: int,
        resume: Sequence[int],
        dead: Sequence[Sequence[int]],
    ) -> None:
        self.values[: self.HEAD] = [epoch, resume_epoch, rank, world, len(resume)]
        self.values[self.HEAD : self.HEAD + len(resume)] = list(resume)
        for row, counts in enumerate(dead):
            self._write_rows(self.HEAD + _MAX_WORKERS, row, counts)

    def read(self) -> Tuple[int, int, int, int, List[int], List[List[int]]]:
        values = self.values[:]
        epoch, resume_epoch, rank, world, workers = values[: self.HEAD]
        resume = values[self.HEAD : self.HEAD + workers]
        base = self.HEAD + _MAX_WORKERS
        dead = [values[base + row * self.members : base + (row + 1) * self.members] for row in range(workers)]
        return epoch, resume_epoch, rank, world, resume, dead

    def write_found(self, worker: int, counts: Sequence[int]) -> None:
        self._write_rows(self.HEAD + _MAX_WORKERS + _MAX_WORKERS * self.members, worker, counts)

    def found(self, worker: int) -> List[int]:
        start = self.HEAD + _MAX_WORKERS + _MAX_WORKERS * self.members + worker * self.members
        return list(self.values[start : start + self.members])


class _Pass:
    """The samples of one member in this worker, one pass over them, from the start of the
    member's epoch ``epoch`` (its own resume position is not used: the mixture keeps it)."""

    def __init__(self, member: Any, epoch: int, rank_world: Tuple[int, int], plan: Any = None) -> None:
        view = copy.copy(member)
        view.epoch = epoch
        view._explicit = rank_world
        view._rank_world = rank_world
        view._resume_epoch = -1
        # A member's own elastic resume plan (another world size) is not this pass's: the
        # mixture keeps the position.
        if hasattr(view, "_base"):
            view._base = None
        self.view = view
        self.position = 0
        t = _torch_module()
        self.sample = t._sample
        self.prefetch = lambda paths: t._Prefetcher(view.version, paths, first=t._FIRST_WINDOW)
        if plan is not None and plan[0] == "paths":
            # An elastic resume: this worker's share of the member's remaining samples.
            self.paths: Optional[List[str]] = list(plan[1])
            self.prefetcher: Any = None
            self.base = 0
        elif isinstance(member, t.IterableVersionDataset):
            # Known without reading: skipping needs no data, and the length is known.
            self.paths = [view.paths[i] for i in view._worker_share(view.rank_order(epoch))]
            self.prefetcher: Any = None
            self.base = 0
        else:
            self.paths = None
            view._resume = []
            view._consumed = [0]
            # In a worker the member would take the main process's epoch and position from
            # the memory it shares with it: this view keeps its own.
            view._adopt = lambda: None
            if plan is not None:
                # An elastic resume of a TarShardDataset: its samples read before (``base``)
                # are left out and its remaining shards split at the new size.
                view._base = plan[1]
                view._resume_epoch = epoch
                view._resume = []
                view._loaded = None
                view._plan_id = t._plan_id(plan[1])
                view._publish = lambda: None
            self.stream: Iterator[Any] = iter(view)

    def skip(self) -> bool:
        """Steps past one sample (without reading it when the member allows); False at the end."""
        if self.paths is not None:
            if self.position >= len(self.paths):
                return False
            self.position += 1
            return True
        for _ in self.stream:
            self.position += 1
            return True
        return False

    def take(self) -> Tuple[bool, Any]:
        """(True, the next sample), or (False, None) at the end of the pass."""
        if self.paths is None:
            for sample in self.stream:
                self.position += 1
                return True, sample
            return False, None
        if self.position >= len(self.paths):
            self.close()
            return False, None
        if self.prefetcher is None:
            self.base = self.position
            self.prefetcher = self.prefetch(self.paths[self.base :])
        self.prefetcher.wait(self.position - self.base)
        path = self.paths[self.position]
        self.position += 1
        return True, self.sample(self.view.transform, path, self.view.version.read(path))

    def close(self) -> None:
        if self.paths is None:
            self.stream.close()  # type: ignore[attr-defined]
        elif self.prefetcher is not None:
            self.prefetcher.stop()


class _MemberStream:
    """A member's samples in this worker: one pass, or with ``cycle`` pass after pass
    (pass ``p`` of mixture epoch ``e`` reads the member's epoch ``e + p``)."""

    def __init__(
        self, member: Any, epoch: int, rank_world: Tuple[int, int], cycle: bool, plan: Any = None
    ) -> None:
        self.member, self.epoch, self.rank_world, self.cycle = member, epoch, rank_world, cycle
        self.passes = 0
        self.elastic = plan is not None
        # With an elastic plan, the first pass is the member's remaining share.
        self.current = _Pass(member, epoch, rank_world, plan)

    def _next_pass(self) -> bool:
        """Opens the next pass (cycle); False when there is none or it would be empty."""
        # An empty pass ends the stream, unless it is an elastic plan's (its share may be read).
        if not self.cycle or (self.current.position == 0 and not (self.elastic and self.passes == 0)):
            return False
        self.current.close()
        self.passes += 1
        self.current = _Pass(self.member, self.epoch + self.passes, self.rank_world)
        return True

    def skip(self) -> bool:
        while not self.current.skip():
            if not self._next_pass():
                return False
        return True

    def take(self) -> Tuple[bool, Any]:
        while True:
            ok, sample = self.current.take()
            if ok:
                return True, sample
            if not self._next_pass():
                return False, None

    def close(self) -> None:
        self.current.close()


class CombinedDataset(torch.utils.data.IterableDataset):
    """A weighted mixture of dsv iterable datasets (LitData's ``CombinedStreamingDataset``,
    MosaicML's ``Stream(proportion=...)``): each sample comes from one member, drawn at random
    with probability proportional to its weight.

    ``datasets``: the members, each an :class:`IterableVersionDataset`,
    :class:`TarShardDataset` or :class:`ParquetRowDataset` of any version of any dataset, in
    any store (local or read from a remote); they must agree on rank and world size.
    ``weights``: one finite number >= 0 per member, not all zero, normalized to sum 1
    (``ValueError`` otherwise); default: the members' sizes (files of an
    ``IterableVersionDataset``, rows or batches of a ``ParquetRowDataset``; a
    ``TarShardDataset`` does not know its size: give weights), so every sample is about
    equally likely.

    Split and draws: each rank (and each DataLoader worker of it) reads, of each member,
    exactly the share the member would read by itself there (the member's own split between
    ranks and workers, with the member's ``batch_size`` for an ``IterableVersionDataset``),
    and mixes those shares: for each sample it draws a member with Python's
    ``random.Random`` seeded by (``seed``, epoch, world size, rank, worker, number of
    workers), so the samples, their order and their sources depend only on those and the
    members' own orders (their versions, seeds and the epoch).

    ``stop`` says when an epoch ends, in each worker (a member "runs out" when its share in
    that worker has no sample left):

    - ``"shortest"`` (default): at the first draw of a member that has run out. With members
      of equal share the epoch then reads about ``min(size / weight)`` samples.
    - ``"longest"``: a member that has run out is left out and the others go on, their
      weights renormalized (the draw is repeated), until every member has run out: every
      sample of every member is read exactly once.
    - ``"cycle"``: a member that runs out starts again at once with a new pass (pass ``p``,
      counting from 0, of mixture epoch ``e`` reads the member's epoch ``e + p``, so a
      shuffled member comes in another order), and the epoch ends after
      ``samples_per_epoch`` samples in all, over all ranks and workers (required; rank ``r``
      of ``W`` reads ``samples_per_epoch // W``, one more for the first
      ``samples_per_epoch % W`` ranks, and its workers share those the same way). Shares are
      then the weights exactly in expectation, whatever the members' sizes. A member whose
      share in a worker is empty is left out there, as with ``"longest"``.

    ``set_epoch(e)`` selects the epoch for the mixture and its members (call it before each
    epoch in the main process, as with ``DistributedSampler``).

    Resuming: ``state_dict()`` records the epoch and, per worker stream (one without
    workers), the samples the training loop has consumed from it (``consumed``;
    ``samples_seen`` is their sum), with what follows from them: per worker and member the
    samples drawn (``member_draws``) and the members found run out (``exhausted``), and each
    member's order (``members``). ``load_state_dict(state)`` makes the next pass over that
    epoch replay, in each worker, the draws already consumed (an
    ``IterableVersionDataset`` member skips its files without reading them; the others read
    through the samples they skip) and go on after them: the samples that follow are
    exactly those of an unbroken run. The counts are exact when the mixture is iterated in
    this process; with DataLoader workers the loader must tell the mixture which worker made
    each batch the loop consumed, as :class:`dsv.torch.DataLoader` does (a plain
    ``DataLoader`` never does): otherwise the state restarts the epoch. A loader asks worker 0 first, so a
    checkpoint taken when the workers had not all handed over as many batches resumes each
    worker's stream exactly but interleaves their batches from worker 0 on. Resume with the
    same members, weights, ``stop``, ``seed`` and ``samples_per_epoch`` (``ValueError``
    otherwise).

    Elastic resume: with another world size (checked at ``load_state_dict``) or number of
    workers (checked when iteration starts), give every new rank the list of the state dicts
    of all the old ranks (``load_state_dict(states)``; one state alone raises
    ``ValueError``). Their ``member_draws`` say which samples each old worker read of each
    member (its share's first ones); each member's remaining samples are split between the
    new ranks and workers as the member splits them (an ``IterableVersionDataset``: the
    remaining files of the epoch's order, rank ``r`` of ``W`` taking every ``W``-th and its
    workers blocks of ``batch_size`` in turn; a ``TarShardDataset``: its elastic split of the
    shards not finished, leaving out the samples read; a ``ParquetRowDataset`` member resumes
    at the same size only), and each worker mixes its shares as in any epoch, with a
    generator seeded by (``seed``, epoch, new world size, rank, worker, workers, a resume
    marker). ``"longest"``: every remaining sample of every member is read exactly once in
    all. ``"shortest"``: each worker stops at the first draw of a member whose remaining
    share ran out. ``"cycle"``: ``samples_per_epoch`` minus the samples all old ranks
    consumed is split between the new ranks and workers as above, and a member whose
    remaining share runs out goes on with its next pass (its epoch ``e + 1``, ...) at the
    new size. ``state_dict()`` in the resumed epoch records the plan (``elastic``): it
    resumes at the same size; resuming it at yet another size raises ``ValueError``. The
    next epoch is split as usual. With persistent workers, load the states before the
    workers start.

    Not a map-style dataset, and it has no ``len()``.
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Optional[Sequence[float]] = None,
        seed: int = 0,
        stop: str = "shortest",
        samples_per_epoch: Optional[int] = None,
    ) -> None:
        super().__init__()
        members = list(datasets)
        if not members:
            raise ValueError("a mixture needs at least one dataset")
        t = _torch_module()
        for number, member in enumerate(members):
            if not isinstance(member, (t.IterableVersionDataset, t.TarShardDataset, t.ParquetRowDataset)):
                raise TypeError(
                    f"member {number} is a {type(member).__name__}: a mixture's members are "
                    "dsv.torch.IterableVersionDataset, TarShardDataset or ParquetRowDataset"
                )
        if stop not in STOPS:
            raise ValueError(f"stop must be one of {', '.join(repr(s) for s in STOPS)}, not {stop!r}")
        if stop == "cycle":
            if samples_per_epoch is None or isinstance(samples_per_epoch, bool) or int(samples_per_epoch) < 1:
                raise ValueError(
                    f"stop='cycle' needs samples_per_epoch= (the samples of an epoch over all ranks and workers, "
                    f"at least 1), not {samples_per_epoch!r}"
                )
            samples_per_epoch = int(samples_per_epoch)
        elif samples_per_epoch is not None:
            raise ValueError(
                f"samples_per_epoch applies to stop='cycle' only (with stop={stop!r} the members' sizes end an epoch)"
            )
        self.datasets: List[Any] = members
        self.weights: List[float] = _weights(members, weights)
        self.seed = int(seed)
        self.stop = stop
        self.samples_per_epoch: Optional[int] = samples_per_epoch
        self.epoch = 0
        self._rank_world = (0, 1)
        self._resume_epoch = -1
        self._resume: List[int] = []
        self._resume_dead: List[List[int]] = []
        # Elastic resume of epoch `_elastic["epoch"]` (see `_plan_elastic`), or None; `_loaded`:
        # the loaded states of all ranks of this world size, kept to resume with another
        # number of workers.
        self._elastic: Optional[Dict[str, Any]] = None
        self._loaded: Optional[List[Dict[str, Any]]] = None
        # Per worker stream, its samples of the current epoch consumed, as far as this process knows.
        self._consumed: List[int] = [0]
        self._cumulative = self._cumulative_weights()
        # Members that can be drawn: an epoch of "longest" ends when all of these ran out.
        self._drawn = [number for number, weight in enumerate(self.weights) if weight > 0]
        self._shared = _SharedMixture(len(members))
        self._resolve()
        self._publish()

    def _cumulative_weights(self) -> List[float]:
        out, total = [], 0.0
        for weight in self.weights:
            total += weight
            out.append(total)
        return out

    # -- shared position ------------------------------------------------------------------

    def _publish(self) -> None:
        """Writes where iteration starts to the memory the workers read (main process)."""
        if self._shared.owner != os.getpid():
            # Another training process's memory (this one is a rank it started): ours instead,
            # with the members found run out so far.
            old, self._shared = self._shared, _SharedMixture(len(self.datasets))
            for row in range(_MAX_WORKERS):
                self._shared.write_found(row, old.found(row))
        rank, world = self._rank_world
        self._shared.write(self.epoch, self._resume_epoch, rank, world, self._resume, self._resume_dead)

    def _adopt(self) -> None:
        """In a worker: takes the main process's epoch, resume position, rank and world size."""
        self.epoch, self._resume_epoch, rank, world, self._resume, self._resume_dead = self._shared.read()
        self._rank_world = (rank, world)

    def _resolve(self) -> Tuple[int, int]:
        """Rank and world size: the members', which must agree (main process)."""
        if torch.utils.data.get_worker_info() is None:
            found = {(member.rank, member.world_size) for member in self.datasets}
            if len(found) > 1:
                raise ValueError(
                    f"the members disagree on rank and world size ({sorted(found)}): give them the same "
                    "rank= and world_size= (or none)"
                )
            (rank_world,) = found
            if rank_world != self._rank_world:
                self._rank_world = rank_world
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

    # -- draws ----------------------------------------------------------------------------

    def _generator(self, worker: int, workers: int) -> random.Random:
        rank, world = self._rank_world
        key = f"dsv.mixture\0{self.seed}\0{self.epoch}\0{world}\0{rank}\0{worker}\0{workers}"
        if self._elastic_now() is not None:
            # An elastically resumed epoch draws anew (a resume marker in the seed).
            key += "\0resume"
        return random.Random(key)

    def _elastic_now(self) -> Optional[Dict[str, Any]]:
        """The elastic resume plan of the current epoch, or None."""
        plan = self._elastic
        if plan is None or plan["epoch"] != self.epoch or self._resume_epoch != self.epoch:
            return None
        return plan

    def _pick(self, rng: random.Random) -> int:
        # rng.random() is the one draw Python promises to keep the same across its versions.
        number = bisect.bisect_right(self._cumulative, rng.random() * self._cumulative[-1])
        return min(number, len(self.weights) - 1)

    def _quota(self, worker: int, workers: int) -> Optional[int]:
        """The samples worker ``worker`` reads this epoch (cycle), else None (its members decide);
        in an elastically resumed epoch its share of the samples the old ranks had not read."""
        if self.samples_per_epoch is None:
            return None
        rank, world = self._rank_world
        budget = self.samples_per_epoch
        plan = self._elastic_now()
        if plan is not None:
            budget = max(0, budget - int(plan["consumed"]))
        return _share(_share(budget, world, rank), workers, worker)

    def _replay(self, rng: random.Random, draws: int, dead: Sequence[int]) -> List[int]:
        """Advances ``rng`` over the first ``draws`` samples of a worker whose members ran out
        at the counts ``dead`` (-1: not known to); returns the samples drawn per member."""
        counts = [0] * len(self.weights)
        made = 0
        while made < draws:
            number = self._draw(rng, dead, counts)
            if number is None:
                break
            counts[number] += 1
            made += 1
        return counts

    def _draw(self, rng: random.Random, dead: List[int], counts: List[int]) -> Optional[int]:
        """The member of the next sample, drawn by weight among those not run out (``dead[m]``
        >= 0: member ``m`` ran out after that many samples; ``counts``: samples taken so far),
        or None when the stream ends: every member ran out, or under ``stop="shortest"`` a
        member that ran out was drawn. The live iteration and the replay of a resume draw
        through it alike."""
        while not self._all_out(dead, counts):
            number = self._pick(rng)
            if 0 <= dead[number] <= counts[number]:
                if self.stop == "shortest":
                    return None
                continue
            return number
        return None

    def _all_out(self, dead: Sequence[int], counts: Sequence[int]) -> bool:
        """Whether every member that can be drawn has run out."""
        return all(0 <= dead[n] <= counts[n] for n in self._drawn)

    # -- epochs and progress --------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch of the mixture and of its members. Call it before each epoch, in
        the main process. A resume position loaded for another epoch is dropped."""
        self._resolve()
        changed = epoch != self.epoch
        if changed:
            self._consumed = [0] * len(self._consumed)
        self.epoch = int(epoch)
        for member in self.datasets:
            member.set_epoch(self.epoch)
        self._publish()
        if changed:
            for row in range(len(self._consumed)):
                self._shared.write_found(row, [-1] * len(self.datasets))

    def _order_key(self, world: int) -> Dict[str, Any]:
        """What the draws depend on: a state dict resumes only where all of it matches."""
        return {
            "mixture": "dsv.mixture/1",
            "stop": self.stop,
            "seed": self.seed,
            "weights": list(self.weights),
            "samples_per_epoch": self.samples_per_epoch,
            "members": [{**member._order_key(), "world_size": world} for member in self.datasets],
            "world_size": world,
        }

    def state_dict(self) -> Dict[str, Any]:
        """Progress to save in a checkpoint (see the class): the epoch, per worker stream the
        samples consumed (``consumed``, ``samples_seen`` their sum), per worker and member the
        samples drawn (``member_draws``) and the counts at which members ran out
        (``exhausted``, -1: not), and what the draws depend on. Replays the draws of each
        worker (a few hundred thousand per second)."""
        rank, world = self._resolve()
        consumed = [int(c) for c in self._consumed]
        workers = len(consumed)
        draws, exhausted = [], []
        for worker, count in enumerate(consumed):
            found = self._shared.found(worker) if count else [-1] * len(self.datasets)
            counts = self._replay(self._generator(worker, workers), count, found)
            # A member found run out beyond the consumed samples is found again on resume.
            exhausted.append([d if 0 <= d <= c else -1 for d, c in zip(found, counts)])
            draws.append(counts)
        state = {
            **self._order_key(world),
            "rank": rank,
            "epoch": self.epoch,
            "workers": workers,
            "consumed": consumed,
            "samples_seen": sum(consumed),
            "member_draws": draws,
            "exhausted": exhausted,
        }
        plan = self._elastic_now()
        if plan is not None:
            state["elastic"] = copy.deepcopy(plan)
        return state

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continues from ``state``: this rank's ``state_dict()``, or the list of the state
        dicts of all ranks (gathered with ``torch.distributed.all_gather_object``).

        Of the same world size and number of workers, the rank's own state is used: the epoch
        it names (set on the members too), and the next pass over that epoch starts, in each
        worker, after the samples already consumed. Of another world size (checked here) or
        number of workers (checked when iteration starts), the list of all the old ranks'
        states is needed (elastic resume, see the class). Raises ``ValueError`` when a state
        is of another mixture (members and their orders, weights, ``stop``, ``seed``,
        ``samples_per_epoch``), world size or rank, when the states disagree or miss a rank
        an elastic resume needs, or are malformed."""
        rank, world = self._resolve()
        if isinstance(state, dict):
            states = [state]
        else:
            states = list(state)
            if not states or not all(isinstance(one, dict) for one in states):
                raise ValueError("a state is a dict from state_dict(), or a list of them (one per rank)")
        first = states[0]
        saved_world = first.get("world_size")
        if not isinstance(saved_world, int) or isinstance(saved_world, bool) or saved_world < 1:
            raise ValueError(f"the state's world_size {saved_world!r} is malformed")
        expected = self._order_key(saved_world)
        for one in states:
            for key, value in expected.items():
                if one.get(key) != value:
                    raise ValueError(
                        f"the state is of another mixture: its {key} is {one.get(key)!r}, this mixture's is {value!r}"
                    )
            for key in ("epoch", "workers", "elastic"):
                if one.get(key) != first.get(key):
                    raise ValueError(f"the states disagree: their {key} differs ({first.get(key)!r}, {one.get(key)!r})")
        complete = sorted(int(one.get("rank", -1)) for one in states) == list(range(saved_world))
        if saved_world != world:
            if not complete or isinstance(state, dict):
                raise ValueError(
                    f"the state's world_size is {saved_world} and this mixture's is {world}: an elastic resume needs "
                    f"the states of all {saved_world} ranks, as a list (gather them with "
                    "torch.distributed.all_gather_object when saving)"
                )
            self._load_elastic(states)
            return
        mine = first if len(states) == 1 else next((one for one in states if one.get("rank") == rank), None)
        if mine is None or mine.get("rank") != rank:
            got = None if mine is None else mine.get("rank")
            raise ValueError(f"the state is of another mixture: its rank is {got!r}, this mixture's is {rank!r}")
        consumed = [int(c) for c in mine["consumed"]]
        exhausted = [[int(d) for d in row] for row in mine["exhausted"]]
        if (
            len(consumed) != int(mine["workers"])
            or not 1 <= len(consumed) <= _MAX_WORKERS
            or min(consumed) < 0
            or len(exhausted) != len(consumed)
            or any(len(row) != len(self.datasets) for row in exhausted)
        ):
            raise ValueError(
                f"the state's consumed counts {consumed!r} or exhausted members {exhausted!r} are malformed"
            )
        self.set_epoch(int(mine["epoch"]))
        self._resume_epoch = self.epoch
        self._resume = consumed
        self._resume_dead = exhausted
        self._consumed = list(consumed)
        plan = mine.get("elastic")
        self._elastic = copy.deepcopy(plan) if plan is not None else None
        self._loaded = [dict(one) for one in states] if complete and not isinstance(state, dict) else None
        for row, counts in enumerate(exhausted):
            self._shared.write_found(row, counts)
        self._publish()

    def _load_elastic(self, states: List[Dict[str, Any]]) -> None:
        """Elastic resume from the states of all old ranks (one epoch, world size and number of
        workers): the plan of the epoch's rest; each member's remaining samples are found when
        iteration starts, in each worker (the same in every process)."""
        t = _torch_module()
        if any(one.get("elastic") is not None for one in states):
            raise ValueError(
                "the states were saved in an epoch already resumed at another size: resuming it at another size "
                "again is not supported yet (resume at the size it was saved at, or from the end of the epoch)"
            )
        for number, member in enumerate(self.datasets):
            if not isinstance(member, (t.IterableVersionDataset, t.TarShardDataset)):
                raise ValueError(
                    f"member {number} ({type(member).__name__}) cannot resume a mixture at another world size or "
                    "number of workers yet: resume at the size the state was saved at"
                )
        by_rank = sorted(states, key=lambda one: int(one["rank"]))
        workers = int(by_rank[0]["workers"])
        draws = []
        for one in by_rank:
            rows = [[int(c) for c in row] for row in one["member_draws"]]
            if len(rows) != workers or any(len(row) != len(self.datasets) or min(row) < 0 for row in rows):
                raise ValueError(f"the state's member_draws {one['member_draws']!r} are malformed")
            draws.append(rows)
        epoch = int(by_rank[0]["epoch"])
        plan = {
            "epoch": epoch,
            "world_size": int(by_rank[0]["world_size"]),
            "workers": workers,
            "member_draws": draws,
            "consumed": sum(int(c) for one in by_rank for c in one["consumed"]),
        }
        in_main = torch.utils.data.get_worker_info() is None
        if in_main:
            self.set_epoch(epoch)
        self._resume_epoch = self.epoch
        self._resume = []
        self._resume_dead = []
        self._elastic = plan
        self._loaded = None
        if in_main:
            self._consumed = [0]
            self._publish()

    def _member_plans(self, worker: int, workers: int) -> List[Any]:
        """Per member, its share in this worker of the samples the old ranks had not read
        (the elastic plan of this epoch): ("paths", paths) for an ``IterableVersionDataset``,
        ("base", what was read) for a ``TarShardDataset``."""
        plan = self._elastic_now()
        assert plan is not None
        t = _torch_module()
        rank, world = self._rank_world
        old_world, old_workers, epoch = plan["world_size"], plan["workers"], plan["epoch"]
        out: List[Any] = []
        for number, member in enumerate(self.datasets):
            counts = [[row[number] for row in rank_rows] for rank_rows in plan["member_draws"]]
            if isinstance(member, t.IterableVersionDataset):
                view = copy.copy(member)
                view._explicit = view._rank_world = (0, old_world)
                order = view.order(epoch)
                block = member.batch_size or 1
                read = set()
                for old_rank in range(old_world):
                    positions = list(range(len(order)))[old_rank::old_world]
                    for old_worker in range(old_workers):
                        share = _blocks(positions, old_worker, old_workers, block)
                        read.update(order[p] for p in share[: counts[old_rank][old_worker]])
                remaining = [i for i in dict.fromkeys(order) if i not in read]
                mine = _blocks(remaining[rank::world], worker, workers, block)
                out.append(("paths", [member.paths[i] for i in mine]))
            else:
                view = copy.copy(member)
                view._publish = lambda: None
                states = [
                    {
                        "rank": old_rank,
                        "epoch": epoch,
                        "world_size": old_world,
                        "workers": old_workers,
                        "consumed": counts[old_rank],
                    }
                    for old_rank in range(old_world)
                ]
                view._merge(states, None)
                out.append(("base", view._base))
        return out

    def _start(self, workers: int) -> List[int]:
        """Per worker stream, the samples to replay in this pass (a loaded resume position)."""
        resume = self._resume if self._resume_epoch == self.epoch else []
        loaded = self._loaded if self._resume_epoch == self.epoch else None
        if loaded is not None and int(loaded[0]["workers"]) != workers and self._elastic_now() is None:
            # Another number of workers, with the states of all ranks: an elastic resume.
            self._load_elastic(loaded)
            return [0] * workers
        if any(resume) and len(resume) != workers:
            raise ValueError(
                f"the resume position was saved by a loader with {len(resume)} worker stream(s) and this one has "
                f"{workers}: resume with num_workers={len(resume) if len(resume) > 1 else 0} (each worker mixes "
                "its own share of the members), or load the states of all ranks (a list) for an elastic resume"
            )
        return list(resume) if any(resume) else [0] * workers

    def _finish_epoch(self) -> None:
        """The epoch was read to its end: a later pass over it starts from the beginning."""
        if self._resume_epoch == self.epoch:
            self._resume_epoch = -1
            self._resume = []
            self._resume_dead = []
            self._elastic = None
            self._loaded = None
            self._publish()

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        in_main = info is None
        if in_main:
            self._resolve()
            if self._shared.owner != os.getpid():
                self._publish()
        else:
            self._adopt()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if workers > _MAX_WORKERS:
            raise ValueError(f"a mixture supports at most {_MAX_WORKERS} DataLoader workers, not {workers}")
        skip = self._start(workers)[worker]
        members = len(self.datasets)
        dead = [-1] * members
        if skip and worker < len(self._resume_dead):
            dead = list(self._resume_dead[worker])
        self._shared.write_found(worker, dead)
        if in_main:
            self._consumed = [skip]
        rng = self._generator(worker, workers)
        counts = self._replay(rng, skip, dead)
        quota = self._quota(worker, workers)
        cycle = self.stop == "cycle"
        plans: List[Any] = [None] * members
        if self._elastic_now() is not None:
            plans = self._member_plans(worker, workers)
        streams = [
            _MemberStream(m, self.epoch, self._rank_world, cycle, plan) for m, plan in zip(self.datasets, plans)
        ]
        try:
            for number, stream in enumerate(streams):
                for _ in range(counts[number]):
                    if not stream.skip():
                        raise ValueError(
                            f"member {number} has fewer samples than the resume position says were drawn from it "
                            "(its data changed?)"
                        )
            made = skip
            while quota is None or made < quota:
                number = self._draw(rng, dead, counts)
                if number is None:
                    break
                ok, sample = streams[number].take()
                if not ok:
                    dead[number] = counts[number]
                    self._shared.write_found(worker, dead)
                    if self.stop == "shortest":
                        break
                    continue
                counts[number] += 1
                made += 1
                if in_main:
                    self._consumed = [made]
                yield sample
        finally:
            for stream in streams:
                stream.close()
        if in_main:
            self._finish_epoch()

    def __getstate__(self) -> Dict[str, Any]:
        # As dsv.torch's datasets: the shared memory travels only to a child process.
        return _torch_module()._pickled_state(self)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        _torch_module()._unpickled(self, state, lambda: _SharedMixture(len(state["datasets"])))
