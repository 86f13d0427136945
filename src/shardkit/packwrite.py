"""The write stage of a pack: every shard still to write, one task each.

:func:`write_shards` is the stage's one entry. Each task is :func:`.writer.write_shard` (run by
:func:`.tasks.run_tasks` on worker processes, a Dask cluster, or here); each shard written is
recorded in ``.shardkit/done/`` as it completes, so a run stopped part-way resumes, and its
hashes are kept so that a resume or the push need not read it again.

Test seams: ``run_tasks`` and ``write_shard`` are looked up in this module when they are called
(a test kills a worker, or the run after one shard).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from .manifest import ManifestShard, rows_written_to, write_atomic
from .packrun import PackRun
from .plan import ShardPlan
from .tasks import Tasks, run_tasks, task_executor
from .writer import ShardJob, write_shard

if TYPE_CHECKING:
    from .packplan import Planned
    from .packresume import Reconciled
    from .packstage import Staged

HASHES_SAVE_SECONDS = 10.0  # how often the hash cache is written while shards are written


def write_shards(run: PackRun, staged: Staged, planned: Planned, reconciled: Reconciled) -> dict[str, ManifestShard]:
    """Write the shards ``reconciled`` has not found done; return every planned shard's record
    (those found done and those written), by file."""
    config, hashes, progress = run.config, reconciled.hashes, run.progress
    done = dict(reconciled.done)
    todo = reconciled.todo
    jobs = [_job(run, staged, planned, p) for p in todo]
    tasks: Tasks[ShardJob] = _JobsWithTheirRows(jobs, staged.path, reconciled.plan) if run.remote else jobs
    progress.start("writing shards", total=sum(p.bytes for p in todo), unit="B")
    saved = time.monotonic()
    try:
        names = [job.plan.name for job in jobs]
        # The workers are gone when the block ends: the finish phase's preview does not sit beside them.
        with task_executor(config.jobs, run.cluster, len(tasks)) as executor:
            for result in run_tasks(write_shard, tasks, names=names, executor=executor, what="write"):
                done[result.file] = result
                write_atomic(run.done_record(result.file), json.dumps(result.to_json()).encode())
                if hashes is not None:  # so a resume or the push need not read the files again
                    hashes.record(result.file, result.sha256)
                    hashes.record(rows_written_to(result.file, result.metadata), result.metadata_sha256)
                    if time.monotonic() - saved > HASHES_SAVE_SECONDS:
                        hashes.save()
                        saved = time.monotonic()
                progress.advance(result.bytes, shards=len(done), rows=result.rows)
    except BaseException:
        if run.cluster is None:
            # The local workers are gone (the pool killed any still there after tasks.STOP_SECONDS,
            # as one stuck in a read that no signal reaches): the file a killed one was writing is
            # no one's now, and Ctrl-C leaves no partial file however long they took.
            shutil.rmtree(run.tmp_dir, ignore_errors=True)
        raise
    finally:
        if hashes is not None:
            hashes.save()
    progress.finish()
    return done


def _job(run: PackRun, staged: Staged, planned: Planned, p: ShardPlan) -> ShardJob:
    config, remote = run.config, run.remote
    return ShardJob(
        plan=p,
        staging_path="" if remote else staged.path,  # with a URL the rows travel in the job
        images_dir=os.path.abspath(config.images_dir),
        out_dir=run.location.url,
        tmp_dir="" if remote else run.tmp_dir,  # a worker writing to a URL uses its own temp folder
        read_threads=config.read_threads,
        prefetch_bytes=config.prefetch_bytes,
        fsync=config.fsync,
        format=run.fmt.name,
        max_shard_bytes=config.max_shard_bytes,
        features=staged.features,
        table_path=planned.tables.get(p.name, ""),
    )


class _JobsWithTheirRows:
    """Shard jobs for an OUT_DIR URL, each given its staged rows (its slice of sorted.tsv) only
    when it is sent: a worker then needs no access to this machine, and memory holds the rows of
    the shards in flight, not of all of them."""

    def __init__(self, jobs: list[ShardJob], staging_path: str, plan: list[ShardPlan]) -> None:
        self.jobs = jobs
        self.staging_path = staging_path
        self.ends = {p.name: q.offset for p, q in itertools.pairwise(plan)}  # the plan cuts the file in order

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[ShardJob]:
        with open(self.staging_path, "rb") as f:
            for job in self.jobs:
                f.seek(job.plan.offset)
                end = self.ends.get(job.plan.name)
                rows = f.read() if end is None else f.read(end - job.plan.offset)
                table = None
                if job.table_path:
                    with open(job.table_path, "rb") as t:
                        table = t.read()
                yield replace(job, staged=rows, table=table, table_path="")
