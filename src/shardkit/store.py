"""Where a pack's shards live: OUT_DIR itself, or an fsspec URL (``s3://bucket/repo``...).

``pack -o s3://bucket/my-dataset`` writes the same files a local OUT_DIR gets, byte for byte,
to that URL. The run's working files (staging, done records, lock) and a copy of the repo's
small files (card, manifest, ``.gitattributes``, preview, loading script) stay in a local work
folder on the machine that runs the pack (``--work-dir``); the shards and their
``metadata/`` files go straight from the writer to the URL, never through that folder. At the
end the small files are uploaded too, so the URL holds the whole repo.

A writer puts a finished shard with one upload. On object stores (S3, GCS, Azure) an object
exists only once its upload completes, so a shard is either whole or absent, as with the local
rename; other filesystems get an upload to a temporary name and a move.

Credentials and endpoints come from each machine's environment, as fsspec reads them (for S3:
``AWS_ACCESS_KEY_ID``..., ``~/.aws``, or ``FSSPEC_S3_ENDPOINT_URL`` for an S3-compatible
server); Dask workers need them as well.

Network waits are bounded: no byte for :func:`network_timeout` seconds (``SHARDKIT_NETWORK_TIMEOUT``,
default 60) is an error naming the URL, set through each library's own per-read timeout
(aiohttp's ``sock_read`` for http(s), botocore's ``read_timeout`` for S3, httpx's for the Hub),
never a limit on a whole transfer. Other protocols keep their library's defaults. Two waits of an
S3 upload have no such setting in aiohttp, which s3fs sends through: the wait for ``100
Continue`` and a body the server stops reading; Ctrl-C still ends them.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import math
import os
import secrets
from collections.abc import Callable
from typing import IO, Any

from .errors import NetworkError, ShardkitError, UsageError

#: fsspec protocols whose objects appear only when their upload completes.
ATOMIC_UPLOAD_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})

#: The one setting for every network wait: seconds without a byte before a read or write fails.
TIMEOUT_VARIABLE = "SHARDKIT_NETWORK_TIMEOUT"
DEFAULT_NETWORK_TIMEOUT = 60.0
RESUME = "Try again: pack and push resume where they stopped."


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


def run_folder(out_dir: str, work_dir: str | None) -> str:
    """The local folder a run keeps its working files in: OUT_DIR, or for a URL the work folder."""
    if out_dir.startswith("hf://"):  # fsspec would make a commit per file
        raise UsageError(
            f"{out_dir}: OUT_DIR is where shards are packed (a folder or a bucket); to publish on the Hub,"
            " pack there and run `shardkit push OUT_DIR --repo NAMESPACE/NAME` (or add --push)"
        )
    if is_url(out_dir):
        return os.path.abspath(work_dir or default_work_dir(out_dir))
    if work_dir:
        raise UsageError("--work-dir is for an OUT_DIR URL; a local OUT_DIR keeps its working files in it")
    return local_path(out_dir)


class ShardStore:
    """OUT_DIR's ``data/`` and ``metadata/`` files, local or remote; paths are repo-relative."""

    location: str

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        """Move a finished local file to ``rel``, atomically: no reader sees part of it."""
        raise NotImplementedError

    def list(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder`` (empty when it does not exist)."""
        raise NotImplementedError

    def files_under(self, folder: str) -> builtins.list[str]:
        """Repo-relative paths of the files in ``folder`` and its subfolders (a split's shards
        are in ``data/<split>/``); empty when it does not exist."""
        raise NotImplementedError

    def size(self, rel: str) -> int | None:
        """The file's size, or None when it does not exist."""
        raise NotImplementedError

    def remove(self, rel: str) -> None:
        raise NotImplementedError

    def open(self, rel: str) -> IO[bytes]:
        raise NotImplementedError


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(ShardStore):
    def __init__(self, root: str) -> None:
        self.root = root
        self.location = root

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        target = self._path(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(local_file, target)
        if fsync:  # the rename itself survives a power loss
            _fsync_dir(os.path.dirname(target))

    def list(self, folder: str) -> list[str]:
        path = self._path(folder)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def files_under(self, folder: str) -> builtins.list[str]:
        found: builtins.list[str] = []
        for top, dirs, files in os.walk(self._path(folder)):
            dirs.sort()
            rel_top = os.path.relpath(top, self.root).replace(os.sep, "/")
            found.extend(f"{rel_top}/{name}" for name in sorted(files))
        return found

    def size(self, rel: str) -> int | None:
        try:
            return os.path.getsize(self._path(rel))
        except FileNotFoundError:
            return None

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(rel))

    def open(self, rel: str) -> IO[bytes]:
        return open(self._path(rel), "rb")


class UrlStore(ShardStore):
    """A folder at an fsspec URL. Built on the machine that uses it (a Dask worker makes its own)."""

    def __init__(self, url: str) -> None:
        self.location = url.rstrip("/")
        self.fs, root = filesystem_for(self.location)
        self.root = root.rstrip("/")
        self.atomic = bool(set(_protocols(self.fs)) & ATOMIC_UPLOAD_PROTOCOLS)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _parent(self, target: str) -> None:
        if not self.atomic:  # a filesystem with real folders (an object store has none)
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        self.upload(local_file, rel)
        os.unlink(local_file)

    def upload(self, local_file: str, rel: str) -> None:
        """Copy a local file to ``rel``, streamed and atomically (the local file stays)."""
        target = self._path(rel)
        self._parent(target)
        if self.atomic:
            self.fs.put_file(local_file, target)
        else:
            partial = f"{target}.{secrets.token_hex(4)}.partial"
            self.fs.put_file(local_file, partial)
            self.fs.mv(partial, target)

    def list(self, folder: str) -> list[str]:
        try:
            entries = self.fs.ls(self._path(folder), detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file")

    def files_under(self, folder: str) -> builtins.list[str]:
        try:
            found = self.fs.find(self._path(folder), withdirs=False)
        except FileNotFoundError:
            return []
        return sorted(name[len(self.root) + 1 :] for name in found)

    def find(self) -> dict[str, int]:
        """Every file under the URL: repo-relative path -> size."""
        found = self.fs.find(self.root, detail=True, withdirs=False)
        return {name[len(self.root) + 1 :]: int(info["size"]) for name, info in found.items()}

    def size(self, rel: str) -> int | None:
        # Not info(refresh=True): s3fs takes it, but fsspec's http(s) filesystem passes it on to
        # aiohttp, which refuses it (and every shard at an http URL then looked missing).
        self.fs.invalidate_cache(self._path(rel))
        try:
            info = self.fs.info(self._path(rel))
        except FileNotFoundError:
            return None
        return int(info["size"]) if info.get("type") == "file" else None

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(rel))

    def remove_working_file(self, rel: str) -> None:
        """Remove one of shardkit's own files (``.shardkit/...``), and its folder once empty."""
        self.remove(rel)
        if not self.atomic and "/" in rel:
            with contextlib.suppress(OSError):  # not empty: another run's file is there
                self.fs.rmdir(self._path(rel.rsplit("/", 1)[0]))

    def open(self, rel: str) -> IO[bytes]:
        return self.fs.open(self._path(rel), "rb", block_size=8 << 20)  # type: ignore[no-any-return]

    def forget_listings(self) -> None:
        """Drop fsspec's cached listings: other processes (workers) have written since."""
        self.fs.invalidate_cache()

    def check_writable(self) -> None:
        """Write and delete a small object, or fail with a message naming the URL and the cause."""
        probe = f".shardkit/probe-{secrets.token_hex(4)}"
        try:
            self.write_bytes(probe, b"shardkit")
            self.remove_working_file(probe)
        except ShardkitError as exc:  # the cause, already named
            raise UsageError(f"cannot write to {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write to {self.location}: {type(exc).__name__}: {exc}") from None

    def get(self, rel: str, local_file: str) -> None:
        """Download ``rel`` to a local file."""
        self.fs.get_file(self._path(rel), local_file)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._parent(self._path(rel))
        self.fs.pipe_file(self._path(rel), data)

    def read_bytes(self, rel: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(rel)))
        except FileNotFoundError:
            return None


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


def network_failure(exc: BaseException, doing: str, timeout: float, then: str = RESUME) -> NetworkError | None:
    """The one-line error for a timeout or a failed connection (refused, cut mid-body) while
    ``doing`` ("reading <URL>"); None for any other failure. fsspec's http(s) filesystem hides
    both behind a FileNotFoundError: its cause tells."""
    cause = exc.__cause__ if isinstance(exc, FileNotFoundError) else None
    if is_timeout(exc) or (cause is not None and is_timeout(cause)):
        return timeout_error(doing, timeout, then)
    failed = cause if cause is not None and is_network_error(cause) else exc
    if is_network_error(failed):
        return NetworkError(f"the connection failed {doing} ({type(failed).__name__}: {failed}). {then}")
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
        except Exception as exc:
            if (failure := network_failure(exc, doing(args), timeout)) is not None:
                raise failure from None
            if isinstance(exc, OSError):
                raise
            raise ShardkitError(f"{location}: {type(exc).__name__}: {exc}") from None

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


def store_for(out_dir: str) -> ShardStore:
    return UrlStore(out_dir) if is_url(out_dir) else LocalStore(local_path(out_dir))
