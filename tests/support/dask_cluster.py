"""A real Dask cluster on 127.0.0.1 for the tests: ``dask scheduler`` plus ``dask worker`` processes.

Workers are started without a nanny, so a killed worker stays dead (as a node that fails), and
with ``--preload tests.dask_worker_preload``, which logs the shards each worker writes and can
slow each shard down (``SLOW_SHARD_SECONDS``) so a test can kill a worker in the middle of one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.corpus import REPO_ROOT

DASK = str(Path(sys.executable).parent / "dask")
START_TIMEOUT_S = 60


class DaskCluster:
    def __init__(self, root: Path, workers: int = 2, env: dict[str, str] | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.scheduler_file = root / "scheduler.json"
        self.task_log_dir = root / "task-logs"
        self.task_log_dir.mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            **(env or {}),
            # this checkout's shardkit (not the one installed), tests.remux_functions and the preload, on the workers
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
            "SHARDKIT_TEST_TASK_LOG_DIR": str(self.task_log_dir),
        }
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.scheduler = self._start(
            "scheduler",
            [
                *(DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"),
                *("--scheduler-file", str(self.scheduler_file)),
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.scheduler_file.exists():
            self._check_alive(self.scheduler, "scheduler", deadline)
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written in one go, but be sure it is complete
        self.address: str = json.loads(self.scheduler_file.read_text())["address"]
        for i in range(workers):
            self.start_worker(f"w{i}")
        self.wait_for_workers(workers)

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _check_alive(self, proc: subprocess.Popen[bytes], name: str, deadline: float) -> None:
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"dask {name} did not start (exit {proc.poll()}):\n{log}")

    def start_worker(self, name: str) -> None:
        self.workers[name] = self._start(
            name,
            [
                *(DASK, "worker", "--scheduler-file", str(self.scheduler_file), "--name", name),
                *("--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"),
                *("--local-directory", str(self.root / f"{name}-space"), "--preload", "tests.dask_worker_preload"),
            ],
        )

    def client(self) -> Any:
        from distributed import Client

        return Client(self.address, timeout=START_TIMEOUT_S)

    def wait_for_workers(self, n: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.client() as client:
            while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
                for name, proc in self.workers.items():
                    self._check_alive(proc, name, deadline)
                time.sleep(0.1)

    def worker_names(self) -> list[str]:
        with self.client() as client:
            return sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())

    def tasks_of(self, worker: str) -> list[str]:
        """The lines the preload logged for ``worker``: "start <shard>" and "end <shard>"."""
        path = self.task_log_dir / f"{self.workers[worker].pid}.log"
        return path.read_text().split("\n")[:-1] if path.exists() else []

    def kill_worker(self, name: str) -> None:
        proc = self.workers[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        for proc in [*self.workers.values(), self.scheduler]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), self.scheduler]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
