"""The exceptions dsv raises.

Every error of the library is a :class:`Error`; its subclasses are named after the library's
error variants (the ones the CLI reports), and where Python has a built-in class for the same
failure they derive from it too, so ``except FileNotFoundError`` or ``except ValueError``
keeps working: :class:`PathNotFound` is a ``FileNotFoundError``, :class:`InvalidShard` a
``ValueError``, :class:`IoError` an ``OSError``, :class:`StoreClosed` a ``ValueError`` (as a
closed file's I/O is in Python).

The message is the one the CLI prints: the error, then a ``caused by:`` line for each cause,
then the CLI's hint. The same parts are on the exception as attributes:

- ``kind``: ``"user"``, ``"conflict"``, ``"corrupt"``, ``"io"``, ``"interrupted"`` or
  ``"internal"`` (the CLI's exit-code classes, as ``dsv --json`` names them);
- ``causes``: the chain of underlying errors, outermost first;
- ``hints``: what the user can do about it.
"""

from __future__ import annotations

from typing import List

__all__ = [
    "Error",
    "NoStore",
    "StoreExists",
    "StoreBusy",
    "StoreTooNew",
    "StoreClosed",
    "InvalidName",
    "InvalidRevision",
    "UnknownRevision",
    "UnknownDataset",
    "AmbiguousRevision",
    "PathNotFound",
    "NotAFile",
    "NotADirectory",
    "NotAWorkspace",
    "InsideWorkspace",
    "Unsupported",
    "TagExists",
    "Conflict",
    "Corrupt",
    "CatalogLost",
    "MissingObject",
    "UnsafePath",
    "IoError",
    "InternalError",
    "RemoteError",
    "UnknownRemote",
    "RemoteExists",
    "InvalidRemote",
    "RemoteDiverged",
    "VersionHeld",
    "VersionRemoved",
    "InvalidPattern",
    "InvalidShard",
    "RangeNotSatisfiable",
    "Interrupted",
    "InvalidTar",
    "InvalidParquet",
]


class Error(Exception):
    """Base class of every dsv error."""

    kind: str = "user"
    """The CLI's class of the error: user, conflict, corrupt, io, interrupted or internal."""
    causes: List[str]
    """The underlying errors, outermost first."""
    hints: List[str]
    """What the user can do about it (the CLI's ``hint:`` lines)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.causes = []
        self.hints = []


class NoStore(Error, FileNotFoundError):
    """No ``.dsv`` store in the directory or any parent (and no ``DSV_STORE``)."""


class StoreExists(Error, FileExistsError):
    """A store already exists where one was to be created (``dsv.clone``)."""


class StoreBusy(Error):
    """Other processes have the store open, so ``dsv repair`` cannot run."""


class StoreTooNew(Error):
    """The store was made by a newer dsv."""


class StoreClosed(Error, ValueError):
    """The store (of a version or file) was closed with ``Store.close()``."""


class InvalidName(Error, ValueError):
    """A dataset, tag or remote name that breaks the naming rules."""


class InvalidRevision(Error, ValueError):
    """A revision that does not parse."""


class UnknownRevision(Error, LookupError):
    """No version matches the revision."""


class UnknownDataset(UnknownRevision):
    """No dataset of that name (a kind of unknown revision)."""


class AmbiguousRevision(Error, LookupError):
    """An id prefix that matches more than one version."""


class PathNotFound(Error, FileNotFoundError):
    """A path the version does not have."""


class NotAFile(Error, IsADirectoryError):
    """A path that is a directory or symlink where a regular file is needed."""


class NotADirectory(Error, NotADirectoryError):
    """A path that is a file where a directory is needed."""


class NotAWorkspace(Error):
    """A directory that no checkout or commit made a workspace."""


class InsideWorkspace(Error):
    """A commit of a directory inside another workspace of the same dataset (``force=True``
    commits it anyway)."""


class Unsupported(Error):
    """An entry dsv does not store (a socket, a device)."""


class TagExists(Error):
    """The tag is already given to another version."""


class Conflict(Error):
    """Uncommitted changes are in the way (``force=True`` overwrites them)."""


class Corrupt(Error):
    """Stored data failed a hash or format check."""


class CatalogLost(Corrupt):
    """The catalog is lost while the store holds data: ``dsv repair`` rebuilds it."""


class MissingObject(Corrupt):
    """Data the version needs is neither in the store nor on any remote."""


class UnsafePath(Corrupt):
    """A stored path dsv refuses to write (one escaping the directory)."""


class IoError(Error, OSError):
    """The operating system refused (disk full, permissions)."""


class InternalError(Error):
    """A bug in dsv, not a problem with the data."""


class RemoteError(Error):
    """A request to a remote failed (after retries)."""


class UnknownRemote(Error, LookupError):
    """No remote of that name."""


class RemoteExists(Error):
    """A remote of that name exists already."""


class InvalidRemote(Error, ValueError):
    """A remote URL or option dsv cannot use."""


class RemoteDiverged(Conflict):
    """The remote has versions this store does not have."""


class VersionHeld(Error):
    """The version must be kept (pinned, or held by a workspace)."""


class VersionRemoved(Error):
    """The version was removed (``dsv rm``); its data may be gone."""


class InvalidPattern(Error, ValueError):
    """A glob that does not parse."""


class InvalidShard(Error, ValueError):
    """A shard (rank, world size) out of range: the rank counts from 0 and must be below the
    world size."""


class RangeNotSatisfiable(Error, ValueError):
    """A byte range that starts at or past the end of a non-empty file (HTTP's 416)."""


class Interrupted(Error):
    """The operation was interrupted; the store is consistent and a re-run finishes it."""


class InvalidTar(Error, ValueError):
    """A file read as a tar shard (``dsv.torch.TarShardDataset``) that is not a valid tar:
    a bad header, a size past the end of the file, a malformed pax record, a repeated member
    of one sample. Raised by the Python package itself (the library has no such variant);
    ``shard`` is the file's path in the version and ``offset`` the byte where its tar breaks."""

    shard: str
    """The shard's path in the version."""
    offset: int
    """The byte of the shard where the error was found (a header's start, mostly)."""

    def __init__(self, message: str = "", shard: str = "", offset: int = 0) -> None:
        super().__init__(message)
        self.shard = shard
        self.offset = offset


class InvalidParquet(Error, ValueError):
    """A file read as Parquet (``dsv.torch.ParquetRowDataset``, ``dsv._parquet.row_groups``)
    that is not a Parquet file: pyarrow cannot read its footer. Raised by the Python package
    itself (the library has no such variant); ``path`` is the file's path in the version."""

    path: str
    """The file's path in the version."""

    def __init__(self, message: str = "", path: str = "") -> None:
        super().__init__(message)
        self.path = path
