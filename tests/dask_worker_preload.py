"""Loaded into each test Dask worker (``dask worker --preload``); instruments shard writing.

Tasks name ``shardkit.writer.write_shard`` and ``shardkit.check.check_range`` by reference, so
replacing the module attributes here makes the worker run the wrappers: they log "check <range>",
"start <shard>" and "end <shard>" to
``$SHARDKIT_TEST_TASK_LOG_DIR/<pid>.log``, and sleeps ``$SLOW_SHARD_SECONDS`` once the shard is
written and before it is renamed into place, the moment a killed worker leaves a partial file.
"""

from __future__ import annotations

import os
import time
from typing import Any

from shardkit import check, writer

_check_range = check.check_range
_write_shard = writer.write_shard
fsync_close = writer.fsync_close


def _log(line: str) -> None:
    with open(os.path.join(os.environ["SHARDKIT_TEST_TASK_LOG_DIR"], f"{os.getpid()}.log"), "a") as f:
        f.write(line + "\n")


def write_shard(job: Any) -> Any:
    _log(f"start {job.plan.name}")
    result = _write_shard(job)
    _log(f"end {job.plan.name}")
    return result


def check_range(job: Any) -> Any:
    _log(f"check {job.index}")
    return _check_range(job)


def slow_fsync_close(f: Any, fsync: bool) -> None:
    time.sleep(float(os.environ.get("SLOW_SHARD_SECONDS", "0")))
    fsync_close(f, fsync)


check.check_range = check_range
writer.write_shard = write_shard
writer.fsync_close = slow_fsync_close


def dask_setup(worker: Any) -> None:  # the hook dask calls for a preload module
    pass
