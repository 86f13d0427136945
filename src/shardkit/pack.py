"""``pack``: raw files + metadata JSONL -> shards, manifest, card. The sequence, stage by stage:

1. :mod:`.packstage`: check every row and its file (:mod:`.check`, :mod:`.metadata`; in byte
   ranges on worker processes or a Dask cluster), sort the rows by key on disk, group them by
   split (:mod:`.staging`); input problems refuse the run, or go to a rejects file;
2. :mod:`.packplan`: every shard's rows and exact size (:mod:`.plan`, pure);
3. :mod:`.packresume`: the output already there: resume a run stopped part-way, keep the
   shards an update did not change, refuse output of another run;
4. :mod:`.packwrite`: the shards still to write, in parallel, each atomically (:mod:`.writer`);
5. :mod:`.packfinish`: ``metadata.parquet``, the preview, the card, and the manifest last.

Each stage takes the :class:`~.packrun.PackRun`, what every stage needs. Working files live in
``OUT_DIR/.shardkit/``; a lock there keeps two packers apart. A run that stops part-way resumes:
shards already written for the same input and options are checked against their recorded
sha256 and kept.

Test seam: each stage's entry is looked up in this module when it is called, so a test may
replace one here (``reconcile``: the moment between the check and the write).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from .builtin import card_features
from .card import card_problem
from .errors import UsageError
from .location import Location
from .manifest import ManifestShard
from .outdir import CreatedHere, locked, pull_small_files
from .packconfig import ExecutorName, OnProblem, PackConfig, PackSummary, ShardChange, ShardFormatName, check_config
from .packfinish import finish, write_table
from .packplan import Planned, plan_pack
from .packprevious import previous_run
from .packresume import Reconciled, reconcile
from .packrun import PackRun, check_places
from .packstage import Staged, problem_report, stage_rows
from .packwrite import write_shards
from .plan import ShardPlan
from .problems import ProblemReport
from .progress import NullProgress, Progress
from .tasks import cluster_for, give_back_freed_memory, start_forkserver

__all__ = ["ExecutorName", "OnProblem", "PackConfig", "PackSummary", "ShardChange", "ShardFormatName", "pack"]


def pack(config: PackConfig, *, progress: Progress | None = None, client: Any = None) -> PackSummary:
    """Pack ``config.images_dir`` + ``config.metadata_path`` into shards under ``config.out_dir``.

    ``progress`` shows how far it got (the command line's bars; None: nothing shown).
    ``client``, a ``distributed.Client``, runs the row checks and the shard writes as tasks on
    that Dask cluster (as does ``config.executor="dask"`` with ``config.scheduler``); see
    :mod:`shardkit.tasks`.
    """
    progress = progress or NullProgress()
    started = time.perf_counter()
    fmt = check_config(config)
    # Where the repo goes, and the local folder holding the run's working files (.shardkit/) and
    # the small files it edits (card, manifest...): for a local OUT_DIR, the same folder.
    location = Location.out_dir(config.out_dir)
    local_dir = location.local_dir(config.work_dir)
    check_places(config, location, local_dir)
    created = CreatedHere(local_dir)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(cluster_for(config.executor, config.scheduler, client))
        shardkit_dir = stack.enter_context(locked(local_dir))
        created.locked()
        # Runs before the lock is released (LIFO): a refused run or a dry run takes away what it
        # made, while no other run can be working here. A run refused the lock made nothing and
        # undoes nothing.
        stack.callback(lambda: created.undo() if not created.finished or config.dry_run else None)
        run = PackRun(config, fmt, location, local_dir, shardkit_dir, progress, cluster, created, started)
        if cluster is not None:  # before the check phase, which can take hours
            metadata_dir = os.path.dirname(os.path.abspath(config.metadata_path))
            cluster.check_workers(shardkit_dir, [os.path.abspath(config.images_dir), metadata_dir], location)
        location.check_writable()  # credentials, bucket, endpoint: now, not after hours of checking
        pull_small_files(location, local_dir)
        if problem := card_problem(local_dir):  # a card shardkit cannot keep true: before hours of work
            raise UsageError(problem)
        summary = _pack_locked(run)
        created.finished = True
    return summary


def _pack_locked(run: PackRun) -> PackSummary:
    """The stages, in order, holding the lock."""
    config = run.config
    if run.cluster is None and not config.dry_run:
        start_forkserver(config.jobs)
    run.clear_working_folders()  # leftovers of a run that died
    problems = problem_report(run)  # the run's one report: each problem the stage finds goes to it
    run.phases.start()  # the check's clock starts here
    try:
        previous = previous_run(run)
        staged = stage_rows(run, problems, previous.labels if previous is not None else {})
    finally:
        problems.close()
    run.phases.end("check")
    planned = plan_pack(run, staged, previous)
    run.phases.end("plan")
    if config.dry_run:  # what the run would do with OUT_DIR (or its refusal), changing nothing
        reconciled = reconcile(run, staged, planned, previous, dry_run=True)
        return _summary(run, staged, planned, reconciled, problems, written=reconciled.todo, manifest=None)
    # What each stage freed goes back to the system before the next (glibc and pyarrow would keep
    # it): the plan's and the table's tens of MB would otherwise sit beside the write's workers.
    give_back_freed_memory()
    table = write_table(run, staged, planned.plan)
    reconciled = reconcile(run, staged, planned, previous)
    run.created.keep()  # OUT_DIR changes from here on: its work folder is what a re-run resumes from
    give_back_freed_memory()
    done = write_shards(run, staged, planned, reconciled)
    run.phases.end("write")
    manifest = finish(run, staged, planned, [done[p.name] for p in reconciled.plan], table)
    run.phases.end("finish")
    written = [done[p.name] for p in reconciled.todo]
    return _summary(run, staged, planned, reconciled, problems, written=written, manifest=manifest)


def _summary(
    run: PackRun,
    staged: Staged,
    planned: Planned,
    reconciled: Reconciled,
    problems: ProblemReport,
    *,
    written: list[ManifestShard] | list[ShardPlan],
    manifest: str | None,
) -> PackSummary:
    """What the run did (``written``: the shards it wrote, or a dry run's to write, as planned)."""
    plan, kept = reconciled.plan, reconciled.kept
    # Each shard's size as it is on disk (written or kept); a dry run's to write, as planned.
    sizes = {s.name if isinstance(s, ShardPlan) else s.file: s.bytes for s in written}
    sizes.update({name: s.bytes for name, s in reconciled.done.items()})
    return PackSummary(
        out_dir=run.location.url,
        manifest=manifest,
        rows=staged.rows,
        shards=len(plan),
        bytes=sum(sizes.values()),
        prefix_length=planned.options.prefix_length,
        written_shards=len(written),
        resumed_shards=len(plan) - len(written) - kept,
        kept_shards=kept,
        removed_shards=len(reconciled.removed),
        written_bytes=sum(s.bytes for s in written),
        written_rows=sum(s.rows for s in written),
        changes=reconciled.changes,
        rejected_rows=problems.count,
        skipped_duplicates=staged.duplicate_count,
        rejects_file=run.rejects_path if problems.count else None,
        seconds=time.perf_counter() - run.started,
        dry_run=run.config.dry_run,
        plan=plan,
        phase_seconds=dict(run.phases.seconds),
        warnings=planned.warnings,
        features=card_features(run.fmt, staged.features, staged.extensions),
        splits=[
            {
                "name": s.name,
                "rows": s.rows,
                "shards": sum(1 for p in plan if p.split == s.name),
                "bytes": sum(sizes[p.name] for p in plan if p.split == s.name),
                "prefix_length": planned.prefix_lengths[s.name],
            }
            for s in staged.splits
        ],
    )
