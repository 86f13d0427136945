"""``--format tar``: the subset of the tar format that shardkit writes and reads.

datasets' webdataset builder and the ``webdataset`` library read these shards. Sizes are
exact. This module holds the container (below), the format's size cost and member names, and
its writer, reader and verifier parts (:class:`TarFormat`, at the end).

A shard is a ustar archive in the webdataset layout: for each row, ``<key>.json`` then
``<key><ext>``. Headers carry no clock, owner or machine (mtime 0, uid/gid 0, mode 0644), so
the same rows give the same bytes. It ends with the two zero blocks POSIX asks for and no
padding to a record size.

tar has no checksum over a member's data, so each member is preceded by a PAX extended header
(POSIX.1-2001, typeflag ``x``) holding one record, ``comment=shardkit-crc32:<8 hex digits>``:
the CRC-32 of the member's bytes. The standard ``comment`` keyword, not a vendor one: every
tar reader that knows PAX (Python's ``tarfile``, hence datasets' webdataset builder and the
``webdataset`` library; GNU tar; libarchive) ignores it silently and reads the same members
as before, where GNU tar warns once per member about a keyword it does not know. A member
costs ``1024 + 512 + padded(size)`` bytes (:func:`member_bytes`); a shard, ``1024`` more.

Shards packed before these records existed have none: a reader tells by the first header. If it
is a PAX header, every member must have its CRC record and its bytes must match it; if it is a
plain member, no member may have one (such shards have no data check; ``verify`` still compares
the whole file's sha256 with the manifest's).

A shard's manifest record holds an index (shards packed before shardkit recorded it have none,
and are read from their front): ``row_offsets[i]``, where row ``i * row_offsets_every``
begins (its ``.json`` member's CRC record), for every ceil(rows / 64)-th row. A cut piece of the
shard (``shardkit.stream`` with ranks) is one ranged read from the index point at or before its
first row; every member is checked as in a whole read, so an offset that is not a row's first
header is an error, and ``verify`` compares every recorded offset with the walk's.

:func:`iter_tar_members` walks an archive front to back from a forward-only stream, as the
webdataset builder of datasets does, and accepts only what :class:`TarWriter` writes: every
header byte for byte as the writer makes it for that name and size (so valid octal fields, the
right checksum, regular files, plain names), zero padding, and nothing after the end blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import no_note, source_note
from ..rowrules import SOURCE_PATH_COLUMN
from ..streamio import CountingOutput, Output, crc32, decode_member_name, read_exact
from .base import (
    INDEX_POINTS,
    MAX_ZIP_BYTES,
    MAX_ZIP_MEMBERS,
    HashingReader,
    ShardCheck,
    ShardFormat,
    ShardFormatError,
    ShardRecord,
    ShardRows,
    ShardSource,
    Walk,
    rows_between,
    source_of_row,
)

BLOCK = 512
END_BYTES = 2 * BLOCK
MAX_NAME_BYTES = 100  # the ustar name field; shardkit never uses the prefix field for names
MAX_MEMBER_BYTES = 8**11 - 1  # eleven octal digits
#: The record's keyword and the start of its value: the rest is the CRC-32 in 8 hex digits.
CRC_RECORD_PREFIX = "comment=shardkit-crc32:"
#: What each member adds beyond its padded data: its PAX header and record block, its header.
MEMBER_OVERHEAD = 3 * BLOCK
_ZEROS = bytes(BLOCK)
_PAX_NAME = "././@PaxHeader"  # what Python's tarfile names a PAX header (no member is called that)
_SIZE_FIELD = re.compile(rb"[0-7]{11}\0")
#: What no member name may hold: a '/' (shardkit's members are plain names), control characters
#: (NUL...), a backslash or a colon (a Windows path or drive); nor may it be '.' or '..'.
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\:]|^\.\.?\Z")
#: The ustar header's fields, named for messages saying where a header differs from shardkit's.
_FIELDS = (
    ("name", 0, 100),
    ("mode", 100, 108),
    ("uid", 108, 116),
    ("gid", 116, 124),
    ("size", 124, 136),
    ("mtime", 136, 148),
    ("checksum", 148, 156),
    ("type", 156, 157),
    ("link name", 157, 257),
    ("magic", 257, 263),
    ("version", 263, 265),
    ("user name", 265, 297),
    ("group name", 297, 329),
    ("device major", 329, 337),
    ("device minor", 337, 345),
    ("prefix", 345, 500),
    ("padding", 500, 512),
)


class TarFormatError(ShardFormatError):
    """A shard's bytes are not the tar subset shardkit writes, or are damaged."""


def padded(size: int) -> int:
    """``size`` rounded up to a whole number of 512-byte blocks."""
    return -(-size // BLOCK) * BLOCK


def member_bytes(size: int) -> int:
    """Bytes a member of ``size`` bytes takes in a shard: CRC record, header, padded data."""
    return MEMBER_OVERHEAD + padded(size)


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode("ascii") + b"\0"


def _checksum(header: bytes | bytearray) -> int:
    """The header's checksum: the sum of its bytes with the checksum field read as spaces."""
    return sum(header[:148]) + 8 * 32 + sum(header[156:])


def _header(raw_name: bytes, size: int, typeflag: bytes) -> bytes:
    header = bytearray(BLOCK)
    header[0 : len(raw_name)] = raw_name
    header[100:108] = _octal(0o644, 8)
    header[108:116] = _octal(0, 8)  # uid
    header[116:124] = _octal(0, 8)  # gid
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(0, 12)  # mtime: no clock in the bytes
    header[156:157] = typeflag
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[148:156] = _octal(_checksum(header), 7) + b" "
    return bytes(header)


def member_header(name: str, size: int) -> bytes:
    raw = name.encode("utf-8")
    if not raw or len(raw) > MAX_NAME_BYTES or _UNSAFE_NAME.search(name):
        raise TarFormatError(f"member name {name!r} is not a plain name of 1 to {MAX_NAME_BYTES} bytes")
    if not 0 <= size <= MAX_MEMBER_BYTES:
        raise TarFormatError(f"member {name!r}: {size} bytes do not fit a ustar header")
    return _header(raw, size, b"0")  # "0": a regular file


# A PAX record is "<length> <keyword>=<value>\n", the length counting its own two digits.
_CRC_RECORD_BYTES = len(f"00 {CRC_RECORD_PREFIX}00000000\n")
_CRC_RECORD = re.compile(re.escape(f"{_CRC_RECORD_BYTES} {CRC_RECORD_PREFIX}".encode()) + rb"([0-9a-f]{8})\n")
_PAX_HEADER = _header(_PAX_NAME.encode("ascii"), _CRC_RECORD_BYTES, b"x")


def crc_record(crc: int) -> bytes:
    """The PAX extended header and its record block that give the next member's CRC-32."""
    record = f"{_CRC_RECORD_BYTES} {CRC_RECORD_PREFIX}{crc:08x}\n".encode("ascii")
    return _PAX_HEADER + record + bytes(BLOCK - len(record))


@dataclass
class TarWriter(CountingOutput):
    """Writes regular-file members in order, each after its CRC record."""

    _pending: int = 0
    _padding: int = 0

    @property
    def offset(self) -> int:
        """Where the next member's blocks begin (its CRC record)."""
        return self._offset

    def start_member(self, name: str, size: int, crc: int) -> None:
        """Start a member of ``size`` bytes whose CRC-32 is ``crc``; its data follows in :meth:`write_data`."""
        if self._pending:
            raise TarFormatError(f"previous member still expects {self._pending} bytes")
        header = member_header(name, size)
        self._emit(crc_record(crc))
        self._emit(header)
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
        self.start_member(name, len(data), crc32(data))
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
    crc: int | None = None  # what its CRC record gives; None in shards from before CRC records
    start: int = 0  # of its first block: its CRC record's header (its own header without one)


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    return read_exact(stream, n, what, TarFormatError)


def _difference(found: bytes, expected: bytes) -> str:
    """The first field where a header differs from the one shardkit writes, as words."""
    for field, start, end in _FIELDS:
        if found[start:end] != expected[start:end]:
            got, want = found[start:end].rstrip(b"\0"), expected[start:end].rstrip(b"\0")
            return f"its {field} field is {got!r}, where shardkit writes {want!r}"
    return "it differs from what shardkit writes"


def _shown_name(header: bytes) -> str:
    """The name a header gives, for messages about a header not to be trusted."""
    return header[0:MAX_NAME_BYTES].split(b"\0", 1)[0].decode("utf-8", "replace")


def _checked_header(header: bytes, offset: int) -> None:
    """Refuse a header whose checksum does not match its bytes (damage, or not tar at all)."""
    try:
        recorded = int(header[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        recorded = -1
    if recorded != _checksum(header):
        raise TarFormatError(f"header checksum mismatch at offset {offset} (a header for {_shown_name(header)!r})")


def _member_of(header: bytes, offset: int, note: Callable[[str], str]) -> tuple[str, int]:
    """The name and size of the regular-file member ``header`` announces, all fields checked."""
    raw = header[0:MAX_NAME_BYTES].split(b"\0", 1)[0]
    shown = _shown_name(header)
    if header[156:157] != b"0":
        raise TarFormatError(f"member {shown!r} at offset {offset} is not a regular file (type {header[156:157]!r})")
    if not _SIZE_FIELD.fullmatch(header[124:136]):
        field = header[124:136]
        raise TarFormatError(f"member {shown!r} at offset {offset}: its size field {field!r} is not 11 octal digits")
    if header[len(raw) : MAX_NAME_BYTES].strip(b"\0"):
        field = header[0:MAX_NAME_BYTES].rstrip(b"\0")
        raise TarFormatError(f"member name {field!r} at offset {offset} holds a NUL")
    name = decode_member_name(raw, offset, _UNSAFE_NAME, TarFormatError)
    size = int(header[124:135], 8)
    expected = member_header(name, size)
    if header != expected:
        raise TarFormatError(f"member {name!r}{note(name)} at offset {offset}: {_difference(header, expected)}")
    return name, size


def _crc_of(stream: BinaryIO, header: bytes, offset: int) -> int:
    """The CRC-32 a PAX header at ``offset`` gives, its record block read from ``stream``."""
    if header != _PAX_HEADER:
        raise TarFormatError(f"the PAX header at offset {offset}: {_difference(header, _PAX_HEADER)}")
    block = _read_exact(stream, BLOCK, f"the PAX record at offset {offset + BLOCK}")
    match = _CRC_RECORD.match(block)
    if match is None or block[match.end() :].strip(b"\0"):
        raise TarFormatError(f"the PAX record at offset {offset + BLOCK} is not one shardkit CRC-32 record")
    return int(match.group(1), 16)


def iter_tar_members(
    stream: BinaryIO, *, check_crc: bool = True, note: Callable[[str], str] = no_note, base: int = 0
) -> Iterator[TarMember]:
    """Walk a shard front to back, yielding each regular-file member; checks what follows the end blocks.
    ``stream`` begins at byte ``base`` of the shard (a member's first block: a ranged read from
    an index point), which every offset and message counts from.

    Refuses anything :class:`TarWriter` would not write (see the module doc): a bad header
    checksum, any member type but a regular file, unsafe or repeated names, a missing or extra
    CRC record and, with ``check_crc``, data whose CRC-32 differs from its record.

    ``note(name)`` follows a member's (checked) name in a message about it: the caller, who read
    the row before it, knows its source (:func:`.errors.source_note`); it is asked only on failure.
    """
    offset = base
    with_crc: bool | None = None  # the first header tells: a shard from before CRC records has none
    names: set[str] = set()
    while True:
        header = _read_exact(stream, BLOCK, f"the header at offset {offset}")
        if header == _ZEROS:
            if _read_exact(stream, BLOCK, "the end-of-archive blocks") != _ZEROS:
                raise TarFormatError(f"the end-of-archive block at offset {offset + BLOCK} is not zeros")
            if stream.read(1):
                raise TarFormatError(f"data after the end-of-archive blocks (from offset {offset + END_BYTES})")
            return
        _checked_header(header, offset)
        start, crc = offset, None
        if header[156:157] == b"x":
            if with_crc is False:
                raise TarFormatError(f"a CRC record at offset {offset}, in a shard whose first member has none")
            crc = _crc_of(stream, header, offset)
            offset += 2 * BLOCK
            header = _read_exact(stream, BLOCK, f"the header at offset {offset}")
            if header == _ZEROS:
                raise TarFormatError(f"the CRC record at offset {start} is followed by no member")
            _checked_header(header, offset)
        elif with_crc:
            raise TarFormatError(f"member {_shown_name(header)!r} at offset {offset} has no CRC record before it")
        with_crc = crc is not None
        name, size = _member_of(header, offset, note)
        if name in names:
            raise TarFormatError(f"member {name!r}{note(name)} at offset {offset}: a second member of that name")
        names.add(name)
        data = _read_exact(stream, size, f"member {name!r}")
        if _read_exact(stream, padded(size) - size, f"the padding of {name!r}").strip(b"\0"):
            raise TarFormatError(f"member {name!r}{note(name)} at offset {offset}: its padding holds data")
        if check_crc and crc is not None and crc32(data) != crc:
            raise TarFormatError(f"CRC mismatch in member {name!r}{note(name)} at offset {offset}")
        yield TarMember(name=name, offset=offset, size=size, data=data, crc=crc, start=start)
        offset += BLOCK + padded(size)


# --- the format: member names, size cost, writer, reader, verifier --------------------------------


class TarFormat(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        # Lower case: webdataset readers name the column after the extension, so "x.JPG" and
        # "y.jpg" would otherwise land in two columns.
        return f"{key}{ext.lower()}"

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        return member_bytes(line_bytes) + member_bytes(file_bytes)  # <key>.json, then the file

    def key_problem(self, key: str, ext: str) -> str | None:
        if ext.lower() == ".json":
            return "a .json file cannot go into a tar shard: <key>.json holds the row's metadata there"
        longest = len(key) + max(len(ext), len(".json"))
        if longest > MAX_NAME_BYTES:
            return (
                f"key {key} is {len(key)} digits: with --format tar a member name must fit in"
                f" {MAX_NAME_BYTES} bytes, so keys can be at most {MAX_NAME_BYTES - max(len(ext), 5)} digits"
            )
        return None

    @property
    def metadata_inside(self) -> str:
        return "the .json members of"

    def write(self, out: Output, rows: ShardRows) -> int:
        """``<key>.json`` (the row's metadata line) then ``<key><ext>``, per row."""
        tw = TarWriter(out)
        starts = []  # where each row begins: its .json member's CRC record
        with rows.files() as files:
            for row in files:
                starts.append(tw.offset)
                line = row.metadata_line.encode("utf-8")
                tw.add(f"{row.key}.json", line)
                rows.record_line(line + b"\n")
                tw.start_member(self.member_name(row.key, row.ext), row.size, row.crc)
                row.copy_to(tw.write_data)
        every = max(-(-len(starts) // INDEX_POINTS), 1)
        rows.record_row_offsets(every, starts[::every])
        return tw.close()

    def read_rows(self, f: BinaryIO, record: ShardRecord) -> Iterator[dict[str, Any]]:
        return self._rows(f, record)

    def read_piece(
        self, shard: ShardSource, record: ShardRecord, start: int = 0, stop: int | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """A whole shard, or one without an index (packed before shardkit recorded one): read from
        its front (the default). A cut piece of an indexed shard: one ranged read from the index
        point at or before its first row (:attr:`.ShardRecord.row_offsets`) to the indexed row at
        or after its last (to the shard's end when there is none), each member checked as in a
        whole read; the rows before ``start`` are passed over. A wrong offset is an error naming
        the shard: what is there is not a member's first header (``verify`` compares every
        recorded offset with the members' own)."""
        to_end = stop is None or stop == record.rows
        if not record.row_offsets or record.bytes is None or (start == 0 and to_end):
            yield from super().read_piece(shard, record, start, stop)
            return
        if stop is not None and start >= stop:
            return
        first, begin = record.index_point(start)
        indexed_end = None if to_end or stop is None else record.index_end(stop)
        end = record.bytes if indexed_end is None else indexed_end
        f = shard.open_range(begin, end)
        try:
            yield from rows_between(self._rows(f, record, begin), record, start, stop, first=first)
        finally:
            f.close()

    def _rows(self, f: BinaryIO, record: ShardRecord, base: int = 0) -> Iterator[dict[str, Any]]:
        """The rows of ``f``, which begins at byte ``base`` of the shard, at a row's first block."""
        row: dict[str, Any] | None = None  # the row its .json member gave, until its file comes

        def note(name: str) -> str:
            return source_note(row.get(SOURCE_PATH_COLUMN)) if row is not None and row.get("file_name") == name else ""

        try:
            for member in iter_tar_members(f, note=note, base=base):
                if row is None:
                    if not member.name.endswith(".json"):
                        raise TarFormatError(f"member {member.name!r} has no .json before it")
                    try:
                        row = json.loads(member.data.decode("utf-8"))  # (bytes: json would take UTF-16 too)
                    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
                        row = None
                    if not isinstance(row, dict):
                        raise TarFormatError(f"member {member.name!r} is not a JSON object") from None
                    continue
                name = row.pop("file_name", None)
                if name != member.name:
                    expected = f"{name!r}{source_note(row.get(SOURCE_PATH_COLUMN))}"
                    raise TarFormatError(f"member {member.name!r} follows the row for {expected}")
                row[record.file_column] = {"bytes": member.data, "path": member.name}
                yield row
                row = None
            if row is not None:
                expected = f"{row.get('file_name')!r}{source_note(row.get(SOURCE_PATH_COLUMN))}"
                raise TarFormatError(f"the last row's file {expected} is missing")
        except TarFormatError as exc:
            raise TarFormatError(f"{record.where}: {exc}") from None

    def verify_shard(self, check: ShardCheck) -> Walk:
        """``<key>.json`` then ``<key><ext>`` per row, the json naming the file that follows it."""
        lines: list[bytes] = []
        starts: list[int] = []  # where each row begins (its .json member's first block)
        files = 0
        expected: str | None = None  # the file_name the last .json announced
        source: str | None = None  # and its source_path

        def source_of(name: str) -> str | None:
            """The source of member ``name``'s row: known only for the file its .json announced."""
            return source if name == expected else None

        def note(name: str) -> str:
            return source_note(source_of(name))

        with check.open(check.shard_file) as raw:
            reader = HashingReader(raw)
            try:
                for member in iter_tar_members(reader, check_crc=False, note=note):  # type: ignore[arg-type]
                    if member.crc is not None and crc32(member.data) != member.crc:
                        mismatch = "CRC mismatch: the bytes are not what was written"
                        check.problem(mismatch, member.name, source_of(member.name))
                    if expected is None:
                        if not member.name.endswith(".json"):
                            check.problem("file member without its .json before it", member.name)
                            files += 1
                            continue
                        lines.append(member.data)
                        starts.append(member.start)
                        try:
                            row = json.loads(member.data.decode("utf-8"))  # (bytes: json would take UTF-16 too)
                            expected, source = str(row["file_name"]), source_of_row(row, SOURCE_PATH_COLUMN)
                        except (ValueError, KeyError, TypeError, RecursionError):
                            check.problem("not a JSON object with a file_name", member.name)
                            expected, source = (
                                "",
                                None,
                            )  # the row's problem is reported: not again for the file after it
                        continue
                    files += 1
                    member_source = source_of(member.name)
                    if member.name != expected and expected:
                        check.problem(f"follows the row for {expected!r}{source_note(source)}", member.name)
                    expected = None
                    check.file(member.name, member.data, member_source)
            except TarFormatError as exc:
                reader.sound = False
                check.problem(f"not a sound shard: {exc}")
            reader.drain()  # whatever the walk left unread: the sha256 covers the whole file
        if expected is not None and reader.sound:
            check.problem(f"the last row's file {expected!r}{source_note(source)} is missing")
        keys = sorted(check.check_rows(b"\n".join(lines), "row")[0].values())
        if not reader.sound:  # the rows read are only some: their keys and lines say nothing more
            return Walk(reader.sha256.hexdigest(), files, [], None)
        metadata = b"".join(line + b"\n" for line in lines)
        return Walk(reader.sha256.hexdigest(), files, keys, metadata, row_starts=starts)


TAR = TarFormat(
    "tar",
    exact=True,
    fixed_bytes=END_BYTES,
    max_rows=MAX_ZIP_MEMBERS - 1,  # the same row cap and largest shard as ZIP's
    max_bytes=MAX_ZIP_BYTES,
    member_template="{key}.json, then {key}{ext.lower()}",
    row_index=True,
)
