"""A new kind of place plugs in with one class and one registration, editing no other module.

The kind here, ``dict://``, keeps a repo's files in a dict of bytes in this process: it defines
what a kind must (``open_random`` and ``find``) and the writing methods, and
``shardkit.location.register`` maps its URL scheme to it. ``verify``, ``shardkit.stream``,
``head`` and ``shardrows`` then read a packed dataset through it, as they read a folder.
"""

from __future__ import annotations

import errno
import io
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import pytest
from PIL import Image

import shardkit
from shardkit.head import open_head
from shardkit.location import Folder, Location, register
from shardkit.shardrows import iter_shard, read_manifest_from
from shardkit.verify import verify
from tests.support.corpus import Corpus
from tests.test_location import check_file_operations

PACK_SHARDS = str(Path(sys.executable).parent / "pack-shards")


class DictPlace(Location):
    """A repo whose files are bytes in a dict of this process, one dict per URL (``dict://name``)."""

    kind = "dict"
    repos: ClassVar[dict[str, dict[str, bytes]]] = {}

    @property
    def files(self) -> dict[str, bytes]:
        return self.repos.setdefault(self.url, {})

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        if rel not in self.files:
            raise FileNotFoundError(errno.ENOENT, "no such file", self.where(rel))
        return io.BytesIO(self.files[rel])

    def find(self, folder: str = "") -> dict[str, int]:
        return {rel: len(data) for rel, data in self.files.items() if not folder or rel.startswith(f"{folder}/")}

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        self.upload(local_file, rel)
        Path(local_file).unlink()

    def upload(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        self.files[rel] = Path(local_file).read_bytes()

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.files[rel] = data

    def remove(self, rel: str) -> None:
        self.files.pop(rel, None)


register(DictPlace, "dict")


def test_the_new_kind_is_told_apart_by_its_scheme_and_does_what_every_kind_does(tmp_path: Path) -> None:
    where = Location.parse("dict://operations/")
    assert type(where) is DictPlace and where == Location.out_dir("dict://operations") == Location(where.url, "dict")
    assert where.local_dir(str(tmp_path / "w")) == str(tmp_path / "w")  # a run's work folder, as for any URL
    check_file_operations(where, tmp_path)  # as a folder's and an fsspec URL's (tests/test_location.py)


def test_a_kind_that_defines_too_little_is_refused_at_its_registration() -> None:
    class Nowhere(Location):
        kind = "nowhere"

    with pytest.raises(TypeError, match="needs a kind name and open_random, find"):
        register(Nowhere, "nowhere")
    with pytest.raises(ValueError, match="unknown location kind 'nowhere'"):
        Location("nowhere://x", "nowhere")


@pytest.fixture(scope="module")
def packed_in_a_dict(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A corpus packed into a local folder by ``pack-shards`` (as ZIP and as Parquet), each
    folder's files then copied into its own ``dict://`` repo through the kind's ``upload``."""
    corpus = Corpus(tmp_path_factory.mktemp("in"), 30, with_keys=True)
    urls = {}
    for fmt in ("zip", "parquet"):
        out = tmp_path_factory.mktemp(fmt) / "out"
        shape = ["--format", fmt, "--target-shard-size", "8KB", "-q", "-j", "1"]
        result = subprocess.run(
            [PACK_SHARDS, str(corpus.images), str(corpus.meta), "-o", str(out), *shape],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        urls[fmt] = f"dict://{fmt}"
        place = Location.parse(urls[fmt])
        for rel in Folder(str(out)).find():
            if not rel.startswith(".shardkit/"):
                place.upload(str(out / rel), rel)
    return {"corpus": corpus, "urls": urls}


def _expected(corpus: Corpus) -> dict[str, dict[str, Any]]:
    """Each input row by its key: its metadata fields and its file's bytes."""
    return {row["key"]: {**row, "bytes": (corpus.images / row["file_name"]).read_bytes()} for row in corpus.rows}


@pytest.mark.parametrize("fmt", ["zip", "parquet"])
def test_verify_and_shardrows_read_a_packed_dataset_through_the_new_kind(
    packed_in_a_dict: dict[str, Any], fmt: str
) -> None:
    url = packed_in_a_dict["urls"][fmt]
    expected = _expected(packed_in_a_dict["corpus"])
    report = verify(url, deep=True)
    assert report.ok and report.problems == [] and report.rows == len(expected)
    place = Location.parse(url)
    manifest = read_manifest_from(place)
    assert len(manifest.shards) > 1 and manifest.options.format == fmt
    seen = {}
    for shard in manifest.shards:
        for row in iter_shard(place, shard.file, "image", fmt, manifest):
            seen[row["key"]] = row
    assert seen.keys() == expected.keys()
    for key, row in seen.items():
        want = expected[key]
        assert row["image"]["bytes"] == want["bytes"]
        for field in ("caption", "label", "score"):
            assert row[field] == want[field] and type(row[field]) is type(want[field])
    head = open_head(url)
    assert head.location == place and [row.key for row in head.rows(3)] == [r["key"] for r in seen.values()][:3]


def test_shardkit_stream_reads_a_packed_dataset_through_the_new_kind(packed_in_a_dict: dict[str, Any]) -> None:
    expected = _expected(packed_in_a_dict["corpus"])
    rows = list(shardkit.stream(packed_in_a_dict["urls"]["zip"]))
    assert sorted(row["key"] for row in rows) == sorted(expected)
    for row in rows:
        want = expected[row["key"]]
        with Image.open(io.BytesIO(want["bytes"])) as image:
            assert row["image"].tobytes() == image.convert(row["image"].mode).tobytes()
        for field in ("caption", "label", "score"):
            assert row[field] == want[field] and type(row[field]) is type(want[field])
