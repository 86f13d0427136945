"""A pack's bookkeeping with the output already there: resume a run stopped part-way, update
(``--update``), or refuse output of another run.

:mod:`.packprevious` reads what the run before recorded; the plan starts from it.
:func:`reconcile`, the stage's one entry, compares OUT_DIR with
the plan: the shards already there as they should be (kept), the files it removes, the new
state it records, and each shard the run writes, rewrites or removes, with why.

Test seam: ``write_atomic`` is looked up in this module when called (a test kills a run the
moment the new state is recorded).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from . import summarytext
from .errors import ShardkitError, UsageError, listed, one_line
from .formats import ShardFormat
from .location import Location
from .manifest import (
    LINES_DIR,
    MANIFEST_NAME,
    Manifest,
    ManifestShard,
    Options,
    metadata_file_of,
    read_published_rows,
    write_atomic,
)
from .outdir import PLACEHOLDERS, HashCache, shard_problem, unnamed_files, url_shard_problem
from .packconfig import ShardChange
from .packprevious import PreviousRun
from .packrun import PackRun
from .plan import ShardPlan
from .schema import class_label_names
from .staging import iter_staged, rows_sha256
from .workstate import read_done_records

if TYPE_CHECKING:
    from .packplan import Planned
    from .packstage import Staged

log = logging.getLogger(__name__)


#: What each layout version (``ShardFormat.layout_version``) changed in what a pack publishes,
#: beyond the input and options: a new layout rewrites unchanged input (with --force).
LAYOUT_CHANGES = {
    2: "float columns' whole numbers are published as 2.0, and metadata.parquet is new",
    3: "tar members carry a CRC-32 record and Parquet pages a checksum, so readers refuse damaged rows",
    4: "splits are cut into shards near the target size, named by where their keys start, and ZIP shards hold"
    " their rows as a typed metadata.parquet",
    5: "Parquet row groups hold about 1/64 of their shard, so a rank reading part of a shard fetches little more"
    " than its rows",
}


@dataclass(frozen=True)
class RunState:
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
class Reconciled:
    """What :func:`reconcile` found in OUT_DIR, and what the run does about it."""

    plan: list[ShardPlan]  # the plan, each shard with the hash of the rows it is made of (input_sha256)
    done: dict[str, ManifestShard]  # planned shards there already, as they should be
    kept: int  # of those, the ones an update kept from the run before
    recorded: dict[str, ManifestShard]  # every shard the manifest or a done record names, by file
    removed: list[str]  # recorded shard files the plan has no place for (their metadata files go too)
    resuming: bool  # a re-run of the same input and options
    changes: list[ShardChange]  # each shard written, rewritten or removed, and why, in plan order
    #: OUT_DIR's files' sha256 (on this machine; None at a URL, where sizes are compared).
    hashes: HashCache | None

    @property
    def todo(self) -> list[ShardPlan]:
        """The planned shards still to write, in plan order."""
        return [p for p in self.plan if p.name not in self.done]


def reconcile(
    run: PackRun, staged: Staged, planned: Planned, previous: PreviousRun | None, *, dry_run: bool = False
) -> Reconciled:
    """Compare OUT_DIR with the plan: the shards already done (and how many of them an update
    kept from the run before), the shard files it removes; refuse foreign output and output of
    another run (without ``--update`` or ``--force``). Record the new state. ``dry_run``:
    decide the same, refuse the same, and change nothing."""
    fmt = run.fmt
    # What each shard is made of: an update keeps a shard whose rows are those it was written
    # from. A tar's bytes follow from its rows alone; a Parquet file's also from the features (its
    # schema), a ZIP's from their Arrow types (its metadata.parquet).
    salt = fmt.features_salt(staged.features)
    schema_change = _schema_change(fmt, previous, staged.features)
    plan = [replace(p, input_sha256=rows_sha256(staged.path, p.offset, p.rows, salt)) for p in planned.plan]
    # Shards on this machine are hashed (and their hashes kept); at a URL, sizes only (see _done_shards).
    hashes = HashCache(run.local_dir) if run.location.is_local else None
    state = RunState(
        staged.fingerprint,
        planned.options,
        fmt.layout_version,
        planned.prefix_lengths,
        staged.labels,
        staged.split_folders,
        planned.boundaries,
    )
    output = _output_there(run, plan, state, previous)
    if not dry_run:
        _make_room(run, output, state)
    done, kept = _done_shards(run, plan, output, hashes, dry_run=dry_run)
    # (now: the reasons read the staged rows, which the finish phase removes)
    changes = _changes(
        plan, done, output, staged.path, run.location, force=run.config.force, schema_change=schema_change
    )
    return Reconciled(plan, done, kept, output.recorded, output.removed, output.same_run, changes, hashes)


@dataclass(frozen=True)
class _Output:
    """What of OUT_DIR's data/ and metadata/ is shardkit's, and how it relates to this run."""

    same_run: bool  # a re-run of the same input and options
    updating: bool  # an update: the same options and layout, other rows
    planned: set[str]  # the files the plan names (shards and their metadata files)
    done_records: dict[str, ManifestShard]  # by the record's path
    recorded: dict[str, ManifestShard]  # every shard the manifest or a done record names, by file
    ours: list[str]  # files there that shardkit wrote or plans
    removed: list[str]  # recorded shard files the plan has no place for


def _output_there(run: PackRun, plan: list[ShardPlan], state: RunState, previous: PreviousRun | None) -> _Output:
    """What OUT_DIR holds; refuse files shardkit did not write, and output of another run that
    this one may not replace."""
    config, location = run.config, run.location
    where = location.url
    state_json = state.to_json()
    before = previous.state if previous is not None else None
    manifest = previous.manifest if previous is not None else None
    planned = {p.name for p in plan} | {metadata_file_of(p.name, p.split) for p in plan}
    same_run = before == state_json
    # An update: the same options and layout, other rows. Shards whose rows did not change stay.
    updating = (
        config.update
        and not same_run
        and before is not None
        and all(before.get(k) == state_json[k] for k in ("options", "layout"))
    )
    # What shardkit's own records say it wrote here: the manifest's files and the done records
    # of a run that stopped part-way. Nothing else in data/ or metadata/ is ever deleted or
    # overwritten, --force or not; a file at a planned name counts as ours only while a run of
    # this same input and options is under way (killed between writing a shard and its record).
    done_records = read_done_records(run.done_dir)
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
    if not same_run and not updating and (before is not None or ours) and not config.force:
        _refuse_other_run(where, before, state_json, update=config.update)
    return _Output(same_run, bool(updating), planned, done_records, recorded, ours, removed)


def _refuse_other_run(where: str, before: dict[str, Any] | None, state: dict[str, Any], *, update: bool) -> None:
    """Refuse output of another run (other input, options or layout), saying what differs."""
    differs = _what_differs(before, state)
    if update:
        raise UsageError(
            f"{where} holds shardkit output from {differs}: --update keeps shards of the same options"
            " and layout only. Re-run with --force to replace it (only files shardkit wrote)."
        )
    only_input = before is not None and all(before.get(k) == state[k] for k in ("options", "layout"))
    hint = " --update to rewrite only the shards whose rows changed, or" if only_input else ""
    raise UsageError(
        f"{where} already holds shardkit output from {differs}. Re-run with{hint} --force"
        " to replace it (only files shardkit wrote), or choose another OUT_DIR."
    )


def _make_room(run: PackRun, output: _Output, state: RunState) -> None:
    """Remove the files this run replaces and record its state.

    In this order, so that a run killed at any step leaves every file of data/ and metadata/
    named by a record (the old ones, or the new state's plan) and a re-run takes it up: the
    files that go first, while the records naming them are there; then the new state; then
    the old records (a record is trusted only for the rows it was written from, see
    :func:`_done_shards`)."""
    location = run.location
    for rel in output.ours:
        # An update overwrites a changed shard in place, when its new version is written.
        if rel not in output.planned or not (output.same_run or output.updating):
            location.remove_with_empty_folder(rel)  # (a nested shard's folder may empty)
    os.makedirs(run.done_dir, exist_ok=True)
    write_atomic(os.path.join(run.shardkit_dir, "state.json"), json.dumps(state.to_json(), sort_keys=True).encode())
    if not output.same_run:
        shutil.rmtree(run.done_dir, ignore_errors=True)
        os.makedirs(run.done_dir)
        for rel in location.files_under(LINES_DIR):  # nested shards' rows of a run not resumed
            location.remove(rel)
        location.remove(MANIFEST_NAME)
        with contextlib.suppress(FileNotFoundError):  # the work folder's copy, for a URL
            os.unlink(os.path.join(run.local_dir, MANIFEST_NAME))


def _done_shards(
    run: PackRun, plan: list[ShardPlan], output: _Output, hashes: HashCache | None, *, dry_run: bool
) -> tuple[dict[str, ManifestShard], int]:
    """The planned shards already there as they should be, and how many of them an update kept
    from the run before (recorded now, so that a run killed from here on keeps them too)."""
    location, local_dir = run.location, run.local_dir
    # At a URL, one listing: reading terabytes back to hash them would cost as much as the pack.
    sizes = None if location.is_local else location.find()
    exact = run.fmt.exact
    done: dict[str, ManifestShard] = {}
    kept = 0
    for p in plan:
        record_path = run.done_record(p.name)
        result: ManifestShard | None = None
        # (A run of other input clears the done records: a dry run leaves them and ignores them.)
        if output.same_run:
            result = output.done_records.get(record_path)
            if result is not None:  # the manifest's, once the finish placed a nested shard's rows
                result = output.recorded.get(p.name, result)
        if result is not None and result.input_sha256 and result.input_sha256 != p.input_sha256:
            result = None  # written from other rows, by a run of other input killed part-way
        from_before = False
        # An update keeps the shards of the run before whose rows did not change; so does a
        # re-run of the same input without done records (an update killed before it recorded
        # them, or a copy of the folder without its .shardkit/), from the manifest.
        if result is None and (output.updating or output.same_run):
            before = output.recorded.get(p.name)
            if before is not None and before.input_sha256 and before.input_sha256 == p.input_sha256:
                result, from_before = before, True
        if result is None:
            continue
        planned_size = p.bytes == result.bytes or not exact
        if sizes is not None:
            problem = url_shard_problem(sizes, result, location)
        else:
            problem = shard_problem(local_dir, result, hashes)
        if planned_size and problem is None:
            done[p.name] = result
            if from_before:  # recorded, so that a run killed from here on keeps it too
                if not dry_run:
                    write_atomic(record_path, json.dumps(result.to_json()).encode())
                kept += 1
        elif not from_before and not dry_run:
            log.warning("%s: recorded as written but missing or changed; writing it again", p.name)
    return done, kept


def _recorded_shards(manifest: Manifest | None, done_records: dict[str, ManifestShard]) -> dict[str, ManifestShard]:
    """The shards OUT_DIR's manifest or the done records (of a run that stopped part-way) name."""
    shards = {s.file: s for s in manifest.shards} if manifest is not None else {}
    for record in done_records.values():
        placed = shards.get(record.file)
        # The manifest's record of the same shard has its rows' place in its folder's file as the
        # last finish wrote it (a record kept by an update has the place before that finish).
        if placed is None or replace(placed, metadata_range=None) != replace(record, metadata_range=None):
            shards[record.file] = record
    return shards


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


def _schema_change(
    fmt: ShardFormat, previous: PreviousRun | None, features: list[dict[str, Any]]
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
    done: dict[str, ManifestShard],
    output: _Output,
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
        if p.name in done:
            continue
        before = output.recorded.get(p.name)
        if before is None:
            why = "not written yet" if output.same_run else "new"
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
    for file in output.removed:
        old = output.recorded[file]
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
        data = read_published_rows(location, before)
        # (split at "\n" only, as every reader of published lines: JSON leaves U+2028 as it is)
        old = {json.loads(line)["key"]: line for line in data.split(b"\n") if line}
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
