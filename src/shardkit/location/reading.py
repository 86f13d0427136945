"""Reading bytes from a place: bounded reads, a window on a file, and http(s) reading.

A body read whole is read up to a bound per kind (``MAX_*_BYTES`` below): a broken or hostile
server may send an endless one. :class:`HttpReader` is the forward-only file over a streaming
GET (optionally ranged) that a front-to-back read of a shard at an http(s) URL or on the Hub
uses; it survives transient failures, asking again from the next byte (see
:mod:`.network`). :class:`HttpRandomFile` is the seekable file there (a Parquet shard, a ZIP's
directory): each read one ranged :class:`HttpReader`. :class:`Window` is the ranged read over a
file that seeks (on disk, through fsspec).
"""

from __future__ import annotations

import errno
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

from ..errors import NetworkError, ShardkitError, server_text
from .network import (
    PROGRESS_BYTES,
    RETRIES_VARIABLE,
    TRANSIENT_STATUSES,
    answered,
    asked_wait,
    first_retry_wait,
    is_timeout,
    is_transient,
    network_failure,
    network_retries,
    network_timeout,
    retry_wait,
)

log = logging.getLogger(__name__)

# The most of each kind of body shardkit holds in memory, whatever the server sends (a broken or
# hostile one may send an endless body): each is far above what shardkit itself writes
# (``shards.json``'s is :data:`.manifest.MAX_MANIFEST_BYTES`, where every manifest is read).
#: A shard's ``metadata/<stem>.jsonl``, read whole by ``verify``: its rows, a few hundred bytes each
#: (a 4 GiB shard of 1 KB files holds 4 million).
MAX_METADATA_FILE_BYTES = 2 << 30
#: The repo's other top-level files read whole (the card, ``.gitattributes``, loading script, preview).
MAX_SMALL_FILE_BYTES = 32 << 20
#: One answer of the Hub's API (a page of a tree listing is about 1000 entries, under 1 MB).
MAX_API_BODY_BYTES = 16 << 20
#: A server's error answer or redirect: only a line of it is ever shown.
MAX_ERROR_BODY_BYTES = 64 << 10


#: Bytes read at a time where a read is not asked for a size (a skip, a local file's buffer).
CHUNK = 1 << 20


def read_upto(f: Any, size: int) -> bytes:
    """The next ``size`` bytes of an open file, fewer only at its end: a stream's read may return
    less than asked before the end (a network body's next chunk)."""
    parts, got = [], 0
    while got < size:
        part: bytes = f.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def read_bounded(f: Any, limit: int, where: str) -> bytes:
    """All of an open file, or one line naming ``where`` once it holds more than ``limit`` bytes
    (read no further: a server may send an endless body)."""
    data = read_upto(f, limit + 1)
    if len(data) > limit:
        raise ShardkitError(
            f"{where}: more than {limit} bytes, far more than shardkit writes there; the server sent something"
            " else (check the URL)"
        )
    return data


def read_url(url: str, headers: dict[str, str], limit: int) -> bytes | None:
    """A whole (small) file at an http(s) URL, in one GET with ``headers``; None when the server
    answers 404; more than ``limit`` bytes is one line naming it (see :func:`read_bounded`)."""
    try:
        with HttpReader(url, headers) as f:
            return read_bounded(f, limit, url)
    except FileNotFoundError:
        return None


class Window:
    """At most ``n`` bytes of a file, from where it stands: a ranged read on disk or fsspec."""

    def __init__(self, f: Any, n: int) -> None:
        self._f = f
        self._left = n

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data: bytes = self._f.read(n) if n else b""
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Answered(Exception):
    """An error answer a retry may cure (:data:`.network.TRANSIENT_STATUSES`), shaped as
    :func:`.network.network_failure` reads one (``status``, ``message``), with the wait it asks for."""

    def __init__(self, status: int, message: str, wait: int | None) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message
        self.wait = wait


class BodyEndedEarly(ConnectionError):
    """A body that ended, without an error, before the bytes the server said it would send (a
    chunked body closed early, a short ranged answer): a cut connection, retried as one."""


def _content_range(content_range: str | None) -> tuple[int | None, int | None, int | None]:
    """The first byte, the byte after the last, and the file's size in a ``Content-Range``
    (``bytes 10-19/100``, ``bytes */100``)."""
    match = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", (content_range or "").strip())
    if match is None:
        return None, None, None
    start, last, total = match.groups()
    return (int(start) if start else None), (int(last) + 1 if last else None), (int(total) if total != "*" else None)


class HttpReader:
    """A forward-only file over a streaming GET: what a front-to-back read needs, one request
    while nothing fails.

    Kept rather than fsspec's HTTPStreamFile (also one GET): that one hops to fsspec's event-loop
    thread on every read and reports an HTTP error or a cut body without the server's status;
    this one reads in the caller's thread on huggingface_hub's session (its headers, redirects to
    the Hub's storage, and a timeout per read). Its waits are bounded by :func:`network_timeout`
    (a read that brings no byte for that long fails, however long the whole shard takes).

    A transient failure (:func:`.network.is_transient`: a cut or refused connection, a timeout,
    a 429 or 5xx), of the opening request or mid-body, is retried after a wait
    (:func:`.network.retry_wait`) with ``Range: bytes=<next byte>-``: the answer must continue
    where the last one broke (a 206 from that byte; a 200, the whole file, is passed over up to
    it; another ETag than the first answer's is a file that changed, one line). No byte is given
    twice or skipped. After :func:`.network.network_retries` failures in a row with less than
    :data:`.network.PROGRESS_BYTES` read between them, or at once for any other failure, one line
    names the URL, the byte and the failure.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        *,
        byte_range: tuple[int, int] | None = None,
        etag: str | None = None,
        modified: str | None = None,
    ) -> None:
        self._url = url
        self._headers = headers
        self._timeout = network_timeout()
        self._retries = network_retries()
        self._first_wait = first_retry_wait()  # read now: a wrong setting is said before anything fails
        self._fetched = byte_range[0] if byte_range else 0  # the absolute position of the next byte to take
        self._end = byte_range[1] if byte_range else None  # past the last byte to give; None: the file's end
        #: The first answer's ETag (or the one the caller expects): a later one that differs is another file.
        self.etag = etag
        #: The file's size, as the first answer says it (Content-Range's total, or a 200's Content-Length).
        self.size: int | None = None
        #: Whether the last answer was a part of the file (206), as a ranged request asked.
        self.ranged = False
        self._answer_end: int | None = None  # the byte after the last the answer at hand says it sends
        self._asked_from = self._fetched  # where the request of the answer at hand asked to start
        #: The first answer's Last-Modified (or the caller's): compared where there is no ETag.
        self.modified = modified
        self._validated = etag is not None or modified is not None  # the file's validators are known
        self._failures = 0  # in a row, without PROGRESS_BYTES read between them
        self._failed_at = self._fetched  # where the last failure left the read
        self._context: Any = None
        self._chunks: Iterator[bytes] | None = None
        self._discard = 0  # bytes of the current answer to pass over (a 200 to a request from a later byte)
        self._buffer = b""
        self._position = 0
        while True:
            try:
                self._connect()
                return
            except Exception as exc:
                failure = exc
            self._failed(failure)  # out of the except: a Ctrl-C in the wait is not chained to the failure

    def _connect(self) -> None:
        """Ask for the bytes from the next one not yet taken; check the answer continues the file."""
        from huggingface_hub.utils import get_session  # type: ignore[attr-defined]

        # Byte positions are the file's: a body the server compresses on the fly (gzip) would count
        # other bytes, and its ETag is another (weak) one. The Hub API client asks the same.
        headers = {**self._headers, "Accept-Encoding": "identity"}
        if self._fetched or self._end is not None:
            last = "" if self._end is None else str(self._end - 1)
            headers["Range"] = f"bytes={self._fetched}-{last}"
        self._asked_from = self._fetched
        context = get_session().stream("GET", self._url, headers=headers, timeout=self._timeout)
        response = context.__enter__()
        try:
            self._check(response)
        except BaseException:
            context.__exit__(None, None, None)
            raise
        self._context = context
        self._chunks = response.iter_bytes()  # chunks as they arrive, read on this thread

    def _check(self, response: Any) -> None:
        """Refuse an answer that is not the next bytes of the same file; its body is not read."""
        status = response.status_code
        start, end, total = _content_range(response.headers.get("content-range"))
        if status == 416 and total is not None and self._fetched >= total:  # asked from the end: nothing left
            self.size, self._end = total, self._fetched
            return
        if response.is_error:  # its status says it all: the body (the server's, any length) is not read
            if status == 404:
                raise FileNotFoundError(errno.ENOENT, "the server answered 404 Not Found", self._url)
            if status in TRANSIENT_STATUSES:
                raise _Answered(status, response.reason_phrase, asked_wait(response))
            raise NetworkError(f"cannot read {self._url}: {answered(status, response.reason_phrase)}")
        self._same_file(response.headers.get("etag"), response.headers.get("last-modified"))
        length = response.headers.get("content-length")
        plain = status == 200 and response.headers.get("content-encoding", "identity") == "identity"
        size = total if status == 206 else int(length) if plain and (length or "").isdigit() else None
        self._discard = 0
        self.ranged = status == 206
        self._answer_end = end if status == 206 else size  # where this answer says its body ends
        if status == 206:
            if start != self._fetched:  # no Content-Range, or another start: not the bytes asked for
                raise NetworkError(
                    f"reading {self._url}: asked for the bytes from {self._fetched}, the server sent"
                    f" {'them from ' + str(start) if start is not None else 'a part without saying which'}"
                    " (a broken server or proxy)"
                )
        elif self._fetched:  # the server ignored Range and sends the whole file
            self._discard = self._fetched
        if self.size is not None and size is not None and size != self.size:
            self._changed(f"{self.size} bytes, now {size}")
        if self.size is None:
            self.size = size

    def _same_file(self, etag: str | None, modified: str | None) -> None:
        """Refuse an answer of another version of the file than the first answer's (or the one the
        caller knows): another ETag or, without one, another Last-Modified."""
        if not self._validated:
            self.etag, self.modified, self._validated = etag, modified, True
            return
        if self.etag is not None and etag is not None and etag != self.etag:
            self._changed(f"its ETag was {server_text(self.etag)}, now {server_text(etag)}")
        if self.etag is None and self.modified is not None and modified is not None and modified != self.modified:
            self._changed(f"last modified {server_text(self.modified)}, now {server_text(modified)}")

    def _changed(self, how: str) -> None:
        raise NetworkError(
            f"reading {self._url} at byte {self._fetched}: the file changed while it was read ({how})."
            " Read it again from its start."
        )

    def _failed(self, exc: Exception) -> None:
        """After a failure: wait, when it may be retried, and return (the caller asks again);
        else raise its one line (or the failure itself, when it is not the network's)."""
        self.close()
        self._chunks = None
        if isinstance(exc, (ShardkitError, FileNotFoundError)):  # already one line, or a missing file
            raise exc
        wait = exc.wait if isinstance(exc, _Answered) else None
        if self._fetched - self._failed_at >= PROGRESS_BYTES:  # a read that moves on starts a new count
            self._failures = 0
        self._failures += 1
        self._failed_at = self._fetched
        if not is_transient(exc) or self._failures > self._retries:
            attempts = f" after {self._failures} attempts" if self._failures > 1 else ""
            doing = f"reading {self._url}" + (f" at byte {self._fetched}" if self._fetched else "") + attempts
            then = f"Try again later, or raise {RETRIES_VARIABLE} (now {self._retries})." if attempts else "Try again."
            failure = network_failure(exc, doing, self._timeout, then)
            if failure is not None:
                raise failure from None
            raise exc
        pause = retry_wait(self._failures, wait, self._first_wait)
        log.warning(
            "shardkit: %s failed at byte %d (%s); asking again from there in %.1f s (failure %d of %d in a row)",
            self._url,
            self._fetched,
            _what_failed(exc, self._timeout),
            pause,
            self._failures,
            self._retries,
        )
        time.sleep(pause)  # Ctrl-C ends it at once

    def _next_chunk(self) -> bytes | None:
        while True:
            if self._end is not None and self._fetched >= self._end:
                return None
            failure: Exception | None = None
            try:
                if self._chunks is None:
                    self._connect()
                chunk: bytes | None = next(self._chunks, None)  # type: ignore[arg-type]
            except Exception as exc:
                failure = exc
            if failure is not None:
                self._failed(failure)  # out of the except: a Ctrl-C in the wait is not chained to the failure
                continue
            if chunk is None:
                expected = self._end if self._end is not None else self.size
                if expected is None or self._fetched >= expected:
                    return None
                moved = self._fetched > self._asked_from  # an answer of no byte is a failure, not a short part
                if moved and self._answer_end is not None and self._fetched >= self._answer_end:
                    # All the server said it would send, short of what was asked (a 206 may be):
                    # not a failure; the rest is asked for at once.
                    self.close()
                    self._chunks = None
                    continue
                self._failed(BodyEndedEarly(f"the body ended at byte {self._fetched} of {expected}"))
                continue
            if self._discard:
                passed = min(self._discard, len(chunk))
                self._discard -= passed
                chunk = chunk[passed:]
            if self._end is not None and self._fetched + len(chunk) > self._end:  # a 200 to a ranged request
                chunk = chunk[: self._end - self._fetched]
            if chunk:
                self._fetched += len(chunk)
                return chunk

    def read(self, n: int = -1) -> bytes:
        available = len(self._buffer) - self._position
        if n < 0 or available < n:  # top up: one copy of what is left, plus new chunks
            parts = [self._buffer[self._position :]]
            while n < 0 or available < n:
                chunk = self._next_chunk()
                if chunk is None:
                    break
                parts.append(chunk)
                available += len(chunk)
            self._buffer, self._position = b"".join(parts), 0
        end = len(self._buffer) if n < 0 else self._position + n
        data = self._buffer[self._position : end]  # copies only what is returned
        self._position = min(end, len(self._buffer))
        return data

    def close(self) -> None:
        if self._context is not None:
            context, self._context = self._context, None
            context.__exit__(None, None, None)

    def __enter__(self) -> HttpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _what_failed(exc: Exception, timeout: float) -> str:
    """A failure in a few words, for the line that logs a retry."""
    if isinstance(exc, _Answered):
        return answered(exc.status, exc.message)
    if is_timeout(exc):
        return f"nothing from the server for {timeout:g} s"
    return f"{type(exc).__name__}: {server_text(str(exc))}"


class HttpRandomFile:
    """A seekable file at an http(s) URL (a Parquet shard, a ZIP's directory): each read one
    ranged GET through :class:`HttpReader`, so a read that fails is retried and resumed as a
    stream's is, and a file that changes between reads (another ETag) is one line.

    Its size comes from a first ranged GET of one byte (its Content-Range, or a 200's
    Content-Length); where the server does not answer ranged requests, it is read front to back
    only, in one GET. ``block``: the least each request asks for, kept for the reads after it
    (read-ahead for a reader of small reads, e.g. a ZIP walked member by member); 0: each read
    asks for exactly its bytes. A missing file raises FileNotFoundError.
    """

    def __init__(self, url: str, headers: dict[str, str], *, block: int = 0) -> None:
        self._url = url
        self._headers = headers
        self._block = block
        with HttpReader(url, headers, byte_range=(0, 1)) as probe:
            self.size, self._etag, self._modified = probe.size, probe.etag, probe.modified
            ranged = probe.ranged
        # A server that does not honour Range: the file is read front to back only, in one GET (a
        # GET of the whole file for each read would fetch it once per row group).
        front_to_back = not ranged or self.size is None
        self._whole = HttpReader(url, headers, etag=self._etag, modified=self._modified) if front_to_back else None
        self._whole_position = 0
        self._position = 0
        self._kept_at = 0
        self._kept = b""
        self.closed = False

    def read(self, n: int | None = -1) -> bytes:
        size = self.size
        if self._whole is not None or size is None:
            return self._read_whole(-1 if n is None else n)
        end = size if n is None or n < 0 else min(size, self._position + n)
        if end <= self._position:
            return b""
        if self._kept_at <= self._position and end <= self._kept_at + len(self._kept):
            data = self._kept[self._position - self._kept_at : end - self._kept_at]
        else:
            fetched = self._fetch(self._position, min(size, max(end, self._position + self._block)))
            if self._block:
                self._kept_at, self._kept = self._position, fetched
            data = fetched[: end - self._position]
        self._position += len(data)
        return data

    def _read_whole(self, n: int) -> bytes:
        if self._whole is None or self._position != self._whole_position:
            raise self._front_to_back()
        data = self._whole.read(n)
        self._position += len(data)
        self._whole_position = self._position
        return data

    def _front_to_back(self) -> NetworkError:
        return NetworkError(
            f"cannot read {self._url} out of order: the server does not answer ranged requests (Range),"
            " which reading part of a file needs"
        )

    def _fetch(self, start: int, end: int) -> bytes:
        validators = {"etag": self._etag, "modified": self._modified}
        with HttpReader(self._url, self._headers, byte_range=(start, end), **validators) as f:
            data = read_upto(f, end - start)
        if len(data) != end - start:
            raise NetworkError(
                f"reading {self._url} at byte {start}: {len(data)} bytes where {end - start} were asked for; the"
                f" file is shorter than the {self.size} bytes the server said (it changed while read?)"
            )
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 2 and self.size is None:
            raise self._front_to_back()
        base = {0: 0, 1: self._position, 2: self.size or 0}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._kept = b""
        if self._whole is not None:
            self._whole.close()
        self.closed = True

    def __enter__(self) -> HttpRandomFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
