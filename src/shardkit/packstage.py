"""The first stage of a pack: check every row, sort the rows by key on disk, group them by split.

:func:`stage_rows` is the stage's one entry. It runs :func:`.check.check_range` over byte ranges
of the metadata file (tasks on worker processes or a Dask cluster, or one pass here), merges the
ranges' sorted runs into one ``sorted.tsv`` (:func:`.staging.merge_runs`: duplicate keys, the
fingerprint), groups its rows by split and numbers the class labels (:func:`.staging.regroup`),
and then settles the input's problems, all counted by the run's one
:class:`~shardkit.problems.ProblemReport`: it refuses the input, or (``--on-error skip``) writes
the rejects file.

Test seams: ``check_range``, ``run_tasks`` and ``regroup`` are looked up in this module when
they are called, so a test may replace one here (to watch the check, or to kill a run between
the sort and the grouping by split).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from .check import CheckSettings, Combined, RangeJob, RangeResult, check_range, combine, range_jobs, split_warnings
from .errors import InputErrors, InputProblem, ShardkitError, UsageError, listed
from .metadata import FILE_NOT_FOUND
from .packconfig import PackConfig
from .packrun import PackRun
from .plan import max_file_bytes
from .problems import ProblemReport, whole_file_problem
from .schema import float_retyper, with_class_label
from .staging import MergeResult, Regrouped, SplitRows, merge_runs, regroup, repeated_files
from .tasks import run_tasks, task_executor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Staged:
    """The checked rows, sorted by key in ``path`` (``sorted.tsv``), and what the later stages need of them."""

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


def problem_report(run: PackRun) -> ProblemReport:
    """The run's one report of input problems. Each bad row is listed in a spool as it is found;
    the rejects file is written from it once the check is complete (so an existing one is
    replaced whole, or not at all)."""
    return ProblemReport(os.path.join(run.staging_dir, "rejects") if run.rejects_path else None)


def stage_rows(run: PackRun, problems: ProblemReport, published_labels: dict[str, list[str]]) -> Staged:
    """Check, sort and group every row of the metadata file; each problem goes to ``problems``.
    Refuse the input (``--on-error stop``, or no row left to pack), or write the rejects file.

    ``published_labels``: the class names an earlier run published into this OUT_DIR, each
    column's in their order. A run keeps their numbers; ``--force`` numbers the classes afresh
    (and says which published numbers change)."""
    config = run.config
    staged = _check_and_stage(run, problems, {} if config.force else published_labels)
    _settle_problems(run, problems, staged)
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
        _warn_if_renumbered(published_labels, staged)
    return staged


def _check_and_stage(run: PackRun, problems: ProblemReport, previous_labels: dict[str, list[str]]) -> Staged:
    config = run.config
    results, combined = _check(run, problems)
    repeats = repeated_files([path for r in results for path in r.file_runs], report=problems.add)
    modality = "audio" if combined.audio_line else "image"  # mixing the two is refused above
    features = combined.schema.features_yaml(modality, modality)
    labels: dict[str, list[str]] = {}
    if config.class_label is not None:
        _check_class_column(config, results, combined, features, problems.count)
    # With --on-duplicate skip a repeated key is no problem of the input: counted apart, not rejected.
    skipped = ProblemReport(None)
    merged = merge_runs(
        [path for r in results for path in r.runs],
        os.path.join(run.staging_dir, "sorted.tsv"),
        report=skipped.add if config.on_duplicate == "skip" else problems.add,
        drop_lines=repeats,
        fmt=run.fmt,
        retype=float_retyper(features),
    )
    # Class names sorted (code point order), so a class's integer depends on the set of names
    # alone; a remux numbers them as its source does, and a pack into an OUT_DIR that published
    # some keeps their integers and numbers new names after them.
    known = list(config.class_names) or previous_labels.get(config.class_label or "") or []
    try:
        regrouped = regroup(
            merged.path, merged, fmt=run.fmt, label_column=config.class_label, known_labels=known, report=problems.add
        )
    except ValueError as exc:
        raise UsageError(f"{config.metadata_path}: {exc}") from None
    if any(split.name for split in regrouped.splits):
        _warn_about_splits(config, results, regrouped)
    if config.class_label is not None and regrouped.label_names is not None:
        labels[config.class_label] = regrouped.label_names
        features = with_class_label(features, config.class_label, regrouped.label_names)
        _warn_about_classes(config, regrouped, merged.rows)
    return _staged(merged, regrouped, combined, skipped, modality, features, labels)


def _staged(
    merged: MergeResult,
    regrouped: Regrouped,
    combined: Combined,
    skipped: ProblemReport,
    modality: str,
    features: list[dict[str, Any]],
    labels: dict[str, list[str]],
) -> Staged:
    fingerprint = hashlib.sha256(
        (merged.fingerprint + json.dumps(features, sort_keys=True)).encode("utf-8")
    ).hexdigest()
    return Staged(
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


def _check(run: PackRun, problems: ProblemReport) -> tuple[list[RangeResult], Combined]:
    """Check the metadata file's rows: in byte ranges, one task each, when it is large and tasks
    run elsewhere; in one pass here when it is small, or when the ranges disagree on a column's
    type (one pass gives the exact verdicts). Every range's problems go to ``problems``."""
    config = run.config
    # With a URL, the range tasks' runs must land where this process reads them: here.
    cluster = None if run.remote else run.cluster
    settings = CheckSettings(
        metadata_path=os.path.abspath(config.metadata_path),
        images_dir=os.path.abspath(config.images_dir),
        format=run.fmt.name,
        max_file_bytes=max_file_bytes(config.max_shard_bytes, run.fmt),
        threads=max(config.read_threads, 1),
        decode=config.check_images,
        keep_source_path=config.keep_source_path,
        class_label=config.class_label,
        file_ranges=config.file_ranges,
    )
    ranges_dir = os.path.join(run.staging_dir, "ranges")
    skip = problems.lists_rows
    progress = run.progress
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
    return results, combined


def _check_class_column(
    config: PackConfig, results: list[RangeResult], combined: Combined, features: list[dict[str, Any]], refused: int
) -> None:
    """Refuse a ``--class-label`` column that holds no class name, or that no row has (of the
    rows that pass their checks: with ``refused`` rows, theirs are the problems to say first)."""
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
        if refused and config.on_error != "skip":
            return  # (the rows' problems refuse the input next, and may be why no row has the column)
        rows = f"no row of {config.metadata_path}" + (f" that passes its checks ({refused} refused)" if refused else "")
        raise UsageError(f"--class-label {column}: {rows} has a column {column!r}")


def _warn_about_splits(config: PackConfig, results: list[RangeResult], regrouped: Regrouped) -> None:
    """Warn about splits that look like a typo in the split column (see :func:`.check.split_warnings`)."""
    first_lines: dict[str, int] = {}
    for result in results:  # (in input order)
        for name, line in result.split_lines.items():
            first_lines.setdefault(name, line)
    for warning in split_warnings({s.name: s.rows for s in regrouped.splits}, first_lines):
        log.warning("%s: %s", config.metadata_path, warning)


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


def _warn_if_renumbered(published_labels: dict[str, list[str]], staged: Staged) -> None:
    """--force numbers the classes afresh: say which published numbers change."""
    for column, names in staged.labels.items():
        before = published_labels.get(column)
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


def _settle_problems(run: PackRun, problems: ProblemReport, staged: Staged) -> None:
    """Refuse the input for its problems (unless ``--on-error skip``, which writes the rejects
    file), or when no row is left to pack: a file whose every row has a problem of one kind,
    or whose files are all under another folder, is one line naming the cause."""
    config = run.config
    rejects_path = run.rejects_path
    # Every row with a problem of one kind: the file's problem, in one line.
    whole = whole_file_problem(problems, config.metadata_path) if staged.rows == 0 else None
    if problems.count and config.on_error != "skip":
        if whole is None and staged.rows == 0:
            whole = _images_dir_beside(config, problems)
        if whole is not None:
            raise ShardkitError(whole)
        raise problems.error(config.metadata_path, _wrong_folder_hint(config, staged, problems))
    if rejects_path is not None:
        _publish_rejects(problems, rejects_path, config.metadata_path, default=rejects_path == run.default_rejects)
    if staged.rows == 0:
        listed_in = f": see {rejects_path}" if rejects_path is not None else ""
        every = f" (every row was rejected, {problems.count} problem(s){listed_in})" if problems.count else ""
        if whole is not None:
            raise ShardkitError(f"{whole}; every row was rejected{listed_in}")
        raise ShardkitError(f"{config.metadata_path}: no rows to pack{every}")


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


def _wrong_folder_hint(config: PackConfig, staged: Staged, problems: ProblemReport) -> str | None:
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
