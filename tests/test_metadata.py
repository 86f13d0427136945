"""The metadata reader: its fast paths give what the plain code gives, in input order whatever
order the file checks finish in."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import signal
import threading
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardkit import localdisk, metadata
from shardkit.errors import InputProblem
from shardkit.metadata import SourceRecord, check_path, check_row, read_metadata
from shardkit.rowrules import EXT_RE
from shardkit.staging import normal_path
from tests.support.corpus import write_jsonl

ROOT = "/data/images/"


def _plain_check_path(images_root: str, file_name: str) -> str | tuple[str, str]:
    """check_path as first written, with os.path and a regex per row: the reference."""
    control = [c for c in file_name if unicodedata.category(c) == "Cc" or c in "\u2028\u2029"]
    if control:
        return (
            f"file_name {file_name!r} holds {control[0]!r}: a file name holds no control character"
            " (NUL, tab, newline...) or line break; rename the file"
        )
    if file_name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", file_name):
        return f"file_name {file_name!r} is absolute; give it relative to IMAGES_DIR"
    if ".." in file_name.split("/"):
        return f"file_name {file_name!r} contains '..'; paths must stay inside IMAGES_DIR"
    ext = posixpath.splitext(posixpath.basename(file_name))[1]
    if not EXT_RE.fullmatch(ext):
        return (
            f"file_name {file_name!r} has no usable extension (need e.g. .jpg, .png, .flac);"
            " the extension tells loaders the file type"
        )
    return os.path.join(images_root.rstrip("/"), file_name), ext


path_text = st.text(alphabet="a./\\:C\x00j\n\t\r\x85\u2028\u2029\x7f٣ｐ", min_size=1, max_size=12)


@given(path_text)
def test_check_path_decides_as_the_plain_code(file_name: str) -> None:
    assert check_path(ROOT, file_name) == _plain_check_path(ROOT, file_name)


@given(st.text(alphabet="a./", min_size=1, max_size=12).filter(lambda s: not s.startswith("/")))
def test_normal_path_is_normpath(name: str) -> None:
    assert normal_path(name) == posixpath.normpath(name)


def test_column_checks_are_remembered_only_for_good_columns() -> None:
    good = {"file_name": "a.jpg", "caption": "x"}
    assert check_row(good) == ("a.jpg", None, {"caption": "x"})
    assert check_row(dict(good)) == ("a.jpg", None, {"caption": "x"})  # the remembered column set
    bad = {"file_name": "a.jpg", "image": "x"}
    for _ in range(2):  # refused every time, not remembered as good
        assert "reserved" in str(check_row(bad))
    assert "second file column" in str(check_row({"file_name": "a.jpg", "thumb_file_name": "t.jpg"}))


# --- checks in any order, with or without keys: the same results in input order ----------------


def _rows_and_files(tmp_path: Path, n: int, keyed: bool = True) -> tuple[Path, Path]:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(n):
        (images / f"{i:05d}.jpg").write_bytes(b"x" * (i % 7 + 1))
        row: dict[str, Any] = {"file_name": f"{i:05d}.jpg", "n": i}
        if keyed:
            row["key"] = f"{i:032x}"
        rows.append(row)
    rows.insert(100, {"file_name": "missing.jpg", "key": "f" * 32})  # a problem, in its place
    meta = tmp_path / "meta.jsonl"
    write_jsonl(meta, rows)
    return images, meta


def _read(images: Path, meta: Path, threads: int = 4) -> list[SourceRecord | InputProblem]:
    return list(read_metadata(str(meta), str(images), max_file_bytes=1 << 20, threads=threads))


def test_checks_finishing_out_of_order_give_the_same_results_in_input_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever order the file checks finish in (a network mount answers some stats late), the
    reader gives the same records and problems, in input order: here the first batch's stats
    wait until a later batch has been checked, on another thread."""
    images, meta = _rows_and_files(tmp_path, 2000)
    in_order = _read(images, meta, threads=1)
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: "nfs4")  # every batch on the threads
    later_checked = threading.Event()
    real_lstat = os.lstat

    batch = metadata.BATCH
    third, first_end = f"{2 * batch + 22:05d}.jpg", f"{batch:05d}.jpg"

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        name = os.path.basename(str(path))
        if name == third:  # in the third batch of rows
            later_checked.set()
        elif name < first_end:  # the first batch
            later_checked.wait(120)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(metadata.os, "lstat", lstat)
    reordered = _read(images, meta, threads=4)
    monkeypatch.undo()
    assert later_checked.is_set()
    assert in_order == reordered
    # On a local disk, batches that need only stats are checked on the reading thread: the same.
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: "ext4")
    assert _read(images, meta, threads=4) == in_order
    assert [r.line for r in in_order] == list(range(1, 2002))
    assert isinstance(in_order[100], InputProblem) and "file not found" in in_order[100].message
    records = [r for r in in_order if isinstance(r, SourceRecord)]
    assert [r.key for r in records] == [f"{i:032x}" for i in range(2000)]
    assert [r.size for r in records] == [i % 7 + 1 for i in range(2000)]


def test_rows_without_keys_get_the_sha256_of_their_file(tmp_path: Path) -> None:
    images, meta = _rows_and_files(tmp_path, 300, keyed=False)
    rows = _read(images, meta)
    keyed = [r for r in rows if isinstance(r, SourceRecord)]
    assert len(keyed) == 300
    for record in keyed:
        assert record.key == hashlib.sha256((images / record.source).read_bytes()).hexdigest()[:32]


def test_ctrl_c_while_the_first_stat_hangs_stops_the_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dead network mount: the first stat never returns. There every batch is checked on the thread
    # pool; the reading thread only waits for the results, a wait that Ctrl-C interrupts.
    images, meta = _rows_and_files(tmp_path, 200)
    release = threading.Event()
    real_lstat = os.lstat

    returned = threading.Event()

    def hung_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).endswith(".jpg"):
            release.wait(120)
            returned.set()
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(metadata.os, "lstat", hung_lstat)
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: "nfs4")  # a network mount
    # SIGINT to the main thread, as a terminal's Ctrl-C reaches it (the pool's threads block it).
    main = threading.main_thread().ident
    assert main is not None
    threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(read_metadata(str(meta), str(images), max_file_bytes=1 << 20, threads=2))
        # Interrupted while every stat still hung (none had returned): no time is measured.
        assert not returned.is_set()
    finally:
        release.set()
