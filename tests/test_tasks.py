"""The task loop (shardkit.tasks): local worker processes, what they do on a signal or when one
dies, and when a pack's workers run. (Dask: tests/test_cluster.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

import shardkit.packfinish
import shardkit.packstage
import shardkit.packwrite
from shardkit.check import plan_ranges
from shardkit.errors import ShardkitError
from shardkit.pack import pack
from shardkit.tasks import LocalPool, run_tasks, task_executor
from tests.support.packing import config_for

ROOT = Path(__file__).resolve().parent.parent


def pool_workers() -> list[psutil.Process]:
    """This process's worker processes: the forkserver's children (the forkserver and the
    resource tracker are this process's own, and stay while it lives)."""
    return [worker for child in psutil.Process().children() for worker in child.children()]


def test_worker_killed_mid_job_is_reported_and_the_rerun_completes(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(30)
    out = tmp_path / "out"
    # Every shard's task kills its worker (the function is sent to the workers by name).
    monkeypatch.setattr(shardkit.packwrite, "write_shard", die_writing)
    # Shards by key prefix: several, so they go to worker processes (one shard would be written here).
    with pytest.raises(ShardkitError, match=r"the worker running data/.*\.zip died \(exit code -9\); re-run"):
        pack(config_for(corpus, out, jobs=2, prefix_length=1))
    monkeypatch.undo()
    summary = pack(config_for(corpus, out, jobs=2, prefix_length=1))
    assert summary.rows == 30
    manifest = json.loads((out / "shards.json").read_text())
    assert sum(s["rows"] for s in manifest["shards"]) == 30


def die_writing(job: object) -> None:
    """Run in a worker in place of write_shard: die as a worker killed mid-job does."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_pool_with_no_jobs_closes_cleanly() -> None:
    with LocalPool(2, 0) as pool:
        assert list(run_tasks(str, [], names=[], executor=pool, what="test")) == []
    assert pool_workers() == []


def loaded(module: str) -> tuple[int, bool]:
    """Run in a worker: its pid, and whether ``module`` was imported before any task asked for it."""
    return os.getpid(), module in sys.modules


def kill_self(signum: int) -> int:
    """Run in a worker: die of ``signum`` (0 sends no signal)."""
    os.kill(os.getpid(), signum)
    return os.getppid()


def test_workers_have_the_task_modules_and_serve_one_phase_after_another() -> None:
    seen = []
    for _ in range(2):  # the check phase, then the write phase: a pool each
        with task_executor(2, None, 4) as pool:
            assert isinstance(pool, LocalPool)
            seen.append(list(run_tasks(loaded, ["shardkit.writer"] * 4, names=list("abcd"), executor=pool, what="t")))
    assert [len(results) for results in seen] == [4, 4]
    assert all(was_loaded for results in seen for _, was_loaded in results)  # the forkserver imported it
    assert os.getpid() not in {pid for results in seen for pid, _ in results}
    assert pool_workers() == []  # each phase's workers are gone when its block ends


def test_workers_are_never_forked_from_a_threaded_caller() -> None:
    """pytest-timeout's thread is alive here: a worker is forked by the forkserver, not by us."""
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    with task_executor(2, None, 2) as pool:
        parents = set(run_tasks(kill_self, [0, 0], names=["a", "b"], executor=pool, what="t"))
    assert os.getpid() not in parents and len(parents) == 1


FREED_MEMORY = """
import os, subprocess
from shardkit.tasks import give_back_freed_memory, keep_freed_memory

def refuse(*args, **kwargs):
    raise AssertionError("a process was started")

subprocess.Popen = refuse  # (ctypes.util.find_library runs ldconfig in one: a fork of this process)
os.fork = refuse

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

keep_freed_memory()  # (as remux's processes run: the heap is trimmed at 512 MB free only)
blocks = [bytes(2000) for _ in range(100_000)]  # 200 MB in glibc's heap (past pymalloc's 512 bytes)
kept = blocks[::50]  # every 50th outlives the phase: the heap cannot shrink from its top
del blocks
before = rss()
give_back_freed_memory()
print(before, rss())
"""


def test_freed_memory_goes_back_to_the_system_and_no_process_is_started_for_it() -> None:
    """A pack's main process gives back what its check and plan freed before its write workers
    start (glibc keeps memory freed below live objects); neither malloc call forks."""
    result = subprocess.run([sys.executable, "-c", FREED_MEMORY], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    before, after = map(int, result.stdout.split())
    assert before > 150e6  # the freed blocks were still the process's
    assert after < before - 120e6, (before, after)


def test_a_worker_that_dies_is_an_error_naming_its_task_and_leaves_no_worker() -> None:
    with pytest.raises(ShardkitError) as raised, task_executor(2, None, 2) as pool:
        list(run_tasks(kill_self, [9, 0], names=["the task", "other"], executor=pool, what="t"))
    assert str(raised.value) == "the worker running the task died (exit code -9); re-run to resume"
    assert pool_workers() == []


class Unpicklable(Exception):
    def __init__(self, path: str, line: int) -> None:  # pickles as (message,): does not unpickle
        super().__init__(f"{path}:{line}: odd")


def raise_odd(path: str) -> None:
    raise Unpicklable(path, 3)


def raise_value_error(n: int) -> None:
    raise ValueError(f"bad {n}")


def test_a_task_error_reaches_the_caller_even_one_that_does_not_unpickle() -> None:
    with pytest.raises(ShardkitError) as raised, task_executor(2, None, 2) as pool:
        list(run_tasks(raise_odd, ["a.jsonl", "b.jsonl"], names=["a", "b"], executor=pool, what="t"))
    assert str(raised.value) in {"Unpicklable: a.jsonl:3: odd", "Unpicklable: b.jsonl:3: odd"}
    with pytest.raises(ValueError, match=r"^bad [12]$"), task_executor(2, None, 2) as pool:  # its own type
        list(run_tasks(raise_value_error, [1, 2], names=["a", "b"], executor=pool, what="t"))
    assert pool_workers() == []


STOP_SCRIPT = """
import sys, threading
from pathlib import Path
from shardkit.errors import ShardkitError
from shardkit.tasks import LocalPool, run_tasks
from tests.test_tasks import mark_and_wait

if __name__ == "__main__":
    log = sys.argv[1]
    try:
        with LocalPool(1, 3) as pool:  # one worker: the second and third tasks wait in the queue
            tasks = [(log, 1), (log, 2), (log, 3)]
            list(run_tasks(mark_and_wait, tasks, names=["1", "2", "3"], executor=pool, what="t"))
    except KeyboardInterrupt:
        print("interrupted")
        raise SystemExit(130)
    except ShardkitError as exc:
        print(exc)
        raise SystemExit(1)
"""


def mark_and_wait(task: tuple[str, int]) -> None:
    """Run in a worker: note the start, wait forever (as a read of a hung file), note the cleanup."""
    log, n = task
    with open(log, "a") as f:
        f.write(f"started {n}\n")
    try:
        threading.Event().wait()
    finally:
        with open(log, "a") as f:
            f.write(f"cleaned {n}\n")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM to the worker"])
def test_a_stopped_worker_cleans_up_and_starts_no_queued_task(tmp_path: Path, how: str) -> None:
    log = tmp_path / "log"
    proc = subprocess.Popen(
        [sys.executable, "-c", STOP_SCRIPT, str(log)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        everyone = psutil.Process(proc.pid).children(recursive=True)
        if how == "Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole process group
        else:
            worker = next(p for p in everyone if p.ppid() != proc.pid)
            worker.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert log.read_text() == "started 1\ncleaned 1\n"  # cleaned up, and never took task 2
    assert psutil.wait_procs(everyone, timeout=10)[1] == []  # no process left behind
    assert stderr == ""  # no traceback, no warning of leaked semaphores
    if how == "Ctrl-C":
        assert (proc.returncode, stdout) == (130, "interrupted\n")
    else:  # a worker stopped by someone else: the run stops, naming its task
        assert (proc.returncode, stdout) == (1, "the worker running 1 died (exit code 130); re-run to resume\n")


@pytest.mark.parametrize("check", ["here", "split by size", "own workers"])
def test_the_check_splits_by_the_file_alone_and_the_writers_are_gone_before_the_finish(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> None:  # type: ignore[no-untyped-def]
    """How the check is split depends on the file (and --check-range-bytes) alone: a file of
    rows with keys under 8 MiB is checked in one pass here; ranges run as tasks on workers of
    their own. The write phase's workers are gone before the finish phase (so its memory does
    not add to theirs)."""
    events: list[str] = []
    real_check_range = shardkit.packstage.check_range
    real_run_tasks = shardkit.packwrite.run_tasks

    def noting_check_range(*args: Any, **kw: Any) -> Any:
        events.append("check here")
        return real_check_range(*args, **kw)

    def noting_run_tasks(fn: Any, items: Any, *, what: str, executor: Any, **kw: Any) -> Any:
        events.append(f"{len(items)} {what} tasks{' on workers' if isinstance(executor, LocalPool) else ''}")
        return real_run_tasks(fn, items, what=what, executor=executor, **kw)

    real_preview = shardkit.packfinish.write_preview

    def noting_preview(*args: Any, **kw: Any) -> Any:  # the finish phase: the writers are gone
        events.append(f"preview beside {len(pool_workers())} workers")
        return real_preview(*args, **kw)

    monkeypatch.setattr(shardkit.packfinish, "write_preview", noting_preview)
    for stage in (shardkit.packstage, shardkit.packwrite):  # the check's tasks, the writes
        monkeypatch.setattr(stage, "run_tasks", noting_run_tasks)
    if check != "own workers":  # (range tasks are sent to workers by reference: keep the real one)
        monkeypatch.setattr(shardkit.packstage, "check_range", noting_check_range)
    corpus = make_corpus(80)
    long = {"caption": "x" * 30_000} if check == "split by size" else {}  # then 2.4 MB of metadata
    keyed = [{**row, "key": hashlib.md5(row["file_name"].encode()).hexdigest(), **long} for row in corpus.rows]
    corpus.write_meta(keyed)
    config = config_for(corpus, tmp_path / "out", jobs=2, target_shard_bytes=20_000)
    summary = pack(replace(config, check_range_bytes=2048) if check == "own workers" else config)
    assert summary.written_shards > 2 and summary.rows == 80
    writes = f"{summary.written_shards} write tasks on workers"
    ranges = len(plan_ranges(str(corpus.meta), 2048))
    assert (
        events
        == {
            "here": ["check here", writes, "preview beside 0 workers"],
            "split by size": ["check here", writes, "preview beside 0 workers"],  # keyed, under 8 MiB: one pass
            "own workers": [f"{ranges} check tasks on workers", writes, "preview beside 0 workers"],
        }[check]
    )


REPO = Path(__file__).resolve().parent.parent


def _pack_cli(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    example = REPO / "example_datasets" / "yfcc-mini"
    args = [sys.executable, "-m", "shardkit.cli", "pack", str(example / "images"), str(example / "metadata.jsonl")]
    return subprocess.run(
        # 16 shards (by key prefix), so the worker processes write them
        [*args, "-o", str(out), "-j", "2", "-q", "--prefix-length", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_tmpdir_too_long_for_the_forkserver_packs_with_spawned_workers(tmp_path: Path) -> None:
    """The forkserver listens on a Unix socket under TMPDIR, whose path has a 107-byte limit; a
    longer TMPDIR (common for cluster jobs) packs all the same, byte for byte."""
    long_tmp = tmp_path / ("t" * 120)
    long_tmp.mkdir()
    plain = _pack_cli(tmp_path / "plain", dict(os.environ))
    long = _pack_cli(tmp_path / "long", {**os.environ, "TMPDIR": str(long_tmp)})
    assert (plain.returncode, long.returncode) == (0, 0), long.stderr
    assert long.stderr == ""
    files = sorted(p.relative_to(tmp_path / "plain") for p in (tmp_path / "plain" / "data").rglob("*.zip"))
    assert len(files) == 16
    for rel in [*files, Path("shards.json")]:
        assert (tmp_path / "long" / rel).read_bytes() == (tmp_path / "plain" / rel).read_bytes()


def square(x: int) -> int:
    return x * x


def test_dask_tasks_carry_their_names_as_keys() -> None:
    """On a Dask cluster each task's key names the run's kind and the task (what the dashboard shows)."""
    from distributed import Client, LocalCluster, get_task_stream

    from shardkit.tasks import DaskExecutor

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        executor = DaskExecutor(client)
        names = ["data/0.zip", "data/1.zip", "data/2.zip"]
        with get_task_stream(client) as stream:
            assert sorted(run_tasks(square, [1, 2, 3], names=names, executor=executor, what="write")) == [1, 4, 9]
        keys = sorted(str(task["key"]) for task in stream.data)
        executor.shutdown()
    [run] = {key.split("-")[2] for key in keys}
    assert keys == [f"shardkit-write-{run}-{name}" for name in names]
