"""Crash safety: a packer killed anywhere (SIGKILL, disk full) resumes to byte-identical output.

SIGKILL gives no chance to clean up, so these tests check what is on disk at every moment is
safe: finished shards only appear whole (renamed from ``.shardkit/tmp``), and a rerun keeps
exactly the shards that match their records and redoes the rest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main
from tests.support.cli import run_cli
from tests.support.corpus import Corpus, tree_bytes

PACK_SHARDS = str(Path(sys.executable).parent / "pack-shards")
# 600 small images with a 40 KB cap: 16 prefix groups of ~45 KB, most split in two -> about 30 shards.
SHAPE = ["--target-shard-size", "20KB", "--max-shard-size", "40KB", "--jobs", "2"]


def pack(corpus: Corpus, out: Path, *options: str, own_process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run pack-shards on the corpus into ``out`` to the end (its parent made, as a user makes it):
    in this process (tests/support/cli.py), or in a process of its own (``own_process``: the run
    that resumes killed ones)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    args = [str(corpus.images), str(corpus.meta), "-o", str(out), *options]
    if not own_process:
        return run_cli("pack-shards", *args)
    return subprocess.run([PACK_SHARDS, *args], capture_output=True, text=True, check=False, timeout=300)


def _count(folder: Path, pattern: str) -> int:
    return len(list(folder.glob(pattern))) if folder.is_dir() else 0


def kill_points(out: Path, shards: int) -> list[tuple[str, Callable[[], bool]]]:
    """Moments across a run, in the order a run meets them, each as a condition on OUT_DIR."""
    work = out / ".shardkit"
    started = time.monotonic()
    points: list[tuple[str, Callable[[], bool]]] = [
        ("just started", lambda: time.monotonic() - started > 0.05),
        ("staging rows", lambda: _count(work / "staging", "*") > 0),
        ("rows sorted", lambda: (work / "staging" / "sorted.tsv").exists()),
        ("a shard being written", lambda: _count(work / "tmp", "*") > 0),
    ]
    for n in range(2, shards, 3):
        points.append((f"{n} shards done", lambda n=n: _count(out / "data", "*.zip") >= n))  # type: ignore[misc]
    points.append(("manifest written", lambda: (out / "shards.json").exists()))
    return points


@pytest.mark.slow
def test_sigkill_at_many_points_then_resume_gives_identical_output(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus(600, with_keys=True)
    reference = tmp_path / "uninterrupted" / "ds"  # same folder name: the card names it
    done = pack(corpus, reference, "-q", *SHAPE)
    assert done.returncode == 0, done.stderr
    shards = _count(reference / "data", "*.zip")
    assert shards >= 24

    out = tmp_path / "killed" / "ds"
    out.parent.mkdir()
    killed_at = []
    for name, reached in kill_points(out, shards):
        proc = subprocess.Popen(
            [PACK_SHARDS, str(corpus.images), str(corpus.meta), "-o", str(out), "-q", *SHAPE],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: the kill takes the workers too
        )
        deadline = time.monotonic() + 60
        while proc.poll() is None and not reached() and time.monotonic() < deadline:
            time.sleep(0.002)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed_at.append(name)
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
        # Whatever the moment, data/ holds only whole shards: each is one the reference has.
        for shard in (out / "data").glob("*.zip") if (out / "data").is_dir() else []:
            assert shard.read_bytes() == (reference / "data" / shard.name).read_bytes(), (name, shard.name)
    assert len(killed_at) >= 10, killed_at

    final = pack(corpus, out, "--json", *SHAPE, own_process=True)
    assert final.returncode == 0, final.stderr
    assert tree_bytes(out) == tree_bytes(reference)  # byte-identical to a run never interrupted
    assert _count(out / ".shardkit" / "tmp", "*") == 0
    # Every row exactly once: verify checks members against rows and that no key is in two shards.
    result = CliRunner().invoke(main, ["verify", str(out), "--json", "-q"])
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["rows"] == 600, report["problems"]
    keys = [json.loads(line)["key"] for f in sorted((out / "metadata").glob("*.jsonl")) for line in f.open()]
    assert sorted(keys) == sorted(r["key"] for r in corpus.rows) and len(set(keys)) == 600


# Runs pack-shards in this process (--jobs 1) with open() patched so that files written under
# .shardkit/tmp/ (and every os.pwrite, which only shard files use) fail with ENOSPC once BUDGET
# bytes have been written: a disk filling up.
DISK_FULL_WRAPPER = r"""
import builtins, errno, os, sys
budget = [int(sys.argv[1])]
real_open = builtins.open

class FillingDisk:
    def __init__(self, f, path):
        self._f, self._path = f, path
    def write(self, data):
        if len(data) > budget[0]:
            raise OSError(errno.ENOSPC, "No space left on device", self._path)
        budget[0] -= len(data)
        return self._f.write(data)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def patched_open(file, mode="r", *args, **kwargs):
    f = real_open(file, mode, *args, **kwargs)
    return FillingDisk(f, str(file)) if "w" in mode and "/.shardkit/tmp/" in str(file) else f

real_pwrite = os.pwrite

def patched_pwrite(fd, data, offset):  # how shardkit.shardfile writes shards
    if len(data) > budget[0]:
        raise OSError(errno.ENOSPC, "No space left on device")
    budget[0] -= len(data)
    return real_pwrite(fd, data, offset)

builtins.open = patched_open
os.pwrite = patched_pwrite
from shardkit.cli import pack_shards
sys.argv = ["pack-shards", *sys.argv[2:]]
pack_shards()
"""


@pytest.mark.slow
def test_disk_full_is_one_clear_error_and_the_rerun_completes(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus(600, with_keys=True)
    shape = [*SHAPE[:-2], "--jobs", "1"]
    reference = tmp_path / "uninterrupted" / "ds"
    done = pack(corpus, reference, "-q", *shape)
    assert done.returncode == 0, done.stderr

    out = tmp_path / "full" / "ds"
    out.parent.mkdir()
    budget = str(200_000)  # about 5 shards' worth, then the disk is full mid-shard
    inputs = [str(corpus.images), str(corpus.meta)]
    full = subprocess.run(
        [sys.executable, "-c", DISK_FULL_WRAPPER, budget, *inputs, "-o", str(out), "-q", *shape],
        capture_output=True,
        text=True,
    )
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    assert "No space left on device; free some space, then re-run the same command" in full.stderr
    assert "/.shardkit/tmp/" in full.stderr  # names the file that could not be written
    assert len(full.stderr.strip().splitlines()) == 1
    written = sorted((out / "data").glob("*.zip"))
    assert 0 < len(written) < _count(reference / "data", "*.zip")
    for shard in written:  # only whole shards where finished shards go
        assert shard.read_bytes() == (reference / "data" / shard.name).read_bytes()
    assert _count(out / ".shardkit" / "tmp", "*") == 0  # the partial shard was removed
    assert not (out / "shards.json").exists()

    rerun = pack(corpus, out, "--json", *shape)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["resumed_shards"] == len(written)
    assert tree_bytes(out) == tree_bytes(reference)


@pytest.mark.slow
def test_a_second_packer_is_refused_and_the_first_finishes_unharmed(
    make_corpus: Callable[..., Corpus], tmp_path: Path
) -> None:
    corpus = make_corpus(200, with_keys=True)
    lines = corpus.meta.read_bytes().splitlines(keepends=True)
    fifo = tmp_path / "meta-fifo.jsonl"  # the first packer reads its metadata from us, as slowly as we like
    os.mkfifo(fifo)
    out = tmp_path / "ds"
    first = subprocess.Popen(
        [PACK_SHARDS, str(corpus.images), str(fifo), "-o", str(out), "--json", *SHAPE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open(fifo, "wb") as feed:
            feed.writelines(lines[:100])
            feed.flush()
            second = pack(corpus, out, *SHAPE)
            assert first.poll() is None  # the first is still reading its input
            feed.writelines(lines[100:])
        stdout, stderr = first.communicate(timeout=60)
    finally:
        first.kill()
    assert second.returncode == 2
    assert f"another shardkit run is working on {out}" in second.stderr
    assert first.returncode == 0, stderr
    assert json.loads(stdout)["rows"] == 200
    result = CliRunner().invoke(main, ["verify", str(out), "-q"])
    assert result.exit_code == 0, result.stdout
