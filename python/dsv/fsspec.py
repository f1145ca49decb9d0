"""An fsspec file system over dsv versions (protocol ``dsv``), read-only.

``dsv://REVISION/PATH`` names file ``PATH`` of version ``REVISION`` (``mnist@v3``,
``mnist``, ``mnist@<id prefix>``). The versions come from one of (the first given):

- ``store=``: a ``dsv.Store``, or a path to look for one from (a URL such as
  ``s3://bucket/datasets`` is taken as ``remote=``);
- ``remote=URL``: any machine, no store needed: the node-local clone of that remote in
  ``cache=DIR`` (default ``DSV_CACHE``, else ``~/.cache/dsv``), made on first use by one
  process of the node (``dsv.open_remote``); ``remote_options=`` are the remote's settings;
- ``DSV_STORE``, then ``DSV_REMOTE`` (with ``DSV_CACHE``) from the environment;
- the store found from the working directory.

::

    import fsspec, pandas
    with fsspec.open("dsv://mnist@v3/labels.csv") as f:
        labels = pandas.read_csv(f)
    pandas.read_csv("dsv://mnist@v3/labels.csv", storage_options={"remote": "s3://bucket/datasets"})
    fs = fsspec.filesystem("dsv", store="/data/store")
    fs.ls("mnist@v3/train")

**One version per job.** A revision is resolved once per file system object, the first
time a path names it (against the remote's refs, for a remote), and the resolved version id
travels with the object when it is pickled to an engine's workers (``pins``, a storage
option): every worker reads the version the client resolved, even if the remote's head or a
tag moves during the job. The file system pickles by its storage options, never by an open
store: a worker on another machine opens its own node's clone.

``find``, ``glob``, ``walk`` and ``ls(detail=True)`` answer from the version's listing in
one pass; ``modified`` (which DuckDB asks of every file) is the time the version was made. The ``dsv`` package registers the protocol through an ``fsspec.specs`` entry point,
so ``import dsv`` is not even needed. Writes raise ``PermissionError``: a version never
changes.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple, Union

from fsspec.spec import AbstractFileSystem, make_instance

from ._dsv import Store, Version
from ._engine import open_store
from .errors import PathNotFound

__all__ = ["DsvFileSystem"]


# Each exact version (``DATASET@ID``, which never changes) opened once per process and
# store, whatever number of file system objects a job makes; versions survive fork (each
# process opens its own engine on first use). Stores are kept once per process by
# ``_engine.open_store``.
_VERSIONS: "OrderedDict[Tuple[Any, ...], Version]" = OrderedDict()
_KEEP_VERSIONS = 64
_LOCK = threading.Lock()


class DsvFileSystem(AbstractFileSystem):
    """Read-only fsspec file system of the versions of one dsv store, or of one remote.

    Paths are ``REVISION/PATH``; the top level (``""``) lists nothing (revisions are not
    enumerated). Storage options: ``store`` (a ``dsv.Store``, a path, or a remote's URL),
    ``remote`` (a remote's URL: read on any machine through the node-local clone), ``cache``
    (the cache directory of ``remote``), ``remote_options`` (the remote's settings, as
    ``dsv remote add --option``), ``pins`` (``{revision: "DATASET@ID"}``, filled as revisions
    are resolved; what a pickled file system carries to workers).
    """

    protocol = "dsv"
    root_marker = ""
    # A new object per call, so each job resolves names anew (stores and exact versions are
    # shared through the module's caches, so this costs no second clone or listing).
    cachable = False

    def __init__(
        self,
        store: Union[Store, str, os.PathLike, None] = None,
        remote: Optional[str] = None,
        cache: Union[str, os.PathLike, None] = None,
        remote_options: Optional[Dict[str, str]] = None,
        pins: Optional[Dict[str, str]] = None,
        **kwargs: Any,
    ) -> None:
        nested = kwargs.pop("storage_options", None)
        if nested is not None:
            # `read_bytes(..., storage_options={...})` and the like pass the options one level
            # too deep; taking them is kinder than reading the wrong store.
            if not isinstance(nested, dict) or store is not None or remote is not None:
                raise TypeError("dsv: give the storage options as keywords (remote=, cache=, store=), not storage_options=")
            return DsvFileSystem.__init__(self, **{**kwargs, **nested})
        super().__init__(**kwargs)
        self.store = open_store(remote=remote, cache=cache, remote_options=remote_options, store=store)
        self.pins: Dict[str, str] = dict(pins or {})
        self._versions: Dict[str, Version] = {}
        # One resolution per revision, whichever thread asks first: two threads must never
        # pin one name to two versions.
        self._resolving = threading.Lock()

    def __reduce__(self) -> Any:
        # The storage options as given, plus every revision resolved so far: a worker
        # reads the same versions as this process.
        options = dict(self.storage_options)
        if self.pins:
            options["pins"] = dict(self.pins)
        return make_instance, (type(self), self.storage_args, options)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith("dsv://"):
            path = path[len("dsv://") :]
        elif path.startswith("dsv::"):
            path = path[len("dsv::") :]
        return path.strip("/")

    def version(self, revision: str) -> Version:
        """The version ``revision`` names in this file system: resolved on first use (on the
        remote, for a remote), then pinned for this object and its pickled copies."""
        version = self._versions.get(revision)
        if version is not None:
            return version
        with self._resolving:
            version = self._versions.get(revision)
            if version is not None:
                return version
            pinned = self.pins.get(revision)
            if pinned is None:
                version = self.store.version(revision)
                pinned = self.pins[revision] = f"{version.dataset}@{version.id}"
                self._remember(pinned, version)
            else:
                version = self._exact(pinned, revision)
            self._versions[revision] = version
            return version

    def _exact(self, pinned: str, revision: str) -> Version:
        key = (id(self.store), pinned)
        with _LOCK:
            version = _VERSIONS.get(key)
            if version is not None:
                _VERSIONS.move_to_end(key)
                return version
        version = self.store.version(pinned)
        self._remember(pinned, version)
        return version

    def _remember(self, pinned: str, version: Version) -> None:
        with _LOCK:
            _VERSIONS[(id(self.store), pinned)] = version
            while len(_VERSIONS) > _KEEP_VERSIONS:
                _VERSIONS.popitem(last=False)

    def _split(self, path: str) -> Tuple[Version, str]:
        path = self._strip_protocol(path)
        revision, _, inner = path.partition("/")
        if not revision:
            raise PathNotFound("a dsv path starts with a revision: dsv://DATASET@TAG/PATH")
        return self.version(revision), inner

    def _info(self, revision: str, entry: Dict[str, Any]) -> Dict[str, Any]:
        kind = entry["type"]
        return {
            "name": f"{revision}/{entry['path']}" if entry["path"] else revision,
            "size": entry["size"],
            "type": "file" if kind == "file" else ("directory" if kind == "directory" else "other"),
            "id": entry["id"],
            **({"executable": entry["executable"]} if "executable" in entry else {}),
            **({"destination": entry["target"], "islink": True} if "target" in entry else {}),
        }

    def info(self, path: Any, **kwargs: Any) -> Dict[str, Any]:
        """What ``path`` is: ``name``, ``size``, ``type`` (``file``, ``directory``) and the
        content ``id``. Raises ``FileNotFoundError`` (``dsv.PathNotFound``)."""
        version, inner = self._split(path)
        revision = self._strip_protocol(path).partition("/")[0]
        if not inner:
            return {"name": revision, "size": version.size_bytes, "type": "directory", "id": version.id}
        return self._info(revision, version.stat(inner))

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> Union[List[str], List[Dict[str, Any]]]:
        """The entries of directory ``path`` (a file lists itself)."""
        version, inner = self._split(path)
        revision = self._strip_protocol(path).partition("/")[0]
        if inner and version.stat(inner)["type"] != "directory":
            entries = [self._info(revision, version.stat(inner))]
        else:
            entries = [self._info(revision, e) for e in version.listdir(inner)]
        return entries if detail else [e["name"] for e in entries]

    def find(
        self, path: Any, maxdepth: Optional[int] = None, withdirs: bool = False, detail: bool = False, **kwargs: Any
    ) -> Union[List[str], Dict[str, Dict[str, Any]]]:
        """Every file below ``path`` (and directory, with ``withdirs``), down to ``maxdepth``
        levels: one pass over the version's listing (``glob`` and ``walk`` build on it)."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        version, inner = self._split(path)
        revision = self._strip_protocol(path).partition("/")[0]
        try:
            entries = version.walk(inner)
        except FileNotFoundError:
            return {} if detail else []
        base = inner.count("/") + 1 if inner else 0
        found: Dict[str, Dict[str, Any]] = {}
        if withdirs and inner and entries and entries[0]["path"] != inner:
            found[f"{revision}/{inner}"] = self._info(revision, version.stat(inner))
        for entry in entries:
            depth = entry["path"].count("/") + 1 - base
            if maxdepth is not None and depth > maxdepth:
                continue
            if entry["type"] == "directory" and not withdirs:
                continue
            info = self._info(revision, entry)
            found[info["name"]] = info
        names = sorted(found)
        return {name: found[name] for name in names} if detail else names

    def cat_file(self, path: Any, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        """The bytes ``[start, end)`` of file ``path`` (negative offsets count from the end)."""
        version, inner = self._split(path)
        size = version.stat(inner)["size"] if (start is not None and start < 0) or (end is not None and end < 0) else None
        if start is not None and start < 0:
            start = max(0, size + start)
        if end is not None and end < 0:
            end = max(0, size + end)
        start = start or 0
        if end is not None and end <= start:
            return b""
        if start > 0 and start >= version.stat(inner)["size"]:
            return b""
        return version.read(inner, start, end)

    def _open(self, path: Any, mode: str = "rb", block_size: Any = None, autocommit: bool = True, cache_options: Any = None, **kwargs: Any) -> Any:
        if mode != "rb":
            raise PermissionError(f"dsv versions are read-only: cannot open {path!r} with mode {mode!r}")
        version, inner = self._split(path)
        return version.open(inner)

    def modified(self, path: Any) -> datetime.datetime:
        """When the version holding ``path`` was made (UTC): a version's files never change
        after it (DuckDB asks this of every file it reads). Raises ``FileNotFoundError``."""
        version, inner = self._split(path)
        if inner:
            version.stat(inner)
        return datetime.datetime.fromtimestamp(version.time, tz=datetime.timezone.utc)

    created = modified

    def ukey(self, path: Any) -> str:
        """The content id of the file (never changes for a version's file)."""
        return self.info(path)["id"]

    def _readonly(self, *args: Any, **kwargs: Any) -> Any:
        """Raises ``PermissionError``: a version never changes."""
        raise PermissionError("dsv versions are read-only")

    rm_file = _readonly
    _rm = _readonly
    mkdir = _readonly
    makedirs = _readonly
    rmdir = _readonly
    touch = _readonly
    mv = _readonly
    cp_file = _readonly
    pipe_file = _readonly
    put_file = _readonly
