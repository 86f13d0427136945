"""Rows that are byte ranges of files (``PackConfig.file_ranges``): how remux hands its staged
output to the packer, a batch's rows in one file rather than a file per row.

A dataset packed from byte ranges is byte for byte the dataset packed from the same bytes as
files, in every format; a range that is not one of its file is refused at the check, naming the
line; a file rewritten after the check is refused by the writer (tests/test_readahead.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shardkit.metadata import InputProblem, SourceRecord, read_metadata
from shardkit.pack import pack
from tests.support.corpus import Corpus, tree_bytes, write_jsonl
from tests.support.packing import config_for


def as_ranges(corpus: Corpus, root: Path, per_file: int) -> tuple[Path, Path]:
    """The corpus's files as byte ranges: ``per_file`` rows' bytes a file, in row order; the
    IMAGES_DIR and the metadata naming ``[file, offset, size]``."""
    images = root / "ranged"
    images.mkdir()
    rows: list[dict[str, Any]] = []
    for first in range(0, len(corpus.rows), per_file):
        name = f"batch{first:04d}/rows.jpg"
        (images / name).parent.mkdir()
        offset = 0
        with open(images / name, "wb") as out:
            for row in corpus.rows[first : first + per_file]:
                data = (corpus.images / row["file_name"]).read_bytes()
                out.write(data)
                rows.append({**row, "file_name": [name, offset, len(data)]})
                offset += len(data)
    return images, write_jsonl(root / "ranged.jsonl", rows)


@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
def test_rows_as_byte_ranges_pack_to_the_bytes_of_rows_as_files(make_corpus, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(90, with_keys=True)
    images, metadata = as_ranges(corpus, tmp_path, per_file=7)
    as_files, as_ranged = tmp_path / "a" / "out", tmp_path / "b" / "out"  # (the card is titled by the folder)
    pack(config_for(corpus, as_files, format=fmt, max_shard_bytes=20_000, target_shard_bytes=17_000))
    config = config_for(
        corpus, as_ranged, format=fmt, max_shard_bytes=20_000, target_shard_bytes=17_000, file_ranges=True
    )
    summary = pack(replace(config, images_dir=str(images), metadata_path=str(metadata)))
    assert summary.rows == 90 and summary.shards > 1
    expected, got = tree_bytes(as_files), tree_bytes(as_ranged)
    assert got.keys() == expected.keys()
    # The same shards and metadata; the manifest differs only in what it records of the input
    # (each shard's input fingerprint names the files read).
    assert {k: v for k, v in got.items() if k != "shards.json"} == {
        k: v for k, v in expected.items() if k != "shards.json"
    }

    def published(tree: dict[str, bytes]) -> list[dict[str, Any]]:
        shards = json.loads(tree["shards.json"])["shards"]
        return [{k: v for k, v in s.items() if k != "input_sha256"} for s in shards]

    assert published(got) == published(expected)


def checked(images: Path, lines: list[Any], tmp_path: Path) -> list[SourceRecord | InputProblem]:
    metadata = write_jsonl(tmp_path / "m.jsonl", lines)
    return list(read_metadata(str(metadata), str(images), max_file_bytes=1000, file_ranges=True))


def test_a_range_is_a_keyed_slice_of_a_file_inside_images_dir_or_its_line_is_refused(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "rows.jpg").write_bytes(bytes(range(200)) * 10)
    (tmp_path / "outside.jpg").write_bytes(bytes(300))
    (images / "link.jpg").symlink_to(tmp_path / "outside.jpg")
    key = "ab" * 8
    got = checked(
        images,
        [
            {"file_name": ["rows.jpg", 0, 120], "key": key, "n": 1},
            {"file_name": ["rows.jpg", 120, 80], "key": "cd" * 8},
            {"file_name": ["rows.jpg", 1950, 51], "key": key},  # past the end
            {"file_name": "rows.jpg", "key": key},  # a whole file: not a range
            {"file_name": ["rows.jpg", 0, 10]},  # no key
            {"file_name": ["rows.jpg", 0, 0], "key": key},  # empty
            {"file_name": ["rows.jpg", -1, 10], "key": key},
            {"file_name": ["rows.jpg", True, 10], "key": key},
            {"file_name": ["../outside.jpg", 0, 10], "key": key},
            {"file_name": ["link.jpg", 0, 10], "key": key},
            {"file_name": ["rows.jpg", 0, 1001], "key": key},  # more than fits in a shard
            {"file_name": ["gone.jpg", 0, 10], "key": key},
        ],
        tmp_path,
    )
    first, second = got[0], got[1]
    assert isinstance(first, SourceRecord) and isinstance(second, SourceRecord)
    assert (first.source, first.file_offset, first.size, first.key, first.fields, first.ext) == (
        "rows.jpg",
        0,
        120,
        key,
        {"n": 1},
        ".jpg",
    )
    assert (second.file_offset, second.size, second.content_keyed) == (120, 80, False)
    problems = got[2:]
    assert all(isinstance(p, InputProblem) for p in problems)
    assert [p.line for p in problems if isinstance(p, InputProblem)] == list(range(3, 13))
    messages = [p.message for p in problems if isinstance(p, InputProblem)]
    assert "rows.jpg: bytes 1950 to 2001 are past its end (2000 bytes)" in messages[0]
    for message in messages[1:6]:
        assert "is not [name, offset, size > 0] of a keyed row" in message
    assert "contains '..'" in messages[6]
    assert "resolves outside IMAGES_DIR" in messages[7]
    assert "more than fits in one shard" in messages[8]
    assert "file not found" in messages[9]
