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
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import os
import pickle
import selectors
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

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


class WorkerPool:
    """``size`` worker processes, each running one task at a time.

    The processes start at once and import ``preload`` (module names) while the caller does
    other work, so the first task does not wait for them (pack starts its writers before a check
    phase that runs in its own process, or that they run themselves for a small metadata file).
    A pool may serve several :meth:`map_unordered` calls.
    """

    def __init__(self, size: int, preload: Iterable[str] = ()) -> None:
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
    def _send(proc: subprocess.Popen[str], fn: Callable[[Any], Any], item: Any) -> None:
        assert proc.stdin is not None
        proc.stdin.write(_encode((fn, item)) + "\n")
        proc.stdin.flush()

    @staticmethod
    def _result(proc: subprocess.Popen[str], name: str, line: str) -> Any:
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
    try:
        for module in sys.argv[1:]:  # the modules the tasks will need, imported while the pool waits
            with contextlib.suppress(Exception):  # if it fails, the task that needs it says why
                importlib.import_module(module)
        serve(sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        # write_shard removed its partial files as the exception passed; a reader thread may
        # still be stuck on a hung file, and joining it would hang the exit.
        sys.stdout.flush()
        os._exit(130)


if __name__ == "__main__":
    main()
