"""What the engine front ends (``dsv.fsspec``, ``dsv.ray``, ``dsv.spark``) share: where the versions come
from, opened once per process, and a revision pinned to its version once per job."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._dsv import Store, Version, default_cache_dir, open_remote

StoreArg = Union[Store, str, "os.PathLike[str]", None]

_STORES: Dict[Tuple[Any, ...], Store] = {}
_LOCK = threading.Lock()


def open_store(
    *,
    remote: Optional[str] = None,
    cache: Union[str, "os.PathLike[str]", None] = None,
    remote_options: Optional[Mapping[str, str]] = None,
    store: StoreArg = None,
) -> Store:
    """The store the versions come from, as ``dsv.fsspec`` chooses it (the first given):
    ``store`` (a ``dsv.Store``, a path to search from, or a remote's URL, taken as
    ``remote``); ``remote`` (the node-local clone in ``cache``, ``dsv.open_remote``);
    ``DSV_STORE``, then ``DSV_REMOTE`` (with ``DSV_CACHE``) from the environment; the store
    found from the working directory. A remote's store is opened once per process.

    Raises ``dsv.NoStore``, ``dsv.InvalidRemote``, ``dsv.RemoteError``."""
    if isinstance(store, str) and "://" in store:
        remote, store = store, None
    if store is None and remote is None:
        if os.environ.get("DSV_STORE"):
            store = os.environ["DSV_STORE"]
        elif os.environ.get("DSV_REMOTE"):
            remote = os.environ["DSV_REMOTE"]
    if isinstance(store, Store):
        return store
    if store is not None or remote is None:
        return Store(store)
    cache_text = None if cache is None else os.fspath(cache)
    options = dict(remote_options or {})
    # Keyed on the cache directory in effect (the default as the environment names it now):
    # a process that changes DSV_CACHE reads through the new cache, as open_remote would.
    where = cache_text if cache_text is not None else os.fspath(default_cache_dir())
    key = (remote, where, tuple(sorted(options.items())))
    with _LOCK:
        found = _STORES.get(key)
    if found is not None and not found.closed:
        return found
    opened = open_remote(remote, cache=cache_text, options=options or None)
    with _LOCK:
        found = _STORES.get(key)
        if found is not None and not found.closed:
            return found
        _STORES[key] = opened
    return opened


def resolve(revision: str, **where: Any) -> Version:
    """Version ``revision`` (``covid@v1``, ``covid``: the head, resolved now, on the remote
    for a remote) in the store ``open_store(**where)`` picks. The returned ``Version`` is
    pinned: pickled to a worker, it reopens the same version id there.

    Raises ``ValueError`` for an empty revision, and what ``Store.version`` raises."""
    if not isinstance(revision, str) or not revision.strip():
        raise ValueError("a revision names a dataset and optionally a tag: 'covid@v1', 'covid'")
    return open_store(**where).version(revision)


def pinned_name(version: Version) -> str:
    """``DATASET@ID``: the revision that names exactly this version on any machine."""
    return f"{version.dataset}@{version.id}"
