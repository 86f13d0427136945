"""Stage 2: sort the checked records by key on disk, in bounded memory.

Each record is a :class:`StagedRow`, written as one line whose plain string order is (key,
input line) order, sorted in runs of bounded size, then merged into one ``sorted.tsv``.
Duplicate keys meet during the merge; the first row (lowest input line) wins and later ones
become problems. The merge also computes the input fingerprint: a sha256 over the sorted
lines, so it changes when any key, file size, source path or published field changes.
A second sort, of :class:`FileRef` lines, finds rows that name one file under two keys.

Keys are unique across splits (an image in two splits is a leak between them).
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from .errors import InputProblem, naming_errors
from .formats import ZIP, ShardFormat
from .metadata import SourceRecord
from .plan import PlanEntry
from .schema import label_retyper

DEFAULT_RUN_BYTES = 8 << 20
#: Most runs merged at once; more are merged in rounds (keeps open files and memory bounded).
MAX_FAN_IN = 64

#: Where each field of a staged line is (see :class:`StagedRow`). The hot loops (merge, regroup,
#: plan, hashes) split a line with :meth:`StagedRow.fields` and pick fields by these positions
#: instead of building a row: most of them need two or three fields of every row.
_KEY, _LINE, _SIZE, _EXT, _CHECK, _SPLIT, _SOURCE, _PUBLISHED = range(8)


class UnstageableRow(ValueError):
    """A row with a field no staged line can hold as it is: the checks before staging refuse
    such keys, extensions and split names, so this is a last guard of the line format."""

    def __init__(self, fields: str) -> None:
        super().__init__(f"the row's {fields} holds a control character or a character that is not ASCII")


def _plain(fields: str) -> bool:
    """Whether ``fields`` (a key, extension or split, which a staged line holds as they are, not
    as JSON) are printable ASCII: a tab would shift every later field, a line end (``\\n``;
    ``\\r``, ``\\x85``, ``\\u2028`` for a reader that splits as str.splitlines does) would cut the
    row in two."""
    return fields.isascii() and fields.isprintable()


def _staged_line(row: SourceRecord | StagedRow, metadata_line: str) -> str:
    """The one writer of a staged line (see :class:`StagedRow`)."""
    if not _plain(row.key + row.ext + row.split):
        raise UnstageableRow(f"key {row.key!r}, extension {row.ext!r} or split {row.split!r}")
    # A content key's CRC-32 goes before ``:h``, where a shardkit that predates it reads it as part
    # of the stamp: a work folder or a Dask worker of that version refuses the row as changed
    # instead of taking it as checked by its stamp alone.
    crc = f":{row.crc:08x}" if row.content_keyed and row.crc >= 0 else ""
    check = f"{row.stamp}{crc}:{'h' if row.content_keyed else 'k'}"
    if row.file_offset >= 0:
        check += f"@{row.file_offset}"
    head = f"{row.key}\t{row.line:012d}\t{row.size}\t{row.ext}\t{check}"
    return f"{head}\t{row.split}\t{json_string(row.source)}\t{metadata_line}\n"


@dataclass(frozen=True, slots=True)
class StagedRow:
    """One checked row on its way to a shard: a line of the staging files (``run-*.tsv``,
    ``sorted.tsv``). The line, tab-separated, with its fields at the positions above::

        key \\t line(12 digits) \\t size \\t ext \\t check \\t split \\t json(source) \\t metadata.jsonl line \\n

    ``check`` is what the writer compares the file with: the check's stamp of it
    (:func:`~shardkit.inputfile.stamp`), then, when the key is the hash of its bytes, the CRC-32 of
    the bytes hashed in 8 hex digits and ``:h`` (``:1a2b3c4d:h``; a line staged before has no CRC,
    and the writer hashes that file again), else ``:k``, and for a byte range of a file (remux's
    staging) ``@`` and where the range starts: ``:k@4096``.
    It is not part of the fingerprint: touching a file does not change what gets
    published. ``split`` is the row's ``split`` column ("" for a dataset without one, whose one
    split is ``train``). No field holds a tab or a line end, whatever the row holds: the key,
    extension and split are printable ASCII (checked as the line is written), the stamp is
    numbers, and the free text (the file_name, the published line) is JSON, which escapes tab,
    CR, newline and every other character below U+0020. So a line splits in eight, and the
    published line, last, can be sliced off as it is. JSON leaves U+0085, U+2028 and U+2029 as
    they are: lines are split at "\\n" only (binary readline, or text files opened with
    ``newline="\\n"``), never with str.splitlines.
    """

    key: str
    line: int  # 1-based line in the metadata file
    size: int  # bytes of the file
    ext: str
    source: str  # file_name as given, relative to IMAGES_DIR
    metadata_line: str  # as published in metadata.jsonl, without its newline
    offset: int = 0  # byte offset of this row in sorted.tsv (not part of the line)
    stamp: str = ""  # the file as the check saw it; "" compares nothing (rows made by hand, in tests)
    content_keyed: bool = False  # the key is the hash of the file's bytes: the writer checks them again
    split: str = ""
    file_offset: int = -1  # where the row's bytes start in its file; -1: the whole file
    crc: int = -1  # a content-keyed file's CRC-32 as the check hashed it; -1: unknown (hashed again)

    @classmethod
    def of(cls, record: SourceRecord, metadata_line: str) -> StagedRow:
        """The checked ``record`` with its published line."""
        return cls(
            record.key,
            record.line,
            record.size,
            record.ext,
            record.source,
            metadata_line,
            stamp=record.stamp,
            content_keyed=record.content_keyed,
            split=record.split,
            file_offset=record.file_offset,
            crc=record.crc,
        )

    def to_line(self) -> str:
        return _staged_line(self, self.metadata_line)

    @staticmethod
    def line_of(record: SourceRecord, metadata_line: str) -> str:
        """``StagedRow.of(record, metadata_line).to_line()``, without making the row (once per input row)."""
        return _staged_line(record, metadata_line)

    @classmethod
    def from_line(cls, text: str, offset: int = 0) -> StagedRow:
        key, line, size, ext, check, split, source, published = StagedRow.fields(text)
        stamp, _, how = check.rpartition(":")
        metadata_line = published.rstrip("\n")
        file_offset = int(how[2:]) if how[1:2] == "@" else -1
        hashed = how == "h"
        crc = -1
        # A stamp is empty or size:mtime:ctime (two colons): one part more is the CRC-32.
        if hashed and stamp.count(":") in (1, 3):
            stamp, _, crc_hex = stamp.rpartition(":")
            crc = int(crc_hex, 16)
        name = _source_of(source)
        return cls(key, int(line), int(size), ext, name, metadata_line, offset, stamp, hashed, split, file_offset, crc)

    @staticmethod
    def fields(text: str) -> list[str]:
        """A staged line's eight fields as text, unparsed (the published line keeps its newline)."""
        return text.split("\t", _PUBLISHED)

    @staticmethod
    def raw_fields(raw: bytes) -> list[bytes]:
        """:meth:`fields` of a line read as bytes: nothing is decoded."""
        return raw.split(b"\t", _PUBLISHED)


_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def json_string(text: str) -> str:
    """``json.dumps(text, ensure_ascii=False)``, without its cost for the usual name that needs no escape."""
    return json.dumps(text, ensure_ascii=False) if _JSON_ESCAPED.search(text) else f'"{text}"'


def _source_of(field: str) -> str:
    """A staged line's json(source) field as the file_name (see :func:`json_string`)."""
    return field[1:-1] if "\\" not in field else str(json.loads(field))


def _cost(fmt: ShardFormat, fields: Sequence[str] | Sequence[bytes]) -> int:
    """A staged row's shard cost from its :meth:`StagedRow.fields` (or raw ones)."""
    key, size, ext, published = fields[_KEY], fields[_SIZE], fields[_EXT], fields[_PUBLISHED]
    # Keys and extensions are ASCII: their length is their length in bytes.
    line_bytes = len(published) if isinstance(published, bytes) else len(published.encode("utf-8"))
    return fmt.row_cost(len(key), len(ext), int(size), line_bytes - 1)  # the line without "\n"


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
        with naming_errors(path), open(path, "w", encoding="utf-8", newline="\n") as f:
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


def consume_sorted(runs: list[str], fan_in: int = MAX_FAN_IN) -> contextlib.AbstractContextManager[Iterator[str]]:
    """Every line of the sorted ``runs`` (of a :class:`RunWriter`) in order; deleted once read."""
    return _consuming(runs, fan_in)


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
            with naming_errors(path), _merging(group) as lines, open(path, "w", encoding="utf-8", newline="\n") as out:
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
    report: Callable[[InputProblem], None],
    fan_in: int = MAX_FAN_IN,
    drop_lines: frozenset[int] = frozenset(),
    fmt: ShardFormat = ZIP,
    retype: Callable[[str], str] | None = None,
) -> MergeResult:
    """Merge sorted runs into ``out_path``, dropping duplicate keys: each goes to ``report``.

    Rows from the input lines in ``drop_lines`` (already reported elsewhere) are left out.
    ``retype`` rewrites each published line once every row's type is known (see
    :func:`~shardkit.schema.float_retyper`); sizes and the fingerprint are of the rewritten
    line. The runs are consumed: they are deleted once merged.
    """
    fingerprint = hashlib.sha256()
    rows = 0
    total_cost = 0
    prev_key = None
    prev_text = ""  # the row that keeps the key (as read: before ``retype``)
    splits: dict[str, tuple[int, int]] = {}
    with (
        naming_errors(out_path),
        _consuming(runs, fan_in) as lines,
        open(out_path, "w", encoding="utf-8", newline="\n") as out,
    ):
        for text in lines:
            fields = StagedRow.fields(text)
            key = fields[_KEY]
            if drop_lines and int(fields[_LINE]) in drop_lines:
                continue
            if key == prev_key:
                report(_duplicate(StagedRow.from_line(text), StagedRow.from_line(prev_text)))
                continue
            prev_key, prev_text = key, text
            if retype is not None:
                fields[_PUBLISHED] = f"{retype(fields[_PUBLISHED][:-1])}\n"
                text = "\t".join(fields)
            # Neither the input line number nor the file's stamp is part of the fingerprint:
            # moving rows around in the metadata file, or touching a file, does not change
            # what gets published.
            split = fields[_SPLIT]
            if split:  # (rows without a split hash as before splits existed: their outputs resume)
                fingerprint.update(f"split={split}\t".encode())
            size, ext, source, published = fields[_SIZE], fields[_EXT], fields[_SOURCE], fields[_PUBLISHED]
            fingerprint.update(f"{size}\t{ext}\t{source}\t{published}".encode())
            fingerprint.update(key.encode("ascii"))
            out.write(text)
            rows += 1
            cost = _cost(fmt, fields)
            total_cost += cost
            split_rows, split_cost = splits.get(split, (0, 0))
            splits[split] = (split_rows + 1, split_cost + cost)
    return MergeResult(out_path, rows, total_cost, fingerprint.hexdigest(), splits)


def _duplicate(row: StagedRow, first: StagedRow) -> InputProblem:
    """``row``, whose key ``first`` (an earlier row) has too."""
    # The same image in two splits is a leak between them (a test image seen in training).
    leak = ""
    if row.split and first.split and row.split != first.split:
        leak = f" (split {row.split!r}; line {first.line} is in {first.split!r}: a leak between splits)"
    if row.content_keyed:  # the key is the hash of the file's bytes: the user gave no keys
        name = row.source
        if normal_path(name) == normal_path(first.source):
            message = f"file_name {name!r} is named again (first on line {first.line}){leak}"
        else:
            message = f"file_name {name!r} has the same bytes as {first.source!r} on line {first.line}{leak}"
        message += ": a file is published once; drop one of the rows (or pass --on-duplicate skip to keep the first)"
    else:
        message = f"duplicate key {row.key} (first used on line {first.line}){leak}"
    return InputProblem(row.line, message, row.metadata_line)


@dataclass(frozen=True, slots=True)
class FileRef:
    """A row as :func:`repeated_files` sorts it: by the file it names, then by input line. The
    line, tab-separated::

        json(normalized file_name) \t line(12 digits) \t key \t json(file_name) \t metadata.jsonl line \n

    Identity is the path, not the inode: hard or symbolic links are how some collections
    deduplicate files shared by distinct rows, and those rows are meant to stay.
    """

    line: int
    key: str
    source: str  # file_name as given
    metadata_line: str  # without its newline

    @classmethod
    def of(cls, record: SourceRecord, metadata_line: str) -> FileRef:
        return cls(record.line, record.key, record.source, metadata_line)

    def to_line(self) -> str:
        return FileRef.line_of(self, self.metadata_line)

    @staticmethod
    def line_of(row: SourceRecord | FileRef, metadata_line: str) -> str:
        """``FileRef.of(row, metadata_line).to_line()``, without making the object (once per input row)."""
        if not _plain(row.key):
            raise UnstageableRow(f"key {row.key!r}")
        source = json_string(row.source)
        normal = normal_path(row.source)
        path = source if normal == row.source else json_string(normal)
        return f"{path}\t{row.line:012d}\t{row.key}\t{source}\t{metadata_line}\n"

    @classmethod
    def from_line(cls, text: str) -> FileRef:
        _, line, key, source, published = FileRef.fields(text)
        return cls(int(line), key, _source_of(source), published.rstrip("\n"))

    @staticmethod
    def fields(text: str) -> list[str]:
        """The line's five fields, unparsed: the file (sort key), line, key, file_name, published line."""
        return text.split("\t", 4)


def normal_path(name: str) -> str:
    """``posixpath.normpath(name)``, skipped for the usual name it would leave as is (public for
    tests/test_metadata.py, which holds it to normpath)."""
    if "//" in name or "/." in name or name.startswith(".") or name.endswith("/"):
        return posixpath.normpath(name)
    return name


def repeated_files(
    runs: list[str], *, report: Callable[[InputProblem], None], fan_in: int = MAX_FAN_IN
) -> frozenset[int]:
    """Rows naming a file an earlier row names too (same normalized file_name) under another key.

    The first row keeps the file; each later one is a problem, given to ``report``: a file is
    published once. (Under the same key it is a duplicate key, which :func:`merge_runs` reports.)
    Return the repeats' input lines, to leave out when skipping bad rows. Consumes the runs.
    Memory holds the repeats' line numbers only.
    """
    lines: set[int] = set()
    first_file, first_key, first_text = None, "", ""  # of the row that keeps the file
    with _consuming(runs, fan_in) as merged:
        for text in merged:
            file, line_text, key, _, _ = FileRef.fields(text)
            if file != first_file:
                first_file, first_key, first_text = file, key, text
                continue
            if key == first_key:
                continue
            line = int(line_text)
            lines.add(line)
            row, first = FileRef.from_line(text), FileRef.from_line(first_text)
            message = (
                f"file_name {row.source!r} is the same file as line {first.line} names"
                f" ({first.source!r}, key {first.key}): a file is published once; drop one of the rows"
            )
            report(InputProblem(line, message, row.metadata_line))
    return frozenset(lines)


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
        yield StagedRow.raw_fields(raw)[_PUBLISHED]


def iter_keys_and_extensions(path: str, offset: int, count: int) -> Iterator[tuple[str, str]]:
    """The key and file extension of ``count`` staged rows from ``offset``: those two ASCII
    fields, nothing else of the line parsed (what a shard's member names need)."""
    for _, raw in _raw_rows(path, offset, count):
        fields = raw.split(b"\t", _EXT + 1)
        yield fields[_KEY].decode("ascii"), fields[_EXT].decode("ascii")


def iter_staged(path: str, offset: int = 0, count: int | None = None) -> Iterator[StagedRow]:
    """Read staged rows from ``sorted.tsv``, starting at a byte offset, at most ``count`` rows."""
    for position, raw in _raw_rows(path, offset, count):
        yield StagedRow.from_line(raw.decode("utf-8"), position)


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
        fmt = self.fmt
        for offset, raw in _raw_rows(self.path, self.offset, self.count):
            fields = StagedRow.raw_fields(raw)
            yield PlanEntry(fields[_KEY].decode("ascii"), _cost(fmt, fields), offset)


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
    unsplit_count: int  # rows left out for having no split (each given to ``report``)
    label_names: list[str] | None  # the class_label column's names, numbered in this order
    empty_labels: list[str] = field(default_factory=list)  # known names no packed row has


def regroup(
    path: str,
    merged: MergeResult,
    *,
    fmt: ShardFormat = ZIP,
    label_column: str | None = None,
    known_labels: tuple[str, ...] | list[str] = (),
    report: Callable[[InputProblem], None],
) -> Regrouped:
    """Rewrite ``sorted.tsv`` so that each split's rows are together (train, validation, test,
    then the others by name; rows by key within each), and with ``label_column`` write each
    row's class name as its number.

    Rows without a split in a dataset whose other rows have one are left out, each a problem
    given to ``report``: put in ``train`` they would leak what was held out. The class names are those of
    the rows that stay (a duplicate left out adds none): ``known_labels`` first, in their order
    (what an earlier pack published), then the others sorted; a row without a label gets -1,
    datasets' number for no label. Split names that differ only in case are refused: on macOS,
    Windows and in a clone of the repo they would be one folder. A dataset without a ``split``
    column and without labels is one split, ``train``, and its file is not read again.
    """
    named = sorted((name for name in merged.splits if name), key=split_order)
    if not named and label_column is None:
        rows, cost = merged.splits.get("", (0, 0))
        return Regrouped([SplitRows("train", 0, rows, cost)], 0, None)
    if len(named) > MAX_SPLITS:
        raise ValueError(
            f"the split column has {len(named)} different values ({', '.join(named[:5])}, ...): more than"
            f" {MAX_SPLITS} splits. It names each row's split (train, validation, test...); rename a column"
            " that means something else"
        )
    order = named or [""]
    parts = {name: os.path.join(os.path.dirname(path), f"split-{i:03d}.tsv") for i, name in enumerate(order)}
    missing, first_line, labels = _separate_splits(path, named, parts, label_column, report)
    _refuse_names_of_one_folder(named, first_line)
    names = [*known_labels, *sorted(labels - set(known_labels))] if label_column is not None else None
    relabel = label_retyper(label_column, names) if label_column is not None and names is not None else None
    found = _join_splits(path, order, parts, relabel, fmt)
    empty = [n for n in known_labels if n not in labels] if label_column is not None else []
    return Regrouped(found, missing, names, empty)


def _separate_splits(
    path: str,
    named: list[str],
    parts: dict[str, str],
    label_column: str | None,
    report: Callable[[InputProblem], None],
) -> tuple[int, dict[str, int], set[str]]:
    """Copy each row of ``path`` into its split's part file (``parts``, by split name); a row
    without a split while others have one is left out and given to ``report``. Return how many
    were left out, each split's first input line, and the class names (of ``label_column``)."""
    missing = 0
    first_line: dict[str, int] = {}
    labels: set[str] = set()
    folder = os.path.dirname(path)
    with naming_errors(folder), contextlib.ExitStack() as stack:  # (one of the parts: the folder is named)
        outs = {name: stack.enter_context(open(part, "wb")) for name, part in parts.items()}
        for _, raw in _raw_rows(path, 0, None):
            fields = StagedRow.raw_fields(raw)
            line_text, split, published = fields[_LINE], fields[_SPLIT].decode("utf-8"), fields[_PUBLISHED]
            if named and not split:
                missing += 1
                message = (
                    f"the row has no split, while other rows have one ({', '.join(named[:5])}):"
                    " give every row its split"
                )
                report(InputProblem(int(line_text), message, published.decode("utf-8").rstrip("\n")))
                continue
            line = int(line_text)
            first_line[split] = min(first_line.get(split, line), line)
            if label_column is not None:
                value = json.loads(published).get(label_column)
                if isinstance(value, str):
                    labels.add(value)
            outs[split].write(raw)
    return missing, first_line, labels


#: Why two split names that differ only in case are refused (here, and as a remux commits its batches).
ONE_FOLDER = (
    "split names that differ only in case are one folder on macOS, Windows and in a clone of the repo; spell each"
    " split one way"
)


def _refuse_names_of_one_folder(named: list[str], first_line: dict[str, int]) -> None:
    """Refuse split names that differ only in case (one folder on macOS, Windows, in a clone)."""
    folded: dict[str, str] = {}
    for name in named:
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            a, b = sorted((other, name), key=lambda n: first_line.get(n, 0))
            raise ValueError(
                f"line {first_line.get(b, 0)} has split {b!r} and line {first_line.get(a, 0)} {a!r}: {ONE_FOLDER}"
            )


def _join_splits(
    path: str,
    order: list[str],
    parts: dict[str, str],
    relabel: Callable[[str], str] | None,
    fmt: ShardFormat,
) -> list[SplitRows]:
    """Write the split parts back into ``path`` one after the other, in ``order`` (each row's class
    name as its number, with ``relabel``); remove the parts. Return where each split's rows are."""
    found: list[SplitRows] = []
    offset = 0
    with naming_errors(path), open(path, "wb") as out:
        for name in order:
            start, rows, cost = offset, 0, 0
            with open(parts[name], "rb") as part:
                for raw in part:
                    fields = StagedRow.raw_fields(raw)
                    if relabel is not None:
                        relabeled = relabel(fields[_PUBLISHED][:-1].decode("utf-8"))
                        fields[_PUBLISHED] = relabeled.encode("utf-8") + b"\n"
                        raw = b"\t".join(fields)
                    out.write(raw)
                    offset += len(raw)
                    rows += 1
                    cost += _cost(fmt, fields)
            os.unlink(parts[name])
            found.append(SplitRows(name or "train", start, rows, cost))
    return found


def rows_sha256(path: str, offset: int, count: int, salt: bytes = b"") -> str:
    """sha256 of ``count`` staged rows from ``offset`` as published: keys, file sizes, extensions,
    splits, source names and published lines (not the input line or the file's stamp), after
    ``salt`` (what else shapes the shard's bytes). Equal for equal rows: ``pack --update`` keeps
    the shards whose rows did not change."""
    digest = hashlib.sha256(salt)
    for _, raw in _raw_rows(path, offset, count):
        f = StagedRow.raw_fields(raw)
        digest.update(b"\t".join((f[_KEY], f[_SIZE], f[_EXT], f[_SPLIT], f[_SOURCE], f[_PUBLISHED])))
    return digest.hexdigest()
