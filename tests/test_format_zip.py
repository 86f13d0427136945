"""The ZIP subset: readable by zipfile, walkable front to back, damage and tricks refused."""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib

import pyarrow.parquet as pq
import pytest

from shardkit.formats.parquet import (
    ParquetShardError,
    encode_metadata_table,
    metadata_table_rows,
    read_metadata_table,
)
from shardkit.formats.zip import (
    END_RECORD_SIZE,
    ZipFormatError,
    ZipWriter,
    iter_members,
    stored_member_overhead,
)


def build(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    zw = ZipWriter(buf)
    for name, data in members:
        zw.add(name, data)
    zw.close()
    return buf.getvalue()


MEMBERS = [
    ("metadata.jsonl", b'{"a":1}\n'),
    ("images/abc/def/abcdef01.jpg", b"\xff\xd8" + bytes(range(256)) * 3),
    ("images/é/ü.png", b"png bytes"),
]


def test_size_is_exactly_predicted() -> None:
    blob = build(MEMBERS)
    predicted = sum(stored_member_overhead(n) + len(d) for n, d in MEMBERS) + END_RECORD_SIZE
    assert len(blob) == predicted


def test_zipfile_reads_every_member_stored_with_fixed_metadata() -> None:
    with zipfile.ZipFile(io.BytesIO(build(MEMBERS))) as zf:
        assert zf.testzip() is None
        assert [i.filename for i in zf.infolist()] == [n for n, _ in MEMBERS]
        for (name, data), info in zip(MEMBERS, zf.infolist(), strict=True):
            assert zf.read(name) == data
            assert info.compress_type == zipfile.ZIP_STORED
            assert info.flag_bits & 0x08 == 0  # no data descriptor
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.external_attr >> 16 == 0o100644


def test_a_central_directory_over_1_mib_waits_in_a_file_and_comes_out_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """12,000 members make a 1.1 MB directory: past CENTRAL_IN_MEMORY_BYTES it is spooled to a
    temporary file, and the shard is byte for byte the one an all-in-memory directory gives."""
    import shardkit.formats.zip

    members = [(f"images/{i:03x}/{i:06x}/{i:032x}.jpg", i.to_bytes(4, "big")) for i in range(12_000)]
    spooled = build(members)
    central = len(spooled) - sum(len(n) + 30 + len(d) for n, d in members) - END_RECORD_SIZE
    assert central > shardkit.formats.zip.CENTRAL_IN_MEMORY_BYTES
    monkeypatch.setattr(shardkit.formats.zip, "CENTRAL_IN_MEMORY_BYTES", 64 << 20)
    assert build(members) == spooled
    with zipfile.ZipFile(io.BytesIO(spooled)) as zf:
        assert zf.testzip() is None
        assert [(i.filename, zf.read(i)) for i in zf.infolist()] == members


def test_front_to_back_walk_matches_without_seeking() -> None:
    class ForwardOnly(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray) -> int:  # type: ignore[override]
            chunk = self._inner.read(min(len(b), 7))  # tiny reads, like a network stream
            b[: len(chunk)] = chunk
            return len(chunk)

        def seekable(self) -> bool:
            return False

    walked = list(iter_members(ForwardOnly(build(MEMBERS))))  # type: ignore[arg-type]
    assert [(m.name, m.data) for m in walked] == MEMBERS
    assert walked[0].offset == 0


def test_crc_mismatch_is_reported_not_yielded() -> None:
    blob = bytearray(build(MEMBERS))
    data_at = blob.index(b"png bytes")
    blob[data_at] ^= 0xFF
    with pytest.raises(ZipFormatError, match=r"CRC mismatch in member 'images/é/ü.png'"):
        list(iter_members(io.BytesIO(bytes(blob))))


def test_truncated_stream_is_an_error() -> None:
    blob = build(MEMBERS)
    with pytest.raises(ZipFormatError, match="truncated"):
        list(iter_members(io.BytesIO(blob[:100])))


def _forged(name: bytes, flags: int = 0x800, method: int = 0) -> bytes:
    data = b"x"
    header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 33, zlib.crc32(data), 1, 1, len(name), 0)
    return header + name + data + struct.pack("<I", 0x02014B50)


@pytest.mark.parametrize("name", [b"/etc/passwd", b"../escape.jpg", b"images/../../x.jpg", b"a\\..\\b"])
def test_reader_refuses_unsafe_member_names(name: bytes) -> None:
    with pytest.raises(ZipFormatError, match="unsafe member name"):
        list(iter_members(io.BytesIO(_forged(name))))


def test_reader_refuses_data_descriptors_and_compression() -> None:
    with pytest.raises(ZipFormatError, match="data descriptor"):
        list(iter_members(io.BytesIO(_forged(b"a.jpg", flags=0x808))))
    with pytest.raises(ZipFormatError, match="compressed"):
        list(iter_members(io.BytesIO(_forged(b"a.jpg", method=8))))


def test_writer_refuses_unsafe_names_and_wrong_lengths() -> None:
    zw = ZipWriter(io.BytesIO())
    with pytest.raises(ZipFormatError):
        zw.add("../x", b"1")
    zw.start_member("a.bin", 3, 0)
    with pytest.raises(ZipFormatError, match="longer than announced"):
        zw.write_data(b"1234")
    with pytest.raises(ZipFormatError, match="still expects"):
        zw.close()


TABLE_FEATURES = [
    {"name": "image", "dtype": "image"},
    {"name": "key", "dtype": "string"},
    {"name": "n", "dtype": "int64"},
    {"name": "note", "dtype": "string"},
]


def metadata_table(rows: int) -> bytes:
    """A shard's metadata.parquet of ``rows`` rows (row groups of 100), a column null in most."""
    lines = b"".join(
        json.dumps(
            {"file_name": f"images/{i:04d}.jpg", "key": f"k{i:04d}", "n": i, "note": None if i % 3 else "x"}
        ).encode()
        + b"\n"
        for i in range(rows)
    )
    return encode_metadata_table(lines, TABLE_FEATURES)


def test_a_metadata_tables_rows_are_read_as_asked_in_any_order() -> None:
    """A reader takes a shard's table rows one by one (a row group at a time), and gets every row
    as the whole table gives it, in order or not."""
    data = metadata_table(350)
    whole = read_metadata_table(data, TABLE_FEATURES)
    rows = metadata_table_rows(data, TABLE_FEATURES)
    assert len(rows) == 350
    assert [rows[i] for i in range(350)] == whole
    assert [(type(r["key"]), type(r["n"])) for r in whole] == [(str, int)] * 350
    assert [r["note"] for r in whole[:4]] == ["x", None, None, "x"]
    assert rows[349] is rows[349]  # the last one asked for is at hand
    assert [rows[i] for i in (5, 250, 0, 101, 100)] == [whole[i] for i in (5, 250, 0, 101, 100)]  # back, then on
    for outside in (350, -1):
        with pytest.raises(IndexError):
            rows[outside]


def test_a_damaged_row_group_of_a_metadata_table_fails_when_it_is_reached() -> None:
    data = bytearray(metadata_table(350))
    column = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(2).column(0)
    data[column.data_page_offset + column.total_compressed_size - 1] ^= 0xFF  # in the group's first page's data
    rows = metadata_table_rows(bytes(data), TABLE_FEATURES)
    assert [rows[i]["n"] for i in range(200)] == list(range(200))  # groups 0 and 1 are whole
    with pytest.raises(ParquetShardError, match="row group 2"):
        rows[200]
