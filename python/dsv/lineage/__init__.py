"""Lineage records: which version, which selection and which order a training run read.

A record (schema ``dsv.lineage/1``, a JSON object) names:

- the version: ``uri`` (``dsv://DATASET@VERSION_ID``), ``dataset``, ``revision`` (as it was
  opened), ``version`` (id), ``tree`` (root tree id), ``tags`` naming it, ``remotes`` known to
  hold it (name, URL, options that are no credential), ``store`` (its path, and the remote it
  is the node-local clone of);
- the selection: ``include`` globs, or ``paths`` (a ``TarShardDataset``'s shards, in order),
  ``files``, ``bytes``, and ``digest`` (of the selected paths);
- the order: ``loader`` (``IterableVersionDataset``, ``VersionDataset``, ``TarShardDataset``,
  ``ParquetRowDataset``, or ``null`` for a bare ``dsv.Version``) and ``order``: ``shuffle``,
  ``seed``, ``epoch``, ``rank``, ``world_size``, ``workers`` (DataLoader worker processes,
  when known) and the loader's own settings;
- the position: ``samples``: ``seen`` (samples of the epoch this rank's training loop
  consumed), and for an ``IterableVersionDataset`` the ``digest`` of their ids (paths) in
  order, and the ``ids`` themselves for short runs (at most ``max_ids``);
- ``lock``: the path and BLAKE3 of the ``dsv.lock`` the run used, if any;
- ``run_id`` and ``trackers``: the active MLflow run and W&B run, when there is one.

Digests are ``blake3:`` and the hex BLAKE3 of each id followed by a NUL byte
(``dsv._dsv.ids_digest``). ``dsv audit --lineage dsv-lineage.json`` replays a record: it
checks the version (here or on a remote the record names), its root tree and the
selection, recomputes the loader's order from (version id, seed, epoch, shuffle, world
size, rank) and proves the samples the record says were seen.

Adapters write the record where experiment trackers look: :mod:`dsv.lineage.mlflow`
(``mlflow.log_input`` with a ``dsv`` dataset source), :mod:`dsv.lineage.wandb` (a
``type="dataset"`` reference artifact the run uses) and :mod:`dsv.lineage.openlineage` (an
input dataset with the ``version`` facet).

::

    import dsv, dsv.lineage, dsv.torch
    ds = dsv.torch.IterableVersionDataset(dsv.Store().version("mnist@v1"), shuffle=True, seed=7)
    ...  # train
    dsv.lineage.write(dsv.lineage.record(ds))     # dsv-lineage.json
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import pathlib
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .. import _dsv

__all__ = ["SCHEMA", "MAX_IDS", "record", "write", "read", "as_record", "lineage_method"]

SCHEMA = "dsv.lineage/1"
"""The schema tag of the records this module writes."""

MAX_IDS = 10_000
"""The most seen sample ids a record lists by default (the digest covers them all)."""

# The most bytes read of a lock file (as `dsv audit --lock` bounds it) and of a record.
_MAX_LOCK_BYTES = 16 << 20
_MAX_RECORD_BYTES = 64 << 20

_LOADERS = ("IterableVersionDataset", "VersionDataset", "TarShardDataset", "ParquetRowDataset")

StrPath = Union[str, "os.PathLike[str]"]


def _loader_name(obj: Any) -> Optional[str]:
    """The dsv.torch loader class ``obj`` is (or derives from), by name: no torch import."""
    for cls in type(obj).__mro__:
        if cls.__name__ in _LOADERS and cls.__module__ == "dsv.torch":
            return cls.__name__
    return None


def _globs(include: Any) -> Optional[List[str]]:
    if include is None:
        return None
    if isinstance(include, str):
        return [include]
    return [str(g) for g in include]


def _sizes(version: Any) -> Dict[str, int]:
    """Every regular file's size, from one pass over the version's listing."""
    return {e["path"]: int(e["size"]) for e in version.walk("") if e["type"] == "file"}


def _selection(version: Any, include: Any, paths: Sequence[str], explicit: bool) -> Dict[str, Any]:
    sizes = _sizes(version)
    return {
        "include": None if explicit else _globs(include),
        "paths": list(paths) if explicit else None,
        "files": len(paths),
        "bytes": sum(sizes.get(p, 0) for p in paths),
        "digest": _dsv.ids_digest(list(paths)),
    }


def _state(obj: Any) -> Dict[str, Any]:
    """The loader's ``state_dict()``, or ``{}`` when it has none that this can read."""
    try:
        state = obj.state_dict()
    except Exception:  # a loader whose counts cannot be told (see its state_dict)
        return {}
    return dict(state) if isinstance(state, Mapping) else {}



def _read_bounded(path: pathlib.Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file (a symlink to one is followed) of at most
    ``limit`` bytes, opened without waiting: a FIFO is refused, never waited on (as the
    CLI's readers of user files). Raises ``OSError``, ``ValueError``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file (a FIFO, a directory or a device): not a {what}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is longer than {limit >> 20} MiB: not a {what}")
    return data

def _lock(lock_file: StrPath, version: Any) -> Dict[str, Any]:
    path = pathlib.Path(os.fspath(lock_file))
    data = _read_bounded(path, _MAX_LOCK_BYTES, "dsv lock file")
    pins = None
    try:
        pinned = json.loads(data)["datasets"][version.dataset]["version"]
        pins = pinned == version.id
    except (ValueError, KeyError, TypeError):
        pins = False
    return {"path": str(path), "blake3": _dsv.blake3_hex(data), "pins_version": pins}


def _trackers() -> Dict[str, Dict[str, Any]]:
    """The active MLflow run and W&B run, when their libraries are imported and a run is on
    (nothing is imported here)."""
    found: Dict[str, Dict[str, Any]] = {}
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None:
        try:
            run = mlflow.active_run()
        except Exception:
            run = None
        if run is not None:
            found["mlflow"] = {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id}
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is not None:
        found["wandb"] = {"run_id": run.id, "project": getattr(run, "project", None)}
    return found


def record(
    dataset_or_version: Any,
    *,
    epoch: Optional[int] = None,
    samples_seen: Optional[int] = None,
    lock_file: Optional[StrPath] = None,
    run_id: Optional[str] = None,
    workers: Optional[int] = None,
    max_ids: int = MAX_IDS,
) -> Dict[str, Any]:
    """The lineage record (schema ``dsv.lineage/1``, a JSON-ready dict) of what
    ``dataset_or_version`` read: a ``dsv.Version``, a ``dsv.torch`` loader
    (``IterableVersionDataset``, ``VersionDataset``, ``TarShardDataset``,
    ``ParquetRowDataset``), or a ``torch.utils.data.DataLoader`` over one (its
    ``num_workers`` is recorded).

    ``epoch`` (default: the loader's current epoch) and ``samples_seen`` (default: the
    loader's ``state_dict()`` count, which is exact through ``dsv.torch.DataLoader``) say
    where this rank is; ``workers`` the DataLoader worker processes, when not given a
    DataLoader. ``lock_file``: the ``dsv.lock`` the run used, hashed (BLAKE3) into the
    record. ``run_id``: the tracker's run id (default: the active MLflow run, else the W&B
    run, when one is on). At most ``max_ids`` seen sample ids are listed (the digest covers
    every one).

    Raises ``ValueError`` for an object that is none of these, or a ``samples_seen`` outside
    the rank's epoch; ``OSError`` for a lock file that cannot be read."""
    obj = dataset_or_version
    if workers is None and hasattr(obj, "num_workers") and hasattr(obj, "dataset"):
        workers = int(obj.num_workers)
    if hasattr(obj, "dataset") and not isinstance(obj, _dsv.Version) and _loader_name(obj.dataset):
        obj = obj.dataset
    loader = _loader_name(obj)
    if loader is None and not isinstance(obj, _dsv.Version):
        raise ValueError(
            f"a lineage record is of a dsv.Version or a dsv.torch loader (or a DataLoader over one), "
            f"not {type(obj).__name__}"
        )
    version = obj if loader is None else obj.version
    state = _state(obj) if loader is not None else {}
    order: Optional[Dict[str, Any]] = None
    samples: Optional[Dict[str, Any]] = None
    if loader is not None and epoch is None:
        epoch = int(obj.epoch) if hasattr(obj, "epoch") else None
    if loader is not None and samples_seen is None and state.get("epoch", epoch) == epoch:
        if "samples_seen" in state:
            samples_seen = int(state["samples_seen"])
    if workers is None and "workers" in state:
        workers = int(state["workers"])

    if loader is None:
        selection = _selection(version, None, version.files(), explicit=False)
    elif loader == "TarShardDataset":
        selection = _selection(version, None, list(obj.shards), explicit=True)
    else:
        paths = list(obj.paths) if hasattr(obj, "paths") else version.files(obj.include)
        selection = _selection(version, obj.include, paths, explicit=False)

    if loader in ("IterableVersionDataset", "TarShardDataset", "ParquetRowDataset"):
        order = {
            "shuffle": bool(obj.shuffle),
            "seed": int(obj.seed),
            "epoch": int(epoch or 0),
            "rank": int(obj.rank),
            "world_size": int(obj.world_size),
            "workers": workers,
        }
    if loader == "IterableVersionDataset":
        assert order is not None
        order["equal_per_rank"] = bool(obj.equal_per_rank)
        order["batch_size"] = obj.batch_size
        rank_order = list(obj.rank_order(order["epoch"]))
        seen = 0 if samples_seen is None else int(samples_seen)
        if not 0 <= seen <= len(rank_order):
            raise ValueError(
                f"samples_seen must be between 0 and {len(rank_order)} (this rank's samples in epoch "
                f"{order['epoch']}), not {seen}"
            )
        ids = [obj.paths[i] for i in rank_order[:seen]]
        samples = {
            "seen": seen,
            "unit": "file",
            "digest": _dsv.ids_digest(ids),
            "ids": ids if seen <= max_ids else None,
        }
    elif loader == "TarShardDataset":
        assert order is not None
        order["buffer_size"] = int(obj.buffer_size)
        order["rank_shards"] = _dsv.ids_digest(list(obj.rank_shards(order["epoch"])))
        samples = {"seen": samples_seen, "unit": "sample", "digest": None, "ids": None}
    elif loader == "ParquetRowDataset":
        assert order is not None
        order["balance"] = obj.balance
        order["batch_rows"] = obj.batch_rows
        order["row_groups"] = len(obj.groups)
        order["columns"] = obj.columns
        samples = {
            "seen": samples_seen,
            "unit": "row" if obj.batch_rows is None else "batch",
            "digest": None,
            "ids": None,
        }
    elif loader == "VersionDataset":
        # Map-style: the order is the sampler's, which the dataset does not know.
        samples = None if samples_seen is None else {"seen": int(samples_seen), "unit": "file"}

    trackers = _trackers()
    if run_id is None:
        for name in ("mlflow", "wandb"):
            if name in trackers:
                run_id = trackers[name]["run_id"]
                break
    store = version.store
    return {
        "schema": SCHEMA,
        "uri": f"dsv://{version.dataset}@{version.id}",
        "dataset": version.dataset,
        "revision": version.revision,
        "version": version.id,
        "tree": version.tree,
        "tags": list(version.tags),
        "remotes": [dict(r) for r in version.remotes],
        "store": {"path": str(store.path), "remote": store.remote},
        "loader": loader,
        "selection": selection,
        "order": order,
        "samples": samples,
        "lock": None if lock_file is None else _lock(lock_file, version),
        "run_id": run_id,
        "trackers": trackers,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dsv": _dsv.__build__,
    }


def lineage_method(self: Any, **options: Any) -> Dict[str, Any]:
    """The lineage record of this loader, as :func:`record` makes it (``epoch``,
    ``samples_seen``, ``lock_file``, ``run_id``, ``workers``, ``max_ids``): what a training
    run read, ready for :func:`write` or an adapter. (``dsv.torch``'s loaders have it as their
    ``lineage()`` method.)"""
    return record(self, **options)


def as_record(record_or_dataset: Any) -> Dict[str, Any]:
    """``record_or_dataset`` if it is a record (a dict of schema ``dsv.lineage/1``), else
    ``record(record_or_dataset)``. Raises ``ValueError`` for a dict of another schema."""
    if isinstance(record_or_dataset, Mapping):
        if record_or_dataset.get("schema") != SCHEMA:
            raise ValueError(f"not a lineage record: its schema is {record_or_dataset.get('schema')!r}, not {SCHEMA!r}")
        return dict(record_or_dataset)
    return record(record_or_dataset)


def write(record: Mapping[str, Any], path: StrPath = "dsv-lineage.json", *, overwrite: bool = False) -> pathlib.Path:
    """Writes ``record`` as JSON to ``path`` (default ``dsv-lineage.json`` in the working
    directory), whole or not at all (a temporary file renamed over it). Returns the path.
    An earlier lineage record there is replaced; any other file there raises
    ``FileExistsError`` unless ``overwrite=True``."""
    if record.get("schema") != SCHEMA:
        raise ValueError(f"not a lineage record: its schema is {record.get('schema')!r}, not {SCHEMA!r}")
    target = pathlib.Path(os.fspath(path))
    if not overwrite and os.path.lexists(target):
        try:
            read(target)
        except (OSError, ValueError) as e:
            raise FileExistsError(
                f"{target} exists and is not a lineage record ({e}); pass overwrite=True to replace it"
            ) from None
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    finally:
        if temporary.exists():
            temporary.unlink()
    return target


def read(path: StrPath = "dsv-lineage.json") -> Dict[str, Any]:
    """The record in ``path`` (at most 64 MiB). Raises ``ValueError`` when it is not a
    lineage record of schema ``dsv.lineage/1``."""
    return as_record(json.loads(_read_bounded(pathlib.Path(os.fspath(path)), _MAX_RECORD_BYTES, "lineage record")))
