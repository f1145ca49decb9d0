"""An fsspec file system over dsv versions (protocol ``dsv``), read-only.

``dsv://REVISION/PATH`` names file ``PATH`` of version ``REVISION`` (``mnist@v3``,
``mnist``, ``mnist@<id prefix>``) of the store found from the working directory (or
``DSV_STORE``), or of ``store=`` given as a storage option::

    import fsspec, pandas
    with fsspec.open("dsv://mnist@v3/labels.csv") as f:
        labels = pandas.read_csv(f)
    pandas.read_csv("dsv://mnist@v3/labels.csv", storage_options={"store": "/data/store"})
    fs = fsspec.filesystem("dsv", store="/data/store")
    fs.ls("mnist@v3/train")

The ``dsv`` package registers the protocol through an ``fsspec.specs`` entry point, so
``import dsv`` is not even needed. Writes raise ``PermissionError``: a version never changes.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

from fsspec.spec import AbstractFileSystem

from ._dsv import Store, Version
from .errors import PathNotFound

__all__ = ["DsvFileSystem"]


class DsvFileSystem(AbstractFileSystem):
    """Read-only fsspec file system of the versions in one dsv store.

    Paths are ``REVISION/PATH``; the top level (``""``) lists nothing (revisions are not
    enumerated). ``store``: a ``dsv.Store``, or a path to start looking for one from (default:
    ``DSV_STORE``, else the working directory).
    """

    protocol = "dsv"
    root_marker = ""

    def __init__(self, store: Union[Store, str, os.PathLike, None] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(store, Store):
            self.store = store
        else:
            self.store = Store(store)
        self._versions: Dict[str, Version] = {}

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith("dsv://"):
            path = path[len("dsv://") :]
        elif path.startswith("dsv::"):
            path = path[len("dsv::") :]
        return path.strip("/")

    def _split(self, path: str) -> Tuple[Version, str]:
        path = self._strip_protocol(path)
        revision, _, inner = path.partition("/")
        if not revision:
            raise PathNotFound("a dsv path starts with a revision: dsv://DATASET@TAG/PATH")
        version = self._versions.get(revision)
        if version is None:
            version = self.store.version(revision)
            self._versions[revision] = version
        return version, inner

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

