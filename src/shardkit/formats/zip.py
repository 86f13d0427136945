"""``--format zip`` (the default): the exact subset of the ZIP format that shardkit writes and reads.

A shard is ``metadata.parquet`` first (the rows typed as the card declares, so that datasets'
imagefolder reads every shard with the same types; first, so a front-to-back reader knows every
row before the first file), then one stored member per row at
``images/<key[:3]>/<key[3:6]>/<key><ext>``. Shards of layouts before 4 hold ``metadata.jsonl``
in its place; every reader here reads both.
datasets' imagefolder/audiofolder, the loading script of datasets 3.x and ``shardkit.stream``
read it. Sizes are exact. This module holds the container (below), the format's size cost and
member names, and its writer, reader and verifier parts (:class:`ZipFormat`, at the end).

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
script in the template) uses: one ``open()`` per shard, no seeking. It accepts only what
:class:`ZipWriter` writes: each header byte for byte as the writer makes it for that name, size
and CRC, members back to back, then a central directory listing exactly those members in order
at their offsets, the end record, and nothing after it. ``zipfile`` (and so ``datasets``) reads
a member through the central directory; this walk reads it through its local header: only a
shard where both lead to the same bytes is accepted.
"""

from __future__ import annotations

import json
import re
import struct
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from ..errors import listed, no_note, source_note
from ..rowrules import SOURCE_PATH_COLUMN
from ..streamio import CountingOutput, Output, crc32, decode_member_name, jsonl_lines, read_exact
from .base import (
    MAX_ZIP_BYTES,
    MAX_ZIP_MEMBERS,
    METADATA_MEMBER,
    METADATA_TABLE_MEMBER,
    HashingReader,
    ShardCheck,
    ShardFormat,
    ShardFormatError,
    ShardRecord,
    ShardRows,
    ShardSource,
    Walk,
)

if TYPE_CHECKING:  # (pyarrow is imported where a metadata table is read)
    from .parquet import TableRows

LOCAL_HEADER_SIG = 0x04034B50
CENTRAL_HEADER_SIG = 0x02014B50
END_RECORD_SIG = 0x06054B50
_LOCAL_SIG_BYTES = struct.pack("<I", LOCAL_HEADER_SIG)
_CENTRAL_SIG_BYTES = struct.pack("<I", CENTRAL_HEADER_SIG)

_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # 30 bytes, then name, then extra
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes, then name, extra, comment
_END_RECORD = struct.Struct("<IHHHHIIH")  # 22 bytes
# The fields of each record, named for messages saying where a shard differs from what shardkit writes.
_SHARED_FIELDS = ("version needed", "flags", "method", "time", "date", "CRC-32", "compressed size", "size")
_LOCAL_FIELDS = ("signature", *_SHARED_FIELDS, "name length", "extra field length")
_CENTRAL_FIELDS = (
    "signature",
    "made by",
    *_SHARED_FIELDS,
    "name length",
    "extra field length",
    "comment length",
    "disk number",
    "internal attributes",
    "external attributes",
    "local header offset",
)
_END_FIELDS = (
    "signature",
    "disk number",
    "directory disk",
    "entries on this disk",
    "entries",
    "directory size",
    "directory offset",
    "comment length",
)

LOCAL_HEADER_SIZE = _LOCAL_HEADER.size
CENTRAL_HEADER_SIZE = _CENTRAL_HEADER.size
END_RECORD_SIZE = _END_RECORD.size

CENTRAL_IN_MEMORY_BYTES = 1 << 20  # a writer's central directory beyond this waits in a temporary file

_VERSION = 20  # 2.0: the version that introduced stored members and folders
_FLAG_UTF8 = 0x0800  # names are UTF-8 (bit 11)
_DOS_TIME = 0  # 00:00:00
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the earliest DOS date: no clock in the bytes
_UNIX_MODE = 0o100644  # regular file, rw-r--r--
_MADE_BY = (3 << 8) | _VERSION  # 3 = Unix, so the mode in external_attr is honoured


class ZipFormatError(ShardFormatError):
    """A shard's bytes are not the ZIP subset shardkit writes, or are damaged."""


#: What no member name may hold: control characters (NUL...), a backslash or a colon (a Windows
#: path, drive or stream: ``C:/x.jpg``), a leading '/', or an empty, '.' or '..' part.
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f\\:]|^/|//|/\Z|(?:^|/)\.\.?(?:/|\Z)")


def encode_name(name: str) -> bytes:
    """Encode a member name; refuses names a reader must not trust."""
    if not name or _UNSAFE_NAME.search(name):
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


def _difference(layout: struct.Struct, fields: tuple[str, ...], found: bytes, expected: bytes) -> str:
    """The first field where a record differs from the one shardkit writes, as words."""
    for field, got, want in zip(fields, layout.unpack(found), layout.unpack(expected), strict=True):
        if got != want:
            return f"its {field} is {got}, where shardkit writes {want}"
    return "it differs from what shardkit writes"


def _member_at(name: str, offset: int, note: Callable[[str], str]) -> str:
    return f"member {name!r}{note(name)} at offset {offset}"


def iter_members(stream: BinaryIO, *, check_crc: bool = True, note: Callable[[str], str] = no_note) -> Iterator[Member]:
    """Walk a shard front to back from a forward-only stream, yielding each stored member.

    Refuses compressed members, data descriptors, extra fields, unsafe or repeated names, any
    header that is not byte for byte what :class:`ZipWriter` writes, and (with ``check_crc``)
    data whose CRC-32 does not match its header. After the last member, the central directory
    must describe exactly the members walked (same headers, same offsets, in order), the end
    record must follow, and nothing after it: else :class:`ZipFormatError` is raised there,
    after the members were yielded (a forward-only reader meets the directory last).

    ``note(name)`` follows a member's name in a message about it: the caller, who reads the
    rows, knows the member's source (:func:`.errors.source_note`); it is asked only on failure.
    """
    offset = 0
    directory = bytearray()  # the entries the members walked call for, to compare with the file's
    names: set[str] = set()
    name = ""
    while True:
        sig_bytes = _read_exact(stream, 4, f"the record at offset {offset} (no central directory yet)")
        if sig_bytes != _LOCAL_SIG_BYTES:
            break
        header = sig_bytes + _read_exact(stream, LOCAL_HEADER_SIZE - 4, f"the local header at offset {offset}")
        _, _, flags, method, _, _, crc, csize, usize, name_len, _ = _LOCAL_HEADER.unpack(header)
        raw_name = _read_exact(stream, name_len, f"the member name at offset {offset}")
        name = decode_member_name(raw_name, offset, _UNSAFE_NAME, ZipFormatError)
        if flags & 0x0008:
            raise ZipFormatError(f"{_member_at(name, offset, note)} uses a data descriptor")
        if method != 0 or csize != usize:
            raise ZipFormatError(f"{_member_at(name, offset, note)} is compressed (method {method})")
        expected = local_header(raw_name, usize, crc)[:LOCAL_HEADER_SIZE]
        if header != expected:
            difference = _difference(_LOCAL_HEADER, _LOCAL_FIELDS, header, expected)
            raise ZipFormatError(f"{_member_at(name, offset, note)}: {difference}")
        if name in names:
            raise ZipFormatError(f"{_member_at(name, offset, note)}: a second member of that name")
        if offset > MAX_ZIP_BYTES:
            raise ZipFormatError(
                f"{_member_at(name, offset, note)}: past 4 GiB, which needs ZIP64 (shardkit never writes it)"
            )
        names.add(name)
        data = _read_exact(stream, usize, f"member {name!r}")
        if check_crc and crc32(data) != crc:
            raise ZipFormatError(f"CRC mismatch in {_member_at(name, offset, note)}")
        directory += central_header(raw_name, usize, crc, offset)
        yield Member(name=name, offset=offset, size=usize, crc=crc, data=data)
        offset += LOCAL_HEADER_SIZE + name_len + usize
    (sig,) = struct.unpack("<I", sig_bytes)
    if sig not in (CENTRAL_HEADER_SIG, END_RECORD_SIG):
        after = f" after member {name!r}" if name else ""
        raise ZipFormatError(f"no local file header at offset {offset}{after} (found 0x{sig:08x})")
    _check_directory(stream, sig_bytes, bytes(directory), len(names), offset, note)


@dataclass(frozen=True)
class DirectoryEntry:
    """One member as the central directory lists it."""

    name: str
    raw_name: bytes
    size: int
    crc: int
    offset: int  # of its local header

    @property
    def end(self) -> int:
        """Where the member's data ends (the next member's header, or the directory)."""
        return self.offset + LOCAL_HEADER_SIZE + len(self.raw_name) + self.size


def read_directory(shard: ShardSource, size: int) -> list[DirectoryEntry]:
    """Every member of a ``size``-byte shard, from its central directory (two ranged reads: the
    end record, then the directory). Held to what :class:`ZipWriter` writes: the end record and
    every entry byte for byte, members back to back from offset 0 up to the directory."""
    if size < END_RECORD_SIZE:
        raise ZipFormatError(f"{size} bytes: too short for an end record")
    with shard.open_range(size - END_RECORD_SIZE, size) as f:
        tail = _read_exact(f, END_RECORD_SIZE, "the end record")
    _, _, _, _, count, cd_size, cd_offset, _ = _END_RECORD.unpack(tail)
    if cd_offset + cd_size != size - END_RECORD_SIZE or tail != end_record(count, cd_size, cd_offset):
        raise ZipFormatError(f"the end record at offset {size - END_RECORD_SIZE} is not what shardkit writes")
    with shard.open_range(cd_offset, cd_offset + cd_size) as f:
        directory = _read_exact(f, cd_size, "the central directory")
    entries: list[DirectoryEntry] = []
    names: set[str] = set()
    pos = expected_offset = 0
    for _ in range(count):
        fields = _CENTRAL_HEADER.unpack_from(directory, pos) if pos + CENTRAL_HEADER_SIZE <= cd_size else None
        if fields is None or fields[0] != CENTRAL_HEADER_SIG:
            raise ZipFormatError(f"no directory entry at offset {cd_offset + pos}")
        crc, usize, name_len, offset = fields[7], fields[9], fields[10], fields[16]
        raw_name = directory[pos + CENTRAL_HEADER_SIZE : pos + CENTRAL_HEADER_SIZE + name_len]
        name = decode_member_name(raw_name, cd_offset + pos, _UNSAFE_NAME, ZipFormatError)
        entry_bytes = central_header(raw_name, usize, crc, offset)
        if offset != expected_offset or directory[pos : pos + len(entry_bytes)] != entry_bytes:
            raise ZipFormatError(f"the directory entry of member {name!r} is not what shardkit writes")
        if name in names:
            raise ZipFormatError(f"the directory lists member {name!r} twice")
        names.add(name)
        entries.append(DirectoryEntry(name, raw_name, usize, crc, offset))
        pos += len(entry_bytes)
        expected_offset = entries[-1].end
    if pos != cd_size or expected_offset != cd_offset or not entries:
        raise ZipFormatError("the central directory does not describe the members back to back")
    return entries


def _read_member(stream: BinaryIO, entry: DirectoryEntry, note: Callable[[str], str] = no_note) -> bytes:
    """The data of the member ``entry`` lists, its local header next in ``stream``."""
    expected = local_header(entry.raw_name, entry.size, entry.crc)
    header = _read_exact(stream, len(expected), f"the local header at offset {entry.offset}")
    if header != expected:
        difference = _difference(_LOCAL_HEADER, _LOCAL_FIELDS, header[:LOCAL_HEADER_SIZE], expected[:LOCAL_HEADER_SIZE])
        raise ZipFormatError(f"{_member_at(entry.name, entry.offset, note)}: {difference}")
    data = _read_exact(stream, entry.size, f"member {entry.name!r}")
    if crc32(data) != entry.crc:
        raise ZipFormatError(f"CRC mismatch in {_member_at(entry.name, entry.offset, note)}")
    return data


def _read_up_to(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes: fewer only where the stream ends."""
    chunks = []
    while n > 0 and (chunk := stream.read(n)):
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _check_directory(
    stream: BinaryIO, sig_bytes: bytes, directory: bytes, count: int, cd_offset: int, note: Callable[[str], str]
) -> None:
    """The rest of the shard must be ``directory``, then its end record, then nothing."""
    expected = directory + end_record(count, len(directory), cd_offset)  # refuses what would need ZIP64
    found = sig_bytes + _read_up_to(stream, len(expected) - len(sig_bytes))
    if found != expected:
        raise ZipFormatError(_directory_difference(found, expected, count, cd_offset, note))
    if stream.read(1):
        raise ZipFormatError(f"data after the end record (from offset {cd_offset + len(expected)})")


def _directory_difference(found: bytes, expected: bytes, count: int, cd_offset: int, note: Callable[[str], str]) -> str:
    """Where the central directory and end record ``found`` first differ from those ``expected``."""
    at = 0
    for number in range(1, count + 1):
        name_len = _CENTRAL_HEADER.unpack_from(expected, at)[10]
        end = at + CENTRAL_HEADER_SIZE + name_len
        name = expected[at + CENTRAL_HEADER_SIZE : end].decode("utf-8")
        entry = found[at : at + CENTRAL_HEADER_SIZE]
        if entry[:4] != expected[at : at + 4]:
            if len(entry) < 4:
                return f"truncated: the file ends inside the central directory, before member {name!r}'s entry"
            return f"the central directory lists {number - 1} members, the file holds {count} (no entry for {name!r})"
        if len(entry) < CENTRAL_HEADER_SIZE:
            return f"truncated: the file ends inside the central directory entry of member {name!r}"
        wanted = expected[at : at + CENTRAL_HEADER_SIZE]
        if entry != wanted:
            difference = _difference(_CENTRAL_HEADER, _CENTRAL_FIELDS, entry, wanted)
            return f"the central directory entry of member {name!r}{note(name)} does not match the member: {difference}"
        if found[at + CENTRAL_HEADER_SIZE : end] != expected[at + CENTRAL_HEADER_SIZE : end]:
            return f"the central directory entry {number} names another member than {name!r}{note(name)}"
        at = end
    record, wanted = found[at : at + END_RECORD_SIZE], expected[at:]
    if record[:4] == _CENTRAL_SIG_BYTES:
        return f"the central directory lists more members than the {count} the file holds (a hidden member)"
    if len(record) < END_RECORD_SIZE:
        return f"truncated: the file ends inside the end record at offset {cd_offset + at}"
    return f"the end record at offset {cd_offset + at}: {_difference(_END_RECORD, _END_FIELDS, record, wanted)}"


# --- the format: member names, size cost, writer, reader, verifier --------------------------------


def member_name(key: str, ext: str) -> str:
    """Where a row's file lives inside its shard (the YFCC layout, without a leading 'data/')."""
    return f"images/{key[:3]}/{key[3:6]}/{key}{ext}"


#: Bytes of a member name beyond its key and extension (all ASCII): "images/abc/def/".
MEMBER_NAME_FIXED = len(member_name("00000000", "")) - len("00000000")


class ZipFormat(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        return member_name(key, ext)

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        # The row's line stands for its share of metadata.parquet: the packer encodes each
        # shard's table before writing and plans with its exact size (see pack).
        name_bytes = MEMBER_NAME_FIXED + key_length + ext_length
        return member_overhead_for_length(name_bytes) + file_bytes + line_bytes + 1

    def features_salt(self, features: list[dict[str, Any]]) -> bytes:
        from .parquet import shard_table_schema  # pyarrow: in the packer's process only

        return str(shard_table_schema(features)).encode()  # metadata.parquet's columns and types

    def write(self, out: Output, rows: ShardRows) -> int:
        """``metadata.parquet`` (encoded by the packer), then the members; the rows' lines go to
        ``metadata/<stem>.jsonl`` as they are."""
        zw = ZipWriter(out)
        zw.add(METADATA_TABLE_MEMBER, rows.metadata_table())
        for line in rows.published_lines():
            rows.record_line(line)
        with rows.files() as files:
            for row in files:
                zw.start_member(member_name(row.key, row.ext), row.size, row.crc)
                row.copy_to(zw.write_data)
        return zw.close()

    def read_rows(self, f: BinaryIO, record: ShardRecord) -> Iterator[dict[str, Any]]:
        rows: _ZipRows | None = None

        def note(name: str) -> str:
            return rows.note(name) if rows is not None else ""  # before the metadata member no row is known

        try:
            for member in iter_members(f, note=note):
                if rows is None:
                    rows = _metadata_rows(member.name, member.data, record.features)
                    continue
                row = rows.take(member.name)
                if row is None:
                    raise ZipFormatError(f"member {member.name!r} has no row in {rows.member}")
                row[record.file_column] = {"bytes": member.data, "path": member.name}
                yield row
            if rows is not None and (left := rows.left()):
                raise ZipFormatError(f"{len(left)} row(s) in {rows.member} have no member: {listed(left, 3)}")
        except ZipFormatError as exc:
            raise ZipFormatError(f"{record.where}: {exc}") from None

    def read_piece(
        self, shard: ShardSource, record: ShardRecord, start: int = 0, stop: int | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """A whole shard: :meth:`read_rows`, front to back. Part of one: only its bytes, found
        through the central directory (:func:`read_directory`: the end record, then the directory,
        two ranged reads at the tail), the metadata member at the front, then one ranged read of
        the piece's members, each header held to its directory entry and each CRC checked."""
        if (start == 0 and stop in (None, record.rows)) or record.bytes is None or record.rows is None:
            yield from super().read_piece(shard, record, start, stop)
            return
        stop = record.rows if stop is None else stop
        if start >= stop:
            return
        try:
            if stop > record.rows:
                raise ZipFormatError(f"no row {stop - 1}: the manifest records {record.rows} rows")
            entries = read_directory(shard, record.bytes)
            first = entries[0].name
            if len(entries) != record.rows + 1 or first not in _METADATA_MEMBERS:
                raise ZipFormatError(
                    f"its directory lists {len(entries)} members, first {first!r}; the manifest"
                    f" records {record.rows} rows after {METADATA_TABLE_MEMBER}"
                )
            with shard.open_range(0, entries[0].end) as f:
                data = _read_member(f, entries[0])
            rows = _metadata_rows(first, data, record.features, first=start)
            if len(rows) != record.rows:
                raise ZipFormatError(f"{first} has {len(rows)} rows; the directory lists {record.rows} files")
            wanted = entries[start + 1 : stop + 1]
            with shard.open_range(wanted[0].offset, wanted[-1].end) as f:
                for entry in wanted:
                    data = _read_member(f, entry, rows.note)
                    row = rows.take(entry.name)
                    if row is None:
                        raise ZipFormatError(f"member {entry.name!r} has no row in {first}")
                    row[record.file_column] = {"bytes": data, "path": entry.name}
                    yield row
        except ZipFormatError as exc:
            raise ZipFormatError(f"{record.where}: {exc}") from None

    def verify_shard(self, check: ShardCheck) -> Walk:
        """One front-to-back read: the structure (iter_members also checks the central directory
        against the members: what zipfile and datasets read through it is then what was walked),
        every CRC, and the metadata member's rows against the members one to one. A
        ``metadata.parquet`` is read as every reader reads it and compared, row by row and typed,
        with ``metadata/<stem>.jsonl``; a ``metadata.jsonl`` (before layout 4) is compared byte
        for byte by the caller."""
        rows: dict[str, str] | None = None
        sources: dict[str, str] = {}  # file_name -> source_path, once the metadata member is read
        keys: list[str] = []
        members = 0
        inner_metadata: bytes | None = b""
        metadata_name = METADATA_TABLE_MEMBER  # the first member's, once met

        def note(name: str) -> str:
            return source_note(sources.get(name))

        with check.open(check.shard_file) as raw:
            reader = HashingReader(raw)
            try:
                for member in iter_members(reader, check_crc=False, note=note):  # type: ignore[arg-type]
                    members += 1
                    if crc32(member.data) != member.crc:
                        mismatch = "CRC mismatch: the bytes are not what was written"
                        check.problem(mismatch, member.name, sources.get(member.name))
                    if rows is None:
                        metadata_name = member.name
                        if member.name == METADATA_MEMBER:
                            inner_metadata = member.data
                            rows, sources = check.check_rows(member.data, METADATA_MEMBER)
                        elif member.name == METADATA_TABLE_MEMBER:
                            inner_metadata = None  # compared here, typed
                            rows, sources = _check_table(check, member.data)
                        else:
                            check.problem(f"first member is {member.name!r}, not {METADATA_TABLE_MEMBER}")
                            rows = {}
                            continue
                        keys = sorted(rows.values())
                        continue
                    if rows.pop(member.name, None) is None:
                        check.problem(f"member has no row in {metadata_name}", member.name)
                    # a member without a row has no source: sources holds rows' names only
                    check.file(member.name, member.data, sources.get(member.name))
            except ZipFormatError as exc:
                reader.sound = False
                check.problem(f"not a sound shard: {exc}")
            reader.drain()  # whatever the walk left unread: the sha256 covers the whole file
        if reader.sound:  # else the walk stopped short: the rows left say nothing more
            for name in sorted(rows or {}):
                check.problem(f"row in {metadata_name} has no member", name, sources.get(name))
        return Walk(reader.sha256.hexdigest(), max(members - 1, 0), keys, inner_metadata)


_METADATA_MEMBERS = (METADATA_TABLE_MEMBER, METADATA_MEMBER)


def _check_table(check: ShardCheck, data: bytes) -> tuple[dict[str, str], dict[str, str]]:
    """A shard's ``metadata.parquet``: its rows checked as every shard's rows are (as JSON lines,
    ``check_rows``), then compared, typed, with ``metadata/<stem>.jsonl``. Returns what
    ``check_rows`` does."""
    from .parquet import ParquetShardError, read_metadata_table, table_difference

    try:
        table = read_metadata_table(data, check.features)
    except ParquetShardError as exc:
        check.problem(f"{METADATA_TABLE_MEMBER}: {exc}")
        return {}, {}
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in table)
    found = check.check_rows(text, METADATA_TABLE_MEMBER)
    try:
        with check.open(check.metadata_file) as f:
            outer = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return found  # the shared check says it is missing
    # Strictly typed: these lines are what the loading script reads, held to the same types.
    if (difference := table_difference(table, jsonl_lines(outer), strict=True)) is not None:
        check.problem(
            f"differs from the {METADATA_TABLE_MEMBER} inside {check.shard_file}: {difference}",
            file=check.metadata_file,
        )
    return found


def _metadata_rows(name: str, data: bytes, features: list[dict[str, Any]] | None, first: int = 0) -> _ZipRows:
    """The rows of a shard's first member, ``name``: its ``metadata.parquet`` (layout 4) or
    ``metadata.jsonl`` (before)."""
    if name == METADATA_TABLE_MEMBER:
        from .parquet import ParquetShardError, metadata_table_rows

        try:
            return _ZipRows(name, metadata_table_rows(data, features), first=first)
        except ParquetShardError as exc:
            raise ZipFormatError(f"{name}: {exc}") from None
    if name == METADATA_MEMBER:
        try:
            return _ZipRows(name, jsonl_lines(data.decode("utf-8")), first=first)
        except UnicodeDecodeError:
            raise ZipFormatError(f"{METADATA_MEMBER} is not UTF-8 text") from None
    raise ZipFormatError(f"the first member is {name!r}, not {METADATA_TABLE_MEMBER}")


class _ZipRows:
    """The rows of a ZIP shard's metadata member, handed out by member name: the lines of a
    ``metadata.jsonl``, or the rows of a ``metadata.parquet``.

    shardkit writes the rows in the order of the members, so each row is parsed only when its
    member comes (a reader that stops early, like the card's preview, parses a few of a
    shard's rows, not all); rows in another order are matched by name.
    """

    def __init__(self, member: str, items: list[str] | TableRows, first: int = 0) -> None:
        self.member = member
        self._items = items
        self._first = first  # the first member's row, when the rows come in member order (a cut piece: > 0)
        self._next = first  # the next row, while the rows come in member order
        self._by_name: dict[str, dict[str, Any]] | None = None  # once they do not
        self._sources: dict[str, Any] = {}  # the source_path of each row taken, for messages after it

    def __len__(self) -> int:
        return len(self._items)

    def _row(self, index: int) -> dict[str, Any]:
        """Row ``index`` (0-based): a JSON object (or table row) with a ``file_name``, a copy."""
        try:
            item = self._items[index]
        except ShardFormatError as exc:  # a row group of the table, read now, that fails its checks
            raise ZipFormatError(f"{self.member}: {exc}") from None
        try:
            row = dict(item) if isinstance(item, dict) else json.loads(item)
        except (ValueError, RecursionError):  # a hostile row nested too deep for the parser
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
            what = "line" if isinstance(item, str) else "row"
            raise ZipFormatError(f"{self.member} {what} {index + 1} is not a JSON object with a file_name")
        return row

    def take(self, name: str) -> dict[str, Any] | None:
        if self._by_name is None and self._next < len(self._items):
            row = self._row(self._next)
            if row["file_name"] == name:
                self._next += 1
                del row["file_name"]
                self._remember(name, row)
                return row
            self._by_name = {}
            for number in [*range(self._first), *range(self._next, len(self._items))]:
                other = self._row(number)
                other_name = other.pop("file_name")
                if other_name in self._by_name:
                    raise ZipFormatError(f"{self.member} has two rows for member {other_name!r}")
                self._by_name[other_name] = other
        taken = self._by_name.pop(name, None) if self._by_name is not None else None
        if taken is not None:
            self._remember(name, taken)
        return taken

    def _remember(self, name: str, row: dict[str, Any]) -> None:
        if SOURCE_PATH_COLUMN in row:
            self._sources[name] = row[SOURCE_PATH_COLUMN]

    def note(self, name: str) -> str:
        """What follows member ``name`` in a message: its row's source, if the row is known
        (taken, or the next in order, or matched by name) and has one; never raises."""
        if name in self._sources:
            return source_note(self._sources[name])
        if self._by_name is not None:
            return source_note((self._by_name.get(name) or {}).get(SOURCE_PATH_COLUMN))
        if self._next < len(self._items):
            try:
                row = self._row(self._next)
            except ZipFormatError:
                return ""
            if row.get("file_name") == name:
                return source_note(row.get(SOURCE_PATH_COLUMN))
        return ""

    def left(self) -> list[str]:
        """The rows no member has taken, as a message names them: member name, then source."""
        if self._by_name is not None:
            rows = list(self._by_name.items())
        else:
            pending = (self._row(i) for i in range(self._next, len(self._items)))
            rows = [(row.pop("file_name"), row) for row in pending]
        return [name + source_note(row.get(SOURCE_PATH_COLUMN)) for name, row in rows]


ZIP = ZipFormat(
    "zip",
    exact=True,
    fixed_bytes=member_overhead_for_length(len(METADATA_TABLE_MEMBER)) + END_RECORD_SIZE,
    max_rows=MAX_ZIP_MEMBERS - 1,  # one member is metadata.parquet
    max_bytes=MAX_ZIP_BYTES,
    member_template="images/{key[0:3]}/{key[3:6]}/{key}{ext}",
    metadata_member=METADATA_TABLE_MEMBER,
    metadata_table=True,
    loading_script=True,
)
