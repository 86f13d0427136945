"""The plain interface every shard format keeps (:class:`shardkit.formats.base.ShardFormat`):
the registry, then each format's write, read_rows and verify_shard on rows held in memory, as
a fourth format's author would test theirs, without packing."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shardkit.builtin import LOADERS, builder_name
from shardkit.card import FORMAT_WORDS, LAYOUT_WORDS
from shardkit.formats import (
    FORMAT_NAMES,
    FORMATS,
    SHARD_SUFFIXES,
    ShardFormat,
    ShardFormatError,
    format_named,
    format_of_manifest,
)
from shardkit.formats.base import ShardRecord
from shardkit.formats.parquet import encode_metadata_table
from shardkit.location import Location
from shardkit.manifest import Manifest, ManifestShard, Options
from shardkit.rowcheck import DatasetRows
from shardkit.verify import walk_shard
from tests.support.corpus import tiny_image

FEATURES = [
    {"name": "image", "dtype": "image"},
    {"name": "key", "dtype": "string"},
    {"name": "caption", "dtype": "string"},
]
KEYS = ["a0000001", "a0000002", "a0000003"]


def test_the_registry_names_each_format_once() -> None:
    assert FORMAT_NAMES == ("zip", "tar", "parquet")
    assert SHARD_SUFFIXES == (".zip", ".tar", ".parquet")
    for name, fmt in FORMATS.items():
        assert isinstance(fmt, ShardFormat)
        assert format_named(name) is fmt
        assert format_of_manifest(fmt.manifest_format) is fmt
    with pytest.raises(ValueError, match="unknown shard format 'rar' \\(choose from zip, tar, parquet\\)"):
        format_named("rar")
    with pytest.raises(ValueError, match="not a shardkit manifest format"):
        format_of_manifest("shardkit.rar/1")


def test_every_format_has_its_builtin_loader_and_its_words_in_the_card() -> None:
    """A format holds container facts only: what datasets' builtin loader does with its shards
    is one entry in builtin.LOADERS, how the card names it one in the card's words."""
    for name, fmt in FORMATS.items():
        assert builder_name(fmt, "image") in ("imagefolder", "webdataset", "parquet")
        assert FORMAT_WORDS[name] and LAYOUT_WORDS[name]
    assert set(LOADERS) == set(FORMAT_WORDS) == set(LAYOUT_WORDS) == set(FORMATS)
    assert builder_name(format_named("zip"), "audio") == "audiofolder"


class _File:
    def __init__(self, key: str, data: bytes, line: str) -> None:
        self.key, self.ext, self.size, self.metadata_line = key, ".jpg", len(data), line
        self._data = data
        self.crc = zlib.crc32(data)

    def copy_to(self, write: Callable[[bytes | memoryview], object]) -> None:
        write(self._data[:5])  # in two pieces, as a big file comes
        write(self._data[5:])

    def read_all(self) -> bytes:
        return self._data


class _Rows:
    """A shard's rows held in memory (what the writer's frame gives a format)."""

    def __init__(self, fmt: ShardFormat) -> None:
        self.name = f"data/a{fmt.suffix}"
        self.features = FEATURES
        self.files_ = []
        for i, key in enumerate(KEYS):
            line = json.dumps({"file_name": fmt.member_name(key, ".jpg"), "key": key, "caption": f"c{i}"})
            self.files_.append(_File(key, tiny_image(i), line))
        self.recorded = b""
        self.planned_bytes = 1 << 20
        self.index: tuple[int, list[int]] | None = None

    def published_lines(self) -> Iterator[bytes]:
        return iter([f.metadata_line.encode() + b"\n" for f in self.files_])

    @contextlib.contextmanager
    def files(self) -> Iterator[Iterator[_File]]:
        yield iter(self.files_)

    def record_line(self, line: bytes) -> None:
        self.recorded += line

    def record_row_offsets(self, every: int, offsets: list[int]) -> None:
        self.index = (every, offsets)

    def metadata_table(self) -> bytes:
        return encode_metadata_table(b"".join(self.published_lines()), FEATURES)


def _written(fmt: ShardFormat, folder: Path) -> tuple[ManifestShard, _Rows]:
    rows = _Rows(fmt)
    out = io.BytesIO()
    size = fmt.write(out, rows)
    data = out.getvalue()
    (folder / "data").mkdir()
    (folder / "metadata").mkdir()
    (folder / rows.name).write_bytes(data)
    (folder / "metadata/a.jsonl").write_bytes(rows.recorded)
    shard = ManifestShard(
        file=rows.name,
        metadata="metadata/a.jsonl",
        rows=len(KEYS),
        bytes=size,
        sha256=hashlib.sha256(data).hexdigest(),
        metadata_sha256=hashlib.sha256(rows.recorded).hexdigest(),
        first_key=KEYS[0],
        last_key=KEYS[-1],
    )
    assert size == len(data)
    return shard, rows


def _verified(fmt: ShardFormat, folder: Path, shard: ManifestShard) -> tuple[list[str], Any]:
    # The shard's rows are held to a manifest naming it alone (by prefix "a": its keys' first digit).
    manifest = Manifest(Options(1, fmt.max_bytes, fmt.max_bytes, fmt.name), "", "image", FEATURES, [shard], layout=4)
    rows_check = DatasetRows(manifest).shard(shard.file, shard.file)
    walk, problems = walk_shard(Location(str(folder), "folder"), shard, fmt, rows_check, FEATURES)
    return [p.format() for p in problems], walk


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_format_reads_and_verifies_what_it_wrote(tmp_path: Path, name: str) -> None:
    fmt = format_named(name)
    shard, rows = _written(fmt, tmp_path)
    assert rows.recorded == b"".join(rows.published_lines())  # metadata/ holds each row's line
    record = ShardRecord(str(tmp_path / shard.file), "image", FEATURES, fmt.max_bytes, shard.bytes, shard.rows)
    with open(tmp_path / shard.file, "rb") as f:
        read = list(fmt.read_rows(f, record))
    assert [r["key"] for r in read] == KEYS
    assert [r["caption"] for r in read] == ["c0", "c1", "c2"]
    assert [r["image"]["bytes"] for r in read] == [f.read_all() for f in rows.files_]
    assert [r["image"]["path"] for r in read] == [fmt.member_name(k, ".jpg") for k in KEYS]
    problems, walk = _verified(fmt, tmp_path, shard)
    assert problems == []
    assert (walk.sha256, walk.members, walk.keys) == (shard.sha256, 3, KEYS)


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_format_finds_a_changed_byte_of_a_file(tmp_path: Path, name: str) -> None:
    fmt = format_named(name)
    shard, rows = _written(fmt, tmp_path)
    path = tmp_path / shard.file
    data = bytearray(path.read_bytes())
    at = data.find(rows.files_[1].read_all()) + 200  # inside the second image
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    record = ShardRecord(str(path), "image", FEATURES, fmt.max_bytes, shard.bytes, shard.rows)
    with open(path, "rb") as f, pytest.raises(ShardFormatError, match=f"^{path}: "):
        list(fmt.read_rows(f, record))
    problems, _ = _verified(fmt, tmp_path, shard)
    assert problems[0].startswith(f"{shard.file}: ")
    assert any("CRC" in p or "checksum" in p for p in problems), problems
