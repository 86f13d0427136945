"""Shard-writing worker processes: ``python -m shardkit.worker``, one JSON line per job.

Why not ``concurrent.futures.ProcessPoolExecutor``: on Linux it brings a forkserver and a
resource-tracker process (about 27 MB between them) and its workers import more than they
need. A worker here imports only the writer (about 18 MB), takes a :class:`ShardJob` as one
JSON line on stdin, and answers one JSON line on stdout: the :class:`ManifestShard`, or the error.

A worker that dies (killed, out of memory) is reported as an error naming the shard; its
partial file sits under ``.shardkit/tmp`` and is cleaned by the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import IO, Any

from .errors import ShardkitError
from .manifest import ManifestShard
from .plan import ShardPlan
from .writer import ShardJob, SourceChanged, write_shard


def job_to_json(job: ShardJob) -> str:
    return json.dumps(asdict(job))


def job_from_json(text: str) -> ShardJob:
    data = json.loads(text)
    data["plan"] = ShardPlan(**data["plan"])
    return ShardJob(**data)


def serve(stdin: IO[str], stdout: IO[str]) -> None:
    """The worker loop: read a job, write the shard, answer; until stdin closes."""
    for line in stdin:
        try:
            answer: dict[str, Any] = {"result": write_shard(job_from_json(line)).to_json()}
        except SourceChanged as exc:
            answer = {"error": str(exc), "kind": "input"}
        except ShardkitError as exc:
            answer = {"error": str(exc), "kind": "failure"}
        except OSError as exc:
            answer = {"error": f"{exc.filename or 'writing a shard'}: {exc.strerror or exc}", "kind": "failure"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


class WorkerPool:
    """``size`` worker processes, each writing one shard at a time."""

    def __init__(self, size: int) -> None:
        self._procs = [
            subprocess.Popen(
                [sys.executable, "-m", "shardkit.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            for _ in range(size)
        ]

    def map_unordered(self, jobs: Iterable[ShardJob]) -> Iterator[ManifestShard]:
        """Run every job; yield results as they finish. Stops at the first failed job."""
        queue = iter(jobs)
        running: dict[int, tuple[subprocess.Popen[str], ShardJob]] = {}
        with selectors.DefaultSelector() as selector:
            for proc in self._procs:
                job = next(queue, None)
                if job is None:
                    break
                self._send(proc, job)
                running[proc.pid] = (proc, job)
                assert proc.stdout is not None
                selector.register(proc.stdout, selectors.EVENT_READ, proc)
            while running:
                # A timeout, so a signal delivered to another thread is still handled soon.
                for key, _ in selector.select(timeout=0.25):
                    proc = key.data
                    _, job = running.pop(proc.pid)
                    assert proc.stdout is not None
                    line = proc.stdout.readline()
                    yield self._result(proc, job, line)
                    following = next(queue, None)
                    if following is None:
                        selector.unregister(proc.stdout)
                    else:
                        self._send(proc, following)
                        running[proc.pid] = (proc, following)

    @staticmethod
    def _send(proc: subprocess.Popen[str], job: ShardJob) -> None:
        assert proc.stdin is not None
        proc.stdin.write(job_to_json(job) + "\n")
        proc.stdin.flush()

    @staticmethod
    def _result(proc: subprocess.Popen[str], job: ShardJob, line: str) -> ManifestShard:
        if not line:
            code = proc.wait()
            raise ShardkitError(f"the worker writing {job.plan.name} died (exit code {code}); re-run to resume")
        answer = json.loads(line)
        if "error" in answer:
            raise (SourceChanged if answer["kind"] == "input" else ShardkitError)(answer["error"])
        return ManifestShard(**answer["result"])

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
        serve(sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        # write_shard removed its partial files as the exception passed; a reader thread may
        # still be stuck on a hung file, and joining it would hang the exit.
        sys.stdout.flush()
        os._exit(130)


if __name__ == "__main__":
    main()
