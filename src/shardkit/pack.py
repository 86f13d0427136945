"""``pack``: raw files + metadata JSONL -> hash-prefixed ZIP shards, manifest, card.

The stages, each in its own module:

1. :mod:`.metadata` reads and checks every row and the file it names (streaming), in byte
   ranges of the metadata file run by :mod:`.check` on worker processes (or a Dask cluster);
2. :mod:`.staging` sorts the rows by key on disk and finds duplicate keys;
3. :mod:`.plan` decides every shard's rows and exact size (pure);
4. :mod:`.writer` writes shards in parallel, each atomically;
5. :mod:`.manifest` and :mod:`.card` record the result.

Input problems stop the run before any shard is written (or, with ``on_error="skip"``, go to a
rejects file). Working files live in ``OUT_DIR/.shardkit/``; a lock there keeps two packers
apart. A run that stops part-way resumes: shards already written for the same input and
options are checked against their recorded sha256 and kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from . import summarytext
from .builtin import builtin_loader_warnings, card_features
from .card import card_facts, card_problem, write_card_files
from .check import (
    SPLIT_COLUMN,
    CheckSettings,
    RangeJob,
    check_range,
    combine,
    range_jobs,
    split_warnings,
)
from .errors import InputErrors, InputProblem, ShardkitError, UsageError, listed, naming, one_line
from .formats import ShardFormat, format_named
from .formats.parquet import encode_metadata_table
from .location import Location
from .manifest import MANIFEST_NAME, Manifest, ManifestShard, Options, read_manifest, write_atomic, write_manifest
from .metadata import FILE_NOT_FOUND
from .outdir import (
    PLACEHOLDERS,
    WORK_DIR,
    CreatedHere,
    HashCache,
    check_apart,
    check_out_dir,
    check_own_entries,
    check_parent_exists,
    locked,
    pull_small_files,
    push_small_files,
    shard_problem,
    unnamed_files,
    url_shard_problem,
)
from .plan import (
    BY_SIZE,
    DEFAULT_MAX_SHARD_BYTES,
    FIRST_BOUNDARY,
    HUB_MAX_FOLDER_ENTRIES,
    PlanEntry,
    ShardPlan,
    check_limits,
    default_target,
    max_file_bytes,
    plan_shards,
    shard_stem,
)
from .preview import write_preview
from .problems import ProblemReport, rejects_path_problem, whole_file_problem
from .progress import NullProgress, Progress
from .rowrules import SOURCE_PATH_COLUMN
from .schema import class_label_names, float_retyper, with_class_label
from .staging import (
    Regrouped,
    SplitRows,
    StagedEntries,
    iter_published_lines,
    iter_staged,
    merge_runs,
    regroup,
    repeated_files,
    rows_sha256,
)
from .table import TABLE_NAME, write_metadata_table
from .tasks import Cluster, Tasks, cluster_for, run_tasks, start_forkserver, task_executor
from .workstate import read_done_records, read_pack_state
from .writer import DEFAULT_PREFETCH_BYTES, DEFAULT_READ_THREADS, ShardJob, metadata_path_for, write_shard

log = logging.getLogger(__name__)

PLAN_IN_MEMORY_ROWS = 50_000  # up to this many rows (12 MB at most), the planner reads a list twice, not the file
HASHES_SAVE_SECONDS = 10.0  # how often the hash cache is written while shards are written


#: The choices of the options named after them (PackConfig, RemuxConfig, the command line).
ShardFormatName = Literal["zip", "tar", "parquet"]
OnProblem = Literal["stop", "skip"]  # on_error, on_duplicate
ExecutorName = Literal["local", "dask"]


@dataclass(frozen=True)
class PackConfig:
    """What :func:`pack` packs, and how: ``pack-shards``' arguments and options, by name."""

    images_dir: str
    metadata_path: str
    out_dir: str
    #: The hard cap on a shard file, headers and metadata included.
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    #: Shards land near this size. None: half the cap (see :attr:`target_bytes`).
    target_shard_bytes: int | None = None
    prefix_length: int | None = None  # None: chosen from the total size
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    read_threads: int = DEFAULT_READ_THREADS
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES
    on_error: OnProblem = "stop"
    #: skip: of rows with one key (for rows without keys: files with the same bytes), pack the
    #: first and list the others; stop: they are input problems like any other.
    on_duplicate: OnProblem = "stop"
    rejects_path: str | None = None  # default: OUT_DIR/.shardkit/rejects.jsonl
    force: bool = False
    adopt: bool = False  # OUT_DIR may hold a repo that shardkit did not make (see outdir.check_out_dir)
    dry_run: bool = False
    fsync: bool = True
    check_images: bool = False  # decode every image (and WAV file) while checking
    #: Publish each row's input file_name as a ``source_path`` column (off: paths can carry
    #: private names).
    keep_source_path: bool = False
    #: A column of class names to publish as a ClassLabel (integers; the names in the card).
    class_label: str | None = None
    #: The class_label column's names in the order to number them (a remuxed source's ClassLabel);
    #: names not listed are numbered after them, sorted. Empty: all sorted.
    class_names: tuple[str, ...] = ()
    #: With changed input: rewrite only the shards whose rows changed, keep the others byte for
    #: byte (without it, changed input needs ``force``).
    update: bool = False
    format: ShardFormatName = "zip"
    check_range_bytes: int | None = None  # metadata bytes per check task (None: from the file's size)
    executor: ExecutorName = "local"  # dask: each shard a task on the cluster at `scheduler`
    scheduler: str | None = None  # tcp://HOST:PORT or a scheduler file; default $DASK_SCHEDULER_ADDRESS
    # With an OUT_DIR URL: the local folder for working files and the repo's small files
    # (None: ~/.cache/shardkit/work/<hash of the URL>); see shardkit.location
    work_dir: str | None = None

    @property
    def target_bytes(self) -> int:
        """The target shard size: ``target_shard_bytes``, or half the cap when that is None."""
        return default_target(self.max_shard_bytes) if self.target_shard_bytes is None else self.target_shard_bytes


@dataclass(frozen=True)
class ShardChange:
    """A shard file a run writes or removes, and why: what a summary and a dry run list."""

    file: str  # "data/train/3f.zip"
    split: str
    #: write: no shard of this name was there; rewrite: one was, with other rows (or damaged);
    #: remove: a shard of the run before that the new plan has no place for.
    action: Literal["write", "rewrite", "remove"]
    why: str  # "new", "3 rows added, 1 removed (25 -> 27 rows)", "new class names: owl"...
    rows: int  # planned (a removed shard: the rows it held)
    bytes: int


@dataclass(frozen=True)
class PackSummary:
    out_dir: str
    manifest: str | None
    rows: int
    shards: int
    bytes: int
    prefix_length: int
    written_shards: int
    resumed_shards: int
    rejected_rows: int
    rejects_file: str | None
    seconds: float
    dry_run: bool
    plan: list[ShardPlan]
    skipped_duplicates: int = 0  # rows left out by on_duplicate="skip"
    kept_shards: int = 0  # shards an update kept as they were (their rows did not change)
    #: Each split: name, rows, shards, bytes, prefix_length.
    splits: list[dict[str, Any]] = field(default_factory=list)
    #: The schema the card declares (datasets' YAML feature list), first the file column.
    features: list[dict[str, Any]] = field(default_factory=list)
    # wall-clock seconds per phase: check (read, check and sort the metadata), plan, write, finish
    # (manifest, card, preview); where a slow run spends its time
    phase_seconds: dict[str, float] = field(default_factory=dict)
    #: What a reader would still refuse or get wrong in this layout, one sentence each (logged
    #: as warnings too; the card says the same).
    warnings: list[str] = field(default_factory=list)
    removed_shards: int = 0  # shards of the run before that the new plan has no place for
    written_bytes: int = 0  # of the shards written (a dry run: would write), not of the dataset
    written_rows: int = 0
    #: Each shard written, rewritten or removed (a dry run: would be), with why, in plan order.
    changes: list[ShardChange] = field(default_factory=list)

    @property
    def write_seconds(self) -> float:
        return self.phase_seconds.get("write", 0.0)

    @property
    def mb_per_s(self) -> float:
        """Bytes written (not the dataset's: a re-run writes none) per second of the whole run."""
        return self.written_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def write_bytes_per_s(self) -> float | None:
        """Bytes written per second of the write phase; None when nothing was written."""
        if not self.written_shards or self.dry_run or self.write_seconds <= 0:
            return None
        return self.written_bytes / self.write_seconds

    def to_json(self) -> dict[str, Any]:
        """The --json summary; the plan is listed only for a dry run (the manifest has it otherwise)."""
        data = asdict(self)
        data["plan"] = [asdict(p) for p in self.plan] if self.dry_run else None
        data["total_rows"] = self.rows
        data["mb_per_s"] = round(self.mb_per_s, 1)
        rate = self.write_bytes_per_s
        data["write_mb_per_s"] = None if rate is None else round(rate / 1e6, 1)
        data["seconds"] = round(self.seconds, 3)
        data["phase_seconds"] = {k: round(v, 3) for k, v in self.phase_seconds.items()}
        return data


def pack(config: PackConfig, *, progress: Progress | None = None, client: Any = None) -> PackSummary:
    """Pack ``config.images_dir`` + ``config.metadata_path`` into shards under ``config.out_dir``.

    ``progress`` shows how far it got (the command line's bars; None: nothing shown).
    ``client``, a ``distributed.Client``, runs the row checks and the shard writes as tasks on
    that Dask cluster (as does ``config.executor="dask"`` with ``config.scheduler``); see
    :mod:`shardkit.tasks`.
    """
    progress = progress or NullProgress()
    started = time.perf_counter()
    try:
        fmt = format_named(config.format)
        check_limits(config.max_shard_bytes, config.target_bytes, fmt)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for path, what in ((config.images_dir, "IMAGES_DIR"), (config.metadata_path, "META_JSONL")):
        if not os.path.exists(path):
            raise UsageError(f"{what} {path!r} does not exist")
    if not os.path.isdir(config.images_dir):
        raise UsageError(f"IMAGES_DIR {config.images_dir!r} is not a directory")
    if problem := _class_label_problem(config):
        raise UsageError(problem)
    if config.update and config.force:
        raise UsageError("--update keeps the shards whose rows did not change, --force rewrites them all: give one")
    # Where the repo goes, and the local folder holding the run's working files (.shardkit/) and
    # the small files it edits (card, manifest...): for a local OUT_DIR, the same folder.
    location = Location.out_dir(config.out_dir)
    local_dir = location.local_dir(config.work_dir)
    check_apart(location, local_dir, [("IMAGES_DIR", config.images_dir)])
    if config.rejects_path:
        check_parent_exists(config.rejects_path, "--rejects")
    if config.rejects_path and config.on_error == "skip":
        problem = rejects_path_problem(
            config.rejects_path,
            metadata=config.metadata_path,
            images_dir=config.images_dir,
            out_dir=local_dir,
            default=_default_rejects(local_dir),
        )
        if problem:
            raise UsageError(problem)
    # Before anything reads or writes there (the foreign-file check reads README.md; the lock is in .shardkit/).
    check_own_entries(local_dir)
    if location.is_local:  # a URL is not checked for foreign files: a bucket has no "folder" to claim
        check_out_dir(local_dir, adopt=config.adopt)
    created = CreatedHere(local_dir)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(cluster_for(config.executor, config.scheduler, client))
        work_dir = stack.enter_context(locked(local_dir))
        created.locked()
        # Runs before the lock is released (LIFO): a refused run or a dry run takes away what it
        # made, while no other run can be working here. A run refused the lock made nothing and
        # undoes nothing.
        stack.callback(lambda: created.undo() if not created.finished or config.dry_run else None)
        if cluster is not None:  # before the check phase, which can take hours
            metadata_dir = os.path.dirname(os.path.abspath(config.metadata_path))
            cluster.check_workers(work_dir, [os.path.abspath(config.images_dir), metadata_dir], location)
        location.check_writable()  # credentials, bucket, endpoint: now, not after hours of checking
        pull_small_files(location, local_dir)
        if problem := card_problem(local_dir):  # a card shardkit cannot keep true: before hours of work
            raise UsageError(problem)
        summary = _pack_locked(config, fmt, local_dir, work_dir, progress, started, cluster, location, created)
        created.finished = True
    return summary


def _pack_locked(
    config: PackConfig,
    fmt: ShardFormat,
    local_dir: str,
    work_dir: str,
    progress: Progress,
    started: float,
    cluster: Cluster | None,
    location: Location,
    created: CreatedHere,
) -> PackSummary:
    """Pack, holding the lock; ``local_dir`` is OUT_DIR, or for a URL the local work folder."""
    if cluster is None and not config.dry_run:
        start_forkserver(config.jobs)
    # Workers writing to a URL need no access to this machine: their rows travel in the job.
    remote = not location.is_local
    tmp_dir = os.path.join(work_dir, "tmp")
    staging_dir = os.path.join(work_dir, "staging")
    shutil.rmtree(tmp_dir, ignore_errors=True)  # leftovers of a run that died
    shutil.rmtree(staging_dir, ignore_errors=True)
    os.makedirs(staging_dir)
    skip = config.on_error == "skip"
    # A dry run writes no rejects file of its own (it leaves no work folder); one asked for is written.
    default_rejects = None if config.dry_run else _default_rejects(local_dir)
    rejects_path = (config.rejects_path or default_rejects) if skip else None
    # Each bad row is listed in a spool as it is found; the rejects file is written from it once
    # the check is complete (so an existing one is replaced whole, or not at all).
    problems = ProblemReport(os.path.join(staging_dir, "rejects") if rejects_path else None)
    phases = _PhaseClock()
    try:
        # With a URL, the range tasks' runs must land where this process reads them: here.
        check_cluster = None if remote else cluster
        previous = _previous_run(local_dir, work_dir, force=config.force)
        staged = _check_and_stage(
            config,
            fmt,
            staging_dir,
            problems,
            progress,
            check_cluster,
            # --force numbers the classes afresh (and says what changed); any other run into
            # this OUT_DIR keeps the numbers it published.
            previous_labels=previous.labels if previous is not None and not config.force else {},
        )
    finally:
        problems.close()
    # Every row with a problem of one kind: the file's problem, in one line.
    whole = whole_file_problem(problems, config.metadata_path) if staged.rows == 0 else None
    if problems.count and not skip:
        if whole is None and staged.rows == 0:
            whole = _images_dir_beside(config, problems)
        if whole is not None:
            raise ShardkitError(whole)
        raise problems.error(config.metadata_path, _wrong_folder_hint(config, staged, problems))
    if rejects_path is not None:
        _publish_rejects(problems, rejects_path, config.metadata_path, default=rejects_path == default_rejects)
    if staged.rows == 0:
        listed_in = f": see {rejects_path}" if rejects_path is not None else ""
        every = f" (every row was rejected, {problems.count} problem(s){listed_in})" if problems.count else ""
        if whole is not None:
            raise ShardkitError(f"{whole}; every row was rejected{listed_in}")
        raise ShardkitError(f"{config.metadata_path}: no rows to pack{every}")
    if staged.duplicate_count:
        first = staged.duplicates[0]
        log.warning(
            "%s: %d row(s) left out, each after an earlier row with its key: %s (line %d: %s)",
            config.metadata_path,
            staged.duplicate_count,
            listed([f"line {p.line}" for p in staged.duplicates], 10),
            first.line,
            first.message.split("; drop one of the rows")[0],
        )
    if config.force:
        _warn_if_renumbered(previous, staged)
    phases.end("check")

    # Each split is cut by size (named by where its keys start), or by key prefix with
    # --prefix-length. A run of the same input plans from what the run before planned from (a
    # re-run is the same run); an update keeps the run before's rule and shard names, so that
    # unchanged rows land in the shards they are in.
    # --force plans afresh: it replaces the output.
    reuse = previous is not None and not config.force and (config.update or previous.fingerprint == staged.fingerprint)
    prefix_lengths: dict[str, int] = {}
    boundaries: dict[str, list[str]] = {}
    for split in staged.splits:
        before = previous.prefix_lengths.get(split.name) if previous is not None and reuse else None
        prefix_lengths[split.name] = config.prefix_length or (before if before is not None else BY_SIZE)
        if prefix_lengths[split.name] == BY_SIZE:
            boundaries[split.name] = _boundaries_before(
                previous if reuse else None, split.name, staged.fingerprint, config.update
            )
    try:
        plan, tables = _plan_with_tables(config, fmt, staged, prefix_lengths, boundaries, staging_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # One prefix length for a dataset without splits (as before splits existed); with splits,
    # the one given, or 0: each split's own (in the manifest).
    prefix_length = config.prefix_length or (0 if staged.split_folders else prefix_lengths["train"])
    options = Options(prefix_length, config.max_shard_bytes, config.target_bytes, fmt.name)
    warnings = builtin_loader_warnings(fmt, plan, staged.path, staged.modality, prefix_lengths)
    for warning in warnings:
        log.warning("%s", warning)
    per_folder = Counter(p.name.rsplit("/", 1)[0] for p in plan)  # data/, or each split's folder
    folder, count = per_folder.most_common(1)[0]
    if count > HUB_MAX_FOLDER_ENTRIES:
        log.warning(
            "%d shards in %s/: more than the %d files per folder the Hub advises, so `shardkit push` will refuse"
            " them. A larger --target-shard-size (up to --max-shard-size) makes fewer shards.",
            count,
            folder,
            HUB_MAX_FOLDER_ENTRIES,
        )

    def summary(
        reconciled: _Reconciled,
        changes: list[ShardChange],
        *,
        written: list[ManifestShard | ShardPlan],
        manifest: str | None,
    ) -> PackSummary:
        kept = reconciled.kept
        # Each shard's size as it is on disk (written or kept); a dry run's to write, as planned.
        sizes = {s.name if isinstance(s, ShardPlan) else s.file: s.bytes for s in written}
        sizes.update({name: s.bytes for name, s in reconciled.done.items()})
        return PackSummary(
            out_dir=location.url,
            manifest=manifest,
            rows=staged.rows,
            shards=len(plan),
            bytes=sum(sizes.values()),
            prefix_length=prefix_length,
            written_shards=len(written),
            resumed_shards=len(plan) - len(written) - kept,
            kept_shards=kept,
            removed_shards=len(reconciled.removed),
            written_bytes=sum(s.bytes for s in written),
            written_rows=sum(s.rows for s in written),
            changes=changes,
            rejected_rows=problems.count,
            skipped_duplicates=staged.duplicate_count,
            rejects_file=rejects_path if problems.count else None,
            seconds=time.perf_counter() - started,
            dry_run=config.dry_run,
            plan=plan,
            phase_seconds=dict(phases.seconds),
            warnings=warnings,
            features=card_features(fmt, staged.features, staged.extensions),
            splits=[
                {
                    "name": s.name,
                    "rows": s.rows,
                    "shards": sum(1 for p in plan if p.split == s.name),
                    "bytes": sum(sizes[p.name] for p in plan if p.split == s.name),
                    "prefix_length": prefix_lengths[s.name],
                }
                for s in staged.splits
            ],
        )

    phases.end("plan")
    # What each shard is made of: an update keeps a shard whose rows are those it was written
    # from. A tar's bytes follow from its rows alone; a Parquet file's also from the features (its
    # schema), a ZIP's from their Arrow types (its metadata.parquet).
    salt = fmt.features_salt(staged.features)
    schema_change = _schema_change(fmt, previous, staged.features)
    plan = [replace(p, input_sha256=rows_sha256(staged.path, p.offset, p.rows, salt)) for p in plan]
    # Shards on this machine are hashed (and their hashes kept); at a URL, sizes only (see _reconcile).
    hashes = HashCache(local_dir) if location.is_local else None
    state = _RunState(
        staged.fingerprint,
        options,
        fmt.layout_version,
        prefix_lengths,
        staged.labels,
        staged.split_folders,
        boundaries,
    )
    if config.dry_run:  # what the run would do with OUT_DIR (or its refusal), changing nothing
        reconciled = _reconcile(local_dir, work_dir, plan, state, previous, config, hashes, location, dry_run=True)
        changes = _changes(plan, reconciled, staged.path, location, force=config.force, schema_change=schema_change)
        return summary(reconciled, changes, written=[p for p in plan if p.name not in reconciled.done], manifest=None)

    # The metadata table now, in the work folder: a row it cannot hold stops the run before any
    # shard is written, not after hours of writing.
    table_tmp = os.path.join(staging_dir, TABLE_NAME)
    table_sha256 = write_metadata_table(
        table_tmp,
        ((p.name, b"".join(iter_published_lines(staged.path, p.offset, p.rows))) for p in plan),
        staged.features,
    )
    reconciled = _reconcile(local_dir, work_dir, plan, state, previous, config, hashes, location)
    done = dict(reconciled.done)
    # (now: the reasons read the staged rows, which the finish phase removes)
    changes = _changes(plan, reconciled, staged.path, location, force=config.force, schema_change=schema_change)
    created.keep()  # OUT_DIR changes from here on: its work folder is what a re-run resumes from
    todo = [p for p in plan if p.name not in done]
    jobs: list[ShardJob] = [
        ShardJob(
            plan=p,
            staging_path="" if remote else staged.path,  # with a URL the rows travel in the job
            images_dir=os.path.abspath(config.images_dir),
            out_dir=location.url,
            tmp_dir="" if remote else tmp_dir,  # a worker writing to a URL uses its own temp folder
            read_threads=config.read_threads,
            prefetch_bytes=config.prefetch_bytes,
            fsync=config.fsync,
            format=fmt.name,
            max_shard_bytes=config.max_shard_bytes,
            features=staged.features,
            table_path=tables.get(p.name, ""),
        )
        for p in todo
    ]
    tasks: Tasks[ShardJob] = _JobsWithTheirRows(jobs, staged.path, plan) if remote else jobs
    progress.start("writing shards", total=sum(p.bytes for p in todo), unit="B")
    saved = time.monotonic()
    try:
        names = [job.plan.name for job in jobs]
        # The workers are gone when the block ends: the finish phase's preview does not sit beside them.
        with task_executor(config.jobs, cluster, len(tasks)) as executor:
            for result in run_tasks(write_shard, tasks, names=names, executor=executor, what="write"):
                done[result.file] = result
                write_atomic(_done_record(work_dir, result.file), json.dumps(result.to_json()).encode())
                if hashes is not None:  # so a resume or the push need not read the files again
                    hashes.record(result.file, result.sha256)
                    hashes.record(result.metadata, result.metadata_sha256)
                    if time.monotonic() - saved > HASHES_SAVE_SECONDS:
                        hashes.save()
                        saved = time.monotonic()
                progress.advance(result.bytes, shards=len(done), rows=result.rows)
    except BaseException:
        if cluster is None:
            # The local workers are gone (the pool killed any still there after tasks.STOP_SECONDS,
            # as one stuck in a read that no signal reaches): the file a killed one was writing is
            # no one's now, and Ctrl-C leaves no partial file however long they took.
            shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    finally:
        if hashes is not None:
            hashes.save()
    progress.finish()
    phases.end("write")
    location.forget_listings()  # workers wrote what this process listed before (the preview reads it)

    location.put(table_tmp, TABLE_NAME, fsync=config.fsync)
    manifest = Manifest(
        options=options,
        input_fingerprint=staged.fingerprint,
        modality=staged.modality,
        features=staged.features,
        shards=[done[p.name] for p in plan],
        metadata_table_sha256=table_sha256,
        prefix_lengths=prefix_lengths if staged.split_folders else {},
        layout=fmt.layout_version,
    )
    preview = None
    if staged.modality == "image":
        preview = write_preview(
            local_dir, [p.name for p in plan], fmt=fmt, shards_at=location, labels=staged.labels, manifest=manifest
        )
    facts = card_facts(
        manifest,
        local_dir,
        title=location.name,
        extensions=staged.extensions,
        preview=preview,
        builtin_warnings=warnings,
    )
    loaders = write_card_files(local_dir, facts)
    for path in loaders.upgraded:
        log.info("%s: its reader code was an earlier template's; now the template's", path)
    for warning in loaders.warnings(lambda path: location.where(os.path.basename(path))):
        log.warning("%s", warning)
    # The manifest last, here as at a URL: it says the dataset is complete, so a run stopped
    # before it (Ctrl-C while the card is written) leaves no folder that verify passes and push
    # publishes with the template's card, which no reader can load.
    write_manifest(local_dir, manifest)
    push_small_files(location, local_dir)
    manifest_path = location.where(MANIFEST_NAME)
    shutil.rmtree(staging_dir, ignore_errors=True)
    shutil.rmtree(tmp_dir, ignore_errors=True)  # partial files of tasks whose worker died
    phases.end("finish")
    return summary(reconciled, changes, written=[done[p.name] for p in todo], manifest=manifest_path)


#: How many times a split is planned again when a shard's encoded metadata table made it pass
#: the cap (each time with the overshoot reserved in every shard); a plan that still does not fit
#: is an error.
_TABLE_PLAN_ROUNDS = 5


def _shard_names(manifest: Manifest, split: str) -> list[str]:
    """The names a manifest gives a split's shards, sorted (cut by size: where each range starts)."""
    return sorted(shard_stem(s.file) for s in manifest.shards if s.split == split)


def _boundaries_before(previous: _PreviousRun | None, split: str, fingerprint: str, update: bool) -> list[str]:
    """The shard names a split cut by size is planned from: the run before's starting names for
    the same input (a re-run is the same run); for an update, the names the run before gave
    its shards (so unchanged rows stay where they are); else one shard to start from."""
    if previous is None:
        return [FIRST_BOUNDARY]
    recorded = (previous.state.get("boundaries") or {}).get(split)
    if previous.fingerprint == fingerprint and recorded:
        return list(recorded)
    if update and previous.manifest is not None:
        names = _shard_names(previous.manifest, split)
        if names and names[0] == FIRST_BOUNDARY:
            return names
    return list(recorded) if update and recorded else [FIRST_BOUNDARY]


def _plan_with_tables(
    config: PackConfig,
    fmt: ShardFormat,
    staged: _Staged,
    prefix_lengths: dict[str, int],
    boundaries: dict[str, list[str]],
    staging_dir: str,
) -> tuple[list[ShardPlan], dict[str, str]]:
    """Every split's shards. For a format whose shards hold a metadata table (ZIP's
    metadata.parquet), each shard's table is encoded now (into the staging folder, unless a dry
    run), so that its size in the plan is exact; a split whose tables push a shard past the cap
    is planned again with room for them. Returns the plan and each shard's table file."""
    table_fixed = len(encode_metadata_table(b"", staged.features)) if fmt.metadata_table else 0
    tables_dir = os.path.join(staging_dir, "tables")
    tables: dict[str, str] = {}
    plan: list[ShardPlan] = []
    for split in staged.splits:
        entries: StagedEntries | list[PlanEntry] = StagedEntries(staged.path, fmt, split.offset, split.rows)
        if split.rows <= PLAN_IN_MEMORY_ROWS:  # read once, not once per planning pass
            entries = list(entries)
        reserve = 0
        for _ in range(_TABLE_PLAN_ROUNDS):
            fixed = fmt.fixed_bytes + table_fixed + reserve
            shards = plan_shards(
                entries,
                prefix_length=prefix_lengths[split.name],
                boundaries=boundaries.get(split.name, [FIRST_BOUNDARY]),
                max_shard_bytes=config.max_shard_bytes,
                target_shard_bytes=config.target_bytes,
                fmt=fmt,
                fixed_bytes=fixed,
                split=split.name,
                folder=f"data/{split.name}" if staged.split_folders else "data",
            )
            if not fmt.metadata_table:
                break
            planned = fixed - fmt.fixed_bytes
            shards = [_with_table(p, planned, staged, tables_dir, tables, config.dry_run) for p in shards]
            over = max(p.bytes - config.max_shard_bytes for p in shards)
            if over <= 0:
                break
            reserve += over
        else:
            raise ShardkitError(
                f"split {split.name!r}: its shards' metadata tables do not fit under --max-shard-size"
                f" {config.max_shard_bytes}; give a larger one"
            )
        plan += shards
    return plan, tables


def _with_table(
    shard: ShardPlan, planned_fixed: int, staged: _Staged, tables_dir: str, tables: dict[str, str], dry_run: bool
) -> ShardPlan:
    """``shard`` with its metadata table encoded and its exact size: what was planned for the
    table (its fixed part and each row's metadata line) replaced by the table's own bytes."""
    lines = b"".join(iter_published_lines(staged.path, shard.offset, shard.rows))
    try:
        table = encode_metadata_table(lines, staged.features)
    except Exception as exc:  # pyarrow raises several types; the rows were typed by the check phase
        raise ShardkitError(f"{shard.name}: its rows cannot be typed as the card declares: {exc}") from None
    if not dry_run:  # a working file, remade by every run: no fsync
        os.makedirs(tables_dir, exist_ok=True)
        path = os.path.join(tables_dir, shard.name.replace("/", "__") + ".parquet")
        try:
            with open(path, "wb") as f:
                f.write(table)
        except OSError as exc:
            raise naming(exc, path) from None
        tables[shard.name] = path
    return replace(shard, bytes=shard.bytes - planned_fixed - len(lines) + len(table))


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


class _PhaseClock:
    """Wall-clock seconds of consecutive phases, each measured from the end of the one before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def end(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = now - self._last
        self._last = now


@dataclass(frozen=True)
class _Staged:
    path: str
    rows: int
    total_cost: int
    fingerprint: str
    modality: str
    features: list[dict[str, Any]]
    extensions: list[str]  # of the files, lower case, sorted (a tar card has a column per extension)
    #: With on_duplicate="skip": the rows left out because an earlier row has their key (the
    #: first ones, for the message), and how many there were.
    duplicates: list[InputProblem] = field(default_factory=list)
    duplicate_count: int = 0
    #: Where each split's rows are in the staged file; one, train, without a split column.
    splits: list[SplitRows] = field(default_factory=list)
    split_folders: bool = False  # the rows named their splits: data/<split>/ per split
    #: The class_label column and its names in ClassLabel order (empty without --class-label).
    labels: dict[str, list[str]] = field(default_factory=dict)


def _check_and_stage(
    config: PackConfig,
    fmt: ShardFormat,
    staging_dir: str,
    problems: ProblemReport,
    progress: Progress,
    cluster: Cluster | None = None,
    previous_labels: dict[str, list[str]] | None = None,
) -> _Staged:
    settings = CheckSettings(
        metadata_path=os.path.abspath(config.metadata_path),
        images_dir=os.path.abspath(config.images_dir),
        format=fmt.name,
        max_file_bytes=max_file_bytes(config.max_shard_bytes, fmt),
        threads=max(config.read_threads, 1),
        decode=config.check_images,
        keep_source_path=config.keep_source_path,
        class_label=config.class_label,
    )
    ranges_dir = os.path.join(staging_dir, "ranges")
    skip = problems.lists_rows
    progress.start("checking rows", total=None, unit="rows")
    at_once = 1 if cluster is not None else config.jobs  # range tasks sharing this machine's memory
    jobs = range_jobs(settings, ranges_dir, skip, at_once, config.check_range_bytes)
    parallel = len(jobs) > 1 and (config.jobs > 1 or cluster is not None)
    combined = None
    if parallel:
        results = []
        names = [f"{job.index:05d}" for job in jobs]
        with task_executor(config.jobs, cluster, len(jobs)) as executor:
            for result in run_tasks(check_range, jobs, names=names, executor=executor, what="check"):
                results.append(result)
                progress.advance(result.rows)
        results.sort(key=lambda r: r.index)
        combined = combine(results)
        if combined is None:  # a type or modality conflict across ranges: one pass gives the exact verdicts
            log.info("the ranges of %s disagree on column types; checking it again in one pass", config.metadata_path)
            shutil.rmtree(ranges_dir)
            progress.start("checking rows again, in one pass", total=None, unit="rows")
    if combined is None:
        whole = RangeJob(settings, 0, 0, None, 1, os.path.join(ranges_dir, "whole"), skip)
        results = [check_range(whole, progress)]
        combined = combine(results)
        assert combined is not None  # one range cannot disagree with itself
    progress.finish()
    for result in results:
        problems.absorb(result.problems)

    repeats = repeated_files([run for r in results for run in r.file_runs], report=problems.add)
    modality = "audio" if combined.audio_line else "image"  # mixing the two is refused above
    features = combined.schema.features_yaml(modality, modality)
    labels: dict[str, list[str]] = {}
    if config.class_label is not None:
        column = config.class_label
        wrong = next((r.label_problem for r in results if r.label_problem is not None), None)
        if wrong is not None and not combined.labels:
            # No row holds a class name: the column is not one of names (numbers, say). One
            # problem, not one per row (nor "no such column": every row with it was refused).
            raise InputErrors(
                config.metadata_path,
                [wrong],
                1,
                f'--class-label names a column of class names (strings such as "cat"), and no row of'
                f" {column!r} holds one: publish it as it is, without --class-label, or name another column.",
            )
        if column not in {f["name"] for f in features}:
            raise UsageError(f"--class-label {column}: no row of {config.metadata_path} has a column {column!r}")
    # With --on-duplicate skip a repeated key is no problem of the input: counted apart, not rejected.
    skipped = ProblemReport(None)
    merged = merge_runs(
        [run for r in results for run in r.runs],
        os.path.join(staging_dir, "sorted.tsv"),
        report=skipped.add if config.on_duplicate == "skip" else problems.add,
        drop_lines=repeats,
        fmt=fmt,
        retype=float_retyper(features),
    )
    # Class names sorted (code point order), so a class's integer depends on the set of names
    # alone; a remux numbers them as its source does, and a pack into an OUT_DIR that published
    # some keeps their integers and numbers new names after them.
    known = list(config.class_names) or (previous_labels or {}).get(config.class_label or "") or []
    try:
        regrouped = regroup(
            merged.path, merged, fmt=fmt, label_column=config.class_label, known_labels=known, report=problems.add
        )
    except ValueError as exc:
        raise UsageError(f"{config.metadata_path}: {exc}") from None
    if any(split.name for split in regrouped.splits):
        first_lines: dict[str, int] = {}
        for result in results:  # (in input order)
            for name, line in result.split_lines.items():
                first_lines.setdefault(name, line)
        for warning in split_warnings({s.name: s.rows for s in regrouped.splits}, first_lines):
            log.warning("%s: %s", config.metadata_path, warning)
    if config.class_label is not None and regrouped.label_names is not None:
        labels[config.class_label] = regrouped.label_names
        features = with_class_label(features, config.class_label, regrouped.label_names)
        _warn_about_classes(config, regrouped, merged.rows)
    fingerprint = hashlib.sha256(
        (merged.fingerprint + json.dumps(features, sort_keys=True)).encode("utf-8")
    ).hexdigest()
    return _Staged(
        merged.path,
        merged.rows - regrouped.unsplit_count,
        merged.total_cost,
        fingerprint,
        modality,
        features,
        sorted(combined.extensions),
        skipped.shown,
        skipped.count,
        regrouped.splits,
        split_folders=any(name for name in merged.splits),
        labels=labels,
    )


def _warn_about_classes(config: PackConfig, regrouped: Regrouped, rows: int) -> None:
    """Say what a user may not expect of the class names: kept ones without rows, or so many
    names that the column is likely not one of classes."""
    column, names = config.class_label, regrouped.label_names or []
    empty = regrouped.empty_labels
    if empty and not config.class_names:
        log.warning(
            "--class-label %s: no row is of class %s now; kept with the number published (numbers never"
            " change in an OUT_DIR). To number the classes afresh: --force (or a new OUT_DIR).",
            column,
            listed([repr(n) for n in empty], 5),
        )
    if len(names) > 1000 and 2 * len(names) > rows:
        log.warning(
            "--class-label %s: %d class names for %d rows: is it a column of class names? Every name is in the card.",
            column,
            len(names),
            rows,
        )


def _warn_if_renumbered(previous: _PreviousRun | None, staged: _Staged) -> None:
    """--force numbers the classes afresh: say which published numbers change."""
    for column, names in staged.labels.items():
        before = (previous.labels if previous is not None else {}).get(column)
        if not before:
            continue
        moved = [f"{n!r} {before.index(n)} -> {i}" for i, n in enumerate(names) if n in before and before.index(n) != i]
        if moved:
            log.warning(
                "--force numbers the classes of %s afresh: %s. A model trained on the data published before reads"
                " these numbers as other classes.",
                column,
                listed(moved, 5),
            )


def _class_label_problem(config: PackConfig) -> str | None:
    """Why ``config.class_label`` cannot name a class label column (None if it can)."""
    column = config.class_label
    if column is None:
        return "class names given without a class_label column" if config.class_names else None
    taken = {"file_name": "the file's name", "key": "the row's key", SPLIT_COLUMN: "the row's split"}
    if config.keep_source_path:
        taken[SOURCE_PATH_COLUMN] = "the --keep-source-path column"
    if column in taken:
        return f"--class-label {column}: that column is {taken[column]}, not a class; name the column of class names"
    if len(set(config.class_names)) != len(config.class_names):
        return f"--class-label {column}: the class names given repeat a name"
    return None


def _default_rejects(local_dir: str) -> str:
    """Where ``--on-error skip`` lists bad rows without ``--rejects``: in the work folder."""
    return os.path.join(local_dir, WORK_DIR, "rejects.jsonl")


def _publish_rejects(problems: ProblemReport, path: str, metadata_path: str, *, default: bool) -> None:
    """Write the rejects file once the check is complete. With no row rejected a file of an
    earlier run stays as it was, unless it is the default one in the work folder (shardkit's
    own, which would mislead)."""
    if problems.publish(path, metadata_path) or not os.path.exists(path):
        return
    if default:
        os.unlink(path)
    else:
        log.info("%s: no row was rejected; the file, from an earlier run, is left as it was", path)


#: Folders inside IMAGES_DIR looked in for the files when none is found (IMAGES_DIR one level too high).
_SUBFOLDERS_LOOKED_IN = 200


def _images_dir_beside(config: PackConfig, problems: ProblemReport) -> str | None:
    """When no row's file is found under IMAGES_DIR but every shown one is under its parent or
    one of its folders (IMAGES_DIR given one level off, or file_names that start with its own
    name), the folder is the cause: one line naming the folder to give instead."""
    images = os.path.abspath(config.images_dir)
    shown = problems.shown
    if not shown or not all(p.message.startswith(FILE_NOT_FOUND) for p in shown):
        return None
    rels = [os.path.relpath(p.message.removeprefix(FILE_NOT_FOUND), images) for p in shown]
    if any(rel.startswith(os.pardir) for rel in rels):
        return None
    candidates = [os.path.dirname(images)]
    with contextlib.suppress(OSError), os.scandir(images) as entries:
        folders = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
        candidates += folders[:_SUBFOLDERS_LOOKED_IN]
    for folder in candidates:
        if all(os.path.isfile(os.path.join(folder, rel)) for rel in rels):
            first = shown[0]
            return (
                f"{config.metadata_path}: no file the metadata names is under IMAGES_DIR {images!r}"
                f" ({problems.count} of {problems.count} rows); line {first.line}: {rels[0]!r} is under"
                f" {folder!r}, as every file_name looked at is: give that folder as IMAGES_DIR"
            )
    return None


def _wrong_folder_hint(config: PackConfig, staged: _Staged, problems: ProblemReport) -> str | None:
    """When no row's file was found, the folder is likely wrong, not every row: say so. When no
    row can be packed, --on-error skip would pack nothing: say to fix the file."""
    if staged.rows:
        return None
    if not all(p.message.startswith(FILE_NOT_FOUND) for p in problems.shown):
        return "No row can be packed as it is (so --on-error skip would pack nothing): fix the rows above."
    return (
        f"None of the files the metadata names is under IMAGES_DIR {os.path.abspath(config.images_dir)!r}:"
        " is that the folder every file_name is relative to? (Give it as the first argument.)"
    )


#: The layout of a manifest that has a metadata table but records no layout: 3 (ZIP shards
#: then were still at 2, which packs of this version do not tell apart: both are older than 4).
_LAST_UNRECORDED_LAYOUT = 3

#: What each layout version (``ShardFormat.layout_version``) changed in what a pack publishes,
#: beyond the input and options: a new layout rewrites unchanged input (with --force).
LAYOUT_CHANGES = {
    2: "float columns' whole numbers are published as 2.0, and metadata.parquet is new",
    3: "tar members carry a CRC-32 record and Parquet pages a checksum, so readers refuse damaged rows",
    4: "splits are cut into shards near the target size, named by where their keys start, and ZIP shards hold"
    " their rows as a typed metadata.parquet",
}


def _recorded_shards(manifest: Manifest | None, done_records: dict[str, ManifestShard]) -> dict[str, ManifestShard]:
    """The shards OUT_DIR's manifest or the done records (of a run that stopped part-way) name."""
    shards = {s.file: s for s in manifest.shards} if manifest is not None else {}
    for record in done_records.values():
        shards[record.file] = record
    return shards


@dataclass(frozen=True)
class _RunState:
    """What a run records in ``.shardkit/state.json``: a re-run is the same run if all is equal."""

    input_fingerprint: str
    options: Options
    layout: int
    prefix_lengths: dict[str, int]  # each split's
    labels: dict[str, list[str]]  # the class label column's names (an update keeps their order)
    split_folders: bool  # the rows named their splits: data/<split>/
    #: Each split cut by size: the shard names its plan started from (plan.plan_shards).
    boundaries: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "input_fingerprint": self.input_fingerprint,
            "options": asdict(self.options),
            "layout": self.layout,
            "prefix_lengths": self.prefix_lengths,
            "labels": self.labels,
            "split_folders": self.split_folders,
            "boundaries": self.boundaries,
        }


@dataclass(frozen=True)
class _PreviousRun:
    state: dict[str, Any]  # as recorded (or, for a folder without its work folder, from its manifest)
    manifest: Manifest | None

    @property
    def fingerprint(self) -> str | None:
        return self.state.get("input_fingerprint")

    @property
    def prefix_lengths(self) -> dict[str, int]:
        return dict(self.state.get("prefix_lengths") or {})

    @property
    def labels(self) -> dict[str, list[str]]:
        return dict(self.state.get("labels") or {})


def _previous_run(local_dir: str, work_dir: str, *, force: bool) -> _PreviousRun | None:
    """The run recorded in OUT_DIR, if any (older records are completed with what they imply).
    A damaged state.json is refused; with ``force``, ignored (the run starts afresh)."""
    state = read_pack_state(os.path.join(work_dir, "state.json"), force=force)
    manifest = read_manifest(local_dir)
    if state is None and manifest is not None:  # a folder packed without its work folder (a clone)
        state = {"input_fingerprint": manifest.input_fingerprint, "options": asdict(manifest.options)}
        state["layout"] = manifest.layout or (_LAST_UNRECORDED_LAYOUT if manifest.metadata_table_sha256 else 1)
        state["prefix_lengths"] = {s.name: s.prefix_length for s in manifest.splits()}
        state["labels"] = {f["name"]: n for f in manifest.features if (n := class_label_names(f)) is not None}
        state["boundaries"] = {
            s.name: _shard_names(manifest, s.name) for s in manifest.splits() if s.prefix_length == BY_SIZE
        }
    if state is None:
        return None
    state.setdefault("layout", 1)  # state from before layout versions
    options = state.get("options") or {}
    # State from before splits and labels: one split, train, with the options' prefix length.
    state.setdefault("prefix_lengths", {"train": options.get("prefix_length")})
    state.setdefault("labels", {})
    state.setdefault("split_folders", manifest.split_folders if manifest is not None else False)
    state.setdefault("boundaries", {})
    return _PreviousRun(state, manifest)


def _what_differs(previous: dict[str, Any] | None, state: dict[str, Any]) -> str:
    """What differs from the recorded run: an older layout, other input, other options, or both."""
    if previous is None:
        return "a run shardkit has no record of"
    same_format = (previous.get("options") or {}).get("format") == state["options"]["format"]
    if previous.get("layout") != state["layout"] and same_format:  # layouts are per format
        before, now = previous.get("layout"), state["layout"]
        since = [LAYOUT_CHANGES[v] for v in range((before or 1) + 1, now + 1) if v in LAYOUT_CHANGES]
        return (
            f"an older shardkit (layout {before} -> {now}: {'; '.join(since) or 'another layout'});"
            " the same input packs to other bytes now"
        )
    parts = []
    old, new = dict(previous.get("options") or {}), state["options"]
    if previous.get("split_folders") != state["split_folders"]:
        parts.append(
            "rows without splits (the rows now name their splits: one folder each)"
            if state["split_folders"]
            else "rows with splits (the rows no longer name splits)"
        )
        old.pop("prefix_length", None)  # (with splits, each split has its own: not an option changed)
        new = {k: v for k, v in new.items() if k != "prefix_length"}
    # A shard format names the files inside shards its own way, which the fingerprint covers:
    # with another format, a changed fingerprint does not mean changed input.
    if previous.get("labels") != state["labels"]:
        parts.append("other class labels (--class-label)")
    elif previous.get("input_fingerprint") != state["input_fingerprint"] and old.get("format") == new["format"]:
        parts.append("other input (rows, files or fields changed)")
    changed = [f"{_OPTION_FLAGS.get(k, k)} {old.get(k)} -> {new[k]}" for k in new if old.get(k) != new[k]]
    if changed:
        parts.append(f"other options ({', '.join(changed)})")
    return " and ".join(parts) or "another run"


#: The options a run records, by the flag that sets them (sizes in bytes).
_OPTION_FLAGS = {
    "prefix_length": "--prefix-length",
    "max_shard_bytes": "--max-shard-size",
    "target_shard_bytes": "--target-shard-size",
    "format": "--format",
}


def _done_record(work_dir: str, shard_file: str) -> str:
    return os.path.join(work_dir, "done", shard_file.replace("/", "__") + ".json")


def _reconcile(
    local_dir: str,
    work_dir: str,
    plan: list[ShardPlan],
    run: _RunState,
    previous_run: _PreviousRun | None,
    config: PackConfig,
    hashes: HashCache | None,
    location: Location,
    *,
    dry_run: bool = False,
) -> _Reconciled:
    """Compare OUT_DIR with the plan: return the shards already done (and how many of them an
    update kept from the run before), and the shard files it removes; refuse foreign output.
    ``dry_run``: decide the same, refuse the same, and change nothing."""
    where = location.url
    state = run.to_json()
    previous = previous_run.state if previous_run is not None else None
    manifest = previous_run.manifest if previous_run is not None else None
    planned = {p.name for p in plan} | {metadata_path_for(p) for p in plan}
    same_run = previous == state
    # An update: the same options and layout, other rows. Shards whose rows did not change stay.
    updating = (
        config.update
        and not same_run
        and previous is not None
        and all(previous.get(k) == state[k] for k in ("options", "layout"))
    )
    # What shardkit's own records say it wrote here: the manifest's files and the done records
    # of a run that stopped part-way. Nothing else in data/ or metadata/ is ever deleted or
    # overwritten, --force or not; a file at a planned name counts as ours only while a run of
    # this same input and options is under way (killed between writing a shard and its record).
    done_dir = os.path.join(work_dir, "done")
    done_records = read_done_records(done_dir)
    recorded = _recorded_shards(manifest, done_records)
    owned = {rel for s in recorded.values() for rel in (s.file, s.metadata)}
    present = sorted(
        rel
        for sub in ("data", "metadata")
        for rel in location.files_under(sub)
        if rel.rsplit("/", 1)[-1] not in PLACEHOLDERS
    )
    unknown = unnamed_files(present, (owned | planned) if same_run else owned)
    if unknown:
        shown = listed(unknown, 5)
        raise UsageError(
            f"{where} holds files in data/ or metadata/ that shardkit did not write ({shown}): no manifest"
            " or record of this folder names them. shardkit never deletes or overwrites them, --force or not:"
            " move them out of data/ and metadata/, which hold a dataset's shards."
        )
    ours = [rel for rel in present if rel in owned or rel in planned]
    removed = [rel for rel in ours if rel in recorded and rel not in planned]
    if not same_run and not updating and (previous is not None or ours) and not config.force:
        differs = _what_differs(previous, state)
        if config.update:
            raise UsageError(
                f"{where} holds shardkit output from {differs}: --update keeps shards of the same options"
                " and layout only. Re-run with --force to replace it (only files shardkit wrote)."
            )
        only_input = previous is not None and all(previous.get(k) == state[k] for k in ("options", "layout"))
        hint = " --update to rewrite only the shards whose rows changed, or" if only_input else ""
        raise UsageError(
            f"{where} already holds shardkit output from {differs}. Re-run with{hint} --force"
            " to replace it (only files shardkit wrote), or choose another OUT_DIR."
        )
    # In this order, so that a run killed at any step leaves every file of data/ and metadata/
    # named by a record (the old ones, or the new state's plan) and a re-run takes it up: the
    # files that go first, while the records naming them are there; then the new state; then
    # the old records (a record is trusted only for the rows it was written from, below).
    if not dry_run:
        for rel in ours:
            # An update overwrites a changed shard in place, when its new version is written.
            if rel not in planned or not (same_run or updating):
                location.remove(rel)
        os.makedirs(done_dir, exist_ok=True)
        write_atomic(os.path.join(work_dir, "state.json"), json.dumps(state, sort_keys=True).encode())
        if not same_run:
            shutil.rmtree(done_dir, ignore_errors=True)
            os.makedirs(done_dir)
            location.remove(MANIFEST_NAME)
            with contextlib.suppress(FileNotFoundError):  # the work folder's copy, for a URL
                os.unlink(os.path.join(local_dir, MANIFEST_NAME))

    # At a URL, one listing: reading terabytes back to hash them would cost as much as the pack.
    sizes = None if location.is_local else location.find()
    exact = run.options.shard_format.exact
    done: dict[str, ManifestShard] = {}
    kept = 0
    for p in plan:
        record_path = _done_record(work_dir, p.name)
        result: ManifestShard | None = None
        # (A run of other input clears the done records: a dry run leaves them and ignores them.)
        if same_run:
            result = done_records.get(record_path)
        if result is not None and result.input_sha256 and result.input_sha256 != p.input_sha256:
            result = None  # written from other rows, by a run of other input killed part-way
        from_before = False
        # An update keeps the shards of the run before whose rows did not change; so does a
        # re-run of the same input without done records (an update killed before it recorded
        # them, or a copy of the folder without its .shardkit/), from the manifest.
        if result is None and (updating or same_run):
            before = recorded.get(p.name)
            if before is not None and before.input_sha256 and before.input_sha256 == p.input_sha256:
                result, from_before = before, True
        if result is None:
            continue
        planned_size = p.bytes == result.bytes or not exact
        problem = url_shard_problem(sizes, result) if sizes is not None else shard_problem(local_dir, result, hashes)
        if planned_size and problem is None:
            done[p.name] = result
            if from_before:  # recorded, so that a run killed from here on keeps it too
                if not dry_run:
                    write_atomic(record_path, json.dumps(result.to_json()).encode())
                kept += 1
        elif not from_before and not dry_run:
            log.warning("%s: recorded as written but missing or changed; writing it again", p.name)
    return _Reconciled(done, kept, recorded, removed, resuming=same_run)


@dataclass(frozen=True)
class _Reconciled:
    """What :func:`_reconcile` found in OUT_DIR."""

    done: dict[str, ManifestShard]  # planned shards there already, as they should be
    kept: int  # of those, the ones an update kept from the run before
    recorded: dict[str, ManifestShard]  # every shard the manifest or a done record names, by file
    removed: list[str]  # recorded shard files the plan has no place for (their metadata files go too)
    resuming: bool  # a re-run of the same input and options


def _schema_change(
    fmt: ShardFormat, previous: _PreviousRun | None, features: list[dict[str, Any]]
) -> _SchemaChange | None:
    """How the features differ from the run before's, when they shape the shards' bytes."""
    before = previous.manifest.features if previous is not None and previous.manifest is not None else None
    if not before or before == features:
        return None
    salt = fmt.features_salt(before)
    if salt == fmt.features_salt(features):
        return None
    old, new = {f["name"]: f for f in before}, {f["name"]: f for f in features}
    parts = []
    if added := [n for n in new if n not in old]:
        parts.append("new columns: " + listed(added, 5))
    if gone := [n for n in old if n not in new]:
        parts.append("columns gone: " + listed(gone, 5))
    for name in (n for n in new if n in old and new[n] != old[n]):
        names_before, names_now = class_label_names(old[name]), class_label_names(new[name])
        if names_before is not None and names_now is not None:
            added_names = [n for n in names_now if n not in names_before]
            parts.append("new class names: " + listed(added_names, 5) if added_names else "class names renumbered")
        else:
            parts.append(f"column {name}'s type changed")
    # one_line: a class name may hold a line end, which must not forge a line of the summary
    return _SchemaChange(salt, one_line("; ".join(parts)) or "the schema changed")


@dataclass(frozen=True)
class _SchemaChange:
    salt_before: bytes  # what the run before hashed each shard's rows after
    words: str


def _changes(
    plan: list[ShardPlan],
    reconciled: _Reconciled,
    staged_path: str,
    location: Location,
    *,
    force: bool,
    schema_change: _SchemaChange | None,
) -> list[ShardChange]:
    """The shards a run writes, rewrites or removes, and why, in plan order (the removed last).
    Called before any shard is written: a rewritten shard's old rows are read from its metadata
    file."""
    changes = []
    for p in plan:
        if p.name in reconciled.done:
            continue
        before = reconciled.recorded.get(p.name)
        if before is None:
            why = "not written yet" if reconciled.resuming else "new"
            changes.append(ShardChange(p.name, p.split, "write", why, p.rows, p.bytes))
            continue
        if force:
            why = "--force"
        elif before.input_sha256 == p.input_sha256:
            why = "missing or changed on disk"
        elif not before.input_sha256:
            why = "written by a shardkit that recorded no hash of its rows"
        elif schema_change is not None and before.input_sha256 == rows_sha256(
            staged_path, p.offset, p.rows, schema_change.salt_before
        ):
            why = schema_change.words  # the same rows: only the schema its bytes hold changed
        else:
            why = _rows_changed(location, before, staged_path, p)
        changes.append(ShardChange(p.name, p.split, "rewrite", why, p.rows, p.bytes))
    for file in reconciled.removed:
        old = reconciled.recorded[file]
        # (whether its rows went or moved to a neighbour: a planned shard's key range overlaps)
        split_plan = [p for p in plan if p.split == old.split]
        if not split_plan:
            why = f"split {old.split} has no rows now"
        elif any(p.first_key <= old.last_key and old.first_key <= p.last_key for p in split_plan):
            why = "its key range is in other shards now"
        else:
            why = "no rows in its key range now"
        changes.append(ShardChange(file, old.split, "remove", why, old.rows, old.bytes))
    return changes


def _rows_changed(location: Location, before: ManifestShard, staged_path: str, p: ShardPlan) -> str:
    """How a shard's rows differ from those it was written from: rows added, removed and changed
    (by key, from its metadata file, whose lines are the published ones), or, with that file
    unreadable, how many rows it had and has."""
    counts = f"({before.rows} -> {p.rows} rows)" if before.rows != p.rows else f"({summarytext.rows(p.rows)})"
    try:
        data = location.read_bytes(before.metadata)
        # (split at "\n" only, as every reader of published lines: JSON leaves U+2028 as it is)
        old = {json.loads(line)["key"]: line for line in data.split(b"\n") if line} if data is not None else None
    except (ShardkitError, OSError, ValueError, KeyError, TypeError):  # a message is not worth a refusal
        old = None
    if old is None:
        return f"rows changed {counts}"
    new = {row.key: row.metadata_line.encode("utf-8") for row in iter_staged(staged_path, p.offset, p.rows)}
    added = sum(1 for key in new if key not in old)
    removed = sum(1 for key in old if key not in new)
    changed = sum(1 for key, line in new.items() if key in old and old[key] != line)
    found = [(n, what) for n, what in ((added, "added"), (removed, "removed"), (changed, "changed")) if n]
    if not found:  # the same keys and fields: a file's bytes, extension or name changed
        return "files changed (same keys and fields)"
    # "3 rows added, 2 removed (95 -> 96 rows)"
    words = [f"{summarytext.rows(n) if i == 0 else n} {what}" for i, (n, what) in enumerate(found)]
    return f"{', '.join(words)} {counts}"
