"""The shard writer's parts: changed files and the worker processes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

import shardkit.pack
from shardkit.check import plan_ranges
from shardkit.errors import ShardkitError
from shardkit.inputfile import SourceChanged
from shardkit.pack import PackConfig, pack
from shardkit.worker import WorkerPool
from tests.conftest import Corpus


def config_for(corpus: Corpus, out: Path, **kw: object) -> PackConfig:
    return PackConfig(images_dir=str(corpus.images), metadata_path=str(corpus.meta), out_dir=str(out), **kw)  # type: ignore[arg-type]


def test_file_changed_during_a_parallel_run_is_an_error_naming_it(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(60)
    out = tmp_path / "out"
    original = shardkit.pack._reconcile

    def grow_then_reconcile(*args: Any, **kw: Any) -> Any:
        # Grow one file between the check and the write: the planned sizes no longer hold.
        with open(corpus.images / corpus.rows[7]["file_name"], "ab") as f:
            f.write(b"more")
        return original(*args, **kw)

    monkeypatch.setattr(shardkit.pack, "_reconcile", grow_then_reconcile)
    with pytest.raises(SourceChanged, match=r"img_0007\.jpg \(metadata line 8\): file changed since it was checked"):
        pack(config_for(corpus, out, jobs=2))
    assert not (out / "shards.json").exists()
    assert list((out / ".shardkit" / "tmp").glob("*")) == []  # nothing half-written left behind


def test_worker_killed_mid_job_is_reported_and_the_rerun_completes(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(30)
    out = tmp_path / "out"
    # Every shard's task kills its worker (the function is sent to the workers by name).
    monkeypatch.setattr(shardkit.pack, "write_shard", die_writing)
    with pytest.raises(ShardkitError, match=r"the worker running data/.*\.zip died \(exit code -9\); re-run"):
        pack(config_for(corpus, out, jobs=2))
    monkeypatch.undo()
    summary = pack(config_for(corpus, out, jobs=2))
    assert summary.rows == 30
    manifest = json.loads((out / "shards.json").read_text())
    assert sum(s["rows"] for s in manifest["shards"]) == 30


def die_writing(job: object) -> None:
    """Run in a worker in place of write_shard: die as a worker killed mid-job does."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_pool_with_no_jobs_closes_cleanly() -> None:
    with WorkerPool(2) as pool:
        assert list(pool.map_unordered(str, [])) == []


def loaded(module: str) -> tuple[int, bool]:
    """Run in a worker: its pid, and whether ``module`` was imported before any task asked for it."""
    import sys

    return os.getpid(), module in sys.modules


def kill_self(signum: int) -> None:
    """Run in a worker: die of ``signum``."""
    os.kill(os.getpid(), signum)


def test_a_pool_preloads_and_serves_several_phases() -> None:
    with WorkerPool(2, ["tabnanny"]) as pool:  # a module neither the worker nor this test module imports
        first = list(pool.map_unordered(loaded, ["tabnanny"] * 4))
        second = list(pool.map_unordered(loaded, ["tabnanny"] * 4))
    assert all(was_loaded for _, was_loaded in first + second)
    assert {pid for pid, _ in second} <= {pid for pid, _ in first}  # the same processes, not new ones


FORK_SCRIPT = """
import os, sys, threading
import tabnanny  # imported here and nowhere else: a forked worker has it, a started one does not
from shardkit.errors import ShardkitError
from shardkit.worker import WorkerPool
from tests.test_writer import kill_self, loaded

if sys.argv[1] == "threaded":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
if sys.argv[1] == "refused":  # the second fork fails: the first worker must not be left behind
    import errno, shardkit.worker
    real_fork, forks = os.fork, []
    def failing_fork():
        forks.append(1)
        if len(forks) == 2:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real_fork()
    shardkit.worker.os.fork = failing_fork
    try:
        WorkerPool(2, fork=True)
    except OSError as exc:
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            print(exc.strerror, "and no worker left")
    raise SystemExit(0)
with WorkerPool(2, fork=True) as pool:
    if sys.argv[1] == "killed":
        try:
            list(pool.map_unordered(kill_self, [9], ["the task"]))
        except ShardkitError as exc:
            print(exc)
        raise SystemExit(0)
    seen = sorted(set(pool.map_unordered(loaded, ["tabnanny"] * 6)))
print(pool.forked, len(seen), all(has for _, has in seen), os.getpid() not in {pid for pid, _ in seen})
"""


def run_fork_script(mode: str) -> str:
    """FORK_SCRIPT in a fresh process (one thread, unlike pytest's with its timeout thread)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-c", FORK_SCRIPT, mode]
    run = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("single", "True 2 True True"),  # forked: ready at once, with this process's modules
        ("threaded", "False 2 False True"),  # another thread alive: started the plain way
    ],
)
def test_a_pool_forks_its_workers_only_from_a_single_threaded_process(mode: str, expected: str) -> None:
    assert run_fork_script(mode) == expected


def test_a_fork_refused_midway_leaves_no_worker_behind() -> None:
    assert run_fork_script("refused") == "Resource temporarily unavailable and no worker left"


def test_a_forked_worker_that_dies_is_an_error_naming_its_task() -> None:
    assert run_fork_script("killed") == "the worker running the task died (exit code -9); re-run to resume"


@pytest.mark.parametrize("check", ["here", "on the writers", "own workers"])
def test_write_workers_start_before_a_check_that_can_use_them(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> None:  # type: ignore[no-untyped-def]
    """The write phase's workers start (and import the writer) before a check in this process,
    or check a small file of rows with keys themselves, split between them; a large file's range
    tasks have workers of their own, and the writers start after them (so no worker carries a
    large check's memory into the write phase). Either way the writers are gone before the
    finish phase (so its memory does not add to theirs)."""
    import shardkit.worker

    events: list[str] = []
    real_popen = shardkit.worker.subprocess.Popen
    real_check_range = shardkit.pack.check_range
    real_run_tasks = shardkit.pack.run_tasks

    def counting_popen(args: list[str], **kw: Any) -> Any:
        events.append("writer" if "shardkit.writer" in args else "worker")
        return real_popen(args, **kw)

    real_pool = shardkit.pack.WorkerPool

    def noting_pool(size: int, preload: Any = (), *, fork: bool = False) -> Any:
        events.append("writers, early" if fork else "writers, after the check")
        return real_pool(size, preload, fork=fork)

    def noting_check_range(*args: Any, **kw: Any) -> Any:
        events.append("check here")
        return real_check_range(*args, **kw)

    def noting_run_tasks(fn: Any, items: Any, names: Any, what: str, **kw: Any) -> Any:
        events.append(f"{len(items)} {what} tasks{' on the writers' if kw.get('pool') else ''}")
        return real_run_tasks(fn, items, names, what, **kw)

    real_preview = shardkit.pack.write_preview

    def noting_preview(*args: Any, **kw: Any) -> Any:  # the finish phase: the writers are gone
        events.append(f"preview beside {len(psutil.Process().children())} workers")
        return real_preview(*args, **kw)

    monkeypatch.setattr(shardkit.worker.subprocess, "Popen", counting_popen)
    monkeypatch.setattr(shardkit.worker, "can_fork", lambda: False)  # (pytest-timeout's thread forbids it anyway)
    monkeypatch.setattr(shardkit.pack, "WorkerPool", noting_pool)
    monkeypatch.setattr(shardkit.pack, "write_preview", noting_preview)
    monkeypatch.setattr(shardkit.pack, "run_tasks", noting_run_tasks)
    if check == "here":  # (range tasks are sent to workers by reference: keep the real one)
        monkeypatch.setattr(shardkit.pack, "check_range", noting_check_range)
    corpus = make_corpus(80)
    long = {"caption": "x" * 30_000} if check == "on the writers" else {}  # then 2.4 MB of metadata
    keyed = [{**row, "key": hashlib.md5(row["file_name"].encode()).hexdigest(), **long} for row in corpus.rows]
    corpus.write_meta(keyed)
    config = config_for(corpus, tmp_path / "out", jobs=2, target_shard_bytes=20_000)
    summary = pack(replace(config, check_range_bytes=2048) if check == "own workers" else config)
    assert summary.written_shards > 2 and summary.rows == 80
    writes = f"{summary.written_shards} write tasks on the writers"
    assert (
        events
        == {
            "here": ["writers, early", "writer", "writer", "check here", writes, "preview beside 0 workers"],
            "on the writers": [
                "writers, early",
                "writer",
                "writer",
                "2 check tasks on the writers",
                writes,
                "preview beside 0 workers",
            ],
            "own workers": [
                f"{len(plan_ranges(str(corpus.meta), 2048))} check tasks",
                "worker",
                "worker",
                "writers, after the check",
                "writer",
                "writer",
                writes,
                "preview beside 0 workers",
            ],
        }[check]
    )
