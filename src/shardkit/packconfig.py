"""What a pack is asked to do (:class:`PackConfig`) and what it did (:class:`PackSummary`, with
each shard it wrote or removed, :class:`ShardChange`); :mod:`shardkit.pack` imports them all, and
:func:`check_config` refuses options that cannot go together before anything is read."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .check import SPLIT_COLUMN
from .errors import UsageError
from .formats import ShardFormat, format_named
from .hubplan import repo_plan
from .plan import DEFAULT_MAX_SHARD_BYTES, ShardPlan, check_limits, default_target
from .rowrules import SOURCE_PATH_COLUMN
from .writer import DEFAULT_PREFETCH_BYTES, DEFAULT_READ_THREADS

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
    #: Each row's file_name is ``[name, offset, size]``, a byte range of a file (remux stages a
    #: batch's rows in one file; not a CLI option).
    file_ranges: bool = False
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
        data["hub"] = repo_plan(self.plan).to_json() if self.plan else None  # the repo against the Hub's limits
        return data


def check_config(config: PackConfig) -> ShardFormat:
    """Refuse options that cannot go together and inputs that are not there (a UsageError each);
    return the shard format the config names."""
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
    if config.file_ranges and config.check_images:
        raise UsageError("byte ranges of files (remux's staging) are not decoded by the check")
    if config.update and config.force:
        raise UsageError("--update keeps the shards whose rows did not change, --force rewrites them all: give one")
    return fmt


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
