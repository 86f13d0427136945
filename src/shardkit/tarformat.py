"""The subset of the tar (ustar) format that shardkit writes and reads for ``--format tar``.

A shard is a plain ustar archive in the webdataset layout: for each row, ``<key>.json`` then
``<key><ext>``. Headers carry no clock, owner or machine (mtime 0, uid/gid 0, mode 0644), so
the same rows give the same bytes. It ends with the two zero blocks POSIX asks for and no
padding to a record size, so a shard costs exactly ``1024 + sum(512 + padded(size))`` bytes.

:func:`iter_tar_members` walks an archive front to back from a forward-only stream, as the
webdataset builder of datasets does, checking every header's checksum.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .streamio import CountingOutput, read_exact

BLOCK = 512
END_BYTES = 2 * BLOCK
MAX_NAME_BYTES = 100  # the ustar name field; shardkit never uses the prefix field or PAX headers
MAX_MEMBER_BYTES = 8**11 - 1  # eleven octal digits
_ZEROS = bytes(BLOCK)


class TarFormatError(ValueError):
    """A shard's bytes are not the tar subset shardkit writes, or are damaged."""


def padded(size: int) -> int:
    """``size`` rounded up to a whole number of 512-byte blocks."""
    return -(-size // BLOCK) * BLOCK


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode("ascii") + b"\0"


def _checksum(header: bytes | bytearray) -> int:
    """The header's checksum: the sum of its bytes with the checksum field read as spaces."""
    return sum(header[:148]) + 8 * 32 + sum(header[156:])


def member_header(name: str, size: int) -> bytes:
    raw = name.encode("utf-8")
    if not raw or len(raw) > MAX_NAME_BYTES or "/" in name or name in (".", ".."):
        raise TarFormatError(f"member name {name!r} is not a plain name of 1 to {MAX_NAME_BYTES} bytes")
    if not 0 <= size <= MAX_MEMBER_BYTES:
        raise TarFormatError(f"member {name!r}: {size} bytes do not fit a ustar header")
    header = bytearray(BLOCK)
    header[0 : len(raw)] = raw
    header[100:108] = _octal(0o644, 8)
    header[108:116] = _octal(0, 8)  # uid
    header[116:124] = _octal(0, 8)  # gid
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(0, 12)  # mtime: no clock in the bytes
    header[156:157] = b"0"  # a regular file
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[148:156] = _octal(_checksum(header), 7) + b" "
    return bytes(header)


@dataclass
class TarWriter(CountingOutput):
    """Writes regular-file members in order."""

    _pending: int = 0
    _padding: int = 0

    def start_member(self, name: str, size: int) -> None:
        if self._pending:
            raise TarFormatError(f"previous member still expects {self._pending} bytes")
        self._emit(member_header(name, size))
        self._pending = size
        self._padding = padded(size) - size

    def write_data(self, data: bytes | memoryview) -> None:
        if len(data) > self._pending:
            raise TarFormatError("member data longer than announced")
        self._emit(data)
        self._pending -= len(data)
        if not self._pending and self._padding:
            self._emit(_ZEROS[: self._padding])
            self._padding = 0

    def add(self, name: str, data: bytes) -> None:
        self.start_member(name, len(data))
        self.write_data(data)

    def close(self) -> int:
        """Write the end-of-archive blocks; return the total size."""
        if self._pending:
            raise TarFormatError(f"last member still expects {self._pending} bytes")
        self._emit(_ZEROS + _ZEROS)
        return self._offset


@dataclass(frozen=True)
class TarMember:
    name: str
    offset: int  # of its header
    size: int
    data: bytes


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    return read_exact(stream, n, what, TarFormatError)


def iter_tar_members(stream: BinaryIO) -> Iterator[TarMember]:
    """Walk a shard front to back, yielding each regular-file member; stops at the end blocks.

    Refuses a bad header checksum, any member type but a regular file, and unsafe names.
    """
    offset = 0
    while True:
        header = _read_exact(stream, BLOCK, f"the header at offset {offset}")
        if header == _ZEROS:
            _read_exact(stream, BLOCK, "the end-of-archive blocks")
            return
        try:
            recorded = int(header[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
            size = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        except ValueError:
            raise TarFormatError(f"unreadable header at offset {offset}") from None
        if recorded != _checksum(header):
            raise TarFormatError(f"header checksum mismatch at offset {offset}")
        name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        if header[345:346] not in (b"\0", b""):  # a ustar prefix: a path, which shardkit never writes
            name = header[345:500].split(b"\0", 1)[0].decode("utf-8", "replace") + "/" + name
        if header[156:157] not in (b"0", b"\0"):
            raise TarFormatError(f"member {name!r} at offset {offset} is not a regular file")
        if not name or name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise TarFormatError(f"unsafe member name {name!r} at offset {offset}")
        data = _read_exact(stream, size, f"member {name!r}")
        if padded(size) > size:
            _read_exact(stream, padded(size) - size, f"the padding of {name!r}")
        yield TarMember(name=name, offset=offset, size=size, data=data)
        offset += BLOCK + padded(size)
