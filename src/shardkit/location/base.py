"""The protocol every kind of place follows, the registry of kinds, and telling places apart.

A kind of place is one subclass of :class:`Location` and one :func:`register` line (as
webdataset's ``gopen_schemes`` or litdata's ``register_downloader``): its URL schemes map to
it, and :meth:`Location.parse` and :meth:`Location.out_dir` hand it the text. A kind defines
:meth:`~Location.open_random` (a seekable file) and :meth:`~Location.find` (its files and their
sizes); everything else a reader asks (``open``, ``open_range``, ``read_bytes``, ``size``,
``list``...) has a default built on those two, which a kind overrides where it has a cheaper
way. A kind is read-only unless it defines the writing methods (``put``, ``upload``,
``write_bytes``, ``remove``).
"""

from __future__ import annotations

import builtins
import hashlib
import os
import secrets
import shutil
from typing import Any, BinaryIO, ClassVar

from ..errors import ShardkitError, UsageError
from .reading import CHUNK, MAX_SMALL_FILE_BYTES, Window, read_bounded

#: The scheme of a plain path (``/data/out``, ``out``) and of ``file://``: the local folder's kind.
LOCAL = "file"
#: The registry key of the kind that takes a URL whose scheme no kind registered (fsspec's).
ANY_URL = "*"


def url_scheme(text: str) -> str | None:
    """The scheme of a URL (``s3`` of ``s3://b/x``, ``file`` of ``file:///x``); None for a path."""
    scheme, sep, _ = text.partition("://")
    return scheme if sep and scheme.isidentifier() else None


def is_url(path: str) -> bool:
    """Whether OUT_DIR names a remote location (``s3://...``); ``file://`` and plain paths are local."""
    return url_scheme(path) not in (None, LOCAL)


def local_path(path: str) -> str:
    """A local OUT_DIR, absolute; ``file:///x`` is ``/x``."""
    return os.path.abspath(path[len("file://") :] if path.startswith("file://") else path)


def default_work_dir(url: str) -> str:
    """``~/.cache/shardkit/work/<hash of the URL>``: the same URL resumes from the same folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "shardkit", "work", hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16])


def not_a_place(text: str) -> UsageError:
    """The one line for a text that names no place a packed dataset is read from."""
    return UsageError(f"{text!r} is not a folder, an http(s) URL, a Hub dataset id (ns/name) or hf://datasets/...")


#: Kind name -> its class; URL scheme (and :data:`LOCAL`, :data:`ANY_URL`) -> the kind that takes it.
_KINDS: dict[str, type[Location]] = {}
_SCHEMES: dict[str, type[Location]] = {}
#: What a kind must define: the rest of the protocol has defaults built on these.
_REQUIRED = ("open_random", "find")


def register(kind: type[Location], *schemes: str) -> None:
    """Make ``kind`` (a :class:`Location` subclass with its ``kind`` name) the place of URLs of
    ``schemes`` (``"s3"``; :data:`LOCAL` for plain paths, :data:`ANY_URL` for a scheme no kind
    registered). A later registration of a scheme wins."""
    missing = [name for name in _REQUIRED if getattr(kind, name) is getattr(Location, name)]
    if missing or not getattr(kind, "kind", ""):
        raise TypeError(f"{kind.__name__} is no kind of place: it needs a kind name and {', '.join(_REQUIRED)}")
    _KINDS[kind.kind] = kind
    for scheme in schemes:
        _SCHEMES[scheme] = kind


def kind_for(text: str) -> type[Location]:
    """The kind that takes ``text``, by its URL scheme (a plain path is :data:`LOCAL`'s)."""
    scheme = url_scheme(text) or LOCAL
    return _SCHEMES.get(scheme) or _SCHEMES[ANY_URL]


def _url_of_name(text: str) -> str | None:
    """The URL a kind reads a scheme-less name as (a Hub id ``ns/name``: ``hf://datasets/ns/name``), or None."""
    return next((url for kind in _KINDS.values() if (url := kind.url_of_name(text)) is not None), None)


class Location:
    """Where a dataset repo is (see :mod:`shardkit.location`); every path it takes is repo-relative, with "/".

    ``Location(url, kind)`` is the kind's class by its registered name (``Location(path,
    "folder")``). It pickles as its class and URL: a DataLoader or Dask worker builds its own
    filesystem, with its own credentials. Two are equal when they are the same kind at the same URL.
    """

    #: The kind's registered name (``folder``, ``fsspec``, ``http``, ``hub``).
    kind: ClassVar[str] = ""
    #: A folder on this machine: a run's OUT_DIR is then its own work folder (a lock, a check for
    #: foreign files, hashes kept of the shards, renames). Read only where that is the question.
    is_local: ClassVar[bool] = False
    #: Whether a damaged file there is repaired in place (verify's advice): a folder's or an
    #: object store's; an http(s) server's are published anew from a local copy, a Hub dataset's
    #: by ``shardkit push``. (Whether writing works at all is what :meth:`check_writable` finds.)
    repaired_in_place: ClassVar[bool] = True
    #: Whether the place has revisions (``@rev``, ``--revision``): a Hub dataset.
    has_revisions: ClassVar[bool] = False

    def __new__(cls, url: str, kind: str | None = None) -> Location:
        if cls is Location:
            if kind not in _KINDS:
                raise ValueError(f"unknown location kind {kind!r}")
            cls = _KINDS[kind]
        return object.__new__(cls)

    def __init__(self, url: str, kind: str | None = None) -> None:
        if kind is not None and kind != self.kind:
            raise ValueError(f"a {type(self).__name__} is of kind {self.kind!r}, not {kind!r}")
        #: The URL without a trailing "/" (a folder: its absolute path).
        self.url = url.rstrip("/")

    # -- telling places apart

    @classmethod
    def parse(cls, text: str, *, revision: str | None = None) -> Location:
        """A place to read a packed dataset from: a folder (one that exists wins), an http(s) URL,
        an fsspec URL (``s3://``...: where ``pack -o URL`` writes), a Hub dataset id (``ns/name``)
        or ``hf://datasets/ns/name[@revision]`` (``revision`` wins over the one in the URL)."""
        if os.path.isdir(text):  # a folder here wins, whatever its name looks like
            return _SCHEMES[LOCAL].reading(text, revision=revision)
        if url_scheme(text) is None:  # a name: a folder, or what a kind reads it as (a Hub id)
            text = _url_of_name(text) or text
        return kind_for(text).reading(text, revision=revision)

    @classmethod
    def out_dir(cls, text: str, *, writing: bool = True) -> Location:
        """OUT_DIR: a folder (whether it exists or not) or a URL; ``hf://`` is refused for
        writing (``writing=False``, as ``verify`` reads it: through fsspec, as any URL, and a
        Hub id ``ns/name`` is the Hub dataset ``hf://datasets/<id>``)."""
        if not writing and url_scheme(text) is None:  # read as shardkit.stream reads it
            text = _url_of_name(text) or text
        return kind_for(text).as_out_dir(text, writing=writing)

    @classmethod
    def reading(cls, text: str, *, revision: str | None = None) -> Location:
        """The place ``text`` (one of this kind's URLs) names, to read a dataset from."""
        return cls(text)

    @classmethod
    def as_out_dir(cls, text: str, *, writing: bool) -> Location:
        """The place ``text`` names as an OUT_DIR (``writing=False``: one ``verify`` reads)."""
        return cls(text)

    @classmethod
    def url_of_name(cls, text: str) -> str | None:
        """The URL of this kind a scheme-less name (not a folder here) means, or None (the default)."""
        return None

    def local_dir(self, work_dir: str | None) -> str:
        """The local folder a run keeps its working files (``.shardkit/``) and its copy of the repo's
        small files in: a local OUT_DIR itself; for a URL ``work_dir`` (``--work-dir``), by default
        ``~/.cache/shardkit/work/<hash of the URL>``."""
        return os.path.abspath(work_dir or default_work_dir(self.url))

    @property
    def atomic(self) -> bool:
        """Whether a file appears only once its upload completes (object stores)."""
        return False

    @property
    def name(self) -> str:
        """The repo's name: the last part of its path."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    def where(self, rel: str) -> str:
        """The path or URL of a repo-relative file (for messages, and what workers open)."""
        return f"{self.url}/{rel}"

    def __repr__(self) -> str:
        return f"Location({self.url!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and type(other) is type(self) and self.url == other.url

    def __hash__(self) -> int:
        return hash((self.url, self.kind))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url,))

    # -- reading: what a kind must define

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        """A seekable file, read with ranged reads where it is remote (a Parquet footer first).
        ``exact``: each read asks for exactly its bytes, no read-ahead (for a reader whose reads
        are whole row groups: a rank reading part of a shard fetches only that part). A missing
        file raises FileNotFoundError."""
        raise NotImplementedError

    def find(self, folder: str = "") -> dict[str, int]:
        """Every file under ``folder`` (the whole repo by default): repo-relative path -> size, in
        one listing (not a request per file); empty when there is none."""
        raise NotImplementedError

    # -- reading: defaults built on those

    def open(self, rel: str) -> BinaryIO:
        """A forward-only stream over a file, front to back (one GET over http(s) and on the Hub,
        large sequential blocks through fsspec, a buffered file on disk). A missing file raises
        FileNotFoundError (or, over http(s), one line naming the URL and the server's answer)."""
        return self.open_random(rel)

    def open_range(self, rel: str, start: int, end: int) -> BinaryIO:
        """A forward-only stream over bytes ``[start, end)`` of a file (one ranged GET over http(s),
        a seek elsewhere). Fewer bytes than asked for is the reader's to notice (it knows what it expects)."""
        f = self.open_random(rel)
        f.seek(start)
        return Window(f, end - start)  # type: ignore[return-value]

    def read_bytes(self, rel: str, limit: int = MAX_SMALL_FILE_BYTES) -> bytes | None:
        """A whole (small) file, or None when it does not exist. At a URL, more than ``limit``
        bytes is one line naming it: a server may send an endless body."""
        try:
            with self.open(rel) as f:
                return read_bounded(f, limit, self.where(rel))
        except FileNotFoundError:
            return None

    def size(self, rel: str) -> int | None:
        """The file's size, or None when it does not exist."""
        return self.find(rel.rpartition("/")[0]).get(rel)

    def list(self, folder: str) -> builtins.list[str]:
        """Names of the files directly in ``folder`` (empty when it does not exist)."""
        prefix = f"{folder}/" if folder else ""
        return sorted(rel[len(prefix) :] for rel in self.find(folder) if "/" not in rel[len(prefix) :])

    def files_under(self, folder: str) -> builtins.list[str]:
        """Repo-relative paths of the files in ``folder`` and its subfolders (a split's shards are
        in ``data/<split>/``), sorted; empty when it does not exist."""
        return sorted(rel for rel in self.find(folder) if rel.startswith(f"{folder}/"))

    def forget_listings(self) -> None:
        """Drop cached listings: other processes (workers) have written since."""

    def get(self, rel: str, local_file: str) -> None:
        """Download ``rel`` to a local file."""
        with self.open(rel) as f, open(local_file, "wb") as out:
            shutil.copyfileobj(f, out, CHUNK)

    # -- writing: a kind writes only if it defines these (a read-only place refuses)

    def refuse_writing(self) -> UsageError:
        """The one line for a write to a place that is not written to."""
        return UsageError(f"{self.url}: shardkit reads a dataset there, it does not write to it")

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        """Move a finished local file to ``rel``, atomically: no reader sees part of it."""
        raise self.refuse_writing()

    def upload(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        """Copy a local file to ``rel``, streamed and atomically (the local file stays)."""
        raise self.refuse_writing()

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a small file (whole: a rename on disk, one upload on object stores)."""
        raise self.refuse_writing()

    def remove(self, rel: str) -> None:
        """Remove a file; nothing when it is not there."""
        raise self.refuse_writing()

    def remove_with_empty_folder(self, rel: str) -> None:
        """Remove one of shardkit's own files (in ``.shardkit/``, or a nested shard folder), and its
        folder once empty."""
        self.remove(rel)

    def check_writable(self) -> None:
        """Write and delete a small file, or fail with a message naming the place and the cause."""
        probe = f".shardkit/probe-{secrets.token_hex(4)}"
        try:
            self.write_bytes(probe, b"shardkit")
            self.remove_with_empty_folder(probe)
        except ShardkitError as exc:  # the cause, already naming the probe's URL
            raise UsageError(f"cannot write to {self.url}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write to {self.url}: {type(exc).__name__}: {exc}") from None
