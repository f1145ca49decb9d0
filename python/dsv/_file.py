"""``dsv.File``: one file of a version as a binary file object."""

from __future__ import annotations

import io
from typing import Any, Optional

__all__ = ["File"]


class File(io.RawIOBase):
    """A file of a version, open for reading: a real binary file object (``io.RawIOBase``),
    so ``read``, ``readinto``, ``readline``, iteration, ``seek`` and ``tell`` work, and it
    can be handed to anything that reads a file (``PIL.Image.open``, ``torch.load``,
    ``pandas.read_csv``, ``tarfile``). Reads go through the store's read engine, without
    the GIL, at any offset; ``read(n)`` returns ``n`` bytes unless the file ends first.

    Made by ``Version.open(path)``; use it as a context manager or ``close()`` it.
    """

    def __init__(self, handle: Any) -> None:
        super().__init__()
        self._handle = handle
        self._position = 0
        self.name = handle.path
        self.mode = "rb"

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._handle.size

    @property
    def version(self) -> Any:
        """The ``dsv.Version`` this file belongs to."""
        return self._handle.version

    def readable(self) -> bool:
        """True: a version's files are read-only."""
        self._check_open()
        return True

    def seekable(self) -> bool:
        """True: any offset can be read."""
        self._check_open()
        return True

    def writable(self) -> bool:
        """False: a version's files are read-only."""
        self._check_open()
        return False

    def tell(self) -> int:
        """The current position."""
        self._check_open()
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Moves to ``offset`` from the start (``whence=0``), the current position (1) or the
        end (2); returns the new position. A position past the end is allowed (reads there
        return ``b""``); a negative one raises ``ValueError``."""
        self._check_open()
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._position + offset
        elif whence == io.SEEK_END:
            position = self._handle.size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._position = position
        return position

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes from the current position (all the rest when ``size`` is
        ``None`` or negative); ``b""`` at the end."""
        self._check_open()
        if size is None:
            size = -1
        data = self._handle.read_at(self._position, size)
        self._position += len(data)
        return data

    def readall(self) -> bytes:
        """The rest of the file."""
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        """Reads into a writable buffer (``bytearray``, ``memoryview``, a NumPy array);
        returns how many bytes were read (0 at the end)."""
        self._check_open()
        view = memoryview(buffer).cast("B")
        data = self._handle.read_at(self._position, len(view))
        n = len(data)
        view[:n] = data
        self._position += n
        return n

    def fileno(self) -> int:
        """Raises ``io.UnsupportedOperation``: the file has no descriptor of its own."""
        raise io.UnsupportedOperation("a dsv file has no file descriptor")

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def __repr__(self) -> str:
        state = " (closed)" if self.closed else ""
        return f"<dsv.File {self.name!r} size={self.size}{state}>"

    def __reduce__(self) -> Any:
        raise TypeError("a dsv.File cannot be pickled: pickle its Version and path instead")
