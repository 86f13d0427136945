"""A file changed or swapped between the check and the write is refused, never published.

Each test changes an input file at one fixed point, after the check and before the writer
reads it (``shardkit.pack.reconcile``, the resume stage, which pack looks up there when it
calls it, runs between the two), so no test depends on timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import types
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardkit.pack
from shardkit import readahead
from shardkit.inputfile import OutsideImagesDir, SourceChanged, open_inside
from shardkit.pack import pack
from shardkit.staging import StagedRow
from tests.support.corpus import Corpus
from tests.support.packing import config_for

PACK_SHARDS = str(Path(sys.executable).parent / "pack-shards")


def after_the_check(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    original = shardkit.pack.reconcile

    def change_then_reconcile(*args: Any, **kw: Any) -> Any:
        change()
        return original(*args, **kw)

    monkeypatch.setattr(shardkit.pack, "reconcile", change_then_reconcile)


def same_size_other_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def assert_nothing_published(out: Path, key: str | None = None) -> None:
    """No manifest, nothing half-written; the shards written whole (kept for the re-run to
    resume) do not hold the row of ``key``."""
    assert not (out / "shards.json").exists()
    assert not list((out / ".shardkit" / "tmp").glob("*"))
    written = [
        json.loads(line)["key"] for meta in out.glob("metadata/*.jsonl") for line in meta.read_text().splitlines()
    ]
    assert key not in written


def rewrite_in_place(path: Path) -> None:
    data = same_size_other_bytes(path)
    with open(path, "r+b") as f:  # the same file (inode), other bytes
        f.write(data)


def swap_for_symlink_outside(path: Path, outside: Path) -> None:
    outside.write_bytes(same_size_other_bytes(path))
    path.unlink()
    path.symlink_to(outside)


def swap_for_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)  # opening it to read would wait for a writer forever


@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
@pytest.mark.parametrize("keys", ["given", "content"])
@pytest.mark.parametrize("change", ["rewrite", "symlink outside", "fifo"])
@pytest.mark.parametrize("big", [False, True], ids=["ring", "copied in chunks"])
def test_a_file_changed_after_the_check_is_refused_and_nothing_is_published(
    make_corpus: Callable[..., Corpus],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
    keys: str,
    change: str,
    big: bool,
) -> None:
    corpus = make_corpus(12, with_keys=keys == "given")
    victim = corpus.images / corpus.rows[5]["file_name"]
    key = corpus.rows[5].get("key") or hashlib.sha256(victim.read_bytes()).hexdigest()[:32]
    outside = tmp_path / "outside.jpg"
    out = tmp_path / "out"
    changes: dict[str, Callable[[], None]] = {
        "rewrite": lambda: rewrite_in_place(victim),
        "symlink outside": lambda: swap_for_symlink_outside(victim, outside),
        "fifo": lambda: swap_for_fifo(victim),
    }
    after_the_check(monkeypatch, changes[change])
    # A ring of 2 bytes: every file is too big for it, and is copied in chunks at its turn.
    config = config_for(corpus, out, format=fmt, jobs=1, **({"prefetch_bytes": 2} if big else {}))
    expected = {
        "rewrite": "file changed since it was checked (modified since)",
        "symlink outside": "resolves outside IMAGES_DIR",
        "fifo": "not a regular file",
    }[change]
    with pytest.raises(SourceChanged) as caught:
        pack(config)
    message = str(caught.value)
    assert expected in message and "(metadata line 6)" in message and str(victim) in message
    assert "\n" not in message
    assert_nothing_published(out, key)


@pytest.mark.slow
def test_the_cli_refuses_in_one_line_and_a_rerun_packs_the_file_as_it_is_now(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    """The CLI: one line naming the file and line, exit 1; after the change, a re-run packs it
    (keys given: with content keys the changed file has another key, and the re-run says so)."""
    corpus = make_corpus(40, with_keys=True)
    out = tmp_path / "out"
    victim = corpus.images / corpus.rows[3]["file_name"]
    # The change happens inside the CLI's own process, after its check: the hook swaps the file.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, shardkit.pack\n"
        "_real = shardkit.pack.reconcile\n"
        "def _swap(*a, **k):\n"
        f"    path = {str(victim)!r}\n"
        "    data = open(path, 'rb').read()\n"
        "    open(path, 'r+b').write(data[:-1] + bytes([data[-1] ^ 0xFF]))\n"
        "    return _real(*a, **k)\n"
        "shardkit.pack.reconcile = _swap\n"
    )
    # The hook first, then the folders PYTHONPATH held (the code under test among them).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    cmd = [PACK_SHARDS, str(corpus.images), str(corpus.meta), "-o", str(out), "-j", "1", "-q"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert first.returncode == 1
    assert "Traceback" not in first.stderr
    lines = [line for line in first.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, first.stderr
    assert f"{victim} (metadata line 4): file changed since it was checked" in lines[0]
    assert_nothing_published(out)
    rerun = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    manifest = json.loads((out / "shards.json").read_text())
    assert manifest["totals"]["rows"] == 40


def test_a_content_keyed_file_whose_bytes_no_longer_hash_to_its_key_is_refused(tmp_path: Path) -> None:
    """Beneath the stamp, the writer hashes a content-keyed file's bytes itself (both ways of reading)."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"checked bytes")
    (images / "b.jpg").write_bytes(b"x" * 40)
    key_a = hashlib.sha256(b"other bytes!!").hexdigest()[:32]  # same size, not these bytes
    key_b = hashlib.sha256(b"x" * 40).hexdigest()[:32]
    rows = [
        StagedRow(key_b, 1, 40, ".jpg", "b.jpg", "{}", content_keyed=True),
        StagedRow(key_a, 2, 13, ".jpg", "a.jpg", "{}", content_keyed=True),
    ]
    for ring in (1 << 10, 16):  # in the ring; copied in chunks (BigFile)
        pattern = rf"a\.jpg \(metadata line 2\): .*no longer hash to its key {key_a}"
        with (
            pytest.raises(SourceChanged, match=pattern),
            readahead.read_in_order(rows, str(images), threads=2, ring_bytes=ring) as files,
        ):
            for _, _, data, _ in files:
                if isinstance(data, readahead.BigFile):
                    with data:
                        data.read_all()


def test_a_content_keyed_file_whose_bytes_are_not_those_hashed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A content key staged with the CRC-32 of the bytes the check hashed (as pack stages it): the
    writer compares the CRC of the bytes it writes with it, both ways of reading, and hashes nothing."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"written bytes")
    (images / "b.jpg").write_bytes(b"x" * 40)
    checked = b"hashed bytes!"  # same size as a.jpg's, as a rewrite that kept the stamp would leave
    key_a = hashlib.sha256(checked).hexdigest()[:32]
    key_b = hashlib.sha256(b"x" * 40).hexdigest()[:32]

    def no_hashing(*_: object) -> None:
        raise AssertionError("hashed again")

    monkeypatch.setattr(readahead, "hashlib", types.SimpleNamespace(sha256=no_hashing))
    rows = [
        StagedRow(key_b, 1, 40, ".jpg", "b.jpg", "{}", content_keyed=True, crc=zlib.crc32(b"x" * 40)),
        StagedRow(key_a, 2, 13, ".jpg", "a.jpg", "{}", content_keyed=True, crc=zlib.crc32(checked)),
    ]
    for ring in (1 << 10, 16):  # in the ring; copied in chunks (BigFile)
        read = []
        with (
            pytest.raises(SourceChanged, match=rf"a\.jpg \(metadata line 2\): .*not those hashed for its key {key_a}"),
            readahead.read_in_order(rows, str(images), threads=2, ring_bytes=ring) as files,
        ):
            for row, _, data, _ in files:
                if isinstance(data, readahead.BigFile):
                    with data:
                        data.read_all()
                read.append(row.source)
        assert read == ["b.jpg"]  # the row before, as checked, is read


def test_open_inside_follows_symlinks_that_stay_inside_only(tmp_path: Path) -> None:
    images = tmp_path / "images"
    (images / "sub").mkdir(parents=True)
    (images / "sub" / "real.jpg").write_bytes(b"inside")
    (tmp_path / "secret.jpg").write_bytes(b"outside")
    (images / "inside-link.jpg").symlink_to(images / "sub" / "real.jpg")
    (images / "outside-link.jpg").symlink_to(tmp_path / "secret.jpg")
    (images / "dir-link").symlink_to(tmp_path)
    inside = os.path.join(os.path.realpath(images), "")
    fd, st = open_inside(str(images / "inside-link.jpg"), inside)
    try:
        assert os.read(fd, 100) == b"inside" and st.st_size == 6
    finally:
        os.close(fd)
    for name in ("outside-link.jpg", "dir-link/secret.jpg"):
        with pytest.raises(OutsideImagesDir, match="resolves outside IMAGES_DIR"):
            open_inside(str(images / name), inside)
    os.mkfifo(images / "pipe.jpg")
    with pytest.raises(OutsideImagesDir, match="not a regular file"):
        open_inside(str(images / "pipe.jpg"), inside)
