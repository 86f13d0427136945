"""Where a dataset repo is: a local folder, an fsspec URL, an http(s) URL or a Hub dataset.

One type, :class:`Location`, for every place shardkit reads a repo from or writes one to; the
stages ask it to open, list, size, put and remove files by their repo-relative paths, and keep
no branch of their own on what kind of place it is. What differs between kinds is decided
here, each with its reason:

- a local folder (``/data/out``, ``file:///data/out``): shards are renamed into place and the
  folder fsynced (a power loss keeps the rename); the writer's ``O_DIRECT`` shard files
  (:mod:`.shardfile`) are local too. Listing and sizes go through fsspec's LocalFileSystem,
  as for a URL. Its files are read only where :func:`readable_root` allows: a link out of the
  folder is refused (a Hub cache snapshot's links into its repo's ``blobs/`` are followed).
- an fsspec URL (``s3://bucket/repo``, ``gs://``, ``memory://``...): where ``pack -o URL``
  writes the same files a local OUT_DIR gets, byte for byte. A finished shard is put with one
  upload. On object stores (S3, GCS, Azure) an object exists only once its upload completes,
  so a shard is either whole or absent, as with the local rename; other filesystems get an
  upload to a temporary name and a move. The run's working files (staging, done records,
  lock) and a copy of the repo's small files stay in a local work folder (``--work-dir``).
- an ``http(s)://`` URL of a packed folder, read-only: each shard is read with one GET.
- a Hub dataset (``ns/name`` or ``hf://datasets/ns/name[@revision]``), read-only: its
  ``resolve`` URLs on ``HF_ENDPOINT``, with the token huggingface_hub finds (``HF_TOKEN`` or
  the login), so private repos work. As an OUT_DIR ``hf://`` is refused: publishing is
  ``shardkit push``'s (fsspec would make a commit per file).

Credentials and endpoints come from each machine's environment, as fsspec reads them (for S3:
``AWS_ACCESS_KEY_ID``..., ``~/.aws``, or ``FSSPEC_S3_ENDPOINT_URL`` for an S3-compatible
server); Dask workers need them as well.

Network waits are bounded: no byte for :func:`network_timeout` seconds (``SHARDKIT_NETWORK_TIMEOUT``,
default 60) is an error naming the URL, set through each library's own per-read timeout
(aiohttp's ``sock_read`` for http(s), botocore's ``read_timeout`` for S3, httpx's for the Hub),
never a limit on a whole transfer. Other protocols keep their library's defaults. Two waits of an
S3 upload have no such setting in aiohttp, which s3fs sends through: the wait for ``100
Continue`` and a body the server stops reading; Ctrl-C still ends them.

What a server answers is held to the same rule: only a 404 means a file is missing (any other
error answer, and a redirect loop, is one line naming the URL); a body read whole is read up
to a bound per kind (``MAX_*_BYTES`` below); and huggingface_hub's client, in a push and a
``verify`` of ``hf://``, is kept from waiting longer than asked or following an upload's
redirect (:func:`bounded_hub_requests`).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from .errors import NetworkError, ShardkitError, UsageError, naming_errors, server_text
from .inputfile import OutsideImagesDir, open_inside

#: fsspec protocols whose objects appear only when their upload completes.
ATOMIC_UPLOAD_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})

#: The one setting for every network wait: seconds without a byte before a read or write fails.
TIMEOUT_VARIABLE = "SHARDKIT_NETWORK_TIMEOUT"
DEFAULT_NETWORK_TIMEOUT = 60.0
RESUME = "Try again: pack and push resume where they stopped."

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


def network_timeout() -> float:
    """Seconds a network read, write or connect may wait without progress (``SHARDKIT_NETWORK_TIMEOUT``).

    Read from the environment, not passed as an argument: readers run in DataLoader workers and
    Dask workers that a call cannot reach, and each of them inherits or sets its environment.
    """
    raw = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_NETWORK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"{TIMEOUT_VARIABLE}={raw!r} is not a number of seconds above 0 (e.g. 60)")
    return value


def is_timeout(exc: BaseException) -> bool:
    """Whether a library's error is a timeout: each raises its own (httpx's ReadTimeout, aiohttp's
    ServerTimeoutError, botocore's ReadTimeoutError, asyncio's TimeoutError...)."""
    return isinstance(exc, TimeoutError) or any("Timeout" in cls.__name__ for cls in type(exc).__mro__)


#: The base classes of the network errors of httpx (huggingface_hub 1.x), httpx2 (2.x) and aiohttp.
_NETWORK_ERRORS = frozenset(
    {"TransportError", "NetworkError", "TimeoutException", "ClientConnectionError", "ClientPayloadError"}
)


def is_network_error(exc: BaseException) -> bool:
    """Whether a library's error is a failed connection (refused, reset, cut mid-body)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, ConnectionError) or bool(names & _NETWORK_ERRORS)


def timeout_error(what: str, timeout: float, then: str = RESUME) -> NetworkError:
    """The one-line message for a wait that timed out: what, from where, how long, and what next."""
    return NetworkError(
        f"timed out {what}: nothing from the server for {timeout:g} s ({TIMEOUT_VARIABLE}={timeout:g};"
        " raise it for a slow server)."
        f" {then}"
    )


def is_url(path: str) -> bool:
    """Whether OUT_DIR names a remote location (``s3://...``); ``file://`` and plain paths are local."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme != "file"


def local_path(path: str) -> str:
    """A local OUT_DIR, absolute; ``file:///x`` is ``/x``."""
    return os.path.abspath(path[len("file://") :] if path.startswith("file://") else path)


def default_work_dir(url: str) -> str:
    """``~/.cache/shardkit/work/<hash of the URL>``: the same URL resumes from the same folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "shardkit", "work", hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16])


#: What a filesystem call does, and which argument is the remote path, for the timeout message
#: ("timed out uploading to s3://bkt/ds/data/3.zip").
_DOING = {
    "put_file": ("uploading to", 1),
    "pipe_file": ("writing", 0),
    "get_file": ("downloading", 0),
    "cat_file": ("reading", 0),
    "ls": ("listing", 0),
    "find": ("listing", 0),
    "info": ("looking up", 0),
    "mv": ("moving", 0),
    "rm_file": ("removing", 0),
    "makedirs": ("creating", 0),
}


def _answer(exc: BaseException) -> tuple[int, str] | None:
    """The HTTP status and reason behind a library's error (aiohttp's ClientResponseError,
    httpx's HTTPStatusError, huggingface_hub's HfHubHTTPError), or None."""
    status = getattr(exc, "status", None)  # aiohttp
    reason = getattr(exc, "message", "")
    response = getattr(exc, "response", None)  # httpx and huggingface_hub
    if not isinstance(status, int) and response is not None:
        status, reason = getattr(response, "status_code", None), getattr(response, "reason_phrase", "")
    return (status, str(reason or "")) if isinstance(status, int) else None


def _is_missing(exc: BaseException) -> bool:
    """Whether a FileNotFoundError really means the file is not there: fsspec's http(s) filesystem
    raises one for any failed request (a 429, a 503, a redirect loop), keeping the cause; only a
    404 (or no HTTP answer behind it at all) means missing."""
    cause = exc.__cause__
    if not isinstance(exc, FileNotFoundError):
        return False
    if cause is None:
        answer = _answer(exc)
        return answer is None or answer[0] == 404
    answer = _answer(cause)
    return answer is not None and answer[0] == 404


def network_failure(exc: BaseException, doing: str, timeout: float, then: str = RESUME) -> NetworkError | None:
    """The one-line error for a timeout, a failed connection (refused, cut mid-body), a redirect
    loop or an HTTP error answer other than 404 while ``doing`` ("reading <URL>"); None for any
    other failure. fsspec's http(s) filesystem hides them all behind a FileNotFoundError: its
    cause tells."""
    cause = exc.__cause__ if isinstance(exc, FileNotFoundError) else None
    if is_timeout(exc) or (cause is not None and is_timeout(cause)):
        return timeout_error(doing, timeout, then)
    failed = cause if cause is not None else exc
    if any(cls.__name__ == "TooManyRedirects" for cls in type(failed).__mro__):  # httpx's and aiohttp's
        return NetworkError(f"{doing}: the server redirected too many times (a redirect loop?). {then}")
    answer = _answer(failed)
    if answer is not None and not (isinstance(exc, FileNotFoundError) and _is_missing(exc)):
        return NetworkError(f"{doing}: {answered(*answer)}. {then}")
    if is_network_error(failed):
        said = server_text(str(failed))
        return NetworkError(f"the connection failed {doing} ({type(failed).__name__}: {said}). {then}")
    return None


def answered(status: int, reason: str) -> str:
    """``the server answered 429 Too Many Requests``: what a message says of an HTTP error answer."""
    return f"the server answered {status} {server_text(reason)}".rstrip()


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
        with _HttpReader(url, headers) as f:
            return read_bounded(f, limit, url)
    except FileNotFoundError:
        return None


def _named(call: Callable[..., Any], location: str, timeout: float, doing: Callable[[tuple[Any, ...]], str]) -> Any:
    """``call``, with its timeouts and failed connections (refused, cut mid-body) turned into one
    ShardkitError line naming what it was doing (``doing(args)``: "uploading to <URL>"), and its
    failures other than OSError (a missing credential, a request the server refused: each library
    raises its own) into one naming ``location``; other OSErrors (FileNotFoundError...) are left
    to the callers."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except ShardkitError:  # already one line (a bound of :func:`bounded_hub_requests`)
            raise
        except Exception as exc:
            if (failure := network_failure(exc, doing(args), timeout)) is not None:
                raise failure from None
            if isinstance(exc, OSError):
                raise
            raise ShardkitError(f"{location}: {type(exc).__name__}: {server_text(str(exc))}") from None

    return run


class _NamedErrors:
    """An fsspec filesystem whose failures are one line naming the URL (see :func:`_named`),
    and whose open files' reads fail the same way."""

    def __init__(self, fs: Any, location: str, timeout: float) -> None:
        self._fs = fs
        self._location = location
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if not callable(attr):
            return attr
        verb, index = _DOING.get(name, ("reaching", -1))
        if name == "open":

            def open_named(path: str, *args: Any, **kwargs: Any) -> _NamedFile:
                url = self._url(path)
                opened = _named(attr, self._location, self._timeout, lambda _: f"opening {url}")(path, *args, **kwargs)
                return _NamedFile(opened, url, self._timeout)

            return open_named

        def doing(args: tuple[Any, ...]) -> str:
            path = args[index] if 0 <= index < len(args) and isinstance(args[index], str) else None
            return f"{verb} {self._url(path) if path else self._location}"

        return _named(attr, self._location, self._timeout, doing)

    def _url(self, path: str) -> str:
        return str(self._fs.unstrip_protocol(path))


class _NamedFile:
    """An open fsspec file whose reads fail with one line naming its URL (a stalled or cut read
    would otherwise surface as aiohttp's or botocore's error, or pass for a damaged file)."""

    def __init__(self, f: Any, url: str, timeout: float) -> None:
        self._f = f
        self._url = url
        self._timeout = timeout

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._f, name)
        return _named(attr, self._url, self._timeout, lambda _: f"reading {self._url}") if callable(attr) else attr

    def __enter__(self) -> _NamedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def filesystem_for(url: str) -> tuple[Any, str]:
    """fsspec's filesystem and path for a URL, with a message naming the package a protocol needs.

    Its waits are bounded by :func:`network_timeout`, and its failures name the URL (see :func:`_named`).
    """
    timeout = network_timeout()
    try:
        import fsspec  # type: ignore[import-untyped]

        protocol = url.partition("://")[0] if "://" in url else "file"
        fs, path = fsspec.core.url_to_fs(url, **_timeout_options(protocol, timeout, fsspec.config.conf))
    except ImportError as exc:  # fsspec names the package, e.g. "Install s3fs to access S3"
        raise UsageError(f"{url}: {exc}") from None
    except ValueError as exc:  # an unknown protocol
        raise UsageError(f"{url}: {exc}") from None
    return _NamedErrors(fs, url.rstrip("/"), timeout), path


def http_filesystem(headers: dict[str, str]) -> Any:
    """fsspec's http(s) filesystem sending ``headers``, its waits bounded and failures named as
    :func:`filesystem_for`'s (for ranged reads of Parquet shards at a URL or on the Hub)."""
    import fsspec

    timeout = network_timeout()
    fs = fsspec.filesystem("http", headers=headers, **_timeout_options("http", timeout, fsspec.config.conf))
    return _NamedErrors(fs, "http(s)", timeout)


def _timeout_options(protocol: str, timeout: float, config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The storage options that make ``protocol``'s library time out a read after ``timeout`` seconds
    without data (not a whole transfer), unless the user's fsspec config already sets them."""
    options: dict[str, Any] = {}
    if protocol in ("http", "https"):
        import aiohttp

        # aiohttp's default is 5 minutes for a whole request, and 30 s to connect.
        options["client_kwargs"] = {"timeout": aiohttp.ClientTimeout(sock_connect=timeout, sock_read=timeout)}
    elif protocol in ("s3", "s3a"):
        options["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout}
    return {key: value for key, value in options.items() if key not in config.get(protocol, {})}


# --- huggingface_hub's HTTP client --------------------------------------------------------------

#: The statuses huggingface_hub's ``http_backoff`` retries, after the wait the answer asks for.
_RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def _asked_wait(response: Any) -> int | None:
    """Seconds an answer asks the client to wait before it retries, as huggingface_hub reads
    them (``Retry-After`` in seconds; a 429's ``RateLimit`` reset), or None."""
    from huggingface_hub.utils import parse_ratelimit_headers  # type: ignore[attr-defined]

    waits = []
    retry_after = response.headers.get("retry-after", "").strip()
    if retry_after.isdigit():
        waits.append(int(retry_after))
    limits = parse_ratelimit_headers(response.headers) if response.status_code == 429 else None
    if limits is not None and limits.remaining == 0:
        waits.append(int(limits.reset_in_seconds))
    return max(waits, default=None)


def _body_limit(response: Any) -> int | None:
    """How much of an answer huggingface_hub may read into memory: an error or a redirect, a bit;
    an API answer (JSON it parses whole), :data:`MAX_API_BODY_BYTES`; part of a file (a ranged
    GET, as ``hf://`` reads are), the range asked for; a whole file (a GET outside ``/api/``: a
    ``resolve`` URL or the storage it redirects to), no limit: it is streamed to disk or to a
    reader that knows its size."""
    if response.status_code >= 300:
        return MAX_ERROR_BODY_BYTES
    request = response.request
    if not _is_api(request):
        asked = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("range", "").strip())
        return int(asked.group(2)) - int(asked.group(1)) + 1 if asked else None
    return MAX_API_BODY_BYTES


def _is_api(request: Any) -> bool:
    """Whether a request of huggingface_hub's is to the Hub's API (its answer JSON, parsed whole),
    not a file download (a GET outside ``/api/``)."""
    return request.method not in ("GET", "HEAD") or "/api/" in request.url.path


@contextlib.contextmanager
def bounded_hub_requests(timeout: float) -> Iterator[None]:
    """In the block, every request huggingface_hub sends waits at most ``timeout`` seconds to
    connect, and for each byte read or written (not for a whole upload); and what a server
    answers cannot make it wait longer, or read without end:

    - an answer asking to wait (``Retry-After``, a 429's ``RateLimit``) more than ``timeout``
      seconds before a retry is one line naming the URL at once (huggingface_hub would sleep that
      long, up to five times; it has no setting to cap it). A shorter wait is honoured, so its
      retries of one request wait five times ``timeout`` at most;
    - an answer's body is read up to a limit (:func:`_body_limit`), past which it is one line;
    - a 307 or 308 redirect of an upload is one line: its body is a file huggingface_hub has
      already read, which httpx cannot send again (it would fail with a traceback). Uploads go
      where the Hub says (its storage's URL is for the right region), so it is refused, not followed.

    Its shared HTTP client has no timeout, and most ``HfApi`` calls (the uploads, the commits)
    pass none, so a Hub that stops answering mid-upload hung the push forever. Request and
    response hooks go on the client that the current factory makes, so a user's factory (a
    proxy, certificates) still applies; that factory is put back when the block ends normally.
    """
    import httpx2
    from huggingface_hub.utils import _http, set_client_factory  # type: ignore[attr-defined]

    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    class bounded_body(httpx2.SyncByteStream):
        """An answer's body that fails with one line naming the request past ``limit`` bytes."""

        def __init__(self, stream: Any, limit: int, request: str) -> None:
            self._stream = stream
            self._limit = limit
            self._request = request

        def __iter__(self) -> Iterator[bytes]:
            seen = 0
            for chunk in self._stream:
                seen += len(chunk)
                if seen > self._limit:
                    raise ShardkitError(
                        f"{self._request}: the server's answer is over {self._limit} bytes, far more than it"
                        " should be; not read further (check HF_ENDPOINT, and the proxy if any)"
                    )
                yield chunk

        def close(self) -> None:
            self._stream.close()

    def bound(request: Any) -> None:
        limits = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {
            kind: timeout if limits.get(kind) is None else limits[kind] for kind in ("connect", "read", "write", "pool")
        }
        if _is_api(request):  # its bound counts the bytes sent: a compressed body could hold a thousand times more
            request.headers["Accept-Encoding"] = "identity"

    def check(response: Any) -> None:
        request = response.request
        url = str(request.url)
        what = answered(response.status_code, response.reason_phrase)
        wait = _asked_wait(response) if response.status_code in _RETRIED_STATUSES else None
        if wait is not None and wait > timeout:
            raise NetworkError(
                f"{request.method} {url}: {what} and asked to wait {wait} s before trying again, longer than"
                f" {TIMEOUT_VARIABLE}={timeout:g} allows. Try again later: pack and push resume where they stopped."
            )
        replayable = isinstance(request.stream, httpx2.ByteStream)
        if response.status_code in (307, 308) and not replayable and request.method not in ("GET", "HEAD"):
            raise NetworkError(
                f"{request.method} {url}: {what} (to {response.headers.get('location', '?')}) for an upload;"
                " shardkit does not send an upload again to where a server redirects it. Check HF_ENDPOINT"
                " (and the proxy, if any)."
            )
        limit = _body_limit(response)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if limit is not None and _is_api(request) and encoding not in ("", "identity"):
            raise NetworkError(
                f"{request.method} {url}: {what}, compressed ({server_text(encoding)}) though asked not to be"
            )
        if limit is not None and not isinstance(response.stream, httpx2.ByteStream):
            response.stream = bounded_body(response.stream, limit, f"{request.method} {url}")

    def factory() -> Any:
        client = previous()
        hooks = client.event_hooks
        client.event_hooks = {
            "request": [*hooks.get("request", []), bound],
            "response": [*hooks.get("response", []), check],
        }
        return client

    set_client_factory(factory)
    yield
    # Not on an error: the threads of a pool left on the way out may still be mid-request on this
    # client, and putting the factory back closes it under them (each then retries, and logs it).
    set_client_factory(previous)


# --- the location of a dataset repo --------------------------------------------------------------

#: A Hub repo id (``ns/name``: ASCII letters, digits, "_", "." and "-"; ``\w`` would take other
#: scripts' letters too) and an ``@revision`` after it (no "/", no space, no line break). The
#: patterns here are matched whole (``.fullmatch``): ``$`` would let a trailing newline through.
HUB_REPO_ID = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
HUB_REVISION = r"@([^/\s]+)"
_REPO_ID = re.compile(HUB_REPO_ID)
_HF_URL = re.compile(rf"hf://datasets/({HUB_REPO_ID})(?:{HUB_REVISION})?/?")
_CHUNK = 1 << 20
#: Block size of fsspec files: large sequential reads, few requests.
_BLOCK = 8 << 20
_KINDS = ("folder", "fsspec", "http", "hub")


def bare_hub_id(text: str) -> str | None:
    """``text`` when it is a Hub dataset id (``ns/name``) and no file or folder of that name, nor a
    folder named as its namespace, is here (a local folder wins: ``hf://datasets/ns/name`` is
    always the Hub); else None. The one rule by which every reader
    (``shardkit.stream``, ``remux``, ``verify``) tells a Hub id from a relative path."""
    if not _REPO_ID.fullmatch(text) or os.path.lexists(text):
        return None
    if os.path.isdir(text.partition("/")[0]):  # out/typo beside a folder out/: a mistyped path
        return None
    # The Hub's own rules (no "..", "--", leading or trailing "." or "-"): a mistyped relative
    # path such as ``../data`` stays a missing folder, not a request to the Hub.
    from huggingface_hub.errors import HFValidationError

    # public as huggingface_hub.utils.validate_repo_id, which mypy does not see re-exported
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return None
    return text


class OutsideDataset(ShardkitError):
    """A file of a local dataset folder that is a link out of it (or not a regular file)."""


def readable_root(folder: str) -> str:
    """The real folder the files of the local dataset ``folder`` may resolve into, ending in a
    separator: the folder itself (a link inside it, to a file beside, is followed), or for a
    Hugging Face cache snapshot (``<repo>/snapshots/<revision>``, whose files are links to
    ``../../blobs/<hash>``) the repo's cache folder that holds ``snapshots/`` and ``blobs/``.
    A link anywhere else (``data/9.zip -> /home/me/secret``) is refused: a dataset someone else
    made must not make a reader read, or remux and push publish, a file of the reader's."""
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots" and os.path.isdir(os.path.join(os.path.dirname(parent), "blobs")):
        real = os.path.dirname(parent)
    return os.path.join(real, "")


def open_in_dataset(path: str, root: str, buffering: int = -1) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file whose real location is inside
    ``root`` (:func:`readable_root`); the test is on the opened descriptor
    (:func:`.inputfile.open_inside`), so no swap after it redirects the read."""
    try:
        fd, _ = open_inside(path, root)
    except OutsideImagesDir:
        check_in_dataset(path, root)
        raise OutsideDataset(f"{path}: not a regular file") from None
    return os.fdopen(fd, "rb", buffering=buffering)


def check_in_dataset(path: str, root: str) -> None:
    """Refuse ``path`` when its real location is outside ``root`` (:func:`readable_root`): for a
    file another library opens by its path (huggingface_hub's upload), and the message of
    :func:`open_in_dataset`."""
    real = os.path.realpath(path)
    if not real.startswith(root):
        raise OutsideDataset(
            f"{path}: a link to {real!r}, outside the dataset folder {root.rstrip(os.sep)!r};"
            " shardkit reads only the dataset's own files"
        )


class Location:
    """Where a dataset repo is (see the module doc); every path it takes is repo-relative, with "/".

    ``kind`` is ``folder`` (a local folder), ``fsspec`` (another fsspec URL), ``http`` (an
    http(s) URL) or ``hub`` (a Hub dataset at a revision). It pickles as its URL and kind: a
    DataLoader or Dask worker builds its own filesystem, with its own credentials.
    """

    def __init__(self, url: str, kind: str) -> None:
        if kind not in _KINDS:
            raise ValueError(f"unknown location kind {kind!r}")
        #: A folder's absolute path, or the URL without a trailing "/".
        self.url = url if kind == "folder" else url.rstrip("/")
        self.kind = kind
        self._fs: Any = None
        self._root = self.url  # the filesystem's path of the repo (for fsspec: without its protocol)
        self._readable: str | None = None  # a folder's readable_root, once known

    # -- telling places apart

    @classmethod
    def parse(cls, text: str, *, revision: str | None = None) -> Location:
        """A place to read a packed dataset from: a folder (one that exists wins), an http(s) URL,
        an fsspec URL (``s3://``...: where ``pack -o URL`` writes), a Hub dataset id (``ns/name``)
        or ``hf://datasets/ns/name[@revision]`` (``revision`` wins over the one in the URL)."""
        if text.startswith("file://") or os.path.isdir(text):
            return cls(local_path(text), "folder")
        if text.startswith(("http://", "https://")):
            return cls(text, "http")
        if is_url(text) and not text.startswith("hf://"):
            return cls(text, "fsspec")
        match = _HF_URL.fullmatch(text)
        repo_id = match.group(1) if match else bare_hub_id(text)
        if repo_id is None:
            raise UsageError(
                f"{text!r} is not a folder, an http(s) URL, a Hub dataset id (ns/name) or hf://datasets/..."
            )
        revision = revision or (match.group(2) if match else None) or "main"
        from urllib.parse import quote

        from huggingface_hub import constants

        return cls(f"{constants.ENDPOINT}/datasets/{repo_id}/resolve/{quote(revision, safe='')}", "hub")

    @classmethod
    def out_dir(cls, text: str, *, writing: bool = True) -> Location:
        """OUT_DIR: a folder (whether it exists or not) or a URL; ``hf://`` is refused for
        writing (``writing=False``, as ``verify`` reads it: through fsspec, as any URL, and a
        :func:`bare_hub_id` is the Hub dataset ``hf://datasets/<id>``)."""
        if writing and text.startswith("hf://"):  # fsspec would make a commit per file
            raise UsageError(
                f"{text}: OUT_DIR is where shards are packed (a folder or a bucket); to publish on the Hub,"
                " pack there and run `shardkit push OUT_DIR --repo NAMESPACE/NAME` (or add --push)"
            )
        if not writing and (repo_id := bare_hub_id(text)):  # read as shardkit.stream reads it
            text = f"hf://datasets/{repo_id}"
        if not is_url(text):
            return cls(local_path(text), "folder")
        return cls(text, "http" if text.startswith(("http://", "https://")) else "fsspec")

    def local_dir(self, work_dir: str | None) -> str:
        """The local folder a run keeps its working files (``.shardkit/``) and its copy of the repo's
        small files in: a local OUT_DIR itself; for a URL ``work_dir`` (``--work-dir``), by default
        ``~/.cache/shardkit/work/<hash of the URL>``."""
        if self.is_local:
            if work_dir:
                raise UsageError("--work-dir is for an OUT_DIR URL; a local OUT_DIR keeps its working files in it")
            return self.url
        return os.path.abspath(work_dir or default_work_dir(self.url))

    @property
    def is_local(self) -> bool:
        """A folder on this machine (renames, fsync, a lock, a check for foreign files, hashes)."""
        return self.kind == "folder"

    @property
    def name(self) -> str:
        """The repo's name: the last part of its path."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def where(self, rel: str) -> str:
        """The path or URL of a repo-relative file (for messages, and what workers open)."""
        return os.path.join(self.url, rel) if self.is_local else f"{self.url}/{rel}"

    def __repr__(self) -> str:
        return f"Location({self.url!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and (self.url, self.kind) == (other.url, other.kind)

    def __hash__(self) -> int:
        return hash((self.url, self.kind))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Location, (self.url, self.kind))

    # -- the filesystem

    @property
    def fs(self) -> Any:
        """fsspec's filesystem for this place (built once, on the machine that uses it). Its paths
        are :meth:`_path`'s; at a URL its waits are bounded and its failures name the URL."""
        if self._fs is None:
            if self.is_local:
                import fsspec

                self._fs = fsspec.filesystem("file")
            elif self.kind == "fsspec":
                self._fs, root = filesystem_for(self.url)
                self._root = root.rstrip("/")
            else:
                self._fs = http_filesystem(self._headers())
        return self._fs

    def _headers(self) -> dict[str, str]:
        """The Hub's headers (its token, user agent) for a Hub location; none for others."""
        if self.kind != "hub":
            return {}
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        return dict(build_hf_headers())

    def _path(self, rel: str) -> str:
        """The filesystem's path of a repo-relative file."""
        if self._fs is None:
            self.fs  # noqa: B018 - an fsspec URL's path is known once its filesystem is
        return f"{self._root}/{rel}" if rel else self._root

    def _relative(self, path: str) -> str:
        return path[len(self._root) + 1 :]

    def _check_writable_kind(self) -> None:
        if self.kind == "hub":
            raise UsageError(f"{self.url}: a Hub dataset is published with `shardkit push`, not written to")

    # -- reading

    def open(self, rel: str) -> BinaryIO:
        """A forward-only stream over a file, front to back: one GET over http(s) and on the Hub,
        large sequential blocks through fsspec, a buffered file on disk. A missing file raises
        FileNotFoundError (or, over http(s), one line naming the URL and the server's answer)."""
        if self.is_local:  # the plain file: fsspec's local file adds a layer to every read
            return self.open_local(rel, _CHUNK)
        if self.kind == "fsspec":
            return self.fs.open(self._path(rel), "rb", block_size=_BLOCK, cache_type="readahead")  # type: ignore[no-any-return]
        return _HttpReader(self.where(rel), self._headers())  # type: ignore[return-value]

    def open_local(self, rel: str, buffering: int = -1) -> BinaryIO:
        """A file of a local folder, read only where :func:`readable_root` allows (every read of a
        local dataset's files comes here: a link out of the folder is one line, refused)."""
        if self._readable is None:
            self._readable = readable_root(self.url)
        return open_in_dataset(self.where(rel), self._readable, buffering)

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        """A seekable file, read with ranged reads where it is remote (a Parquet footer first).
        ``exact``: each read asks for exactly its bytes, no read-ahead (for a reader whose reads
        are whole row groups: a rank reading part of a shard fetches only that part)."""
        if self.is_local:
            return self.open_local(rel)
        cache = "none" if exact else "readahead"
        return self.fs.open(self._path(rel), "rb", block_size=_BLOCK, cache_type=cache)  # type: ignore[no-any-return]

    def open_range(self, rel: str, start: int, end: int) -> BinaryIO:
        """A forward-only stream over bytes ``[start, end)`` of a file: one ranged GET over
        http(s) and on the Hub (the server sends those bytes only), a seek on disk and through
        fsspec. Fewer bytes than asked for is the reader's to notice (it knows what it expects)."""
        if self.is_local:
            f = self.open_local(rel, _CHUNK)
        elif self.kind == "fsspec":  # (its read-ahead may fetch up to a block past ``end``)
            f = self.fs.open(self._path(rel), "rb", block_size=_BLOCK, cache_type="readahead")
        else:
            return _HttpReader(self.where(rel), self._headers(), byte_range=(start, end))  # type: ignore[return-value]
        f.seek(start)
        return _Window(f, end - start)  # type: ignore[return-value]

    def read_bytes(self, rel: str, limit: int = MAX_SMALL_FILE_BYTES) -> bytes | None:
        """A whole (small) file, or None when it does not exist. At a URL, more than ``limit``
        bytes is one line naming it: a server may send an endless body."""
        try:
            if self.is_local:
                with self.open_local(rel) as f:
                    return f.read()
            with self.open(rel) as f:
                return read_bounded(f, limit, self.where(rel))
        except FileNotFoundError:
            return None

    def size(self, rel: str) -> int | None:
        """The file's size, or None when it does not exist."""
        path = self._path(rel)
        # Not info(refresh=True): s3fs takes it, but fsspec's http(s) filesystem passes it on to
        # aiohttp, which refuses it (and every shard at an http URL then looked missing).
        self.fs.invalidate_cache(path)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return int(info["size"]) if info.get("type") == "file" else None

    def list(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder`` (empty when it does not exist)."""
        try:
            entries = self.fs.ls(self._path(folder), detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(
            e["name"].rstrip("/").replace(os.sep, "/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"
        )

    def files_under(self, folder: str) -> builtins.list[str]:
        """Repo-relative paths of the files in ``folder`` and its subfolders (a split's shards are
        in ``data/<split>/``), sorted; empty when it does not exist."""
        return sorted(rel for rel in self.find(folder) if rel.startswith(f"{folder}/"))

    def find(self, folder: str = "") -> dict[str, int]:
        """Every file under ``folder`` (the whole repo by default): repo-relative path -> size, in
        one listing (not a request per file)."""
        try:
            found = self.fs.find(self._path(folder), detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        return {self._relative(name): int(info["size"]) for name, info in found.items()}

    def forget_listings(self) -> None:
        """Drop fsspec's cached listings: other processes (workers) have written since."""
        self.fs.invalidate_cache()

    def get(self, rel: str, local_file: str) -> None:
        """Download ``rel`` to a local file."""
        self.fs.get_file(self._path(rel), local_file)

    # -- writing

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        """Move a finished local file to ``rel``, atomically: no reader sees part of it."""
        self._check_writable_kind()
        if self.is_local:
            target = self.where(rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(local_file, target)
            if fsync:  # the rename itself survives a power loss
                _fsync_dir(os.path.dirname(target))
            return
        self.upload(local_file, rel)
        os.unlink(local_file)

    def upload(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        """Copy a local file to ``rel``, streamed and atomically (the local file stays)."""
        self._check_writable_kind()
        if self.is_local:
            target = self.where(rel)
            if os.path.exists(target) and os.path.samefile(local_file, target):
                return  # a local OUT_DIR is the folder its small files were written in
            partial = f"{target}.{secrets.token_hex(4)}.partial"
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(local_file, partial)
            if fsync:  # the bytes are on the disk before the name points at them
                _fsync_file(partial)
            self.put(partial, rel, fsync=fsync)
            return
        target = self._path(rel)
        self._parent(target)
        if self.atomic:
            self.fs.put_file(local_file, target)
        else:
            partial = f"{target}.{secrets.token_hex(4)}.partial"
            self.fs.put_file(local_file, partial)
            self.fs.mv(partial, target)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a small file (whole: a rename on disk, one upload on object stores)."""
        self._check_writable_kind()
        if self.is_local:
            target = self.where(rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            partial = f"{target}.{secrets.token_hex(4)}.partial"
            with naming_errors(partial), open(partial, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # the bytes are on the disk before the name points at them
            self.put(partial, rel)
            return
        self._parent(self._path(rel))
        self.fs.pipe_file(self._path(rel), data)

    def remove(self, rel: str) -> None:
        """Remove a file; nothing when it is not there."""
        self._check_writable_kind()
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(rel))

    def remove_working_file(self, rel: str) -> None:
        """Remove one of shardkit's own files (``.shardkit/...``), and its folder once empty."""
        self.remove(rel)
        if self.has_folders and "/" in rel:
            with contextlib.suppress(OSError):  # not empty: another run's file is there
                self.fs.rmdir(self._path(rel.rsplit("/", 1)[0]))

    def check_writable(self) -> None:
        """Write and delete a small file, or fail with a message naming the place and the cause."""
        probe = f".shardkit/probe-{secrets.token_hex(4)}"
        try:
            self.write_bytes(probe, b"shardkit")
            self.remove_working_file(probe)
        except ShardkitError as exc:  # the cause, already naming the probe's URL
            raise UsageError(f"cannot write to {self.url}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write to {self.url}: {type(exc).__name__}: {exc}") from None

    @property
    def atomic(self) -> bool:
        """Whether a file appears only once its upload completes (object stores)."""
        return not self.is_local and bool(set(_protocols(self.fs)) & ATOMIC_UPLOAD_PROTOCOLS)

    @property
    def has_folders(self) -> bool:
        """Whether folders exist of their own (an object store has none: a key's prefix is not one)."""
        return not self.atomic

    def _parent(self, target: str) -> None:
        if self.has_folders:
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Window:
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

    def __enter__(self) -> _Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _HttpReader:
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
            skipped = len(self._read(min(n, _CHUNK)))
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

    def __enter__(self) -> _HttpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
