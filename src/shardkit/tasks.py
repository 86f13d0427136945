"""Run a pack's or remux's tasks in parallel: one loop (:func:`run_tasks`) over any executor.

The tasks are the row checks, one per byte range of the metadata file
(:func:`shardkit.check.check_range`); the shards, one each (:func:`shardkit.writer.write_shard`);
for remux, the batches of source rows (:func:`shardkit.remux.transform_batch`). Each is a function and
one picklable argument, run by :func:`task_executor`'s choice:

* ``--jobs 1``, or a single task: here, one after the other, no pool;
* ``--jobs N``: :class:`LocalPool`, N worker processes on this machine (a
  :class:`concurrent.futures.ProcessPoolExecutor`);
* ``--executor dask``: :class:`DaskExecutor`, tasks on a Dask cluster
  (each task a ``distributed.Client.submit``: :class:`DaskExecutor`), after :meth:`Cluster.check_workers`.

Whatever runs them, the caller (the machine running ``pack`` or ``remux``) keeps what needs the
whole input at once: merging the sorted runs, finding duplicate keys, planning the shards, and
recording each result as it arrives. The output is byte for byte the same either way, and a run
that stops part-way resumes the same way.

Why :class:`LocalPool` is more than a plain ``ProcessPoolExecutor``, whose traps it solves:

* **Start.** Workers come from a forkserver (``spawn`` where there is none), never from a plain
  ``fork`` of this process: forking a process with threads (Dask's, a reader's, pytest's) can copy
  a lock some other thread holds. The forkserver imports the task modules (and the script that
  started this process) once; each worker forked from it has them, so a worker does not import
  the CLI again. The forkserver and multiprocessing's resource tracker stay for the life of the
  process (a second pool, the write phase after the check, forks from the same forkserver).
* **Ctrl-C and SIGTERM.** A worker's first SIGINT (Ctrl-C reaches the whole process group) or
  SIGTERM (sent by :meth:`LocalPool.stop` when the run stops for an error, or by a ``kill``)
  becomes a KeyboardInterrupt in its running task, so a shard's partial file is removed as the
  exception passes; an idle worker just leaves. A plain pool's worker would then take the next
  queued task, so here a stopped worker never starts another: it leaves with ``os._exit(130)``
  once its task has cleaned up, without joining the task's threads (a reader stuck on a hung
  mount never returns). Later signals are ignored: a second exception in the middle of the
  cleanup would cut it short. :meth:`LocalPool.stop` waits for the workers to be gone and the
  pool shut down, so no partial file is left and the pool's semaphores are released before the
  CLI exits (else the resource tracker warns about leaked semaphores on stderr).
* **A worker that dies** (killed, out of memory) breaks a plain pool, and every task in flight
  fails with the same ``BrokenProcessPool``. Here each task records in shared memory the worker
  that runs it, so the error names the task that was running and its worker's exit code (the
  pool then stops the others). A
  shard's partial file sits under ``.shardkit/tmp``, removed when the run ends or by the next one.
* **An exception that pickles but does not unpickle** (a custom ``__init__``) would break a plain
  pool too; here it reaches the caller as a ShardkitError with its type and message.

On a Dask cluster, workers read the inputs and write into OUT_DIR themselves, so OUT_DIR and the
input folders must be on storage every worker sees at the same path (NFS, Lustre, a FUSE mount
of an object store), or OUT_DIR is a URL every worker can reach. :meth:`Cluster.check_workers`
proves that before any task is sent: the client writes a random token under
``OUT_DIR/.shardkit`` and every worker must read it back. A worker that dies takes its running
tasks with it; the scheduler sends them to another worker (up to
``distributed.scheduler.allowed-failures`` times, 3 by default). A shard is written under a
name of its own in ``.shardkit/tmp`` and renamed into place only when whole, so a killed task
leaves at most a partial file there, which the run removes when it ends.

``distributed`` is imported only when asked for: ``pip install './shardkit[dask]'`` from a clone.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import multiprocessing
import os
import pickle
import secrets
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait as wait_for_any
from types import FrameType
from typing import Any, NoReturn, Protocol, TypeVar

from . import __version__
from .errors import ShardkitError, UsageError
from .location import Location, is_url

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
R = TypeVar("R")

TOKEN_NAME = "cluster-token"
MIN_TASK_WINDOW = 8  # Dask tasks submitted ahead when the cluster has few (or no) worker threads yet
#: How long :meth:`LocalPool.stop` lets a stopped worker clean up before killing it.
STOP_SECONDS = 10.0
#: The modules whose functions run as a pack's tasks: the forkserver imports them once for every
#: worker. Remux names its own module to :func:`start_forkserver`: a pack's workers do without
#: it, and every module the forkserver imports is held in each worker's memory.
TASK_MODULES = ("shardkit.tasks", "shardkit.check", "shardkit.writer")
#: How often the caller's wait for results wakes up: the pools' own threads do not block SIGINT,
#: and when the kernel hands a Ctrl-C to one of them, Python raises it in the main thread only
#: once that thread runs again.
_POLL_SECONDS = 0.25


class Tasks(Protocol[T_co]):
    """What :func:`run_tasks` takes: a list, or a sized iterable that makes each item when asked."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[T_co]: ...


class TaskExecutor(Executor):
    """An executor that says how many tasks to keep submitted, can stop at once, and can say
    which task a lost worker was running."""

    #: Enough to keep every worker busy; few enough that the items held in memory (a shard's rows,
    #: for an OUT_DIR URL) are those of the tasks running.
    in_flight: int = 1

    def stop(self) -> None:
        """Stop now (an error or Ctrl-C): cancel what has not started, end what runs."""
        self.shutdown(wait=False, cancel_futures=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: Any) -> None:
        """Leaving a ``with`` block normally waits for the tasks; with an exception, :meth:`stop`."""
        if exc_type is None:
            self.shutdown(wait=True)
        else:
            self.stop()

    def task_error(self, exc: BaseException, future: Future[Any], names: dict[Future[Any], str]) -> BaseException:
        """The error to raise for ``future``, which failed with ``exc``; ``names`` names it and
        the other tasks in flight."""
        return exc

    def submit_task(self, fn: Callable[[T], R], item: T, name: str, what: str) -> Future[R]:
        """Submit one task of kind ``what`` named ``name`` (a cluster shows the name)."""
        return self.submit(fn, item)


def run_tasks(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    names: Sequence[str] | Callable[[T], str],
    executor: Executor | None,
    what: str,
    in_flight: int | None = None,
) -> Iterator[R]:
    """``fn`` on every item; the results as they finish (in any order).

    ``executor`` None runs them here, one after the other. Otherwise at most ``in_flight`` tasks
    are submitted at a time (by default the executor's :attr:`TaskExecutor.in_flight`), items
    taken from ``items`` only as they are submitted (a generator may make them as it reads).
    The first failed task stops the run: what has not started is cancelled and its error raised
    (that of a lost worker names its task, ``names[i]`` or ``names(item)``); so does a
    KeyboardInterrupt. ``what`` ("check", "write", "transform") names the kind of task
    in messages. The caller owns ``executor``: it stops it when this raises
    (:func:`task_executor` does).
    """
    if executor is None:
        for item in items:
            yield fn(item)
        return
    if in_flight is None:
        in_flight = executor.in_flight if isinstance(executor, TaskExecutor) else 2 * (os.cpu_count() or 1)
    queue = ((item, names(item)) for item in items) if callable(names) else iter(zip(items, names, strict=True))
    running: dict[Future[R], str] = {}

    def submit_next() -> None:
        task = next(queue, None)
        if task is not None:
            item, name = task
            if isinstance(executor, TaskExecutor):
                running[executor.submit_task(fn, item, name, what)] = name
            else:
                running[executor.submit(fn, item)] = name

    try:
        for _ in range(max(in_flight, 1)):
            submit_next()
        while running:
            done, _ = wait(running, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
            for future in done:
                name = running.pop(future)
                try:
                    result = future.result()
                except Exception as exc:
                    if not isinstance(executor, TaskExecutor):
                        raise
                    error = executor.task_error(exc, future, {future: name, **running})
                    if error is exc:
                        raise
                    log.debug("%s task %s failed: %s", what, name, exc)
                    raise error from None
                yield result
                submit_next()
    finally:
        for future in running:  # (those already running are stopped by the executor's owner)
            future.cancel()


@contextlib.contextmanager
def task_executor(jobs: int, cluster: Cluster | None, tasks: int) -> Iterator[Executor | None]:
    """Where ``tasks`` tasks run: on ``cluster`` if given, else ``jobs`` local worker processes
    (no more than there are tasks), else (``jobs`` 1, or one task) None: here.

    Leaving the block normally waits for the executor to finish; leaving it with an exception
    (Ctrl-C included) stops it at once (:meth:`TaskExecutor.stop`)."""
    executor: TaskExecutor
    if cluster is not None:
        executor = cluster.executor()
    elif jobs <= 1 or tasks <= 1:
        yield None
        return
    else:
        executor = LocalPool(min(jobs, tasks), tasks)
    with executor:
        yield executor


@functools.cache
def keep_freed_memory() -> None:
    """Let glibc's malloc keep the memory this process frees, for its next allocations, instead of
    giving it back to the system at once (its default: blocks of 128 KB and more are mapped and
    unmapped one by one, and the top of the heap is trimmed past 128 KB free).

    A process that decodes images and reads Parquet frees and allocates buffers of 0.1 to 100 MB
    all the time; given back and taken again, every page of them is a page fault to the kernel
    (docs/performance.md, remux). Called only in processes shardkit owns: a remux worker, and the
    command line's own process; never in a library caller's. No effect where malloc is not glibc's.
    """
    if (libc := _glibc()) is None:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest; a fixed value also stops its adjusting
    libc.mallopt(m_trim_threshold, 512 << 20)


def give_back_freed_memory() -> None:
    """Hand the memory this process has freed back to the system now: pyarrow's pool's (if
    pyarrow is in use) and glibc's heap (``malloc_trim``).

    Both keep what is freed for the next allocations: glibc gives back by itself only the free
    memory at the top of its heap, not what a phase freed below objects that outlive it. A pack's
    main process plans with transient buffers of tens of MB (each shard's metadata table, parsed
    and encoded) and then sits beside its write workers for the rest of the run holding them:
    about 100 MB of a million-row pack (docs/performance.md). A call costs a walk of the heap
    (milliseconds), and changes no setting, so a library caller's process may take it too (unlike
    :func:`keep_freed_memory`). Nothing to give back this way where malloc is not glibc's."""
    if (pyarrow := sys.modules.get("pyarrow")) is not None:
        pyarrow.default_memory_pool().release_unused()
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> Any:
    """glibc's functions in this process (ctypes), or None where malloc is another's (musl,
    macOS). Looked up among what the process has loaded: ``ctypes.util.find_library`` would run
    ``ldconfig`` in a child process, a fork of this one, on every first call."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


# --- local worker processes ------------------------------------------------------------------------


#: The forkserver could not start here (its Unix socket's path, under TMPDIR, was too long).
_forkserver_failed = False


def _start_method() -> str:
    # Never a plain fork (see the module docstring); spawn where there is no forkserver (Windows).
    if "forkserver" in multiprocessing.get_all_start_methods() and not _forkserver_failed:
        return "forkserver"
    return "spawn"


def _ensure_forkserver(modules: tuple[str, ...] = ()) -> None:
    """Start this process's forkserver, with the task modules and ``modules`` imported, unless it
    runs already (at once then) or cannot run here (then :func:`_start_method` says spawn)."""
    global _forkserver_failed
    if _start_method() != "forkserver":
        return
    # "__main__": the script that started this process (the CLI), imported once by the
    # forkserver rather than by each worker. (No effect once this process's forkserver runs: it
    # keeps what it imported.)
    multiprocessing.get_context("forkserver").set_forkserver_preload(["__main__", *TASK_MODULES, *modules])
    from multiprocessing import forkserver, resource_tracker

    try:
        # The tracker first: starting it unblocks SIGINT on the way out, which would end the hold.
        resource_tracker.ensure_running()
        with _ctrl_c_held():
            forkserver.ensure_running()
    except OSError:  # "AF_UNIX path too long" under a long TMPDIR: workers are spawned instead
        _forkserver_failed = True


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT blocked in this thread while it starts a process, which inherits the block.

    A Ctrl-C reaches every process of the group, and a process that is still importing (the
    forkserver's preload, a worker before :func:`_start_worker`) would die of it with a
    KeyboardInterrupt traceback. Blocked, the signal waits: the forkserver discards it when it
    ignores SIGINT after its preload (the block stays, and its workers inherit it), and a worker
    takes it in :func:`_start_worker`, once its handler is in place. Here it arrives when the
    block ends, a moment later: nothing is lost. (Only the main thread takes signals.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def start_forkserver(jobs: int, modules: tuple[str, ...] = ()) -> None:
    """Start the forkserver now, when local worker processes will follow (``jobs`` over 1), so
    its start and imports (with ``modules``, shardkit modules of the caller's own tasks) run while
    the caller works (pack's check phase) instead of before the first task; the pool starts it
    itself otherwise. Only the first start in a process counts: a worker imports a task's module
    the forkserver lacks when it first runs one. (No module that starts threads: the forkserver
    forks its workers, so it must hold one thread.)"""
    if jobs > 1:
        _ensure_forkserver(modules)


class LocalPool(ProcessPoolExecutor, TaskExecutor):
    """``jobs`` worker processes on this machine, for ``tasks`` tasks at most (see the module
    docstring for what it adds to ``ProcessPoolExecutor``)."""

    def __init__(self, jobs: int, tasks: int) -> None:
        _ensure_forkserver()
        context = multiprocessing.get_context(_start_method())
        self._spawns = context.get_start_method() == "spawn"
        self.in_flight = jobs + 1  # one waits, so a worker that finishes starts the next at once
        # Per slot, one for each task in flight (a task's slot is free again once it has
        # succeeded, so a run of any number of tasks, remux's batches read as they go, needs no
        # more): 0 not started, a worker's pid while it runs there, _ENDED once it ended with a
        # result or an error. A worker that dies or is stopped leaves its task's pid. No lock:
        # each entry is written by one worker at a time.
        self._task_states = context.RawArray("q", max(min(tasks, 2 * self.in_flight), 1))
        self._task_of: dict[Future[Any], int] = {}  # the slot of each task submitted and not freed
        self._processes_seen: dict[int, Any] = {}
        super().__init__(max_workers=jobs, mp_context=context, initializer=_start_worker, initargs=(self._task_states,))

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        task = self._free_slot()
        # A worker is started here: spawned from this process (no forkserver), it inherits the block.
        # (Not with the forkserver: its workers have the block from it, and this wait for a
        # worker's pid must stay open to Ctrl-C.)
        with _ctrl_c_held() if self._spawns else contextlib.nullcontext():
            future: Future[R] = super().submit(_run_in_worker, fn, task, args, kwargs)
        self._task_of[future] = task
        # ProcessPoolExecutor has no public way to reach its processes (3.14 adds
        # terminate_workers(), which does not wait for them): stop() signals them and
        # task_error() reads a dead one's exit code.
        processes = getattr(self, "_processes", None)
        if processes is not None:  # (None once shut down)
            self._processes_seen = processes
        return future

    def _free_slot(self) -> int:
        """A slot no task in flight holds (one that failed keeps its slot: it names the task)."""
        for future in [f for f in self._task_of if f.done() and not f.cancelled() and f.exception() is None]:
            del self._task_of[future]
        taken = set(self._task_of.values())
        slot = next((i for i in range(len(self._task_states)) if i not in taken), None)
        if slot is None:
            raise RuntimeError(f"more than {len(self._task_states)} tasks in flight")
        self._task_states[slot] = 0
        return slot

    def stop(self) -> None:
        """Cancel what has not started; SIGTERM the workers (a running task gets a
        KeyboardInterrupt and cleans up, an idle worker leaves) and wait for them to be gone
        (killing one still there after ``STOP_SECONDS``); then shut the pool down."""
        processes = [p for p in list(self._processes_seen.values()) if p.exitcode is None]
        for process in processes:
            with contextlib.suppress(OSError, ValueError):
                process.terminate()
        sentinels = {process.sentinel: process for process in processes}
        deadline = time.monotonic() + STOP_SECONDS
        while sentinels and (left := deadline - time.monotonic()) > 0:
            for ready in wait_for_any(list(sentinels), timeout=left):
                sentinels.pop(ready)
        for process in sentinels.values():  # stuck where no signal reaches (a hung NFS read in C)
            with contextlib.suppress(OSError, ValueError):
                process.kill()
        # Joins the pool's thread, which has seen every worker go; the queues (and their
        # semaphores) are released with the pool.
        self.shutdown(wait=True, cancel_futures=True)

    def task_error(self, exc: BaseException, future: Future[Any], names: dict[Future[Any], str]) -> BaseException:
        if not isinstance(exc, BrokenProcessPool):
            return exc
        # Every task in flight fails with this: name the one whose worker died while running it.
        self.shutdown(wait=True, cancel_futures=True)  # the pool's thread has joined every worker
        codes = {pid: process.exitcode for pid, process in self._processes_seen.items()}
        lost = [(task, pid) for task, pid in enumerate(self._task_states) if pid > 0]
        if not lost and not any(self._task_states):  # no worker ever started a task
            return ShardkitError(
                "the worker processes stopped before they started any task (their error is above);"
                ' a script that runs pack or remux with jobs > 1 needs `if __name__ == "__main__":`'
                " around that call, as every Python multiprocessing program does"
            )
        if not lost:
            return ShardkitError(f"the worker running {names[future]} died; re-run to resume")
        # The pool stops its other workers when one dies (they leave with 130): name the first.
        task, pid = min(lost, key=lambda lost: (codes.get(lost[1]) == 130, lost[0]))
        name = next((n for f, n in names.items() if self._task_of.get(f) == task), names[future])
        return ShardkitError(f"the worker running {name} died (exit code {codes.get(pid)}); re-run to resume")


_ENDED = -1


class _Worker:
    """This worker process's state (one per process, set by :func:`_start_worker`)."""

    def __init__(self, task_states: Any) -> None:
        self.task_states = task_states
        self.task: int | None = None  # running now
        self.stopping = False

    def on_stop_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:  # a second exception in the middle of the cleanup would cut it short
            return
        self.stopping = True
        if self.task is not None:
            raise KeyboardInterrupt  # the task's cleanup runs as it passes; then _run_in_worker leaves
        _leave()  # idle: nothing to clean up

    def leave_if_stopping(self) -> None:
        if self.stopping:
            _leave()


_worker: _Worker | None = None


def in_pool_worker() -> bool:
    """Whether this process is a worker of :class:`LocalPool` (not a Dask worker, not the caller)."""
    return _worker is not None


def _start_worker(task_states: Any) -> None:
    """The pool's initializer, in each worker process."""
    global _worker
    _worker = _Worker(task_states)
    signal.signal(signal.SIGINT, _worker.on_stop_signal)
    signal.signal(signal.SIGTERM, _worker.on_stop_signal)
    # Blocked since the process started (:func:`_ctrl_c_held`): a Ctrl-C that came meanwhile is taken now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _leave() -> NoReturn:
    # Not through the interpreter's exit: it joins the task's threads, and a reader stuck on a
    # hung file never returns. The task's files are closed or removed by now.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(130)


def _run_in_worker(fn: Callable[..., R], task: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    """Run one task in a worker: what the pool sends in place of ``fn(*args, **kwargs)``."""
    worker = _worker
    assert worker is not None
    worker.leave_if_stopping()  # a stopped worker starts no other task
    worker.task_states[task] = os.getpid()
    worker.task = task
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:  # a stop signal (the task cleaned up as it passed), or the task's own
        worker.stopping = True
        raise
    except Exception as exc:
        raise _travelling(exc) from None
    finally:
        # Stopped: leave, the result (or error) unsent; it is not wanted, and the worker must not
        # take the next task. Also after a task that swallowed the KeyboardInterrupt.
        worker.leave_if_stopping()
        worker.task = None  # (a signal from here on finds the worker idle, and it leaves)
        worker.task_states[task] = _ENDED


def _travelling(exc: Exception) -> Exception:
    """``exc``, or where it would not unpickle in the caller (a custom ``__init__``), its message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return ShardkitError(f"{type(exc).__name__}: {exc}")
    return exc


# --- a Dask cluster --------------------------------------------------------------------------------


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(
            "--executor dask needs the Dask distributed scheduler: pip install './shardkit[dask]' (from a clone)"
        ) from None
    return distributed


class DaskExecutor(TaskExecutor):
    """Tasks on a Dask cluster, each a ``Client.submit`` seen as a ``concurrent.futures`` future,
    with a window of tasks submitted ahead of the workers (twice their threads) and the error of
    a task every worker died of.

    Not ``Client.get_executor()``: its futures read the Dask future's status after its result,
    and when the worker holding a finished task's result dies in between, the status is no longer
    "finished" and the result is taken for an error tuple (a TypeError), though the task had
    succeeded. Here a task's outcome is what ``result()`` gives (which waits for a result lost
    with its worker to be computed again)."""

    def __init__(self, client: Any) -> None:
        self._distributed = _import_distributed()
        self._client = client
        self._futures: weakref.WeakSet[Any] = weakref.WeakSet()  # Dask's, while a caller holds them
        self.in_flight = max(2 * sum(client.nthreads().values()), MIN_TASK_WINDOW)
        self._run = secrets.token_hex(4)  # keys of another run's tasks, still held, are never reused

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        return self._outcome(self._client.submit(fn, *args, pure=False, **kwargs))

    def submit_task(self, fn: Callable[[T], R], item: T, name: str, what: str) -> Future[R]:
        import dask

        # The key is what the dashboard shows: "shardkit-write-<run>-data/3f.zip". A remux batch
        # carries its source rows to the worker by design (the client reads the source): Dask's
        # "Sending large graph" warning, from 10 MB, would be printed for every batch of photos.
        key = f"shardkit-{what}-{self._run}-{name}"
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "2GB"}):
            return self._outcome(self._client.submit(fn, item, key=key, pure=False))

    def _outcome(self, task: Any) -> Future[Any]:
        """A future that gets ``task``'s result or error; cancelling it cancels the task."""
        self._futures.add(task)
        outcome: Future[Any] = Future()

        def cancel_task(f: Future[Any]) -> None:
            if f.cancelled():
                task.cancel()

        def settle(done: Any) -> None:  # on Dask's callback thread
            if not outcome.set_running_or_notify_cancel():
                return  # cancelled by the caller
            try:
                outcome.set_result(done.result())
            except BaseException as exc:  # the task's error (or its cancellation) is the outcome's
                outcome.set_exception(exc)

        outcome.add_done_callback(cancel_task)
        task.add_done_callback(settle)
        return outcome

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        tasks = list(self._futures)
        if wait and not cancel_futures:
            self._distributed.wait(tasks)
        else:  # every task not finished is cancelled
            self._client.cancel(tasks)

    def task_error(self, exc: BaseException, future: Future[Any], names: dict[Future[Any], str]) -> BaseException:
        if isinstance(exc, self._distributed.KilledWorker):
            return ShardkitError(
                f"{names[future]}: every worker that ran this task died ({exc});"
                " look at the workers' logs (out of memory?), then re-run to resume"
            )
        return exc


class Cluster:
    """A Dask client, and the checks shardkit makes before it sends the cluster any work."""

    def __init__(self, client: Any, *, owned: bool = False) -> None:
        self.client = client
        self._owned = owned  # connected by us, so closed by us

    @classmethod
    def connect(cls, scheduler: str) -> Cluster:
        """Connect to ``tcp://HOST:PORT`` (any Dask address) or to the scheduler a JSON scheduler file names."""
        distributed = _import_distributed()
        address = scheduler
        if os.path.isfile(scheduler):  # what `dask scheduler --scheduler-file` writes
            try:
                with open(scheduler, encoding="utf-8") as f:
                    address = json.load(f)["address"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UsageError(f'{scheduler} is not a Dask scheduler file (JSON with an "address"): {exc}') from None
        try:
            client = distributed.Client(address)
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        return cls(client, owned=True)

    def close(self) -> None:
        if self._owned:
            with contextlib.suppress(Exception):
                self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def executor(self) -> DaskExecutor:
        """An executor for one phase's tasks (:func:`task_executor` makes one)."""
        return DaskExecutor(self.client)

    def check_workers(self, work_dir: str, read_dirs: Iterable[str], location: Location | None = None) -> int:
        """Fail with a message naming the worker and path unless every worker can do the work.

        Each connected worker must run this shardkit version (the bytes written depend on it),
        read a token the client has just written under ``work_dir`` (so it sees the same OUT_DIR,
        not a local folder of the same name), or at an OUT_DIR URL ``location`` (so it can reach
        it, with credentials), and see every folder in ``read_dirs``. Returns the number of
        workers checked; with none connected yet, the tasks wait for workers to join.
        """
        token = secrets.token_hex(16)
        # At a URL the token goes to OUT_DIR itself; a local OUT_DIR's work folder is in it.
        if location is not None and not location.is_local:
            token_rel = f".shardkit/{TOKEN_NAME}"
        else:
            location, token_rel = Location(os.path.abspath(work_dir), "folder"), TOKEN_NAME
        token_path = location.where(token_rel)
        location.write_bytes(token_rel, token.encode())
        try:
            views: dict[str, Any] = self.client.run(worker_view, token_path, sorted(set(read_dirs)), on_error="return")
        finally:
            location.remove_with_empty_folder(token_rel)
        if not views:
            log.warning("no Dask worker is connected yet: the tasks wait for workers to join, unchecked")
        problems = []
        for worker, view in sorted(views.items()):
            if isinstance(view, BaseException):
                problems.append(f"{worker}: cannot run shardkit: {type(view).__name__}: {view}")
                continue
            if view["version"] != __version__:
                problems.append(f"{worker}: runs shardkit {view['version']}, this client {__version__}")
            if view["token"] is None:
                problems.append(f"{worker}: cannot read {token_path}, so it does not share OUT_DIR with this client")
                if view.get("error"):
                    problems[-1] += f" ({view['error']})"
            elif view["token"] != token:
                problems.append(f"{worker}: {token_path} holds another token: its OUT_DIR is not this client's")
            problems.extend(f"{worker}: cannot see {path}" for path in view["missing"])
        if problems:
            raise UsageError(
                [
                    "the Dask workers cannot do this work:",
                    *(f"  {problem}" for problem in problems[:20]),
                    "Every worker needs shardkit (the same version), the input at the same paths on shared"
                    " storage, and OUT_DIR there too or, for an OUT_DIR URL, the credentials to reach it.",
                ]
            )
        return len(views)


def worker_view(token_path: str, read_dirs: list[str]) -> dict[str, Any]:
    """Run on each worker by :meth:`Cluster.check_workers`: what this worker sees."""
    token: str | None = None
    error: str | None = None
    try:
        # An OUT_DIR URL is reached with this worker's credentials and endpoint.
        folder, name = token_path.rsplit("/", 1) if is_url(token_path) else os.path.split(token_path)
        with Location.out_dir(folder).open(name) as f:
            token = f.read().decode()
    except Exception as exc:  # whatever the filesystem raises: the worker cannot reach OUT_DIR
        error = f"{type(exc).__name__}: {exc}"
    return {
        "version": __version__,
        "token": token,
        "error": error,
        "missing": [path for path in read_dirs if not os.path.isdir(path)],
    }


@contextlib.contextmanager
def cluster_for(executor: str, scheduler: str | None, client: Any = None) -> Iterator[Cluster | None]:
    """The cluster a run uses: ``client`` if given, else a connection to ``scheduler``, else None (local)."""
    if client is not None:
        yield Cluster(client)
        return
    if executor == "local":
        if scheduler:
            raise UsageError("--scheduler is for --executor dask")
        yield None
        return
    if executor != "dask":
        raise UsageError(f"unknown executor {executor!r}: use local or dask")
    scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if not scheduler:
        raise UsageError("--executor dask needs --scheduler tcp://HOST:PORT (or a scheduler file)")
    with Cluster.connect(scheduler) as cluster:
        yield cluster
