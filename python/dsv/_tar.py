"""Tar shards read in place: the members of a tar file of a version, parsed from ranged reads
of it (never extracted, never read whole), grouped into WebDataset samples.

The headers are parsed as ``tarfile.TarInfo.frombuf`` parses them (checksums, ustar prefixes,
octal and base-256 numbers: the common case here, the rest by ``frombuf`` itself); the
extended headers around them (GNU long names, pax records, pax global headers) are applied
here, as ``tarfile`` applies them. Every
size is checked against the shard's size before anything is read for it, and an extended
header is read only up to ``EXTENDED_LIMIT`` bytes, so a malformed shard never makes a reader
allocate more than the shard holds: it raises :class:`dsv.InvalidTar`, naming the shard and
the byte where its tar breaks. ``dsv.torch.TarShardDataset`` is built on this module.
"""

from __future__ import annotations

import tarfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .errors import InvalidTar

__all__ = ["TarShard", "Pending", "samples", "split_name"]

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
# Bytes per ranged read: small members (an MNIST PNG, a label) are sliced out of one read.
WINDOW = 1 << 20
# The largest GNU long name or pax header accepted (a real one is a few hundred bytes).
EXTENDED_LIMIT = 1 << 20
# Member types that carry data which is a file's content.
REGULAR_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
ENCODING, ERRORS = "utf-8", "surrogateescape"


_GNU_TYPES = frozenset(tarfile.GNU_TYPES)


def _header(buf: bytes) -> Tuple[str, int, bytes]:
    """``(name, size, type)`` of a 512-byte header, as ``tarfile.TarInfo.frombuf`` gives them.
    The common case (octal numbers, the unsigned checksum) is parsed here, about five times
    faster; anything else goes to ``frombuf``, which raises ``tarfile.HeaderError`` for a
    header that does not parse."""
    try:
        if buf[124] & 0x80 or buf[148] & 0x80:
            raise ValueError("base-256")
        chksum = int(buf[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
        if chksum != 256 + sum(buf) - sum(buf[148:156]):
            raise ValueError("signed checksum, or a bad one")
        size = int(buf[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        info = tarfile.TarInfo.frombuf(buf, ENCODING, ERRORS)
        return info.name, info.size, info.type
    name = buf[0:100].split(b"\0", 1)[0].decode(ENCODING, ERRORS)
    kind = buf[156:157]
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE
    if kind == tarfile.GNUTYPE_SPARSE:
        # frombuf reads the sparse map that follows; refused later either way.
        return name, size, kind
    if kind == tarfile.DIRTYPE:
        name = name.rstrip("/")
    prefix = buf[345:500].split(b"\0", 1)[0]
    if prefix and kind not in _GNU_TYPES:
        name = prefix.decode(ENCODING, ERRORS) + "/" + name
    return name, size, kind


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


class TarShard:
    """One tar file of a version, open for reading: ``members()`` walks its headers and
    ``read(offset, size)`` reads bytes, both through ranged reads of the version's file
    (a window of ``window`` bytes at a time; a larger member in one read of its own)."""

    def __init__(self, version: Any, path: str, window: int = WINDOW) -> None:
        self.path = path
        self._file = version.open(path)
        self._read_at = self._file._handle.read_at
        self.size: int = self._file.size
        self._window = window
        self._buf = b""
        self._base = 0

    def close(self) -> None:
        self._file.close()
        self._buf = b""

    def __enter__(self) -> "TarShard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def read(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)``; fewer only where the file ends first."""
        start = offset - self._base
        if start >= 0 and start + size <= len(self._buf):
            return self._buf[start : start + size]
        if size >= self._window:
            return self._read_at(offset, size)
        self._buf = self._read_at(offset, self._window)
        self._base = offset
        return self._buf[:size]

    def error(self, offset: int, what: str) -> InvalidTar:
        return InvalidTar(f"{self.path}: not a valid tar file: {what} (at byte {offset} of {self.size})",
                          shard=self.path, offset=offset)

    def _extended(self, offset: int, size: int, kind: str) -> bytes:
        if size > EXTENDED_LIMIT:
            raise self.error(offset, f"a {kind} of {size} bytes (the limit is {EXTENDED_LIMIT})")
        return self.read(offset + BLOCK, size)

    def _pax(self, offset: int, payload: bytes) -> Dict[str, str]:
        """The records of a pax header: ``LENGTH KEY=VALUE\\n`` each."""
        records: Dict[str, str] = {}
        pos = 0
        while pos < len(payload) and payload[pos] != 0:
            space = payload.find(b" ", pos, pos + 24)
            length = payload[pos:space]
            if space < 0 or not length.isdigit() or int(length) <= space - pos + 1:
                raise self.error(offset, f"a malformed pax record at byte {pos} of its header")
            end = pos + int(length)
            record = payload[space + 1 : end]
            if end > len(payload) or not record.endswith(b"\n") or b"=" not in record:
                raise self.error(offset, f"a malformed pax record at byte {pos} of its header")
            key, value = record[:-1].split(b"=", 1)
            records[key.decode(ENCODING, ERRORS)] = value.decode(ENCODING, ERRORS)
            pos = end
        return records

    def members(self) -> Iterator[Tuple[str, int, int]]:
        """``(name, offset, size)`` of each regular file in the tar, in order: its name as
        ``tarfile`` gives it (ustar prefix, GNU long name or pax ``path`` applied), the offset
        of its data in the shard and its size. Other members (directories, links) are
        skipped. Stops at the end-of-archive block, or where the file ends on a block
        boundary (as ``tarfile`` does). Raises :class:`dsv.InvalidTar` for anything else."""
        total = self.size
        if total == 0:
            raise self.error(0, "the file is empty")
        offset = 0
        long_name: Optional[str] = None
        pax: Optional[Dict[str, str]] = None
        global_pax: Dict[str, str] = {}
        while True:
            if offset == total and offset > 0 and long_name is None and pax is None:
                return
            if offset + BLOCK > total:
                raise self.error(offset, "the file ends inside a header")
            buf = self.read(offset, BLOCK)
            if buf == ZERO_BLOCK:
                return
            try:
                header_name, size, kind = _header(buf)
            except tarfile.HeaderError as e:
                raise self.error(offset, f"a header that does not parse ({e})") from None
            if kind in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                self._check_size(offset, size, "GNU long name")
                payload = self._extended(offset, size, "GNU long name")
                if kind == tarfile.GNUTYPE_LONGNAME:
                    long_name = payload.split(b"\0", 1)[0].decode(ENCODING, ERRORS)
            elif kind in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.XGLTYPE):
                self._check_size(offset, size, "pax header")
                records = self._pax(offset, self._extended(offset, size, "pax header"))
                if kind == tarfile.XGLTYPE:
                    global_pax.update(records)
                else:
                    pax = records
            elif kind == tarfile.GNUTYPE_SPARSE:
                raise self.error(offset, f"a sparse member ({header_name!r}), which dsv does not read")
            else:
                records = {**global_pax, **(pax or {})}
                name = records.get("path", long_name if long_name is not None else header_name)
                if any(k.startswith("GNU.sparse.") for k in records):
                    raise self.error(offset, f"a sparse member ({name!r}), which dsv does not read")
                if "size" in records:
                    # ASCII digits only (str.isdigit takes others int() refuses), and no
                    # more than a u64 has: bounded before int() reads it.
                    value = records["size"]
                    if not (value.isascii() and value.isdigit() and len(value) <= 20):
                        raise self.error(offset, f"a pax size {records['size']!r} that is not a number")
                    size = int(records["size"])
                long_name, pax = None, None
                if kind in REGULAR_TYPES or kind not in tarfile.SUPPORTED_TYPES:
                    self._check_size(offset, size, f"member {name!r}")
                    if kind in REGULAR_TYPES:
                        yield name, offset + BLOCK, size
                else:
                    # Directories, links, devices: no data follows (tarfile skips none).
                    size = 0
            offset += BLOCK + _padded(size)
            if offset > total:
                # The last member's padding is cut short.
                raise self.error(total, "the file ends inside the padding of its last member")

    def _check_size(self, offset: int, size: int, what: str) -> None:
        if size < 0 or offset + BLOCK + size > self.size:
            raise self.error(offset, f"{what} claims {size} bytes, past the end of the file")


def split_name(name: str) -> Optional[Tuple[str, str]]:
    """``(key, extension)`` of a member, as WebDataset splits it: the key is the path up to
    the first ``.`` of its last component, the extension the rest, lower-cased. None for a
    name WebDataset skips: no ``.`` in the last component, or one that starts with it, or a
    top-level ``__…__`` metadata file."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:
        return None
    if slash == 0 and name.startswith("__") and name.endswith("__"):
        return None
    return name[:dot], name[dot + 1 :].lower()


class Pending:
    """A sample before it is handed out: its key, its shard and, per extension, where its
    member lies in the shard and (once read) its bytes."""

    __slots__ = ("key", "shard", "parts")

    def __init__(self, key: str, shard: str) -> None:
        self.key = key
        self.shard = shard
        # extension -> [offset, size, data or None]
        self.parts: Dict[str, List[Any]] = {}

    def complete(self, version: Any) -> Dict[str, Any]:
        """The sample dict, reading (one ranged read each) the members not read yet."""
        sample: Dict[str, Any] = {"__key__": self.key, "__shard__": self.shard}
        for ext, (offset, size, data) in self.parts.items():
            if data is None:
                data = version.read(self.shard, offset, offset + size) if size else b""
            sample[ext] = data
        return sample


def samples(shard: TarShard, with_data: Callable[[], bool]) -> Iterator[Pending]:
    """The samples of ``shard``: consecutive members sharing a key, in tar order. Each
    member's bytes are read as it is met when ``with_data()`` says so, else left for
    ``Pending.complete``. A key whose extension repeats raises :class:`dsv.InvalidTar`."""
    current: Optional[Pending] = None
    for name, offset, size in shard.members():
        split = split_name(name)
        if split is None:
            continue
        key, ext = split
        if ext.startswith("__"):
            raise shard.error(offset - BLOCK, f"member {name!r}: extensions starting with '__' are reserved")
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = Pending(key, shard.path)
        elif ext in current.parts:
            raise shard.error(offset - BLOCK, f"member {name!r}: a second {ext!r} for key {key!r}")
        data = shard.read(offset, size) if with_data() else None
        if data is not None and len(data) != size:
            raise shard.error(offset, f"member {name!r} is cut short")
        current.parts[ext] = [offset, size, data]
    if current is not None:
        yield current
