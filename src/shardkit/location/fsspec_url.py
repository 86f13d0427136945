"""Places fsspec reaches (``s3://``, ``gs://``, ``memory://``...), and the fsspec filesystem every kind lists through.

:class:`FsspecPlace` is a place whose listing, sizes, downloads and writes go through an fsspec
filesystem (its URL's, or the local one for a folder, or the http(s) one); :class:`FsspecUrl`, the
kind of any URL no other kind registered, is where ``pack -o URL`` writes the same files a local
OUT_DIR gets, byte for byte. A finished shard is put with one upload. On object stores (S3, GCS,
Azure) an object exists only once its upload completes, so a shard is either whole or absent, as
with the local rename; other filesystems get an upload to a temporary name and a move. The run's
working files (staging, done records, lock) and a copy of the repo's small files stay in a local
work folder (``--work-dir``).

Credentials and endpoints come from each machine's environment, as fsspec reads them (for S3:
``AWS_ACCESS_KEY_ID``..., ``~/.aws``, or ``FSSPEC_S3_ENDPOINT_URL`` for an S3-compatible
server); Dask workers need them as well. Waits are bounded by :func:`.network.network_timeout`
through each library's own per-read setting, and every failure is one line naming the URL.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import secrets
from collections.abc import Callable
from typing import Any, BinaryIO

from ..errors import ShardkitError, UsageError, server_text
from .base import ANY_URL, Location, register
from .network import network_failure, network_timeout

#: fsspec protocols whose objects appear only when their upload completes.
ATOMIC_UPLOAD_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})

#: Block size of fsspec files: large sequential reads, few requests.
BLOCK = 8 << 20

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
    :func:`filesystem_for`'s: the sizes and listings of an http(s) URL (its files are read with
    :class:`.reading.HttpReader` and :class:`.reading.HttpRandomFile`)."""
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


class FsspecPlace(Location):
    """A place whose files are listed, sized, fetched and written through an fsspec filesystem
    (:meth:`filesystem`, built once, on the machine that uses it)."""

    def __init__(self, url: str, kind: str | None = None) -> None:
        super().__init__(url, kind)
        self._fs: Any = None
        self._root = self.url  # the filesystem's path of the repo (for fsspec: without its protocol)

    def filesystem(self) -> tuple[Any, str]:
        """fsspec's filesystem for this place, and the repo's path on it."""
        raise NotImplementedError

    @property
    def fs(self) -> Any:
        """fsspec's filesystem for this place. Its paths are :meth:`_path`'s; at a URL its waits
        are bounded and its failures name the URL."""
        if self._fs is None:
            self._fs, self._root = self.filesystem()
        return self._fs

    def _path(self, rel: str) -> str:
        """The filesystem's path of a repo-relative file."""
        if self._fs is None:
            self.fs  # noqa: B018 - an fsspec URL's path is known once its filesystem is
        return f"{self._root}/{rel}" if rel else self._root

    def _relative(self, path: str) -> str:
        return path[len(self._root) + 1 :]

    # -- reading

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        # Large sequential blocks (``open`` and ``open_range`` read through this too: the
        # read-ahead may fetch up to a block past a range's end).
        cache = "none" if exact else "readahead"
        return self.fs.open(self._path(rel), "rb", block_size=BLOCK, cache_type=cache)  # type: ignore[no-any-return]

    def size(self, rel: str) -> int | None:
        path = self._path(rel)
        # Not info(refresh=True): s3fs takes it, but fsspec's http(s) filesystem passes it on to
        # aiohttp, which refuses it (and every shard at an http URL then looked missing).
        self.fs.invalidate_cache(path)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return int(info["size"]) if info.get("type") == "file" else None

    def list(self, folder: str) -> builtins.list[str]:
        try:
            entries = self.fs.ls(self._path(folder), detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(
            e["name"].rstrip("/").replace(os.sep, "/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"
        )

    def find(self, folder: str = "") -> dict[str, int]:
        try:
            found = self.fs.find(self._path(folder), detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        return {self._relative(name): int(info["size"]) for name, info in found.items()}

    def forget_listings(self) -> None:
        self.fs.invalidate_cache()

    def get(self, rel: str, local_file: str) -> None:
        self.fs.get_file(self._path(rel), local_file)

    # -- writing

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        self.upload(local_file, rel)
        os.unlink(local_file)

    def upload(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        target = self._path(rel)
        self._parent(target)
        if self.atomic:
            self.fs.put_file(local_file, target)
        else:
            partial = f"{target}.{secrets.token_hex(4)}.partial"
            self.fs.put_file(local_file, partial)
            self.fs.mv(partial, target)

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._parent(self._path(rel))
        self.fs.pipe_file(self._path(rel), data)

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(rel))

    def remove_with_empty_folder(self, rel: str) -> None:
        self.remove(rel)
        if self.has_folders and "/" in rel:
            with contextlib.suppress(OSError):  # not empty: another run's file is there
                self.fs.rmdir(self._path(rel.rsplit("/", 1)[0]))

    @property
    def atomic(self) -> bool:
        return bool(set(_protocols(self.fs)) & ATOMIC_UPLOAD_PROTOCOLS)

    @property
    def has_folders(self) -> bool:
        """Whether folders exist of their own (an object store has none: a key's prefix is not one)."""
        return not self.atomic

    def _parent(self, target: str) -> None:
        if self.has_folders:
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)


class FsspecUrl(FsspecPlace):
    """A URL fsspec reaches (``s3://bucket/repo``, ``memory://``...): the kind of every scheme no other kind takes."""

    kind = "fsspec"

    def filesystem(self) -> tuple[Any, str]:
        fs, root = filesystem_for(self.url)
        return fs, root.rstrip("/")


register(FsspecUrl, ANY_URL)
