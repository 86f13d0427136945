"""Damaged and hostile sources given to ``shardkit remux``: one line naming the source shard and
row, a non-zero exit, no traceback, and nothing published; and never a file read from outside
the source. (Hostile shardkit shards as a source: tests/test_hostile_shards.py.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.support.corpus import REPO_ROOT, tiny_image

SHARDKIT = str(Path(sys.executable).parent / "shardkit")
_FILE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
#: What datasets writes in a Parquet file's metadata so the column reads back as an Image.
_HF_META = b'{"info": {"features": {"image": {"_type": "Image"}, "n": {"dtype": "int64", "_type": "Value"}}}}'


def image_parquet(path: Path, files: list[dict[str, object]]) -> Path:
    table = pa.table({"image": pa.array(files, _FILE), "n": pa.array(range(len(files)), pa.int64())})
    pq.write_table(table.replace_schema_metadata({b"huggingface": _HF_META}), path)
    return path


def _path_outside(tmp: Path) -> Path:
    secret = tmp / "secret.jpg"  # an image, so only the path rule can stop it
    secret.write_bytes(tiny_image(7))
    return image_parquet(
        tmp / "src.parquet", [{"bytes": tiny_image(1), "path": "a.jpg"}, {"bytes": None, "path": str(secret)}]
    )


def _relative_path_out(tmp: Path) -> Path:
    (tmp / "secret.jpg").write_bytes(tiny_image(7))
    return image_parquet(tmp / "src.parquet", [{"bytes": None, "path": "../secret.jpg"}])


def _not_an_image(tmp: Path) -> Path:
    return image_parquet(
        tmp / "src.parquet", [{"bytes": tiny_image(1), "path": "a.jpg"}, {"bytes": b"plain text", "path": "b.jpg"}]
    )


def _bomb(tmp: Path) -> Path:
    buf = io.BytesIO()
    Image.new("1", (30_000, 30_000)).save(buf, "PNG")  # 900 megapixels in a few KB
    return image_parquet(tmp / "src.parquet", [{"bytes": buf.getvalue(), "path": "bomb.png"}])


def _truncated(tmp: Path) -> Path:
    whole = image_parquet(tmp / "whole.parquet", [{"bytes": tiny_image(1), "path": "a.jpg"}])
    cut = tmp / "src.parquet"
    cut.write_bytes(whole.read_bytes()[:-100])
    return cut


def _not_parquet(tmp: Path) -> Path:
    src = tmp / "src.parquet"
    src.write_bytes(b"these are not the bytes of a Parquet file\n" * 10)
    return src


def _damaged_tar(tmp: Path) -> Path:
    src = tmp / "src.tar"
    src.write_bytes(b"\x00" * 100 + b"garbage" * 300)
    return src


CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    (
        "absolute path outside the source",
        _path_outside,
        "split 'train', row 1: the file has no bytes, only a path outside the source",
    ),
    (
        "relative path out of the source",
        _relative_path_out,
        "split 'train', row 0: the file has no bytes, only a path outside the source",
    ),
    ("not an image", _not_an_image, "split 'train', row 1: column 'image' is not an image Pillow can read"),
    (
        "decompression bomb",
        _bomb,
        "split 'train', row 0: column 'image' does not open as an image: DecompressionBombError",
    ),
    ("truncated Parquet", _truncated, "cannot read"),
    ("not Parquet at all", _not_parquet, "cannot read"),
    ("damaged tar", _damaged_tar, "cannot read"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_or_hostile_source_is_one_line_and_nothing_is_published(
    tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    source = make(work)
    out = tmp_path / "out"
    proc = subprocess.run(
        [SHARDKIT, "remux", str(source), str(out), "--map", "tests.remux_functions:identity", "-q", "-j", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert str(source.name) in errors[0]  # the source, and the row in it
    assert not (out / "shards.json").exists() and not list(out.glob("data/*"))


@pytest.mark.slow
def test_a_folder_whose_files_are_symlinks_elsewhere_is_a_source(tmp_path: Path) -> None:
    """The Hub cache's layout: snapshots/<sha>/ holds links into blobs/. The folder is the user's
    own: its files are read wherever the links lead; only paths a row names must stay inside."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    snapshot = tmp_path / "snapshots" / "abc" / "train"
    snapshot.mkdir(parents=True)
    lines = []
    for i in range(3):
        (blobs / f"b{i}").write_bytes(tiny_image(i))
        (snapshot / f"{i}.jpg").symlink_to(blobs / f"b{i}")
        lines.append(f'{{"file_name": "{i}.jpg", "n": {i}}}\n')
    (snapshot / "metadata.jsonl").write_text("".join(lines))
    out = tmp_path / "out"
    proc = subprocess.run(
        [SHARDKIT, "remux", str(snapshot.parent), str(out), "--map", "tests.remux_functions:identity", "-q", "-j", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "shards.json").read_text())
    assert manifest["totals"]["rows"] == 3
