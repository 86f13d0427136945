"""Stage 2: sort the checked records by key on disk, in bounded memory.

Records are written as tab-separated lines whose plain string order is (key, input line)
order, sorted in runs of bounded size, then merged into one ``sorted.tsv``. Duplicate keys meet
during the merge; the first row (lowest input line) wins and later ones become problems.
The merge also computes the input fingerprint: a sha256 over the sorted lines, so it changes
when any key, file size, source path or published field changes.

A staged line::

    key \\t line(12 digits) \\t size \\t ext \\t check \\t split \\t json(source) \\t metadata.jsonl line

``check`` is what the writer compares the file with: the check's stamp of it
(:func:`~shardkit.inputfile.stamp`), then ``:h`` when the key is the hash of its bytes, else ``:k``.
It is not part of the fingerprint: touching a file does not change what gets published.
``split`` is the row's ``split`` column ("" for a dataset without one, whose one split is
``train``); keys are unique across splits (an image in two splits is a leak between them).
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

from .errors import InputProblem
from .formats import ZIP, ShardFormat
from .metadata import SourceRecord
from .plan import PlanEntry
from .schema import label_retyper

DEFAULT_RUN_BYTES = 8 << 20
#: Most runs merged at once; more are merged in rounds (keeps open files and memory bounded).
MAX_FAN_IN = 64


@dataclass(slots=True)
class StagedRow:
    key: str
    line: int
    size: int
    ext: str
    source: str
    metadata_line: str
    offset: int = 0  # byte offset of this row in sorted.tsv
    stamp: str = ""  # the file as the check saw it; "" compares nothing (rows made by hand, in tests)
    content_keyed: bool = False  # the key is the hash of the file's bytes: the writer hashes them again
    split: str = ""


_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def json_string(text: str) -> str:
    """``json.dumps(text, ensure_ascii=False)``, without its cost for the usual name that needs no escape."""
    return json.dumps(text, ensure_ascii=False) if _JSON_ESCAPED.search(text) else f'"{text}"'


def format_staged(record: SourceRecord, metadata_line: str) -> str:
    source = json_string(record.source)
    check = f"{record.stamp}:{'h' if record.content_keyed else 'k'}"
    head = f"{record.key}\t{record.line:012d}\t{record.size}\t{record.ext}\t{check}"
    return f"{head}\t{record.split}\t{source}\t{metadata_line}\n"


def parse_staged(text: str, offset: int = 0) -> StagedRow:
    key, line, size, ext, check, split, source, metadata_line = text.rstrip("\n").split("\t", 7)
    source = _source_of(source)
    file_stamp, _, how = check.rpartition(":")
    return StagedRow(key, int(line), int(size), ext, source, metadata_line, offset, file_stamp, how == "h", split)


class RunWriter:
    """Collects staged lines and spills them to sorted run files of bounded size."""

    def __init__(self, workdir: str, run_bytes: int = DEFAULT_RUN_BYTES) -> None:
        self.workdir = workdir
        self.run_bytes = run_bytes
        self.runs: list[str] = []
        self._lines: list[str] = []
        self._bytes = 0

    def add(self, staged_line: str) -> None:
        self._lines.append(staged_line)
        self._bytes += len(staged_line)
        if self._bytes >= self.run_bytes:
            self._spill()

    def _spill(self) -> None:
        if not self._lines:
            return
        self._lines.sort()
        path = os.path.join(self.workdir, f"run-{len(self.runs):06d}.tsv")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(self._lines)
        self.runs.append(path)
        self._lines = []
        self._bytes = 0

    def finish(self) -> list[str]:
        self._spill()
        return self.runs


@dataclass(frozen=True)
class MergeResult:
    path: str
    rows: int
    total_cost: int  # bytes the rows add to shards, all together (what the prefix length needs)
    fingerprint: str
    duplicates: list[InputProblem]
    duplicate_count: int
    #: rows and shard cost per split ("": rows without a split), in the order first seen
    splits: dict[str, tuple[int, int]] = field(default_factory=dict)


@contextlib.contextmanager
def _merging(paths: list[str]) -> Iterator[Iterator[str]]:
    """The lines of sorted run files, merged in order; the files are closed on the way out."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(p, encoding="utf-8", newline="\n")) for p in paths]
        yield heapq.merge(*files)


@contextlib.contextmanager
def _consuming(runs: list[str], fan_in: int) -> Iterator[Iterator[str]]:
    """Every line of ``runs`` in sorted order, merged in rounds of ``fan_in``; the runs are
    deleted once the block has read them all without an error."""
    runs = _reduce_runs(runs, fan_in)
    with _merging(runs) as lines:
        yield lines
    for run in runs:
        os.unlink(run)


def _reduce_runs(runs: list[str], fan_in: int) -> list[str]:
    """Merge runs in rounds of ``fan_in`` until at most ``fan_in`` are left (duplicates kept)."""
    round_no = 0
    while len(runs) > fan_in:
        merged: list[str] = []
        for i in range(0, len(runs), fan_in):
            group = runs[i : i + fan_in]
            if len(group) == 1:
                merged.append(group[0])
                continue
            path = f"{group[0]}.r{round_no}"
            with _merging(group) as lines, open(path, "w", encoding="utf-8", newline="\n") as out:
                out.writelines(lines)
            for done in group:
                os.unlink(done)
            merged.append(path)
        runs = merged
        round_no += 1
    return runs


def merge_runs(
    runs: list[str],
    out_path: str,
    *,
    keep_problems: int = 1000,
    fan_in: int = MAX_FAN_IN,
    drop_lines: frozenset[int] = frozenset(),
    fmt: ShardFormat = ZIP,
    retype: Callable[[str], str] | None = None,
) -> MergeResult:
    """Merge sorted runs into ``out_path``, dropping (and reporting) duplicate keys.

    Rows from the input lines in ``drop_lines`` (already reported elsewhere) are left out.
    ``retype`` rewrites each published line once every row's type is known (see
    :func:`~shardkit.schema.float_retyper`); sizes and the fingerprint are of the rewritten
    line. The runs are consumed: they are deleted once merged.
    """
    fingerprint = hashlib.sha256()
    duplicates: list[InputProblem] = []
    duplicate_count = 0
    rows = 0
    total_cost = 0
    prev_key = None
    prev_line = 0
    prev_rest = ""
    splits: dict[str, tuple[int, int]] = {}
    with _consuming(runs, fan_in) as lines, open(out_path, "w", encoding="utf-8", newline="\n") as out:
        for text in lines:
            key, line_text, rest = text.split("\t", 2)
            line = int(line_text)
            if line in drop_lines:
                continue
            if key == prev_key:
                duplicate_count += 1
                if len(duplicates) < keep_problems:
                    duplicates.append(_duplicate(key, line, rest, prev_line, prev_rest))
                continue
            prev_key, prev_line, prev_rest = key, line, rest
            if retype is not None:
                head, published = rest.rsplit("\t", 1)  # published JSON escapes every tab
                rest = f"{head}\t{retype(published[:-1])}\n"
                text = f"{key}\t{line_text}\t{rest}"
            # Neither the input line number nor the file's stamp is part of the fingerprint:
            # moving rows around in the metadata file, or touching a file, does not change
            # what gets published.
            size, ext, _, split, source_published = rest.split("\t", 4)
            if split:  # (rows without a split hash as before splits existed: their outputs resume)
                fingerprint.update(f"split={split}\t".encode())
            fingerprint.update(f"{size}\t{ext}\t{source_published}".encode())
            fingerprint.update(key.encode("ascii"))
            out.write(text)
            rows += 1
            cost = _cost(fmt, key, rest)
            total_cost += cost
            split_rows, split_cost = splits.get(split, (0, 0))
            splits[split] = (split_rows + 1, split_cost + cost)
    return MergeResult(out_path, rows, total_cost, fingerprint.hexdigest(), duplicates, duplicate_count, splits)


def _duplicate(key: str, line: int, rest: str, first_line: int, first_rest: str) -> InputProblem:
    """A row whose key an earlier row has (``rest``: a staged line after "key\tline\t")."""
    _, _, check, split, source, published = rest.split("\t", 5)
    first_split = first_rest.split("\t", 5)[3]
    # The same image in two splits is a leak between them (a test image seen in training).
    leak = ""
    if split and first_split and split != first_split:
        leak = f" (split {split!r}; line {first_line} is in {first_split!r}: a leak between splits)"
    if check.endswith(":h"):  # the key is the hash of the file's bytes: the user gave no keys
        name, first = _source_of(source), _source_of(first_rest.split("\t", 5)[4])
        if _normal_path(name) == _normal_path(first):
            message = f"file_name {name!r} is named again (first on line {first_line}){leak}"
        else:
            message = f"file_name {name!r} has the same bytes as {first!r} on line {first_line}{leak}"
        message += ": a file is published once; drop one of the rows (or pass --on-duplicate skip to keep the first)"
    else:
        message = f"duplicate key {key} (first used on line {first_line}){leak}"
    return InputProblem(line, message, published.rstrip("\n"))


def _source_of(field: str) -> str:
    """A staged line's json(source) field as the file_name (see :func:`json_string`)."""
    return field[1:-1] if "\\" not in field else str(json.loads(field))


def format_file_id(record: SourceRecord, metadata_line: str) -> str:
    """A line for :func:`repeated_files`: the file (its normalized file_name), input line, key, file_name, row.

    Identity is the path, not the inode: hard or symbolic links are how some collections
    deduplicate files shared by distinct rows, and those rows are meant to stay.
    """
    source = json_string(record.source)
    normal = _normal_path(record.source)
    path = source if normal == record.source else json_string(normal)
    return f"{path}\t{record.line:012d}\t{record.key}\t{source}\t{metadata_line}\n"


def _normal_path(name: str) -> str:
    """``posixpath.normpath(name)``, skipped for the usual name it would leave as is."""
    if "//" in name or "/." in name or name.startswith(".") or name.endswith("/"):
        return posixpath.normpath(name)
    return name


@dataclass(frozen=True)
class Repeats:
    problems: list[InputProblem]  # the first ``keep_problems``
    count: int
    lines: frozenset[int]  # input lines of every repeat, to leave out when skipping bad rows


def repeated_files(runs: list[str], *, keep_problems: int = 1000, fan_in: int = MAX_FAN_IN) -> Repeats:
    """Rows naming a file an earlier row names too (same normalized file_name) under another key.

    The first row keeps the file; each later one is a problem: a file is published once.
    (Under the same key it is a duplicate key, which :func:`merge_runs` reports.) Consumes
    the runs. Memory holds the repeats' line numbers only.
    """
    problems: list[InputProblem] = []
    lines: set[int] = set()
    first: tuple[str, int, str, str] | None = None  # file id, line, key, file_name of the row that keeps it
    with _consuming(runs, fan_in) as merged:
        for text in merged:
            file_id, line_text, key, source, published = text.rstrip("\n").split("\t", 4)
            line = int(line_text)
            if first is None or first[0] != file_id:
                first = (file_id, line, key, source)
                continue
            if key == first[2]:
                continue
            lines.add(line)
            if len(problems) < keep_problems:
                message = (
                    f"file_name {_source_of(source)!r} is the same file as line {first[1]} names"
                    f" ({_source_of(first[3])!r}, key {first[2]}): a file is published once; drop one of the rows"
                )
                problems.append(InputProblem(line, message, published))
    return Repeats(problems, len(lines), frozenset(lines))


def _cost(fmt: ShardFormat, key: str, rest: str) -> int:
    """A staged row's shard cost from its text after "key\tline\t"."""
    size, ext, _, _, _, published = rest.split("\t", 5)
    return fmt.row_cost(len(key), len(ext), int(size), len(published.encode("utf-8")) - 1)


def _raw_rows(path: str, offset: int, count: int | None) -> Iterator[tuple[int, bytes]]:
    """(byte offset, raw line) of at most ``count`` staged rows, starting at a byte offset."""
    with open(path, "rb") as f:
        f.seek(offset)
        n = 0
        while count is None or n < count:
            raw = f.readline()
            if not raw:
                return
            yield offset, raw
            offset += len(raw)
            n += 1


def iter_published_lines(path: str, offset: int, count: int) -> Iterator[bytes]:
    """The metadata.jsonl lines (UTF-8, with their newline) of ``count`` staged rows from ``offset``.

    Sliced from the staged bytes as they are: nothing is decoded or re-encoded.
    """
    for _, raw in _raw_rows(path, offset, count):
        yield raw.split(b"\t", 7)[7]


def iter_staged(path: str, offset: int = 0, count: int | None = None) -> Iterator[StagedRow]:
    """Read staged rows from ``sorted.tsv``, starting at a byte offset, at most ``count`` rows."""
    for position, raw in _raw_rows(path, offset, count):
        yield parse_staged(raw.decode("utf-8"), position)


class StagedEntries:
    """The planner's view of ``sorted.tsv`` (or of one split's rows in it, ``count`` rows from
    ``offset``): re-readable, one :class:`PlanEntry` per staged row.

    Read straight from the bytes (no JSON decoding), as many times as the planner needs.
    """

    def __init__(self, path: str, fmt: ShardFormat = ZIP, offset: int = 0, count: int | None = None) -> None:
        self.path = path
        self.fmt = fmt
        self.offset = offset
        self.count = count

    def __iter__(self) -> Iterator[PlanEntry]:
        row_cost = self.fmt.row_cost
        for offset, raw in _raw_rows(self.path, self.offset, self.count):
            key, _, size, ext, _, _, _, published = raw.split(b"\t", 7)
            cost = row_cost(len(key), len(ext), int(size), len(published) - 1)  # the line without "\n"
            yield PlanEntry(key.decode("ascii"), cost, offset)


@dataclass(frozen=True)
class SplitRows:
    """One split's rows in ``sorted.tsv``: ``rows`` lines from byte ``offset``, sorted by key."""

    name: str
    offset: int
    rows: int
    cost: int


#: Most splits a dataset may have: each is a folder of shards and a config entry; more means the
#: ``split`` column is not a split (one file is open per split while they are separated).
MAX_SPLITS = 64


#: Splits come in this order (the card's, the manifest's), then the others by name.
_USUAL_SPLITS = ("train", "validation", "test")


def split_order(name: str) -> tuple[int, str]:
    return (_USUAL_SPLITS.index(name) if name in _USUAL_SPLITS else len(_USUAL_SPLITS), name)


@dataclass(frozen=True)
class Regrouped:
    """``sorted.tsv`` as the planner reads it: where each split's rows are, and the class names."""

    splits: list[SplitRows]
    unsplit: list[InputProblem]  # rows left out for having no split (the first ``keep_problems``)
    unsplit_count: int
    label_names: list[str] | None  # the class_label column's names, numbered in this order
    empty_labels: list[str] = field(default_factory=list)  # known names no packed row has


def regroup(
    path: str,
    merged: MergeResult,
    *,
    fmt: ShardFormat = ZIP,
    label_column: str | None = None,
    known_labels: tuple[str, ...] | list[str] = (),
    keep_problems: int = 1000,
) -> Regrouped:
    """Rewrite ``sorted.tsv`` so that each split's rows are together (train, validation, test,
    then the others by name; rows by key within each), and with ``label_column`` write each
    row's class name as its number.

    Rows without a split in a dataset whose other rows have one are left out and returned as
    problems: put in ``train`` they would leak what was held out. The class names are those of
    the rows that stay (a duplicate left out adds none): ``known_labels`` first, in their order
    (what an earlier pack published), then the others sorted; a row without a label gets -1,
    datasets' number for no label. Split names that differ only in case are refused: on macOS,
    Windows and in a clone of the repo they would be one folder. A dataset without a ``split``
    column and without labels is one split, ``train``, and its file is not read again.
    """
    named = sorted((name for name in merged.splits if name), key=split_order)
    if not named and label_column is None:
        rows, cost = merged.splits.get("", (0, 0))
        return Regrouped([SplitRows("train", 0, rows, cost)], [], 0, None)
    if len(named) > MAX_SPLITS:
        raise ValueError(
            f"the split column has {len(named)} different values ({', '.join(named[:5])}, ...): more than"
            f" {MAX_SPLITS} splits. It names each row's split (train, validation, test...); rename a column"
            " that means something else"
        )
    problems: list[InputProblem] = []
    missing = 0
    first_line: dict[str, int] = {}
    labels: set[str] = set()
    folder = os.path.dirname(path)
    order = named or [""]
    parts = {name: os.path.join(folder, f"split-{i:03d}.tsv") for i, name in enumerate(order)}
    with contextlib.ExitStack() as stack:
        outs = {name: stack.enter_context(open(part, "wb")) for name, part in parts.items()}
        for _, raw in _raw_rows(path, 0, None):
            _, line_text, _, _, _, split_bytes, _, published = raw.split(b"\t", 7)
            split = split_bytes.decode("utf-8")
            if named and not split:
                missing += 1
                if len(problems) < keep_problems:
                    message = (
                        f"the row has no split, while other rows have one ({', '.join(named[:5])}):"
                        " give every row its split"
                    )
                    problems.append(InputProblem(int(line_text), message, published.decode("utf-8").rstrip("\n")))
                continue
            line = int(line_text)
            first_line[split] = min(first_line.get(split, line), line)
            if label_column is not None:
                value = json.loads(published).get(label_column)
                if isinstance(value, str):
                    labels.add(value)
            outs[split].write(raw)
    folded: dict[str, str] = {}
    for name in named:
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            a, b = sorted((other, name), key=lambda n: first_line.get(n, 0))
            raise ValueError(
                f"line {first_line.get(b, 0)} has split {b!r} and line {first_line.get(a, 0)} {a!r}: split names"
                " that differ only in case are one folder on macOS, Windows and in a clone of the repo; spell"
                " each split one way"
            )
    names = [*known_labels, *sorted(labels - set(known_labels))] if label_column is not None else None
    relabel = label_retyper(label_column, names) if label_column is not None and names is not None else None
    found: list[SplitRows] = []
    offset = 0
    with open(path, "wb") as out:
        for name in order:
            start, rows, cost = offset, 0, 0
            with open(parts[name], "rb") as part:
                for raw in part:
                    if relabel is not None:
                        head, published = raw.rsplit(b"\t", 1)  # published JSON escapes every tab
                        raw = head + b"\t" + relabel(published[:-1].decode("utf-8")).encode("utf-8") + b"\n"
                    out.write(raw)
                    offset += len(raw)
                    rows += 1
                    key, _, rest = raw.decode("utf-8").split("\t", 2)
                    cost += _cost(fmt, key, rest)
            os.unlink(parts[name])
            found.append(SplitRows(name or "train", start, rows, cost))
    empty = [n for n in known_labels if n not in labels] if label_column is not None else []
    return Regrouped(found, problems, missing, names, empty)


def _copy_file(src: IO[bytes], dst: IO[bytes]) -> int:
    copied = 0
    while block := src.read(1 << 20):
        dst.write(block)
        copied += len(block)
    return copied


def rows_sha256(path: str, offset: int, count: int, salt: bytes = b"") -> str:
    """sha256 of ``count`` staged rows from ``offset`` as published: keys, file sizes, extensions,
    splits, source names and published lines (not the input line or the file's stamp), after
    ``salt`` (what else shapes the shard's bytes). Equal for equal rows: ``pack --update`` keeps
    the shards whose rows did not change."""
    digest = hashlib.sha256(salt)
    for _, raw in _raw_rows(path, offset, count):
        key, _line, size, ext, _check, split_source_published = raw.split(b"\t", 5)
        digest.update(b"\t".join((key, size, ext, split_source_published)))
    return digest.hexdigest()
