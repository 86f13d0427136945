"""Reading bytes from a place: bounded reads, a window on a file, and http(s) reading (one GET).

A body read whole is read up to a bound per kind (``MAX_*_BYTES`` below): a broken or hostile
server may send an endless one. :class:`HttpReader` is the forward-only file over one streaming
GET (optionally ranged) that a front-to-back read of a shard at an http(s) URL or on the Hub
uses; :class:`Window` is the same ranged read over a file that seeks (on disk, through fsspec).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from typing import Any

from ..errors import NetworkError, ShardkitError
from .network import answered, network_failure, network_timeout

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


class HttpReader:
    """A forward-only file over one streaming GET: what a front-to-back read needs, one request.

    Kept rather than fsspec's HTTPStreamFile (also one GET): that one hops to fsspec's event-loop
    thread on every read and reports an HTTP error or a cut body without the server's status;
    this one reads in the caller's thread on huggingface_hub's session (its headers, redirects to
    the Hub's storage, and a timeout per read). Its waits are bounded by :func:`network_timeout`
    (a read that brings no byte for that long fails, however long the whole shard takes), and
    every failure is one line naming the URL: a stalled or cut connection must not pass for a
    short shard or hang a training job.
    """

    def __init__(self, url: str, headers: dict[str, str], *, byte_range: tuple[int, int] | None = None) -> None:
        from huggingface_hub.utils import get_session  # type: ignore[attr-defined]

        self._url = url
        self._timeout = network_timeout()
        self._received = 0
        if byte_range is not None:
            headers = {**headers, "Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"}
        self._context = get_session().stream("GET", url, headers=headers, timeout=self._timeout)
        with self._named_errors():
            response = self._context.__enter__()
        if response.is_error:  # its status says it all: the body (the server's, any length) is not read
            self._context.__exit__(None, None, None)
            if response.status_code == 404:
                raise FileNotFoundError(errno.ENOENT, "the server answered 404 Not Found", url)
            raise NetworkError(f"cannot read {url}: {answered(response.status_code, response.reason_phrase)}")
        # Chunks as they arrive: httpx re-cuts them to a given size by copying, on this thread.
        self._chunks = response.iter_bytes()
        self._buffer = b""
        self._position = 0
        self._left = -1  # bytes still to give (a ranged read); -1: up to the end of the body
        if byte_range is not None:
            if response.status_code != 206:  # a server that ignores Range sends the whole file
                try:
                    self._skip(byte_range[0])
                except BaseException:
                    self.close()
                    raise
            self._left = byte_range[1] - byte_range[0]

    @contextlib.contextmanager
    def _named_errors(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            doing = f"reading {self._url}" + (f" after {self._received} bytes" if self._received else "")
            failure = network_failure(exc, doing, self._timeout, "Try again: the shard is read again from its start.")
            if failure is not None:
                raise failure from None
            raise

    def _next_chunk(self) -> bytes | None:
        with self._named_errors():
            chunk: bytes | None = next(self._chunks, None)
        self._received += len(chunk or b"")
        return chunk

    def _skip(self, n: int) -> None:
        """Pass over ``n`` bytes, a chunk at a time (never all of them in memory at once)."""
        while n > 0:
            skipped = len(self._read(min(n, CHUNK)))
            if not skipped:
                return  # a short file: the reader finds fewer bytes than it expects, and says so
            n -= skipped

    def read(self, n: int = -1) -> bytes:
        if self._left >= 0:
            n = self._left if n < 0 else min(n, self._left)
            data = self._read(n)
            self._left -= len(data)
            return data
        return self._read(n)

    def _read(self, n: int) -> bytes:
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
        self._context.__exit__(None, None, None)

    def __enter__(self) -> HttpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
