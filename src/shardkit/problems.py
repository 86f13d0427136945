"""The input problems of a pack: one owner counts them, shows the first, and lists every one.

Every problem a check finds (a bad row, a file named twice, a duplicate key, a row without a
split) goes to :class:`ProblemReport` as it is found, and nowhere else: the count in the summary,
the "N problem(s)" of the error and the lines of the rejects file are all this one object's, so
they cannot disagree. With a rejects file asked for, each problem is written at once to a spool
file in the work folder (memory stays bounded for millions of bad rows); the rejects file the
user named is written from the spool only at the end, whole, by an atomic rename.

The rejects file is the user's to name, and shardkit never overwrites a file it did not write:
:func:`rejects_path_problem` refuses the metadata file, anything in IMAGES_DIR or OUT_DIR, and an
existing file that is not a rejects file; a run that rejects no row leaves an existing one as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import IO

from .errors import InputErrors, InputProblem
from .manifest import replace_atomic

#: The problems an error message (and the rejects summary) shows; the rest are counted.
SHOWN_PROBLEMS = 20
#: How every line of a rejects file starts (``{"line": N, "reason": ..., "row": ...}``): a file
#: whose first line does not is not one shardkit wrote, and is never overwritten.
_REJECTS_LINE = re.compile(rb'\{"line":\s*\d+,\s*"reason":\s*"')


class ProblemReport:
    """Counts each input problem once, keeps the first :data:`SHOWN_PROBLEMS` for the message,
    and, given a ``spool`` path, writes each as one rejects line there (one per bad row, its raw
    line kept). Range checks in other processes have reports of their own, which
    :meth:`absorb` takes in input order."""

    def __init__(self, spool: str | None) -> None:
        self.shown: list[InputProblem] = []
        self.count = 0
        self.spool = spool
        self._out: IO[str] | None = None  # the spool, opened at the first problem; close() ends it

    @property
    def lists_rows(self) -> bool:
        """Whether every problem is listed in a rejects file (``--on-error skip``)."""
        return self.spool is not None

    def add(self, problem: InputProblem) -> None:
        self.count += 1
        if len(self.shown) < SHOWN_PROBLEMS:
            self.shown.append(problem)
        if self.spool is not None:
            record = {"line": problem.line, "reason": problem.message, "row": problem.raw}
            self._spool().write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    def absorb(self, other: ReportPart) -> None:
        """Take a range's report (finished in its own process), after the problems already here."""
        self.shown.extend(other.shown[: max(SHOWN_PROBLEMS - len(self.shown), 0)])
        self.count += other.count
        if self.spool is not None and other.spool is not None and other.count:
            with open(other.spool, encoding="utf-8", newline="\n") as part:
                shutil.copyfileobj(part, self._spool())

    def _spool(self) -> IO[str]:
        if self._out is None:
            assert self.spool is not None
            self._out = open(self.spool, "a", encoding="utf-8", newline="\n")  # noqa: SIM115 (closed by close())
        return self._out

    def part(self) -> ReportPart:
        """What :meth:`absorb` needs of this report in the process that gathers them all."""
        self.close()
        return ReportPart(self.shown, self.count, self.spool)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def error(self, source: str, hint: str | None = None) -> InputErrors:
        """The run's refusal: the first problems, and how many there are in all."""
        return InputErrors(source, self.shown, self.count, hint)

    def publish(self, path: str) -> bool:
        """Write the rejects file at ``path`` from the spool, whole (temp file, then rename), and
        remove the spool. With no problem, nothing is written and an existing file stays as it
        was. Return whether the file was written."""
        self.close()
        if self.spool is None:
            return False
        try:
            if self.count:
                with open(self.spool, "rb") as spool:
                    replace_atomic(path, lambda out: shutil.copyfileobj(spool, out))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.spool)
        return bool(self.count)


@dataclass(frozen=True)
class ReportPart:
    """A finished :class:`ProblemReport` of one range, as it crosses processes."""

    shown: list[InputProblem]
    count: int
    spool: str | None


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
