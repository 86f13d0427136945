"""shardkit's error types. Messages name the file and line, and say how to fix the problem."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


def shown_value(value: Any) -> str:
    """A value as a message shows it: repr, cut short (it may be megabytes of anything)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def listed(items: list[str], most: int) -> str:
    """``a, b, c and 4 more``: the first ``most`` items of a list a message names."""
    more = len(items) - most
    return ", ".join(items[:most]) + (f" and {more} more" if more > 0 else "")


def naming(exc: OSError, path: str) -> OSError:
    """``exc``, or the same error naming ``path`` where it names no file: a write's or a flush's
    error (a full disk) and pyarrow's say which call failed, not on which file, and the CLI's
    one line must say where."""
    return exc if exc.filename else OSError(exc.errno, exc.strerror or str(exc), path)


@contextlib.contextmanager
def naming_errors(path: str) -> Iterator[None]:
    """Around a block that writes ``path``: its OSError raised naming ``path`` where it names
    no file (see :func:`naming`)."""
    try:
        yield
    except OSError as exc:
        named = naming(exc, path)
        if named is exc:
            raise
        raise named from None


#: A credential's value as it may be shown: up to a space, a quote or a separator, through any
#: control character or line break (a token may hold one: the header's value is shown as it was
#: given, ``b'Bearer hf_X\\nx'``) and any backslash escape of one (``repr`` shows it so).
_VALUE = r"(?:\\.|[^\s\"',;}()<>\[\]\\]|[\n\r\x0b\x0c\x1c-\x1f\x85\u2028\u2029])+"

#: What a secret looks like in text shardkit shows: each pattern's first group is kept, the rest
#: becomes ``***``. Userinfo in a URL (``https://user:password@host``, up to the last ``@``
#: before the host's ``/``, as clients read it: a password may hold an ``@``), a Hub token (``hf_``
#: and 30 or more letters and digits), an Authorization-style header or ``Bearer``/``Basic``
#: credential, an AWS access key id, and the query parameters presigned URLs carry
#: (``X-Amz-Signature=``, ``sig=``, ``token=``...).
_SECRETS = [
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#]*@"), r"\1***@"),
    (re.compile(rf"(?i)(\b(?:bearer|basic)\s+){_VALUE}"), r"\1***"),
    (
        re.compile(
            r"(?i)(\b(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-amz-security-token"
            r"|aws_secret_access_key|aws_session_token|hf_token)[\"']?\s*[:=]\s*[\"']?)"
            rf"(?!(?:bearer|basic)\s){_VALUE}"
        ),
        r"\1***",
    ),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "hf_***"),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), r"\1***"),
    (
        re.compile(
            r"(?i)([?&;](?:[a-z0-9_-]*token|sig|signature|x-amz-signature|x-amz-credential|x-goog-signature"
            r"|x-goog-credential|key|api_key|apikey|password|passwd|secret|auth|code)=)[^&\s#\"'<>]+"
        ),
        r"\1***",
    ),
]


def redact(text: str) -> str:
    """``text`` with every secret-shaped part (:data:`_SECRETS`) replaced by ``***``: for every
    message, log line and ``--json`` field shardkit prints, since a URL can carry a password or a
    signature and a server can echo the request's headers back."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


#: The most of a server's own text (an error body, a reason) a message shows.
SERVER_TEXT_SHOWN_CHARS = 300


def one_line(text: str) -> str:
    """``text`` with every character that is not printable escaped as Python writes it (``\\n``,
    ``\\x1b``, ``\\u2028``, a lone surrogate's ``\\ud800``): what a message line shows of a path
    or a server's text, which must not forge lines of shardkit's output nor fail to print."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def server_text(text: str) -> str:
    """A server's text as a message may show it: cut to :data:`SERVER_TEXT_SHOWN_CHARS`, control
    characters escaped (:func:`one_line`), secrets redacted."""
    more = "..." if len(text) > SERVER_TEXT_SHOWN_CHARS else ""
    return redact(one_line(text[:SERVER_TEXT_SHOWN_CHARS]) + more)


def redact_log_records() -> None:
    """Make every log record's text redacted (:func:`redact`) and one line (:func:`one_line`: it
    may name a path) as it is made, whichever logger and handler it goes to: libraries log the
    URLs they retry, presigned signatures included, and huggingface_hub's logger has a handler of
    its own. The CLI calls it once."""
    make = logging.getLogRecordFactory()
    if getattr(make, "redacts", False):
        return

    def redacted(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        record.msg, record.args = one_line(redact(record.getMessage())), None
        return record

    redacted.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacted)


class ShardkitError(Exception):
    """Base class: a failure with a message meant for the user (exit code 1 in the CLI).

    Its message is made shown as it is made, whoever prints or logs it: redacted (:func:`redact`:
    a URL may carry a password, a server or a library may quote one) and one line
    (:func:`one_line`: a path from the command line or a file may hold a line break). A message of
    several lines is given as a list of them, each made one line."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(_shown_message(_lines_of_reraise(a)) if isinstance(a, (str, list)) else a for a in args))

    def __reduce__(self) -> Any:
        """A message of several lines crosses to another process (from a pool's worker) as its
        lines: given again as one string, its line breaks would be escaped (:func:`one_line`)."""
        message = self.args[0] if len(self.args) == 1 else None
        if type(self).__init__ is ShardkitError.__init__ and isinstance(message, str) and "\n" in message:
            return (type(self), (message.split("\n"),), self.__dict__ or None)
        return super().__reduce__()


def _lines_of_reraise(message: str | list[str]) -> str | list[str]:
    """torch's DataLoader raises a worker's error again in the main process with the class and
    the worker's whole traceback as its one argument ("Caught UsageError in DataLoader worker
    process 0.\nOriginal Traceback ..."): its lines, each made one line, so that the traceback
    and our message at its end stay readable (escaped into one line, they were not)."""
    if isinstance(message, str) and message.startswith("Caught ") and "\nOriginal Traceback" in message:
        return message.split("\n")
    return message


def _shown_message(message: str | list[str]) -> str:
    lines = message if isinstance(message, list) else [message]
    return "\n".join(one_line(redact(line)) for line in lines)


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
    #: What kind of problem it is, where the whole file may have it (a CSV file, a misnamed file
    #: column): when every row has the same kind, the file is refused in one line of that kind
    #: (:func:`shardkit.problems.whole_file_problem`). "" for the rest.
    kind: str = field(default="", compare=False)

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
        super().__init__([head, *lines, tail])


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
