"""Typed stubs of ``dsv._dsv``, the native half of the ``dsv`` package (pyo3)."""

from __future__ import annotations

import os
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._file import File

StrPath = Union[str, "os.PathLike[str]"]
Include = Union[str, Sequence[str], None]

__version__: str

class Store:
    """A dsv store (its ``.dsv`` directory), open for reading versions, committing and
    checking out. ``Store()`` finds the nearest store from the working directory upward (or
    ``DSV_STORE``), as the CLI does; ``Store(path)`` starts the search at ``path``.

    Raises ``dsv.NoStore`` when there is none. Usable as a context manager (closes on exit),
    picklable (as its path, or as ``open_remote``'s arguments), and safe across ``fork()`` (a child opens its own engine).
    """

    def __init__(self, path: Optional[StrPath] = None) -> None: ...
    @property
    def path(self) -> pathlib.Path:
        """The store's ``.dsv`` directory."""
    @property
    def remote(self) -> Optional[str]:
        """The URL of the remote this store is the node-local clone of (``open_remote``),
        else ``None``."""
    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
    def version(self, revision: str) -> Version:
        """Opens version ``revision`` for reading: any revision the CLI takes (``mnist``,
        ``mnist@v3``, ``mnist@<id prefix>``, ``mnist@v3~1``), and ``REMOTE/NAME[@REV]``,
        whose ref is checked on the remote and whose metadata is fetched (no file data: files
        are fetched when first read).

        Raises ``dsv.UnknownRevision`` (``dsv.UnknownDataset``), ``dsv.InvalidRevision``,
        ``dsv.VersionRemoved``, ``dsv.RemoteError``."""
    def commit(
        self,
        dir: StrPath,
        *,
        dataset: str,
        message: str,
        tag: Optional[str] = None,
        allow_empty: bool = False,
        author: Optional[str] = None,
        force: bool = False,
    ) -> Dict[str, Any]:
        """Commits directory ``dir`` as a new version of ``dataset`` (created if new), as
        ``dsv commit DIR --dataset NAME -m MESSAGE [--tag TAG]``; returns the report ``dsv
        commit --json`` prints (``version``, ``created``, ``files``, ``bytes``, ...)."""
    def checkout(self, revision: str, dir: StrPath, *, force: bool = False) -> Dict[str, Any]:
        """Checks out ``revision`` into ``dir`` (created if missing), as ``dsv checkout REV
        DIR [--force]``: data only on a remote is downloaded first. Returns the report ``dsv
        checkout --json`` prints. Raises ``dsv.Conflict`` when uncommitted changes are in the
        way (``force=True`` overwrites them)."""
    def set_cache_limit(self, limit: Union[int, str, None]) -> None:
        """Sets the store's cache limit, as ``dsv cache limit SIZE`` does: bytes or a size
        such as ``"10GiB"``; ``None`` removes it. Every reader of the store honours it: after
        a fetch brings the store's packs over it, the least recently used data a remote holds
        is evicted (never data no remote holds). Raises ``ValueError`` for 0 or a bad size."""
    @property
    def cache_limit(self) -> Optional[int]:
        """The store's cache limit in bytes, or ``None``."""
    def close(self) -> None:
        """Releases the store's read engine (its catalog connection and cached frames). Every
        later call on the store, or on a version or file opened from it, raises
        ``dsv.StoreClosed``. Closing twice is allowed."""
    def __enter__(self) -> Store: ...
    def __exit__(self, *args: Any) -> bool: ...
    def __reduce__(self) -> Tuple[Any, Tuple[pathlib.Path]]: ...

class Version:
    """One version of a dataset, open for reading without a checkout: list, stat, open and
    read its files, take a worker's shard. Files whose data is only on a remote are fetched
    when first opened and kept in the store, for every later reader on the machine. Reads
    release the GIL, so threads reading one version run in parallel.

    Picklable (as the store's path and the version's id) and safe across ``fork()``.
    """

    @property
    def id(self) -> str:
        """The version's id (64 hex digits)."""
    @property
    def dataset(self) -> str:
        """The dataset it belongs to."""
    @property
    def revision(self) -> str:
        """The revision it was opened as (``mnist@v3``)."""
    @property
    def message(self) -> str:
        """The commit message."""
    @property
    def author(self) -> str:
        """Who made it."""
    @property
    def time(self) -> int:
        """When it was made, in seconds since the Unix epoch."""
    @property
    def parent(self) -> Optional[str]:
        """The id of the previous version of the dataset, or ``None``."""
    @property
    def tree(self) -> str:
        """Its root tree's id (64 hex digits): what a lock file and a lineage record pin
        beside the version id."""
    @property
    def tags(self) -> List[str]:
        """The tags of its dataset that name it, sorted (read from the store's catalog now)."""
    @property
    def remotes(self) -> List[Dict[str, Any]]:
        """The configured remotes known (as last fetched or pushed) to hold it, in the store's
        order: dicts with ``name``, ``url`` and ``options`` (the settings that are no
        credential), as a lock file names them. Nothing is contacted."""
    @property
    def store(self) -> Store:
        """The store it was opened from."""
    @property
    def size_bytes(self) -> int:
        """Total bytes of its regular files."""
    def __len__(self) -> int:
        """The number of regular files."""
    def __contains__(self, path: str) -> bool:
        """True when ``path`` is a regular file of the version."""
    def files(self, include: Include = None) -> List[str]:
        """The paths of its regular files, sorted; with ``include`` (a glob such as
        ``train/**``, or a list of them), only those matching one. Raises
        ``dsv.InvalidPattern`` for a glob that does not parse."""
    def shard(self, rank: int, world_size: int, include: Include = None) -> List[str]:
        """The files worker ``rank`` of ``world_size`` reads: the same assignment as the CLI's
        ``--shard RANK/WORLD_SIZE`` and ``dsv shards`` (balanced by bytes, disjoint, covering
        every file once, the same on every machine), of the files ``include`` selects. Raises
        ``dsv.InvalidShard`` unless ``0 <= rank < world_size``."""
    def stat(self, path: str) -> Dict[str, Any]:
        """What ``path`` is: a dict with ``path``, ``type`` (``file``, ``directory`` or
        ``symlink``), ``size``, ``id``, and ``executable`` (files) or ``target`` (symlinks).
        Raises ``dsv.PathNotFound`` when the version has no such path."""
    def prefetch(self, paths: List[str]) -> int:
        """Fetches the data of files ``paths`` that this store does not hold from its remotes,
        in one round of parallel requests, and keeps it (as a read would). Returns the bytes
        downloaded: 0, contacting nothing, when the data is here or the store has no remote."""
    def walk(self, path: str = "") -> List[Dict[str, Any]]:
        """Every entry below directory ``path`` (``""``: the whole version), recursively, in
        depth-first order with siblings sorted, as ``stat`` gives them: one pass over the
        listing. A file gives itself. Raises ``dsv.PathNotFound``."""
    def listdir(self, path: str = "") -> List[Dict[str, Any]]:
        """The entries directly inside directory ``path`` (``""`` for the top), as ``stat``
        gives them. Raises ``dsv.PathNotFound`` when ``path`` is not a directory."""
    def open(self, path: str) -> File:
        """Opens file ``path`` for reading: a ``dsv.File``, a binary file object (``read``,
        ``readinto``, ``seek``, ``tell``). Data only on a remote is fetched first. Raises
        ``dsv.PathNotFound``, ``dsv.NotAFile``."""
    def read(self, path: str, start: int = 0, end: Optional[int] = None) -> bytes:
        """The bytes ``[start, end)`` of file ``path`` (``end=None``: to the end), as the
        CLI's ``dsv cat REV:PATH --range START..END``: an ``end`` past the size reads to the
        end; a ``start`` at or past the end of a non-empty file raises
        ``dsv.RangeNotSatisfiable``; a negative offset or ``end < start`` raises
        ``ValueError``."""
    def __reduce__(self) -> Tuple[Any, Tuple[pathlib.Path, str, str, str]]: ...

class _FileHandle:
    """One open file of a version: the native half of ``dsv.File``."""

    @property
    def size(self) -> int:
        """The file's size in bytes."""
    @property
    def path(self) -> str:
        """Its path in the version."""
    @property
    def version(self) -> Version:
        """The version it belongs to."""
    def read_at(self, offset: int, count: Optional[int] = None) -> bytes:
        """Up to ``count`` bytes from ``offset`` (all to the end when ``count`` is ``None``
        or negative); ``b""`` at or past the end."""

def clone(url: str, path: StrPath, *, options: Optional[Mapping[str, str]] = None) -> Store:
    """``dsv clone URL PATH``: a new store at ``path`` whose remote ``origin`` is ``url``
    (``s3://bucket/prefix``, ``gs://``, ``az://``, ``file://``), with its datasets' heads and
    tags and their metadata; no file data (reads fetch what they need). ``options`` are the
    remote's settings (``dsv remote add --option KEY=VALUE``); credentials come from the
    environment (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``). Returns the new store; when a store
    at ``path`` is a clone of ``url`` already (an earlier clone, or another process or
    worker cloning there at the same time), returns that one as it is, so "clone if missing"
    works in many workers at once. Raises ``dsv.StoreExists`` (a store of another URL is
    there), ``dsv.InvalidRemote``, ``dsv.RemoteError`` (and leaves nothing behind)."""

def open_remote(
    url: str, *, cache: Optional[StrPath] = None, options: Optional[Mapping[str, str]] = None
) -> Store:
    """The store through which a machine reads remote ``url`` without a store of its own:
    the node-local clone of the remote's metadata in cache directory ``cache`` (default:
    ``DSV_CACHE``, else ``$XDG_CACHE_HOME/dsv``, else ``~/.cache/dsv``), made on first use.
    However many processes of a node open it at once, one clones (under a file lock) and
    the others use that clone. Revisions resolve on the remote (``version("mnist@v3")``
    reads the remote's tag now); file data is fetched when first read and kept for every
    process of the node. The store pickles as these arguments, so a worker on another
    machine opens its own node's clone."""

def default_cache_dir() -> pathlib.Path:
    """The cache directory ``open_remote`` uses when given none: ``DSV_CACHE``, else
    ``$XDG_CACHE_HOME/dsv``, else ``~/.cache/dsv``, read from the environment now."""

def reopen_version(store: Store, dataset: str, id: str, revision: str) -> Version:
    """Opens version ``id`` of ``dataset`` in ``store`` (how a pickled ``Version`` comes
    back in another process)."""

def run_cli(argv: List[str]) -> int:
    """Runs the ``dsv`` command line ``argv`` (program name first) in this process; its exit status."""
    ...

__build__: str
"""What ``dsv --version`` says after the name: version, commit and build date."""

def permutation(n: int, key: str) -> List[int]:
    """The order of ``n`` items for ``key``: a Fisher–Yates shuffle driven by BLAKE3's
    extendable output of ``key``, the same on every machine."""

def ids_digest(ids: List[str]) -> str:
    """The digest of a list of ids (paths) a lineage record carries: ``blake3:`` and the hex
    BLAKE3 of each id's UTF-8 bytes followed by a NUL byte, in order (what ``dsv audit
    --lineage`` recomputes)."""

def blake3_hex(data: bytes) -> str:
    """The hex BLAKE3 of ``data`` (the hash of a lock file a lineage record names)."""
