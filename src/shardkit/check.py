"""Stage 1 of a pack: check every row of the metadata file and stage it for the sort.

A large metadata file is checked in byte ranges of whole lines, one task per range, on worker
processes (or on the Dask cluster with ``--executor dask``); each task writes its own sorted
runs and rejects, and the caller merges them. The result is exactly that of one pass over the
file, because of what each check needs:

* row checks (JSON, columns, key, the file on disk) need the row alone;
* duplicate keys and files named twice are found later, by the global merge of every run;
* column types (:class:`SchemaTracker`) and audio-vs-image are the only order-dependent checks.
  When each range's merged types agree with those of the ranges before it, every row gets the
  verdict one pass gives it (by induction over the rows: types only widen, so a value that
  conflicts with a range's own earlier rows conflicts with everything before it too, and a
  value the range accepted is part of types that agree with the earlier ranges).
  ``tests/test_check.py`` checks this property on random rows. When they disagree (the input
  has a type conflict across ranges), or a range after the first rejects a row for its type or
  modality (its message would name the first such line of that range, not of the file), the
  whole file is checked again in one pass, so verdicts and messages are exactly one pass's.
  Inputs without such conflicts, the ones that get packed, are checked once.

Small files (under 2 MiB, or 8 MiB when rows give keys) are checked in one pass in this process.
How a file is split depends on the file alone (:func:`plan_ranges`), so it is the same on every
machine and for every ``--jobs``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import IO

from .decode import AUDIO_EXTENSIONS
from .errors import InputProblem
from .formats import format_named
from .metadata import SourceRecord, metadata_line, non_finite_problem, read_metadata
from .problems import ProblemReport, ReportPart
from .progress import NullProgress, Progress
from .rowrules import SOURCE_PATH_COLUMN
from .schema import SchemaTracker
from .staging import DEFAULT_RUN_BYTES, FileRef, RunWriter, StagedRow, UnstageableRow

FILE_RUN_BYTES = 2 << 20
MIN_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 64 << 20
RANGES_WANTED = 64  # ranges of a large file, for even load and progress (within the bounds above)
#: A smaller file whose rows give their keys is checked in one pass: for a stat and a parse per
#: row, starting worker processes and merging their runs cost more than they save (the
#: measurement: docs/performance.md, "Figures behind design choices"). Rows without keys are
#: hashed while checked, and ranges in separate processes hash faster than threads in one (the
#: GIL), so those files are split from 2 MiB (two ranges) on.
MIN_SPLIT_BYTES = 8 << 20


#: The column that names each row's split (train, validation, test...); it becomes the split,
#: not a column.
SPLIT_COLUMN = "split"
#: A split's name: datasets' split names (``\w+``), ASCII (it is a folder on the Hub), not
#: ``all`` (datasets' name for every split at once).
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


def split_problem(value: object) -> str | None:
    """Why a ``split`` value cannot name a split (None if it can)."""
    if not isinstance(value, str):
        return f'column {SPLIT_COLUMN!r} holds {json.dumps(value)}, not a split name (a string such as "train")'
    if not _SPLIT_NAME.fullmatch(value) or value.lower() == "all":  # (datasets refuses ALL, All too)
        return (
            f"column {SPLIT_COLUMN!r} holds {json.dumps(value)}: a split name is 1 to 64 ASCII"
            ' letters, digits or underscores, and not "all" in any case (train, validation, test...)'
        )
    return None


#: Names of one split that datasets and papers spell several ways: two of one group in a
#: dataset are most likely one split given two names.
_SPLIT_SYNONYMS = [
    {"train", "training", "trn"},
    {"validation", "valid", "val", "dev", "development", "validate"},
    {"test", "testing", "tst", "eval", "evaluation"},
]
#: A split this small beside the largest is likely a typo in the split column (see split_warnings).
FEW_ROWS = 10
FEW_ROWS_SHARE = 0.01


def split_warnings(rows: dict[str, int], first_lines: dict[str, int]) -> list[str]:
    """Warnings, one line per split, about splits that look like a typo in the split column: a
    name close to another split's (the same in another case or spelling, a synonym such as valid
    beside validation, one a prefix of the other), or very few rows beside the largest split. Such
    a split is legal (the pack goes on): only the author knows. ``rows`` holds each split's row
    count, ``first_lines`` the first line that names it."""
    warnings = []
    largest = max(rows.values(), default=0)
    for name, count in sorted(rows.items(), key=lambda item: (item[1], item[0])):
        where = f"split {name!r} ({count} row(s), first on line {first_lines.get(name, 0)})"
        # Of a close pair, the smaller split is named (the likely typo); a tie names one of them.
        close = [
            other
            for other, n in rows.items()
            if other != name and (n, other) > (count, name) and _close_split_names(name, other)
        ]
        if close:
            other = max(close, key=lambda o: rows[o])
            warnings.append(
                f"{where} is close to split {other!r} ({rows[other]} rows): each name is a split of its own;"
                " if they are one split, give its rows one name"
            )
        elif count < FEW_ROWS and count < FEW_ROWS_SHARE * largest:
            warnings.append(f"{where} has very few rows beside the largest split ({largest}): a typo in its split?")
    return warnings


def _close_split_names(a: str, b: str) -> bool:
    """Whether two split names likely mean one split (see :func:`split_warnings`)."""
    a, b = a.lower(), b.lower()
    bare_a, bare_b = a.replace("_", ""), b.replace("_", "")
    if bare_a == bare_b or any(a in group and b in group for group in _SPLIT_SYNONYMS):
        return True
    if re.sub(r"\d", "", a) == re.sub(r"\d", "", b):  # train1 and train2, fold_0 and fold_1: distinct splits
        return False
    short, long = sorted((bare_a, bare_b), key=len)
    return (len(short) >= 3 and long.startswith(short)) or _typo_distance(a, b) <= (len(short) >= 4) + (len(short) >= 8)


def _typo_distance(a: str, b: str) -> int:
    """The fewest typos that turn ``a`` into ``b``: a letter added, dropped, changed, or two
    neighbours swapped (the optimal string alignment distance)."""
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        earlier, before, row = before, row, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(before[j] + 1, row[j - 1] + 1, before[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], earlier[j - 2] + 1)
    return row[-1]


def class_label_problem(column: str, value: object) -> str | None:
    """Why a value cannot be a class label of ``--class-label column`` (None if it can)."""
    if value is None or isinstance(value, str):
        return None
    return f"--class-label {column}: the column holds {json.dumps(value)}, not a class name (a string)"


@dataclass(frozen=True)
class CheckSettings:
    metadata_path: str
    images_dir: str
    format: str
    max_file_bytes: int
    threads: int
    decode: bool
    keep_source_path: bool = False  # publish each row's input file_name as SOURCE_PATH_COLUMN
    class_label: str | None = None  # a column of class names, published as a ClassLabel
    file_ranges: bool = False  # rows name byte ranges of files (remux's staging: read_metadata)


@dataclass(frozen=True)
class RangeJob:
    """One byte range of the metadata file, whole lines; ``end`` None: to the end of the file."""

    settings: CheckSettings
    index: int
    start: int
    end: int | None
    first_line: int
    work_dir: str  # this range's own folder for runs and rejects
    rejects: bool
    run_bytes: int = DEFAULT_RUN_BYTES
    file_run_bytes: int = FILE_RUN_BYTES


@dataclass
class RangeResult:
    index: int
    rows: int  # non-blank lines read
    problems: ReportPart
    schema: SchemaTracker
    audio_line: int
    image_line: int
    order_dependent_problems: int = 0  # rows refused for their types or modality
    extensions: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)  # the class_label column's names
    #: The range's first row whose class_label value is not a class name: if no row of the file
    #: has one, the column is not a column of names, one problem rather than one per row.
    label_problem: InputProblem | None = None
    runs: list[str] = field(default_factory=list)
    file_runs: list[str] = field(default_factory=list)
    split_lines: dict[str, int] = field(default_factory=dict)  # each split's first line in the range


def check_range(job: RangeJob, progress: Progress | None = None) -> RangeResult:
    """Check the rows of one range and stage them: sorted runs by key, and by file name."""
    progress = progress or NullProgress()
    settings = job.settings
    check = _RangeCheck(job)
    records = read_metadata(
        settings.metadata_path,
        settings.images_dir,
        max_file_bytes=settings.max_file_bytes,
        threads=settings.threads,
        decode=settings.decode,
        start=job.start,
        end=job.end,
        first_line=job.first_line,
        file_ranges=settings.file_ranges,
    )
    n = 0
    try:
        for n, item in enumerate(records, 1):
            if n % 1000 == 0:
                progress.advance(1000)
            if isinstance(item, InputProblem):
                check.problems.add(item)
                continue
            check.row(item)
    finally:
        check.problems.close()
    progress.advance(n % 1000)
    return check.result(n)


class _RangeCheck:
    """One range's checks of each row the metadata reader let through, what they gathered (the
    types, the modality, the splits, the class names), and the staged runs of the rows that pass."""

    def __init__(self, job: RangeJob) -> None:
        self.job = job
        self.settings = job.settings
        self.fmt = format_named(job.settings.format)
        self.problems = ProblemReport(os.path.join(job.work_dir, "rejects") if job.rejects else None)
        self.schema = SchemaTracker()
        self.audio_line = self.image_line = 0
        self.order_dependent = 0  # rows refused for their types or modality
        self.extensions: set[str] = set()
        self.labels: set[str] = set()
        self.label_problem: InputProblem | None = None
        self.split_lines: dict[str, int] = {}
        self.runs = RunWriter(os.path.join(job.work_dir, "keys"), run_bytes=job.run_bytes)
        # (file_name, line): rows naming one file meet when sorted.
        self.files = RunWriter(os.path.join(job.work_dir, "files"), run_bytes=job.file_run_bytes)
        os.makedirs(self.runs.workdir, exist_ok=True)
        os.makedirs(self.files.workdir, exist_ok=True)

    def row(self, item: SourceRecord) -> None:
        """Check one row; stage it, or give its problem to the report."""
        problems = self.problems
        if format_problem := self.fmt.key_problem(item.key, item.ext):
            problems.add(InputProblem(item.line, f"{item.source!r}: {format_problem}", json.dumps(item.fields)))
            return
        if (problem := self._columns_problem(item)) is not None:
            problems.add(problem)
            return
        try:
            line = metadata_line(item, self.fmt.member_name(item.key, item.ext))
        except ValueError as exc:  # NaN or Infinity: not valid JSON out
            problem_text = non_finite_problem(item.fields) or f"value not allowed in JSON: {exc}"
            problems.add(InputProblem(item.line, problem_text, json.dumps(item.fields)))
            return
        try:
            staged, file_ref = StagedRow.line_of(item, line), FileRef.line_of(item, line)
        except UnstageableRow as exc:  # (the checks above let no such row through)
            problems.add(InputProblem(item.line, str(exc), line))
            return
        conflict = self.schema.check(item.fields, item.line)
        if conflict:
            problems.add(InputProblem(item.line, conflict, line))
            self.order_dependent += 1
            return
        is_audio = item.ext.lower() in AUDIO_EXTENSIONS
        if (is_audio and self.image_line) or (not is_audio and self.audio_line):
            other = self.image_line or self.audio_line
            mixed = f"{item.source!r} mixes audio and image files in one dataset (see line {other})"
            problems.add(InputProblem(item.line, mixed, line))
            self.order_dependent += 1
            return
        if is_audio:
            self.audio_line = self.audio_line or item.line
        else:
            self.image_line = self.image_line or item.line
        self.extensions.add(item.ext.lower())
        self.runs.add(staged)
        if item.file_offset < 0:  # (remux writes each byte range once: no two rows share one)
            self.files.add(file_ref)

    def _columns_problem(self, item: SourceRecord) -> InputProblem | None:
        """Take the row's split out of its fields, check its class label, add its source path
        (``--keep-source-path``); the problem of a row that cannot be published so (None if none)."""
        settings = self.settings
        if SPLIT_COLUMN in item.fields:
            split = item.fields.pop(SPLIT_COLUMN)
            if split is not None:  # (null: no split, as when the column is absent)
                if problem := split_problem(split):
                    return InputProblem(item.line, problem, json.dumps(item.fields))
                item.split = split
                self.split_lines.setdefault(split, item.line)
        if settings.class_label is not None:
            label = item.fields.get(settings.class_label)
            if problem := class_label_problem(settings.class_label, label):
                wrong = InputProblem(item.line, problem, json.dumps(item.fields))
                self.label_problem = self.label_problem or wrong
                return wrong
            if label is not None:
                self.labels.add(label)
        if settings.keep_source_path:
            if SOURCE_PATH_COLUMN in item.fields:
                taken = f"column {SOURCE_PATH_COLUMN!r} is where --keep-source-path puts file_name; rename it"
                return InputProblem(item.line, taken, json.dumps(item.fields))
            item.fields[SOURCE_PATH_COLUMN] = item.source
        return None

    def result(self, rows: int) -> RangeResult:
        """What the range found (``rows``: the non-blank lines read); its runs are finished."""
        return RangeResult(
            index=self.job.index,
            rows=rows,
            problems=self.problems.part(),
            schema=self.schema,
            audio_line=self.audio_line,
            image_line=self.image_line,
            order_dependent_problems=self.order_dependent,
            extensions=self.extensions,
            labels=self.labels,
            label_problem=self.label_problem,
            runs=self.runs.finish(),
            file_runs=self.files.finish(),
            split_lines=self.split_lines,
        )


def plan_ranges(path: str, range_bytes: int | None = None) -> list[tuple[int, int | None, int]]:
    """(start, end, first line) of each range: whole lines, about ``range_bytes`` each.

    By default the size depends on the file alone (one range under ``MIN_SPLIT_BYTES`` when the
    rows give keys, else about 64 ranges of 1 to 64 MiB each), so the split, like everything
    else a pack does, is the same on every machine. A compressed file is one range (it cannot be entered in the middle).
    """
    if path.endswith(".gz"):
        return [(0, None, 1)]
    size = os.path.getsize(path)
    if range_bytes is None:
        # (A FIFO has size 0: it is never read here.)
        if size < 2 * MIN_RANGE_BYTES or (size < MIN_SPLIT_BYTES and _first_row_has_key(path)):
            return [(0, None, 1)]
        range_bytes = min(max(size // RANGES_WANTED, MIN_RANGE_BYTES), MAX_RANGE_BYTES)
    if size < 2 * range_bytes:
        return [(0, None, 1)]
    starts = [0]
    with open(path, "rb") as f:
        while starts[-1] + range_bytes < size:
            f.seek(starts[-1] + range_bytes - 1)
            while (chunk := f.readline(1 << 20)) and not chunk.endswith(b"\n"):
                pass  # to the end of the line that crosses the boundary, 1 MiB at a time (it may be huge)
            if f.tell() >= size:
                break
            starts.append(f.tell())
    ranges: list[tuple[int, int | None, int]] = []
    line = 1
    with open(path, "rb") as f:
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            ranges.append((start, end, line))
            if end is not None:
                line += _count_newlines(f, end - start)
    return ranges


def _first_row_has_key(path: str) -> bool:
    """Whether the file's first non-blank line is a JSON object with a "key" (the rows give keys)."""
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                try:
                    row = json.loads(raw.removeprefix(b"\xef\xbb\xbf"))
                except ValueError:
                    return False
                return isinstance(row, dict) and "key" in row
    return False


def _count_newlines(f: IO[bytes], length: int) -> int:
    count = 0
    while length > 0:
        block = f.read(min(length, 8 << 20))
        if not block:
            break
        count += block.count(b"\n")
        length -= len(block)
    return count


@dataclass
class Combined:
    schema: SchemaTracker
    audio_line: int
    image_line: int
    extensions: set[str]
    labels: set[str] = field(default_factory=set)


def combine(results: list[RangeResult]) -> Combined | None:
    """The ranges' types and modality merged; None where one pass must decide (see above).

    ``results`` come in input order (by ``index``), as the caller also needs them for the problems.
    """
    schema = SchemaTracker()
    audio_line = image_line = 0
    extensions: set[str] = set()
    for r in results:
        if r.index > 0 and r.order_dependent_problems:
            return None
        if not schema.absorb(r.schema):
            return None
        audio_line = audio_line or r.audio_line
        image_line = image_line or r.image_line
        if audio_line and image_line:
            return None
        extensions |= r.extensions
    labels = set().union(*(r.labels for r in results))
    return Combined(schema, audio_line, image_line, extensions, labels)


def range_jobs(
    settings: CheckSettings, work_dir: str, rejects: bool, parts: int, range_bytes: int | None = None
) -> list[RangeJob]:
    """The range tasks for ``settings.metadata_path``; ``parts`` of them run at once on this
    machine, so they share its sort buffer."""
    ranges = plan_ranges(settings.metadata_path, range_bytes)
    share = max(min(parts, len(ranges)), 1)
    return [
        RangeJob(
            settings=settings,
            index=i,
            start=start,
            end=end,
            first_line=first_line,
            work_dir=os.path.join(work_dir, f"range-{i:05d}"),
            rejects=rejects,
            run_bytes=DEFAULT_RUN_BYTES // share,
            file_run_bytes=FILE_RUN_BYTES // share,
        )
        for i, (start, end, first_line) in enumerate(ranges)
    ]
