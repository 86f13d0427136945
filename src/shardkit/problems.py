"""The input problems of a pack: one owner counts them, shows the first, and lists every one.

Every problem a check finds (a bad row, a file named twice, a duplicate key, a row without a
split) goes to :class:`ProblemReport` as it is found, and nowhere else: the count in the summary,
the "N problem(s)" of the error and the lines of the rejects file are all this one object's, so
they cannot disagree. With a rejects file asked for, each problem is spooled at once in sorted
runs on disk (memory stays bounded for millions of bad rows); once the check is complete the
rejects file is written from them, whole (temp file, then rename), in input order, each problem
with its row as the metadata file has it.

The rejects file is the user's to name, and shardkit never overwrites a file it did not write:
:func:`rejects_path_problem` refuses the metadata file, anything in IMAGES_DIR or OUT_DIR, and an
existing file that is not a rejects file; a run that rejects no row leaves an existing one as it was.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from .errors import InputErrors, InputProblem
from .manifest import replace_atomic
from .metadata import (
    ABSOLUTE,
    BACKSLASH,
    NO_FILE_NAME,
    NOT_JSON,
    NOT_OBJECT,
    NOT_UTF8,
    OTHER_CASE,
    TOO_LONG,
    URL,
    raw_lines,
)
from .staging import RunWriter, consume_sorted

#: The problems an error message (and the rejects summary) shows; the rest are counted.
SHOWN_PROBLEMS = 20
#: How every line of a rejects file starts (``{"line": N, "reason": ..., "row": ...}``): a file
#: whose first line does not is not one shardkit wrote, and is never overwritten.
_REJECTS_LINE = re.compile(rb'\{"line":\s*\d+,\s*"reason":\s*"')


#: Memory a report's spool holds before it spills a sorted run to disk.
SPOOL_RUN_BYTES = 4 << 20


class ProblemReport:
    """Counts each input problem once, keeps the first :data:`SHOWN_PROBLEMS` for the message,
    and, given a ``spool`` folder, spools each (its line and reason) in sorted runs on disk, from
    which :meth:`publish` writes the rejects file: one line per problem, in input order, with
    the row as it is in the metadata file. Range checks in other processes have reports of
    their own, which :meth:`absorb` takes in."""

    def __init__(self, spool: str | None) -> None:
        self.shown: list[InputProblem] = []
        self.count = 0
        self.kinds: Counter[str] = Counter()  # of every problem (InputProblem.kind)
        self._writer: RunWriter | None = None
        self._runs: list[str] = []  # finished runs: of the ranges absorbed
        if spool is not None:
            os.makedirs(spool, exist_ok=True)
            self._writer = RunWriter(spool, run_bytes=SPOOL_RUN_BYTES)

    @property
    def lists_rows(self) -> bool:
        """Whether every problem is spooled for a rejects file (``--on-error skip``)."""
        return self._writer is not None

    def add(self, problem: InputProblem) -> None:
        self.count += 1
        self.kinds[problem.kind] += 1
        if len(self.shown) < SHOWN_PROBLEMS:
            self.shown.append(problem)
        if self._writer is not None:  # (a JSON string holds no tab or newline)
            self._writer.add(f"{problem.line:012d}\t{json.dumps(problem.message, ensure_ascii=False)}\n")

    def absorb(self, other: ReportPart) -> None:
        """Take a range's report (finished in its own process), after the problems already here."""
        self.shown.extend(other.shown[: max(SHOWN_PROBLEMS - len(self.shown), 0)])
        self.count += other.count
        self.kinds.update(other.kinds)
        self._runs.extend(other.runs)

    def part(self) -> ReportPart:
        """This report as :meth:`absorb` takes it in the process that gathers them all."""
        return ReportPart(self.shown, self.count, self._spooled(), self.kinds)

    def close(self) -> None:
        """Spill what the spool holds in memory to disk."""
        if self._writer is not None:
            self._writer.finish()

    def _spooled(self) -> list[str]:
        return self._runs + (self._writer.finish() if self._writer is not None else [])

    def error(self, source: str, hint: str | None = None) -> InputErrors:
        """The run's refusal: the first problems, and how many there are in all."""
        return InputErrors(source, self.shown, self.count, hint)

    def publish(self, path: str, metadata_path: str) -> bool:
        """Write the rejects file at ``path`` whole (temp file, then rename), each problem with
        its row read again from ``metadata_path``; consume the spool. With no problem nothing is
        written and an existing file stays as it was. Return whether the file was written."""
        runs = self._spooled()
        with consume_sorted(runs) as spooled:
            if not self.count:
                return False
            replace_atomic(path, lambda out: _write_rejects(out, spooled, raw_lines(metadata_path)))
        return True


@dataclass(frozen=True)
class ReportPart:
    """A finished :class:`ProblemReport` of one range, as it crosses processes."""

    shown: list[InputProblem]
    count: int
    runs: list[str]  # its spool: sorted runs
    kinds: Counter[str] = field(default_factory=Counter)


_ONE_OBJECT_PER_LINE = '; META_JSONL holds one JSON object per line, such as {"file_name": "a/1.jpg", "caption": "..."}'


#: What a file whose every row has a problem of one kind is, by kind (see whole_file_problem),
#: and what to do.
_WHOLE_FILE = {
    NOT_UTF8: ("no line is UTF-8 text", "; save it as UTF-8 (with iconv -f LATIN1 -t UTF-8 if it is Latin-1)"),
    NOT_JSON: ("no line is JSON", _ONE_OBJECT_PER_LINE),
    NOT_OBJECT: ("no line is a JSON object", _ONE_OBJECT_PER_LINE),
    ABSOLUTE: ("every file_name is absolute", ""),
    BACKSLASH: ("every file_name separates folders with '\\'", ""),
    OTHER_CASE: ("every file_name differs in case from its file", ""),
    URL: ("every file_name is a URL", ""),
    NO_FILE_NAME: ("no row has 'file_name' (the file's path relative to IMAGES_DIR)", ""),
}


def whole_file_problem(report: ProblemReport, metadata_path: str) -> str | None:
    """One line for a file whose every row has a problem of the same kind (a misnamed file
    column, lines that are not JSON, ...): the cause is the file's, not each row's, and passing
    --on-error skip would pack nothing. None when the rows' problems differ."""
    if len(report.kinds) != 1 or not report.shown:
        return None
    kind, _, column = next(iter(report.kinds)).partition(":")
    if kind not in _WHOLE_FILE:
        return None
    what, fix = _WHOLE_FILE[kind]
    first = report.shown[0]
    # A row without file_name says what it lacks, then what to do: the line says the first once.
    detail = first.message.partition("; ")[2] if kind == NO_FILE_NAME else first.message
    line = f"{metadata_path}: {what} ({report.count} of {report.count} rows); line {first.line}: {detail}{fix}"
    if column and column.isprintable() and not set(column) & set("\"'$`!\\"):
        rename = f"('file_name' if k == {column!r} else k)"
        line += (
            f', e.g. python -c "import json,sys; [print(json.dumps({{{rename}: v for k, v in json.loads(l).items()}},'
            f" ensure_ascii=False)) for l in open(sys.argv[1], encoding='utf-8-sig') if l.strip()]\""
            f" {shlex.quote(metadata_path)} > {shlex.quote(os.path.splitext(metadata_path)[0] + '.fixed.jsonl')}"
        )
    return line


def _write_rejects(out: IO[bytes], spooled: Iterator[str], lines: Iterator[tuple[int, bytes]]) -> None:
    """One JSON line per spooled problem, in input order: ``{"line", "reason", "row"}``, where
    ``row`` is the line as read (a line that is not UTF-8 keeps its bytes as surrogate escapes,
    ``\\udcXX``; a line over the length limit is not copied: "")."""
    lineno, raw = 0, b""
    for entry in spooled:
        line_text, reason = entry.rstrip("\n").split("\t", 1)
        line = int(line_text)
        while lineno < line:
            lineno, raw = next(lines, (line, b""))
        row = "" if raw is TOO_LONG else raw.decode("utf-8", errors="surrogateescape")
        record = {"line": line, "reason": json.loads(reason), "row": row}
        # Surrogate escapes are not UTF-8: such a row is written in ASCII (\\udcXX).
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        if any("\udc80" <= c <= "\udcff" for c in row):
            text = json.dumps(record, separators=(",", ":"))
        out.write(text.encode("utf-8") + b"\n")


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is missing (or a dangling link): not the same file
        return False


def rejects_path_problem(rejects: str, *, metadata: str, images_dir: str, out_dir: str, default: str) -> str | None:
    """Why ``--rejects`` may not name ``rejects`` (None if it may): the input metadata file
    (compared by identity: a hard or symbolic link to it is it), IMAGES_DIR or anything in it,
    a file of OUT_DIR (published by push, or shardkit's own) other than ``default``, a folder,
    or an existing file that is not a rejects file (shardkit overwrites only its own)."""
    given = f"--rejects {rejects}"
    # Where the file would be (its folder's links resolved), and where a link there points.
    placed = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(rejects))), os.path.basename(rejects))
    targets = {placed, os.path.realpath(rejects)}
    if _same_file(rejects, metadata) or os.path.realpath(metadata) in targets:
        return f"{given} is the metadata file {metadata}; name another file for the rejected rows"
    for target in targets:
        if _inside(target, os.path.realpath(images_dir)):
            return f"{given} is in IMAGES_DIR {images_dir}, which shardkit only reads; name a file outside it"
        if _inside(target, os.path.realpath(out_dir)) and target != os.path.realpath(default):
            return (
                f"{given} is in OUT_DIR {out_dir}, whose files shardkit writes and push publishes; name a file"
                f" outside it (without --rejects the rows go to {default})"
            )
    if os.path.lexists(rejects) and not _is_rejects_file(rejects):
        return (
            f"{given} exists and is not a rejects file shardkit wrote (a JSON line per row:"
            ' {"line": ..., "reason": ..., "row": ...}); shardkit does not overwrite it: remove it, or name'
            " another file"
        )
    return None


def _is_rejects_file(path: str) -> bool:
    """Whether ``path`` is a regular file that is empty or starts as every rejects file does
    (opened only once known to be a regular file: a FIFO would block)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return False
    return not head or _REJECTS_LINE.match(head) is not None
