"""Parquet shards that lie, bombs, and damaged pages (issue 20): refused with one line, in bounded memory.

A small dataset is packed with ``--format parquet``; each test replaces one shard with a crafted
one (a real Parquet file, its page headers, zstd frames, CRCs and footer written here byte by
byte), fixes the manifest's size, sha256 and row count so that only the crafted content can be
the reason for a refusal, and runs ``shardkit verify --deep`` (a subprocess, as a user runs it)
and ``shardkit.stream`` on it. Neither may hang, print a traceback, or pass on a changed byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardkit
from shardkit.errors import ShardkitError
from shardkit.formats.parquet import arrow_schema
from tests.support.cli import run_cli
from tests.support.corpus import Corpus, adding_up

SCRIPTS = Path(sys.executable).parent
HUGE = 1_500_000_000  # bytes a bomb decompresses to: what a 52 KB shard of the issue held
MARK = "M" * 16  # a value whose bytes the crafting functions find and replace


# --- Thrift's compact protocol, as Parquet's page headers and footer use it --------------------
# A struct is a list of [field id, type, value]; lists are (element type, items).


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _read(buf: bytes, pos: int, kind: int) -> tuple[Any, int]:
    if kind in (1, 2):
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        n, pos = _uvarint(buf, pos)
        return (n >> 1) ^ -(n & 1), pos
    if kind == 7:
        return buf[pos : pos + 8], pos + 8
    if kind == 8:
        n, pos = _uvarint(buf, pos)
        return buf[pos : pos + n], pos + n
    if kind == 9:
        header = buf[pos]
        pos += 1
        size, element = header >> 4, header & 15
        if size == 15:
            size, pos = _uvarint(buf, pos)
        items = []
        for _ in range(size):
            if element in (1, 2):
                items.append(buf[pos] == 1)
                pos += 1
            else:
                item, pos = _read(buf, pos, element)
                items.append(item)
        return (element, items), pos
    if kind == 12:
        return read_struct(buf, pos)
    raise AssertionError(f"type {kind} is not in Parquet's metadata")


def read_struct(buf: bytes, pos: int) -> tuple[list[list[Any]], int]:
    fields: list[list[Any]] = []
    last = 0
    while True:
        header = buf[pos]
        pos += 1
        if header == 0:
            return fields, pos
        kind, delta = header & 15, header >> 4
        if delta:
            last += delta
        else:
            n, pos = _uvarint(buf, pos)
            last = (n >> 1) ^ -(n & 1)
        value, pos = _read(buf, pos, kind)
        fields.append([last, 1 if kind in (1, 2) else kind, value])


def _w_uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _write(kind: int, value: Any) -> bytes:
    if kind == 3:
        return bytes([value])
    if kind in (4, 5, 6):
        return _w_uvarint((value << 1) ^ (value >> 63))
    if kind == 7:
        return bytes(value)
    if kind == 8:
        return _w_uvarint(len(value)) + bytes(value)
    if kind == 9 and isinstance(value, bytes):  # a list encoded already
        return value
    if kind == 9:
        element, items = value
        out = bytearray([len(items) << 4 | element] if len(items) < 15 else [0xF0 | element])
        if len(items) >= 15:
            out += _w_uvarint(len(items))
        for item in items:
            out += bytes([1 if item else 2]) if element in (1, 2) else _write(element, item)
        return bytes(out)
    if kind == 12:
        return write_struct(value)
    raise AssertionError(kind)


def write_struct(fields: list[list[Any]]) -> bytes:
    out = bytearray()
    last = 0
    for fid, kind, value in sorted(fields, key=lambda f: f[0]):
        wire = (1 if value else 2) if kind == 1 else kind
        out.append((fid - last) << 4 | wire)  # Parquet's field ids are small and ascending
        if kind != 1:
            out += _write(kind, value)
        last = fid
    return bytes(out + b"\0")


def field(fields: list[list[Any]], fid: int) -> Any:
    return next((f[2] for f in fields if f[0] == fid), None)


def set_field(fields: list[list[Any]], fid: int, kind: int, value: Any) -> None:
    for f in fields:
        if f[0] == fid:
            f[2] = value
            return
    fields.append([fid, kind, value])


def without(fields: list[list[Any]], fid: int) -> list[list[Any]]:
    return [f for f in fields if f[0] != fid]


# --- zstd frames and whole Parquet files --------------------------------------------------------


def zstd_frame(prefix: bytes, zeros: int, suffix: bytes) -> bytes:
    """A zstd frame of ``prefix``, ``zeros`` zero bytes and ``suffix``: the zeros are RLE blocks of
    4 bytes per 128 KiB, so 1.5 GB takes 47 KB (what makes a Parquet zstd bomb small)."""
    block = 1 << 17
    out = bytearray(b"\x28\xb5\x2f\xfd\xe0") + struct.pack("<Q", len(prefix) + zeros + len(suffix))
    parts: list[tuple[int, bytes, int]] = []  # (type, content, size)
    parts += [(0, prefix[i : i + block], min(block, len(prefix) - i)) for i in range(0, len(prefix), block)]
    parts += [(1, b"\0", min(block, zeros - i)) for i in range(0, zeros, block)]
    parts += [(0, suffix[i : i + block], min(block, len(suffix) - i)) for i in range(0, len(suffix), block)]
    for n, (kind, content, size) in enumerate(parts):
        out += ((size << 3) | (kind << 1) | (n == len(parts) - 1)).to_bytes(3, "little") + content
    return bytes(out)


PageEdit = Callable[[str, list[list[Any]], bytes], tuple[list[list[Any]], bytes]]


def rebuild(
    data: bytes, edit: PageEdit | None = None, footer: Callable[[list[list[Any]]], None] | None = None
) -> bytes:
    """The Parquet file ``data`` rewritten page by page: ``edit(column path, header, page)`` may change
    any page; offsets, sizes and CRCs are then made right again, and the footer says so (unless
    ``footer`` changes it after)."""
    (length,) = struct.unpack_from("<I", data, len(data) - 8)
    meta, _ = read_struct(data, len(data) - 8 - length)
    out = bytearray(b"PAR1")
    for group in field(meta, 4)[1]:
        group_start, group_decoded = len(out), 0
        for chunk in field(group, 1)[1]:
            column = field(chunk, 3)
            path = ".".join(p.decode() for p in field(column, 3)[1])
            pos = min(o for o in (field(column, 9), field(column, 11)) if o is not None)
            end = pos + field(column, 7)
            chunk_start, decoded, first_data = len(out), 0, None
            while pos < end:
                header, body = read_struct(data, pos)
                page = data[body : body + field(header, 3)]
                pos = body + len(page)
                if edit is not None:
                    header, page = edit(path, header, page)
                set_field(header, 3, 5, len(page))
                if field(header, 4) is not None:
                    set_field(header, 4, 5, struct.unpack("<i", struct.pack("<I", zlib.crc32(page)))[0])
                if field(header, 1) != 2 and first_data is None:
                    first_data = len(out)
                encoded = write_struct(header)
                decoded += len(encoded) + field(header, 2)
                out += encoded + page
            set_field(column, 9, 6, first_data)
            if field(column, 11) is not None:
                set_field(column, 11, 6, chunk_start)
            set_field(column, 6, 6, decoded)
            set_field(column, 7, 6, len(out) - chunk_start)
            group_decoded += decoded
        set_field(group, 2, 6, group_decoded)
        set_field(group, 5, 6, group_start)
        set_field(group, 6, 6, len(out) - group_start)
    if footer is not None:
        footer(meta)
    encoded = write_struct(meta)
    return bytes(out + encoded + struct.pack("<I", len(encoded)) + b"PAR1")


def columns_of(data: bytes) -> list[list[list[Any]]]:
    """The ColumnMetaData of every column chunk of the first row group."""
    (length,) = struct.unpack_from("<I", data, len(data) - 8)
    meta, _ = read_struct(data, len(data) - 8 - length)
    return [field(chunk, 3) for chunk in field(field(meta, 4)[1][0], 1)[1]]


def _pages_at(data: bytes) -> list[tuple[tuple[str, list[list[Any]]], int]]:
    """((column path, header), where the page's bytes start) for every page of the first row group."""
    found = []
    for column in columns_of(data):
        path = ".".join(p.decode() for p in field(column, 3)[1])
        pos = min(o for o in (field(column, 9), field(column, 11)) if o is not None)
        end = pos + field(column, 7)
        while pos < end:
            header, body = read_struct(data, pos)
            found.append(((path, header), body))
            pos = body + field(header, 3)
    return found


def unzstd(header: list[list[Any]], page: bytes) -> bytes:
    return bytes(pa.Codec("zstd").decompress(page, decompressed_size=field(header, 2)).to_pybytes())


def replace_mark(page_bytes: bytes, zeros: int) -> tuple[bytes, bytes]:
    """Around MARK (a PLAIN byte array: 4-byte length, then its bytes): what comes before, with a
    length of ``zeros`` in place of MARK's, and what comes after."""
    at = page_bytes.index(MARK.encode())
    assert struct.unpack_from("<I", page_bytes, at - 4)[0] == len(MARK)
    return page_bytes[: at - 4] + struct.pack("<I", zeros), page_bytes[at + len(MARK) :]


def huge_value(column: str, page_type: int, size: int = HUGE) -> PageEdit:
    """An edit that makes MARK, in ``column``'s page of ``page_type`` (0 data, 2 dictionary), a
    ``size``-byte value of zeros, in a zstd frame (47 KB for HUGE) with an honest header."""

    def edit(path: str, header: list[list[Any]], page: bytes) -> tuple[list[list[Any]], bytes]:
        if path != column or field(header, 1) != page_type:
            return header, page
        before, after = replace_mark(unzstd(header, page), size)
        set_field(header, 2, 5, len(before) + size + len(after))
        return header, zstd_frame(before, size, after)

    return edit


# --- the packed dataset and its crafted shards ---------------------------------------------------


@pytest.fixture(scope="module")
def packed_parquet_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = Corpus(tmp_path_factory.mktemp("in") / "in", 24)
    out = tmp_path_factory.mktemp("out") / "ds"
    # In this process (tests/support/cli.py); verify --deep, which reads the crafted shards, in a process of its own.
    result = run_cli("pack-shards", corpus.images, corpus.meta, "-o", out, "--format", "parquet")
    assert result.returncode == 0, result.stderr
    return out


class Dataset:
    """A copy of the packed dataset, and its largest shard to replace."""

    def __init__(self, packed_parquet_corpus: Path, folder: Path) -> None:
        shutil.copytree(packed_parquet_corpus, folder)
        self.folder = folder
        self.manifest = json.loads((folder / "shards.json").read_text())
        record = max(self.manifest["shards"], key=lambda s: s["rows"])
        self.name: str = record["file"]
        self.path = folder / self.name
        self.original = self.path.read_bytes()
        self.rows: list[dict[str, Any]] = pq.read_table(self.path).to_pylist()
        self.schema = arrow_schema(self.manifest["features"])
        self.file_column = self.schema.names[0]

    def write(self, rows: list[dict[str, Any]], **options: Any) -> bytes:
        """``rows`` as shardkit writes a shard (``options`` change pyarrow's writer)."""
        others = self.schema.names[1:]
        kw: dict[str, Any] = {
            "compression": {f"{self.file_column}.bytes": "NONE", f"{self.file_column}.path": "ZSTD"}
            | {name: "ZSTD" for name in others},
            "use_dictionary": [f"{self.file_column}.path", *others],
            "write_page_checksum": True,
        } | options
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, self.schema, **kw) as writer:
            writer.write_table(pa.Table.from_pylist(rows, schema=self.schema), row_group_size=len(rows))
        return bytes(sink.getvalue().to_pybytes())

    def with_caption(self, value: str) -> list[dict[str, Any]]:
        return [row | {"caption": value} for row in self.rows]

    def replace(self, data: bytes, rows: int | None = None) -> None:
        """The shard becomes ``data``; the manifest records its size, sha256 (and ``rows``)."""
        self.path.write_bytes(data)
        for record in self.manifest["shards"]:
            if record["file"] == self.name:
                record["bytes"] = len(data)
                record["sha256"] = hashlib.sha256(data).hexdigest()
                record["rows"] = record["rows"] if rows is None else rows
        (self.folder / "shards.json").write_text(json.dumps(adding_up(self.manifest), indent=2))

    def verify(self) -> subprocess.CompletedProcess[str]:
        """``shardkit verify --deep -q``, in a process of its own: a crafted shard must not hang it (the timeout) nor
        grow this process's memory."""
        return subprocess.run(
            [str(SCRIPTS / "shardkit"), "verify", str(self.folder), "--deep", "-q"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    def stream(self) -> tuple[list[dict[str, Any]], ShardkitError | None]:
        """The rows stream yields before it stops, and the error it stops with."""
        got: list[dict[str, Any]] = []
        try:
            stream = shardkit.stream(str(self.folder)).cast_column(self.file_column, datasets.Image(decode=False))
            for row in stream:
                got.append(row)
        except ShardkitError as exc:
            return got, exc
        return got, None


@pytest.fixture
def ds(packed_parquet_corpus: Path, tmp_path: Path) -> Dataset:
    return Dataset(packed_parquet_corpus, tmp_path / "ds")


def refused(ds: Dataset, expected: str) -> None:
    """verify and stream both refuse the shard with one line naming it and ``expected``; stream
    yields no row of it, and every row it yielded before is a row as packed."""
    result = ds.verify()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(f"{ds.name}: not a sound shard: ")]
    assert len(lines) == 1 and expected in lines[0], result.stdout

    rows, error = ds.stream()
    assert error is not None, "stream passed the shard on"
    message = str(error)
    assert "\n" not in message and f"{ds.name}: " in message and expected in message, message
    keys = {row["key"] for row in ds.rows}
    assert not keys & {row["key"] for row in rows}  # nothing of the crafted shard came out


def test_the_crafted_shards_start_from_a_sound_one(ds: Dataset) -> None:
    """The writer's copy of a shard (what every case changes) passes both, row for row."""
    assert all(field(header, 4) is not None for (_, header), _ in _pages_at(ds.original))  # shardkit checksums pages
    ds.replace(ds.write(ds.rows))
    result = ds.verify()
    assert result.returncode == 0, result.stdout
    rows, error = ds.stream()
    assert error is None and len(rows) == sum(s["rows"] for s in ds.manifest["shards"])
    mine = {row["key"]: row for row in rows if row["key"] in {r["key"] for r in ds.rows}}
    assert [mine[row["key"]] for row in ds.rows] == ds.rows


def test_a_shard_packed_before_page_checksums_still_reads(ds: Dataset) -> None:
    """Shards packed before page checksums have none: read as before (no data check, as old tar
    shards), every other bound applies, and verify still compares the shard's sha256."""
    ds.replace(rebuild(ds.original, lambda path, header, page: (without(header, 4), page)))
    result = ds.verify()
    assert result.returncode == 0, result.stdout
    rows, error = ds.stream()
    assert error is None
    mine = {row["key"]: row for row in rows if row["key"] in {r["key"] for r in ds.rows}}
    assert [mine[row["key"]] for row in ds.rows] == ds.rows


# --- bombs ---------------------------------------------------------------------------------------


def _huge_string(ds: Dataset) -> str:
    # The caption stored plain: one value of HUGE zero bytes in a page of about 47 KB.
    ds.replace(rebuild(ds.write(ds.with_caption(MARK), use_dictionary=False), huge_value("caption", 0)))
    return "declares"


def _huge_string_lying_footer(ds: Dataset) -> str:
    # The same page, and a footer that declares the small size the page had before.
    small = ds.write(ds.with_caption(MARK), use_dictionary=False)
    sizes = [field(column, 6) for column in columns_of(small)]

    def lie(meta: list[list[Any]]) -> None:
        for chunk, size in zip(field(field(meta, 4)[1][0], 1)[1], sizes, strict=True):
            set_field(field(chunk, 3), 6, 6, size)

    ds.replace(rebuild(small, huge_value("caption", 0), footer=lie))
    return "the footer says"


def _huge_dictionary_page(ds: Dataset) -> str:
    ds.replace(rebuild(ds.write(ds.with_caption(MARK)), huge_value("caption", 2)))
    return "declares"


def _dictionary_multiplied(ds: Dataset) -> str:
    # One 100 MiB caption in the dictionary (under the limit on its own), which every row names.
    assert len(ds.rows) >= 3
    ds.replace(rebuild(ds.write(ds.with_caption(MARK)), huge_value("caption", 2, 100 << 20)))
    return "decodes to"


def _a_million_rows_in_one_group(ds: Dataset) -> str:
    rows = 1_000_000
    row = ds.rows[0] | {ds.file_column: {"bytes": b"\xff", "path": "0.jpg"}, "key": "0", "caption": ""}
    columns = [pa.repeat(pa.scalar(row[f.name], f.type), rows) for f in ds.schema]
    sink = pa.BufferOutputStream()
    table = pa.Table.from_arrays(columns, schema=ds.schema)
    pq.write_table(table, sink, row_group_size=rows, compression="zstd", write_page_checksum=True)
    # The manifest keeps its count: one of a million rows is refused whole, before any shard is read.
    ds.replace(bytes(sink.getvalue().to_pybytes()))
    return "1000000 rows; a shardkit shard holds at most"


def _too_many_rows_in_a_group(ds: Dataset) -> str:
    rows = ds.rows * (500 // len(ds.rows) + 1)
    ds.replace(ds.write(rows), rows=len(rows))
    return f"row group 0: {len(rows)} rows; shardkit writes 1 to 100 a group"


def _footer_of_a_million_column_chunks(ds: Dataset) -> str:
    # Each column chunk takes 3 bytes in the footer ({file_offset: 0}), and pyarrow a kilobyte.
    def bomb(meta: list[list[Any]]) -> None:
        group = field(meta, 4)[1][0]
        set_field(group, 1, 9, bytes([0xF0 | 12]) + _w_uvarint(999_999) + b"\x26\x00\x00" * 999_999)

    ds.replace(rebuild(ds.write(ds.rows), footer=bomb))
    return "the footer holds more structures than its size allows"


BOMBS = {
    "huge string": _huge_string,
    "huge string, lying footer": _huge_string_lying_footer,
    "huge dictionary page": _huge_dictionary_page,
    "dictionary value multiplied": _dictionary_multiplied,
    "a million rows in one group": _a_million_rows_in_one_group,
    "too many rows in a group": _too_many_rows_in_a_group,
    "footer bomb": _footer_of_a_million_column_chunks,
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BOMBS)
def test_a_bomb_is_refused_with_the_shard_named(ds: Dataset, case: str) -> None:
    refused(ds, BOMBS[case](ds))


@pytest.mark.slow
def test_a_bomb_is_refused_in_bounded_memory(ds: Dataset) -> None:
    """The 1.5 GB string in a 47 KB page, read by stream in a process of its own: refused before
    anything is decompressed (pyarrow alone took 5.9 GB)."""
    _huge_string(ds)
    assert ds.path.stat().st_size < 100_000
    # VmHWM: this process's peak resident memory (ru_maxrss would count what the process that
    # forked it held, up to the exec), less what it held once the dataset was made: what the read
    # added, whatever the imports cost (datasets imports torch where it is installed, 300 MB).
    code = (
        "import sys, shardkit\n"
        "def mb(key): return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key)) // 1024\n"
        "ds = shardkit.stream(sys.argv[1])\n"
        "before = mb('VmRSS:')\n"
        "try:\n"
        "    for _ in ds: pass\n"
        "    print('read')\n"
        "except shardkit.errors.ShardkitError as exc:\n"
        "    print('refused:', exc)\n"
        "print(mb('VmHWM:') - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(ds.folder)], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    message, added_mb = result.stdout.splitlines()
    assert message.startswith("refused: ") and f"{ds.name}: row group 0: declares" in message
    assert int(added_mb) < 200


# --- damage --------------------------------------------------------------------------------------


def _flip(column: str, page_type: int) -> Callable[[Dataset], str]:
    def damage(ds: Dataset) -> str:
        data = bytearray(ds.original)
        for (path, header), start in _pages_at(ds.original):
            if path == column and field(header, 1) == page_type:
                data[start + field(header, 3) // 2] ^= 0x01
                break
        else:
            raise AssertionError(f"no page of type {page_type} in {column}")
        ds.replace(bytes(data))
        return f"row group 0, column {column.split('.')[0]}: could not verify page integrity, CRC checksum"

    return damage


def _some_checksums(ds: Dataset) -> str:
    # Checksums taken off one column's pages: not a shard shardkit wrote, old or new.
    ds.replace(
        rebuild(ds.original, lambda path, header, page: (without(header, 4) if path == "label" else header, page))
    )
    return "some pages have a checksum and others not"


def _renamed_column(ds: Dataset) -> str:
    def rename(meta: list[list[Any]]) -> None:
        for element in field(meta, 2)[1]:
            if field(element, 4) == b"caption":
                set_field(element, 4, 8, b"captiom")
                for chunk in field(field(meta, 4)[1][0], 1)[1]:
                    path = field(field(chunk, 3), 3)
                    if path[1] == [b"caption"]:
                        path[1][0] = b"captiom"

    ds.replace(rebuild(ds.original, footer=rename))
    return "its columns are not those the manifest's features declare"


def _key_not_utf8(ds: Dataset) -> str:
    # A string column holding bytes that are not UTF-8, every page checksummed: sound pages, bad text.
    table = pa.Table.from_pylist(ds.rows, schema=ds.schema)
    keys = [row["key"].encode()[:-1] + b"\xff" for row in ds.rows]
    index = ds.schema.get_field_index("key")
    table = table.set_column(index, ds.schema.field(index), pa.array(keys, pa.binary()).view(pa.string()))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_checksum=True, compression="zstd", use_dictionary=False)
    ds.replace(bytes(sink.getvalue().to_pybytes()))
    return "row group 0: 'utf-8' codec can't decode byte 0xff"


DAMAGE = {
    "file bytes (stored)": _flip("image.bytes", 0),
    "file path (zstd data page)": _flip("image.path", 0),
    "caption dictionary (zstd)": _flip("caption", 2),
    "label values (zstd)": _flip("label", 0),
    "checksums on some pages only": _some_checksums,
    "a string that is not UTF-8": _key_not_utf8,
}


@pytest.mark.slow
@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_page_is_refused_never_passed_on(ds: Dataset, case: str) -> None:
    refused(ds, DAMAGE[case](ds))


def test_a_renamed_column_is_refused_by_stream(ds: Dataset) -> None:
    """A flipped byte in the footer's schema renames a column: stream and verify hold the shard
    to the manifest's features."""
    expected = _renamed_column(ds)
    rows, error = ds.stream()
    assert error is not None and f"{ds.name}: its columns are not" in str(error) and expected in str(error)
    assert not {row["key"] for row in ds.rows} & {row["key"] for row in rows}
    result = ds.verify()
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert f"{ds.name}: not a sound shard: its columns are not those the manifest's features" in result.stdout
