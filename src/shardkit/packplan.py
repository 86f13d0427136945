"""The plan stage of a pack: which rows go in which shard, for every split, with exact sizes.

:func:`plan_pack` is the stage's one entry. The cut itself is :func:`.plan.plan_shards` (pure);
this stage chooses each split's rule (by size, named by where its keys start, or by key prefix
with ``--prefix-length``), starts from what the run before planned from (a re-run is the same
run; an update keeps the shard names), encodes a ZIP shard's ``metadata.parquet`` so that its
size in the plan is exact, and warns about what datasets' builtin loaders would make of the
layout (:mod:`.builtin`).

Test seam: ``PLAN_IN_MEMORY_ROWS`` is read when a split is planned (0: every split is planned
from the staged file, as a large one is).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .builtin import builtin_loader_warnings
from .errors import ShardkitError, UsageError, naming
from .formats.parquet import encode_metadata_table
from .hubplan import limit_problem, nested, repo_plan
from .manifest import Options
from .packrun import PackRun
from .plan import BY_SIZE, FIRST_BOUNDARY, PlanEntry, ShardPlan, plan_shards
from .staging import SplitRows, StagedEntries, iter_published_lines

if TYPE_CHECKING:
    from .packconfig import PackConfig
    from .packprevious import PreviousRun
    from .packstage import Staged

log = logging.getLogger(__name__)

PLAN_IN_MEMORY_ROWS = 50_000  # up to this many rows (12 MB at most), the planner reads a list twice, not the file

#: How many times a split is planned again when a shard's encoded metadata table made it pass
#: the cap (each time with the overshoot reserved in every shard); a plan that still does not fit
#: is an error.
_TABLE_PLAN_ROUNDS = 5


@dataclass(frozen=True)
class Planned:
    """Every shard of the run, and the rules they were cut by."""

    plan: list[ShardPlan]  # every split's shards, in order
    tables: dict[str, str]  # each shard's encoded metadata table (a file in the staging folder), if its format has one
    prefix_lengths: dict[str, int]  # each split's (plan.BY_SIZE: cut by size)
    #: Each split cut by size: the shard names its plan started from.
    boundaries: dict[str, list[str]]
    #: The options the manifest records: one prefix length for a dataset without splits (as
    #: before splits existed); with splits, the one given, or 0: each split's own.
    options: Options
    warnings: list[str]  # what datasets' builtin loaders would refuse or get wrong in this layout


def plan_pack(run: PackRun, staged: Staged, previous: PreviousRun | None) -> Planned:
    """Plan every split's shards (see the module's docstring); warn about the layout."""
    config, fmt = run.config, run.fmt
    # Each split is cut by size (named by where its keys start), or by key prefix with
    # --prefix-length. A run of the same input plans from what the run before planned from (a
    # re-run is the same run); an update keeps the run before's rule and shard names, so that
    # unchanged rows land in the shards they are in.
    reused = (
        previous
        if previous is not None and previous.reuses(staged.fingerprint, update=config.update, force=config.force)
        else None
    )
    prefix_lengths: dict[str, int] = {}
    boundaries: dict[str, list[str]] = {}
    for split in staged.splits:
        before = reused.prefix_lengths.get(split.name) if reused is not None else None
        prefix_lengths[split.name] = config.prefix_length or (before if before is not None else BY_SIZE)
        if prefix_lengths[split.name] == BY_SIZE:
            boundaries[split.name] = (
                reused.boundaries(split.name, staged.fingerprint, config.update)
                if reused is not None
                else [FIRST_BOUNDARY]
            )
    try:
        plan, tables = _plan_with_tables(run, staged, prefix_lengths, boundaries)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    prefix_length = config.prefix_length or (0 if staged.split_folders else prefix_lengths["train"])
    options = Options(prefix_length, config.max_shard_bytes, config.target_bytes, fmt.name)
    warnings = builtin_loader_warnings(fmt, plan, staged.path, staged.modality, prefix_lengths)
    for warning in warnings:
        log.warning("%s", warning)
    refuse_over_hub_limits(plan, config)  # before anything is written (a dry run too)
    return Planned(plan, tables, prefix_lengths, boundaries, options, warnings)


def refuse_over_hub_limits(plan: list[ShardPlan], config: PackConfig) -> None:
    """A repo the Hub would refuse is no plan: one line with the option that fixes it."""
    problem = limit_problem(
        repo_plan(plan),
        target_bytes=config.target_bytes,
        max_shard_bytes=config.max_shard_bytes,
        prefix_length=config.prefix_length or 0,
    )
    if problem is not None:
        raise UsageError(problem)


def _plan_with_tables(
    run: PackRun, staged: Staged, prefix_lengths: dict[str, int], boundaries: dict[str, list[str]]
) -> tuple[list[ShardPlan], dict[str, str]]:
    """Every split's shards. For a format whose shards hold a metadata table (ZIP's
    metadata.parquet), each shard's table is encoded now (into the staging folder, unless a dry
    run), so that its size in the plan is exact. Returns the plan and each shard's table file."""
    fmt = run.fmt
    table_fixed = len(encode_metadata_table(b"", staged.features)) if fmt.metadata_table else 0
    tables: dict[str, str] = {}
    plan: list[ShardPlan] = []
    for split in staged.splits:
        plan += _plan_split(run, staged, split, prefix_lengths[split.name], boundaries, table_fixed, tables)
    return plan, tables


def _plan_split(
    run: PackRun,
    staged: Staged,
    split: SplitRows,
    prefix_length: int,
    boundaries: dict[str, list[str]],
    table_fixed: int,
    tables: dict[str, str],
) -> list[ShardPlan]:
    """One split's shards; a split whose tables push a shard past the cap is planned again with
    room for them. Each shard's table file goes into ``tables``."""
    config, fmt = run.config, run.fmt
    tables_dir = os.path.join(run.staging_dir, "tables")
    entries: StagedEntries | list[PlanEntry] = StagedEntries(staged.path, fmt, split.offset, split.rows)
    if split.rows <= PLAN_IN_MEMORY_ROWS:  # read once, not once per planning pass
        entries = list(entries)
    reserve = 0
    for _ in range(_TABLE_PLAN_ROUNDS):
        fixed = fmt.fixed_bytes + table_fixed + reserve
        shards = plan_shards(
            entries,
            prefix_length=prefix_length,
            boundaries=boundaries.get(split.name, [FIRST_BOUNDARY]),
            max_shard_bytes=config.max_shard_bytes,
            target_shard_bytes=config.target_bytes,
            fmt=fmt,
            fixed_bytes=fixed,
            split=split.name,
            folder=f"data/{split.name}" if staged.split_folders else "data",
        )
        shards = nested(shards)  # more shards than a folder may hold: in folders by name
        if not fmt.metadata_table:
            return shards
        # Tables only add bytes: a split over a Hub limit already is refused before they are made.
        refuse_over_hub_limits(shards, config)
        planned = fixed - fmt.fixed_bytes
        shards = [_with_table(p, planned, staged, tables_dir, tables, config.dry_run) for p in shards]
        over = max(p.bytes - config.max_shard_bytes for p in shards)
        if over <= 0:
            return shards
        reserve += over
    raise ShardkitError(
        f"split {split.name!r}: its shards' metadata tables do not fit under --max-shard-size"
        f" {config.max_shard_bytes}; give a larger one"
    )


def _with_table(
    shard: ShardPlan, planned_fixed: int, staged: Staged, tables_dir: str, tables: dict[str, str], dry_run: bool
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
