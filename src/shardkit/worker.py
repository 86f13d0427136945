"""Worker processes for every local task: ``python -m shardkit.worker``, one task per line.

Shards (:func:`shardkit.writer.write_shard`), metadata ranges (:func:`shardkit.check.check_range`)
and remux source shards (:func:`shardkit.remux.transform_shard`) all run here when ``--jobs`` is
over 1. A task is one line on the worker's stdin, base64 of the pickled ``(function, argument)``;
the answer is one line on stdout, ``("ok", result)`` or ``("error", exception)``, pickled the
same way. Functions travel by reference (module and name): the worker gets the parent's
``sys.path`` in ``PYTHONPATH``, so whatever the parent can import, it can too.

Why not ``concurrent.futures.ProcessPoolExecutor``: on Linux it brings a forkserver and a
resource-tracker process (about 27 MB between them), its spawned workers import the parent's
``__main__`` (the CLI and huggingface_hub), and on Ctrl-C a worker takes the next queued task;
terminating them instead makes the resource tracker warn about leaked semaphores. Here the
first SIGINT or SIGTERM becomes an exception in the task (so a shard's partial files are
removed) and the worker exits with 130.

A worker that dies (killed, out of memory) is reported as an error naming its task; a shard's
partial file sits under ``.shardkit/tmp`` and is cleaned by the next run.

A pool asked to ``fork`` (pack's write workers, started before its check phase) forks them from
the calling process instead, on Linux, while that process has a single thread (forking a
threaded process can copy a lock some other thread holds) and is small (:func:`can_fork`).
A forked worker has every module the caller imported, so it is ready at once: a started worker
must start Python and import the writer first, and pack's check waits for that when the
workers split it. A forked worker shares the caller's pages until either changes them, so
pack forks before its check, while it is small, and starts later workers the plain way.
A forked worker serves the same task lines over a pipe pair and always leaves with
``os._exit`` (never back into the caller's code).
"""

from __future__ import annotations

import base64
import contextlib
import gc
import importlib
import os
import pickle
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar, Union

from .errors import ShardkitError

T = TypeVar("T")
R = TypeVar("R")


def _encode(obj: object) -> str:
    return base64.b64encode(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def _decode(line: str) -> Any:
    return pickle.loads(base64.b64decode(line))


def _answer(fn: Callable[[Any], Any], item: Any) -> str:
    try:
        return _encode(("ok", fn(item)))
    except Exception as exc:
        try:
            answer = _encode(("error", exc))
            _decode(answer)  # some exceptions pickle but do not unpickle (a custom __init__)
            return answer
        except Exception:  # an exception that cannot travel: keep its message
            return _encode(("error", ShardkitError(f"{type(exc).__name__}: {exc}")))


def serve(stdin: IO[str], stdout: IO[str]) -> None:
    """The worker loop: read a task, run it, answer; until stdin closes."""
    for line in stdin:
        try:
            fn, item = _decode(line)
        except Exception as exc:  # e.g. the function's module does not import here
            stdout.write(_encode(("error", ShardkitError(f"a worker could not load its task: {exc}"))) + "\n")
        else:
            stdout.write(_answer(fn, item) + "\n")
        stdout.flush()


def _stop_on_signals() -> None:
    """The first SIGINT or SIGTERM raises KeyboardInterrupt in the task; later ones are ignored."""
    import signal

    stopping = False

    def _stop(signum: int, frame: object) -> None:
        # The first SIGINT (Ctrl-C reaches the whole process group) or SIGTERM (from the pool)
        # becomes an exception, so write_shard removes its partial files. Later ones are
        # ignored: a second exception in the middle of that cleanup would cut it short.
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def _serve_until_stopped(stdin: IO[str], stdout: IO[str]) -> int:
    """Serve tasks; the exit code: 0 when ``stdin`` closes, 130 when stopped by a signal."""
    try:
        serve(stdin, stdout)
    except KeyboardInterrupt:
        # write_shard removed its partial files as the exception passed; a reader thread may
        # still be stuck on a hung file, and joining it would hang the exit.
        return 130
    finally:
        with contextlib.suppress(OSError):
            stdout.flush()
    return 0


#: Fork only from a process this small: a forked worker shares the caller's memory until either
#: writes to it, and a library caller holding gigabytes should not lend them to every worker.
FORK_MAX_RSS = 128 << 20


def can_fork() -> bool:
    """Whether this process may fork workers: Linux, no thread but this one (Python's or a
    library's own), and a resident size under ``FORK_MAX_RSS``."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    try:
        with open("/proc/self/statm", "rb") as f:
            resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return len(os.listdir("/proc/self/task")) == 1 and resident < FORK_MAX_RSS
    except (OSError, ValueError, IndexError):
        return False


class ForkedWorker:
    """A worker forked from this process: the part of :class:`subprocess.Popen` the pool uses."""

    def __init__(self, close_in_child: list[int]) -> None:
        task_read, task_write = os.pipe()
        answer_read, answer_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # or the child could write the same bytes again
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's code
            code = 1
            try:
                for fd in (task_write, answer_read, *close_in_child):
                    os.close(fd)
                _stop_on_signals()
                with open(task_read, encoding="utf-8") as stdin, open(answer_write, "w", encoding="utf-8") as stdout:
                    code = _serve_until_stopped(stdin, stdout)
            except KeyboardInterrupt:  # a signal before the worker served
                code = 130
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(task_read)
        os.close(answer_write)
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[str] | None = open(task_write, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed by the pool)
        self.stdout: IO[str] | None = open(answer_read, encoding="utf-8")  # noqa: SIM115

    def fds(self) -> list[int]:
        """The parent's ends of this worker's pipes (a worker forked later closes its copies)."""
        return [f.fileno() for f in (self.stdin, self.stdout) if f is not None and not f.closed]

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        self._signal(15)

    def kill(self) -> None:
        self._signal(9)

    def _signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


_Worker = Union["subprocess.Popen[str]", ForkedWorker]


class WorkerPool:
    """``size`` worker processes, each running one task at a time.

    The processes start at once and import ``preload`` (module names) while the caller does
    other work, so the first task does not wait for them (pack starts its writers before a check
    phase that runs in its own process, or that they run themselves for a small metadata file).
    With ``fork`` they are forked from this process where :func:`can_fork` (see above) and have
    what it imported; ``preload`` is then imported here first. A pool may serve several
    :meth:`map_unordered` calls.
    """

    def __init__(self, size: int, preload: Iterable[str] = (), *, fork: bool = False) -> None:
        self.forked = fork and can_fork()
        self._procs: list[_Worker] = []
        if self.forked:
            for module in preload:
                with contextlib.suppress(Exception):  # if it fails, the task that needs it says why
                    importlib.import_module(module)
            # The caller's objects, frozen, are left out of the workers' garbage collections,
            # which would otherwise touch (and so copy) every page that holds one.
            gc.freeze()
            try:
                for _ in range(size):
                    parent_ends = [fd for proc in self._procs if isinstance(proc, ForkedWorker) for fd in proc.fds()]
                    self._procs.append(ForkedWorker(parent_ends))
            except BaseException:  # a fork refused (out of processes or memory): none left behind
                self.terminate()
                raise
            finally:
                gc.unfreeze()  # (here only: each worker keeps its copy frozen)
            return
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._procs = [
            subprocess.Popen(
                [sys.executable, "-m", "shardkit.worker", *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
                env=env,
            )
            for _ in range(size)
        ]

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T], names: list[str] | None = None) -> Iterator[R]:
        """Run ``fn`` on every item; yield results as they finish. Stops at the first failed task.

        ``names`` name the tasks in the message when a worker dies. Items are taken from
        ``items`` one at a time, as workers become free.
        """
        queue = iter(zip(items, names, strict=True)) if names is not None else ((item, str(item)) for item in items)
        running: dict[int, str] = {}
        with selectors.DefaultSelector() as selector:
            for proc in self._procs:
                task = next(queue, None)
                if task is None:
                    break
                self._send(proc, fn, task[0])
                running[proc.pid] = task[1]
                assert proc.stdout is not None
                selector.register(proc.stdout, selectors.EVENT_READ, proc)
            while running:
                # A timeout, so a signal delivered to another thread is still handled soon.
                for key, _ in selector.select(timeout=0.25):
                    proc = key.data
                    name = running.pop(proc.pid)
                    assert proc.stdout is not None
                    line = proc.stdout.readline()
                    yield self._result(proc, name, line)
                    following = next(queue, None)
                    if following is None:
                        selector.unregister(proc.stdout)
                    else:
                        self._send(proc, fn, following[0])
                        running[proc.pid] = following[1]

    @staticmethod
    def _send(proc: _Worker, fn: Callable[[Any], Any], item: Any) -> None:
        assert proc.stdin is not None
        proc.stdin.write(_encode((fn, item)) + "\n")
        proc.stdin.flush()

    @staticmethod
    def _result(proc: _Worker, name: str, line: str) -> Any:
        if not line:
            code = proc.wait()
            raise ShardkitError(f"the worker running {name} died (exit code {code}); re-run to resume")
        status, value = _decode(line)
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        for proc in self._procs:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def terminate(self) -> None:
        """Stop now (Ctrl-C, or a failed job): workers remove their partial files on SIGTERM."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        self.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.close()
        else:
            self.terminate()


def main() -> None:
    _stop_on_signals()
    try:
        for module in sys.argv[1:]:  # the modules the tasks will need, imported while the pool waits
            with contextlib.suppress(Exception):  # if it fails, the task that needs it says why
                importlib.import_module(module)
    except KeyboardInterrupt:
        os._exit(130)
    code = _serve_until_stopped(sys.stdin, sys.stdout)
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    # Nothing is left to clean up (a task closes its files), and tearing the interpreter down
    # would delay the pack, which waits for its workers before its finish phase.
    os._exit(code)


if __name__ == "__main__":
    main()
