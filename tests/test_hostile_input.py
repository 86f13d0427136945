"""Hostile and broken input, through the CLI as a user meets it.

Every case: ``pack-shards`` exits non-zero, names the metadata file and line of the bad row in
one line, shows no traceback, and writes nothing (OUT_DIR is not even created). Files changed
between the check and the write are in tests/test_input_race.py; hostile shards in
tests/test_hostile_shards.py and tests/test_hostile_parquet.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shardkit.rowrules import MAX_LINE_BYTES
from tests.support.cli import run_cli
from tests.support.corpus import tiny_image

PACK_SHARDS = str(Path(sys.executable).parent / "pack-shards")
GOOD = b'{"file_name": "a.jpg", "n": 1}\n'


def _outside_symlink(images: Path) -> None:
    (images.parent / "secret.jpg").write_bytes(tiny_image(9))
    (images / "link.jpg").symlink_to(images.parent / "secret.jpg")


def _fifo(images: Path) -> None:
    os.mkfifo(images / "pipe.jpg")


def _device(images: Path) -> None:
    (images / "dev.jpg").symlink_to("/dev/zero")


def _directory(images: Path) -> None:
    (images / "dir.jpg").mkdir()


def _empty(images: Path) -> None:
    (images / "empty.jpg").write_bytes(b"")


def _nothing(images: Path) -> None:
    pass


def _newline_name(images: Path) -> None:
    (images / "x.png\n").write_bytes(tiny_image(3, "PNG"))


def _line_separator_name(images: Path) -> None:
    (images / "x\u2028.png").write_bytes(tiny_image(3, "PNG"))


#: (case, bad line (bytes, without its newline), what makes the files, what the message says)
CASES: list[tuple[str, bytes, Callable[[Path], None], str]] = [
    ("path traversal", b'{"file_name": "../secret.jpg"}', _nothing, "contains '..'"),
    ("absolute path", b'{"file_name": "/etc/passwd.jpg"}', _nothing, "is absolute"),
    ("drive letter", b'{"file_name": "C:/x.jpg"}', _nothing, "is absolute"),
    ("NUL in file_name", b'{"file_name": "a\\u0000.jpg"}', _nothing, "holds '\\x00': a file name holds no control"),
    ("newline ending file_name", b'{"file_name": "x.png\\n"}', _newline_name, "holds '\\n': a file name holds no"),
    ("U+2028 in file_name", b'{"file_name": "x\\u2028.png"}', _line_separator_name, "holds '\\u2028': a file"),
    ("key ending in newline", b'{"file_name": "b.jpg", "key": "deadbeef\\n"}', _nothing, "does not fit the key"),
    ("key of Arabic-Indic digits", '{"file_name": "b.jpg", "key": "٠١٢٣٤٥٦٧"}'.encode(), _nothing, "does not fit"),
    ("split ending in newline", b'{"file_name": "b.jpg", "split": "train\\n"}', _nothing, 'holds "train\\n": a split'),
    ("symlink outside", b'{"file_name": "link.jpg"}', _outside_symlink, "resolves outside IMAGES_DIR"),
    ("device", b'{"file_name": "dev.jpg"}', _device, "resolves outside IMAGES_DIR"),
    ("FIFO", b'{"file_name": "pipe.jpg"}', _fifo, "not a regular file"),
    ("directory", b'{"file_name": "dir.jpg"}', _directory, "file_name 'dir.jpg' is a folder, not a file"),
    ("empty file", b'{"file_name": "empty.jpg"}', _empty, "empty file"),
    ("missing file", b'{"file_name": "nowhere.jpg"}', _nothing, "file not found"),
    ("no extension", b'{"file_name": "a"}', _nothing, "has no usable extension"),
    ("NaN", b'{"file_name": "a.jpg", "n": NaN}', _nothing, "column 'n' holds NaN"),
    ("Infinity", b'{"file_name": "a.jpg", "n": Infinity}', _nothing, "column 'n' holds Infinity"),
    ("mixed types", b'{"file_name": "b.jpg", "n": "one"}', _nothing, "is a string here but an integer on line 1"),
    ("int over int64", b'{"file_name": "b.jpg", "n": 9223372036854775808}', _nothing, "outside the 64-bit integers"),
    ("duplicate JSON key", b'{"file_name": "b.jpg", "n": 1, "n": 2}', _nothing, "appears twice in one object"),
    ("lone surrogate value", b'{"file_name": "b.jpg", "c": "\\ud800"}', _nothing, "lone surrogate"),
    ("lone surrogate column", b'{"file_name": "b.jpg", "\\udfff": 1}', _nothing, "lone surrogate"),
    ("lone surrogate file_name", b'{"file_name": "\\ud800.jpg"}', _nothing, "lone surrogate"),
    ("not UTF-8 (a Latin-1 file name)", b'{"file_name": "caf\xe9.jpg"}', _nothing, "not valid UTF-8"),
    ("nesting 100k deep", b'{"file_name": "b.jpg", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", _nothing, "nested"),
    ("nesting 400 deep", b'{"file_name": "b.jpg", "x": ' + b"[" * 400 + b"]" * 400 + b"}", _nothing, "nested 401 deep"),
    ("invalid JSON", b'{"file_name": "b.jpg",', _nothing, "invalid JSON"),
    ("not an object", b'["b.jpg"]', _nothing, "not a JSON object"),
    ("no file_name", b'{"name": "b.jpg"}', _nothing, "no 'file_name'"),
    ("reserved column", b'{"file_name": "b.jpg", "image": 1}', _nothing, "is reserved"),
    ("bad key", b'{"file_name": "b.jpg", "key": "XYZ"}', _nothing, "does not fit the key scheme"),
    ("same file twice", b'{"file_name": "./a.jpg", "n": 2}', _nothing, "is named again (first on line 1)"),
    (
        "line over the limit",
        b'{"file_name": "b.jpg", "c": "' + b"y" * MAX_LINE_BYTES + b'"}',
        _nothing,
        "line is longer than 16 MiB",
    ),
]

#: The cases whose file a wrong check would read forever (a FIFO, /dev/zero): their pack runs in a
#: process of its own, which the timeout ends. The others run in this process (tests/support/cli.py).
READ_FOREVER = {_fifo, _device}


@pytest.mark.slow
@pytest.mark.parametrize(("line", "make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_in_one_line_naming_file_and_line(
    tmp_path: Path, line: bytes, make: Callable[[Path], None], expected: str
) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(tiny_image(1))
    (images / "b.jpg").write_bytes(tiny_image(2))
    make(images)
    meta = tmp_path / "meta.jsonl"
    meta.write_bytes(GOOD + line + b"\n")
    out = tmp_path / "out"
    args = [str(images), str(meta), "-o", str(out), "-q"]
    if make in READ_FOREVER:
        proc = subprocess.run([PACK_SHARDS, *args], capture_output=True, timeout=120, check=False)
        stderr = proc.stderr.decode("utf-8", "replace")
    else:
        proc = run_cli("pack-shards", *args)  # (its stderr decoded as above: UTF-8, errors replaced)
        stderr = proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    named = [text for text in stderr.splitlines() if text.startswith(f"{meta}:")]
    assert len(named) == 1, stderr
    assert named[0].startswith(f"{meta}:2: ") and expected in named[0], stderr
    assert not out.exists()


@pytest.mark.slow
def test_folders_whose_names_are_not_utf8_pack_and_verify(tmp_path: Path) -> None:
    """IMAGES_DIR and OUT_DIR named in bytes that are not UTF-8 (Latin-1 systems, old archives)."""
    root = os.fsencode(tmp_path)
    images = os.path.join(root, b"im\xe9ges")
    out = os.path.join(root, b"d\xe9j\xe0")
    os.mkdir(images)
    with open(os.path.join(images, b"a.jpg"), "wb") as f:
        f.write(tiny_image(1))
    meta = tmp_path / "meta.jsonl"
    meta.write_bytes(GOOD)
    # In this process (tests/support/cli.py), each name as a process finds it in sys.argv: os.fsdecode's
    # str, each byte that is not UTF-8 a lone surrogate.
    proc = run_cli("pack-shards", os.fsdecode(images), str(meta), "-o", os.fsdecode(out), "-q")
    assert proc.returncode == 0, proc.stderr
    check = run_cli("shardkit", "verify", os.fsdecode(out), "--deep", "-q")
    assert check.returncode == 0, check.stderr
    card = Path(os.fsdecode(os.path.join(out, b"README.md"))).read_text(encoding="utf-8")
    assert "# d\ufffdj\ufffd" in card  # the title: what is not UTF-8 replaced, the card stays text


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
def test_line_separators_inside_values_pack_verify_and_read_back(tmp_path: Path, fmt: str) -> None:
    """U+2028, U+0085 and a form feed are text JSON leaves unescaped: a reader that split
    metadata.jsonl with str.splitlines() cut such a row in two."""
    import shardkit

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(tiny_image(1))
    caption = "one\u2028two\x85three\x0cfour"
    meta = tmp_path / "meta.jsonl"
    meta.write_text(json.dumps({"file_name": "a.jpg", "caption": caption}, ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    proc = run_cli("pack-shards", images, meta, "-o", out, "-q", "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    check = run_cli("shardkit", "verify", out, "--deep", "-q")
    assert check.returncode == 0, check.stdout + check.stderr
    assert [row["caption"] for row in shardkit.stream(str(out))] == [caption]
