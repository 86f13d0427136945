"""The exact subset of the ZIP format that shardkit writes and reads.

shardkit shards are plain ZIP files with three properties that make them fast to stream:

* every member is ``ZIP_STORED`` (no compression: images and audio are already compressed);
* every local file header carries the CRC-32 and both sizes (general purpose flag bit 3,
  "data descriptor", is never set), so a reader can walk the archive front to back from a
  single forward-only stream without ever touching the central directory;
* nothing in the bytes depends on the clock or the machine (fixed timestamps and attributes),
  so the same rows always give the same bytes.

Because sizes are known up front, :func:`stored_member_overhead` and :data:`END_RECORD_SIZE`
let the planner compute the exact size of a shard before writing a byte of it.

The front-to-back reader :func:`iter_members` is what every shardkit reader (and the loading
script in the template) uses: one ``open()`` per shard, no seeking.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO

from .streamio import CountingOutput, crc32, read_exact

LOCAL_HEADER_SIG = 0x04034B50
CENTRAL_HEADER_SIG = 0x02014B50
END_RECORD_SIG = 0x06054B50

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # 30 bytes, then name, then extra
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes, then name, extra, comment
_END_RECORD = struct.Struct("<IHHHHIIH")  # 22 bytes

LOCAL_HEADER_SIZE = _LOCAL_HEADER.size
CENTRAL_HEADER_SIZE = _CENTRAL_HEADER.size
END_RECORD_SIZE = _END_RECORD.size

#: Largest shard and member count a ZIP without ZIP64 records can describe.
MAX_ZIP_BYTES = 0xFFFFFFFF
MAX_ZIP_MEMBERS = 0xFFFF
CENTRAL_IN_MEMORY_BYTES = 1 << 20  # a writer's central directory beyond this waits in a temporary file

_VERSION = 20  # 2.0: the version that introduced stored members and folders
_FLAG_UTF8 = 0x0800  # names are UTF-8 (bit 11)
_DOS_TIME = 0  # 00:00:00
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the earliest DOS date: no clock in the bytes
_UNIX_MODE = 0o100644  # regular file, rw-r--r--
_MADE_BY = (3 << 8) | _VERSION  # 3 = Unix, so the mode in external_attr is honoured


class ZipFormatError(ValueError):
    """A shard's bytes are not the ZIP subset shardkit writes, or are damaged."""


def encode_name(name: str) -> bytes:
    """Encode a member name; refuses names a reader must not trust."""
    if not name or name[0] == "/" or "\\" in name or "\x00" in name or (".." in name and ".." in name.split("/")):
        raise ZipFormatError(f"unsafe ZIP member name {name!r}")
    return name.encode("utf-8")


def stored_member_overhead(name: str) -> int:
    """Bytes a stored member adds to a shard beyond its data: local header + central entry."""
    return member_overhead_for_length(len(encode_name(name)))


def member_overhead_for_length(name_bytes: int) -> int:
    """:func:`stored_member_overhead` from the encoded name's length (no extra field, no comment)."""
    return LOCAL_HEADER_SIZE + CENTRAL_HEADER_SIZE + 2 * name_bytes


def local_header(name: bytes, size: int, crc: int) -> bytes:
    return (
        _LOCAL_HEADER.pack(
            LOCAL_HEADER_SIG, _VERSION, _FLAG_UTF8, 0, _DOS_TIME, _DOS_DATE, crc, size, size, len(name), 0
        )
        + name
    )


def central_header(name: bytes, size: int, crc: int, offset: int) -> bytes:
    return (
        _CENTRAL_HEADER.pack(
            CENTRAL_HEADER_SIG,
            _MADE_BY,
            _VERSION,
            _FLAG_UTF8,
            0,
            _DOS_TIME,
            _DOS_DATE,
            crc,
            size,
            size,
            len(name),
            0,
            0,
            0,
            0,
            _UNIX_MODE << 16,
            offset,
        )
        + name
    )


def end_record(count: int, cd_size: int, cd_offset: int) -> bytes:
    if count > MAX_ZIP_MEMBERS or cd_offset + cd_size > MAX_ZIP_BYTES:
        raise ZipFormatError(f"{count} members / {cd_offset + cd_size} bytes need ZIP64, which shardkit never writes")
    return _END_RECORD.pack(END_RECORD_SIG, 0, 0, count, count, cd_size, cd_offset, 0)


@dataclass
class ZipWriter(CountingOutput):
    """Writes stored members to a binary stream, in order, and closes with the central directory.

    The caller gives each member's CRC-32 and size up front (they go into the local header);
    the data may then be written in any number of pieces with :meth:`write_data`.

    The central directory is gathered as it goes, in memory up to 1 MiB and in a temporary
    file beyond (``SpooledTemporaryFile``): a shard of 62,000 small files has a 6 MB directory,
    which as a list of entries took 9 MB of each write worker's memory.
    """

    _central: IO[bytes] | None = None
    _members: int = 0
    _pending: int = 0

    def start_member(self, name: str, size: int, crc: int) -> None:
        if self._pending:
            raise ZipFormatError(f"previous member still expects {self._pending} bytes")
        raw = encode_name(name)
        if self._central is None:
            self._central = tempfile.SpooledTemporaryFile(max_size=CENTRAL_IN_MEMORY_BYTES)  # noqa: SIM115
        self._central.write(central_header(raw, size, crc, self._offset))
        self._members += 1
        self._emit(local_header(raw, size, crc))
        self._pending = size

    def write_data(self, data: bytes | memoryview) -> None:
        if len(data) > self._pending:
            raise ZipFormatError("member data longer than announced")
        self._emit(data)
        self._pending -= len(data)

    def add(self, name: str, data: bytes) -> None:
        self.start_member(name, len(data), crc32(data))
        self.write_data(data)

    def close(self) -> int:
        """Write the central directory and end record; return the total size."""
        if self._pending:
            raise ZipFormatError(f"last member still expects {self._pending} bytes")
        cd_offset = self._offset
        if self._central is not None:
            with self._central as central:
                central.seek(0)
                while chunk := central.read(CENTRAL_IN_MEMORY_BYTES):
                    self._emit(chunk)
            self._central = None
        self._emit(end_record(self._members, self._offset - cd_offset, cd_offset))
        return self._offset


@dataclass(frozen=True)
class Member:
    """One member met while walking a shard front to back."""

    name: str
    offset: int  # of its local header
    size: int
    crc: int
    data: bytes


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    return read_exact(stream, n, what, ZipFormatError)


def iter_members(stream: BinaryIO, *, check_crc: bool = True) -> Iterator[Member]:
    """Walk a shard front to back from a forward-only stream, yielding each stored member.

    Stops at the central directory. Refuses compressed members, data descriptors, unsafe
    names, and (with ``check_crc``) data whose CRC-32 does not match its header.
    """
    offset = 0
    while True:
        sig_bytes = stream.read(4)
        if len(sig_bytes) < 4:
            raise ZipFormatError(f"truncated: no central directory after offset {offset}")
        (sig,) = struct.unpack("<I", sig_bytes)
        if sig in (CENTRAL_HEADER_SIG, END_RECORD_SIG):
            return
        if sig != LOCAL_HEADER_SIG:
            raise ZipFormatError(f"no local file header at offset {offset} (found 0x{sig:08x})")
        fields = _LOCAL_HEADER.unpack(sig_bytes + _read_exact(stream, LOCAL_HEADER_SIZE - 4, "a local header"))
        _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len = fields
        raw_name = _read_exact(stream, name_len, "a member name")
        name = raw_name.decode("utf-8" if flags & _FLAG_UTF8 else "cp437")
        encode_name(name)  # refuses absolute names and '..'
        if flags & 0x0008:
            raise ZipFormatError(f"member {name!r} at offset {offset} uses a data descriptor")
        if method != 0 or csize != usize:
            raise ZipFormatError(f"member {name!r} at offset {offset} is compressed (method {method})")
        if extra_len:
            _read_exact(stream, extra_len, "an extra field")
        data = _read_exact(stream, usize, f"member {name!r}")
        if check_crc and crc32(data) != crc:
            raise ZipFormatError(f"CRC mismatch in member {name!r} at offset {offset}")
        yield Member(name=name, offset=offset, size=usize, crc=crc, data=data)
        offset += LOCAL_HEADER_SIZE + name_len + extra_len + usize
