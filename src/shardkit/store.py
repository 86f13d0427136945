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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from typing import IO, Any

from .errors import ShardkitError, UsageError

#: fsspec protocols whose objects appear only when their upload completes.
ATOMIC_UPLOAD_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})


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
        fs, root = filesystem_for(self.location)
        self.fs: Any = _NamedErrors(fs, self.location)
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

    def find(self) -> dict[str, int]:
        """Every file under the URL: repo-relative path -> size."""
        found = self.fs.find(self.root, detail=True, withdirs=False)
        return {name[len(self.root) + 1 :]: int(info["size"]) for name, info in found.items()}

    def size(self, rel: str) -> int | None:
        try:
            info = self.fs.info(self._path(rel), refresh=True)
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


class _NamedErrors:
    """An fsspec filesystem whose failures other than OSError (a missing credential, a request
    the server refused: each library raises its own) become a ShardkitError naming the URL, so
    the CLI prints one line instead of a traceback."""

    def __init__(self, fs: Any, location: str) -> None:
        self._fs = fs
        self._location = location

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except OSError:  # FileNotFoundError and friends: the callers handle them
                raise
            except Exception as exc:
                raise ShardkitError(f"{self._location}: {type(exc).__name__}: {exc}") from None

        return call


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def filesystem_for(url: str) -> tuple[Any, str]:
    """fsspec's filesystem and path for a URL, with a message naming the package a protocol needs."""
    try:
        import fsspec  # type: ignore[import-untyped]

        return fsspec.core.url_to_fs(url)  # type: ignore[no-any-return]
    except ImportError as exc:  # fsspec names the package, e.g. "Install s3fs to access S3"
        raise UsageError(f"{url}: {exc}") from None
    except ValueError as exc:  # an unknown protocol
        raise UsageError(f"{url}: {exc}") from None


def store_for(out_dir: str) -> ShardStore:
    return UrlStore(out_dir) if is_url(out_dir) else LocalStore(local_path(out_dir))
