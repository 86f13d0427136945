"""shardkit's error types. Messages name the file and line, and say how to fix the problem."""

from __future__ import annotations

from dataclasses import dataclass


def listed(items: list[str], most: int) -> str:
    """``a, b, c and 4 more``: the first ``most`` items of a list a message names."""
    more = len(items) - most
    return ", ".join(items[:most]) + (f" and {more} more" if more > 0 else "")


def naming(exc: OSError, path: str) -> OSError:
    """``exc``, or the same error naming ``path`` where it names no file: a write's or a flush's
    error (a full disk) and pyarrow's say which call failed, not on which file, and the CLI's
    one line must say where."""
    return exc if exc.filename else OSError(exc.errno, exc.strerror or str(exc), path)


class ShardkitError(Exception):
    """Base class: a failure with a message meant for the user (exit code 1 in the CLI)."""


class NetworkError(ShardkitError):
    """A server did not answer in time, or the connection failed: not a fact about the data."""


class UsageError(ShardkitError):
    """The command was asked for something that cannot work (exit code 2 in the CLI)."""


class ManifestError(ShardkitError):
    """A ``shards.json`` that is not one shardkit wrote: one line, ``<where>/shards.json: <what>``."""


@dataclass(frozen=True, order=True)
class InputProblem:
    """One bad row of the metadata file (or one bad file it names)."""

    line: int
    message: str
    raw: str = ""  # the offending line as seen; no longer read (the rejects file reads each row again from the input)

    def format(self, source: str) -> str:
        return f"{source}:{self.line}: {self.message}"


class InputErrors(ShardkitError):
    """The input has problems; nothing was written. Carries the first problems found."""

    def __init__(self, source: str, problems: list[InputProblem], total: int, hint: str | None = None) -> None:
        self.source = source
        self.problems = problems
        self.total = total
        lines = [p.format(source) for p in problems]
        more = total - len(problems)
        if more > 0:
            lines.append(f"... and {more} more problem(s)")
        head = f"{total} problem(s) in the input; no shard was written:"
        tail = hint or "Fix the rows above, or pass --on-error skip to pack the rest and list them in a rejects file."
        super().__init__("\n".join([head, *lines, tail]))


#: The most of a source path a message shows: it is user data, and a forged shard's may be megabytes.
SOURCE_SHOWN_CHARS = 1000


def source_note(source: object) -> str:
    """`` (source 'photos/2019/x.jpg')``, what follows a member's (or a row's) name in every message
    about one row whose ``source_path`` (``--keep-source-path``) is known: files are published under
    their key, and this is the way back to the input file. '' when there is none (no such column,
    or not a string). Quoted with ``repr``: the path is user data, only ever shown, and a control
    character in it must not forge a line of output. The template's loading script has a copy."""
    if not isinstance(source, str):
        return ""
    more = "..." if len(source) > SOURCE_SHOWN_CHARS else ""
    return f" (source {source[:SOURCE_SHOWN_CHARS]!r}{more})"


def no_note(name: str) -> str:
    """A member's note when no row's source is known (see :func:`source_note`)."""
    return ""
