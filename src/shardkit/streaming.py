"""``shardkit.stream``: read a packed dataset as a ``datasets.IterableDataset``, one shard per file.

Each ZIP or tar shard is read front to back from one forward-only stream: a single HTTP GET per
shard on the Hub or any web server (no Range requests, no central directory), or one ``open()``
on disk. Parquet shards need their footer first, so they are read row group by row group through
ranged reads (fsspec). What a shard's bytes mean is its format's (:mod:`.formats`: ZIP members
are CRC-checked, tar headers checksummed, unsafe names refused...); this module finds the
shards, opens them and wires them into ``datasets``. Every format yields the same columns: the
file column (``image`` or ``audio``), ``key``, then the fields. Images are yielded as bytes and
decoded only when a row is formatted, as ``datasets`` does.

The shard list goes into ``gen_kwargs``, so ``n_shards`` is the number of ZIPs: DataLoader
workers and ``split_dataset_by_node`` split the dataset by shard, and ``.shuffle(seed,
buffer_size)`` shuffles the shard order plus a buffer of rows (``set_epoch`` reshuffles).

Sources: a packed folder, an ``http(s)://`` URL of one, a Hub dataset id (``ns/name``),
``hf://datasets/ns/name[@revision]``, or another fsspec URL (``s3://bucket/ds``, where
``pack -o URL`` writes; read through fsspec in 8 MiB blocks). Hub reads go to ``HF_ENDPOINT``
with the token huggingface_hub finds (``HF_TOKEN`` or the login), so private repos work.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ShardkitError, UsageError
from .formats import format_named
from .formats.base import ShardRecord
from .manifest import MANIFEST_NAME, Manifest
from .store import filesystem_for, http_filesystem, is_url, network_failure, network_timeout

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_HF_URL = re.compile(r"^hf://datasets/([\w.-]+/[\w.-]+?)(?:@([^/]+))?/?$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """Where a packed dataset lives: ``base`` is a folder path, or a URL ending in '/'."""

    base: str
    remote: bool
    hub: bool = False  # send the Hub token with requests
    fsspec: bool = False  # another fsspec URL (s3://...): read through fsspec, not plain HTTP

    def locate(self, relative: str) -> str:
        return self.base + relative if self.remote else os.path.join(self.base, relative)


def resolve_source(source: str, revision: str | None = None) -> Source:
    """Tell a folder, a URL, a Hub id and an ``hf://`` URL apart (a folder that exists wins)."""
    if os.path.isdir(source):
        return Source(os.path.abspath(source), remote=False)
    if source.startswith(("http://", "https://")):
        return Source(source.rstrip("/") + "/", remote=True)
    if is_url(source) and not source.startswith("hf://"):  # s3://, gs://...: where `pack -o URL` writes
        return Source(source.rstrip("/") + "/", remote=True, fsspec=True)
    match = _HF_URL.match(source)
    repo_id = match.group(1) if match else source if _REPO_ID.match(source) else None
    if repo_id is None:
        raise UsageError(f"{source!r} is not a folder, an http(s) URL, a Hub dataset id (ns/name) or hf://datasets/...")
    revision = revision or (match.group(2) if match else None) or "main"
    from urllib.parse import quote

    from huggingface_hub import constants

    base = f"{constants.ENDPOINT}/datasets/{repo_id}/resolve/{quote(revision, safe='')}/"
    return Source(base, remote=True, hub=True)


class _HttpReader:
    """A forward-only file over one streaming GET: what a front-to-back read needs, one request.

    Its waits are bounded by :func:`network_timeout` (a read that brings no byte for that long
    fails, however long the whole shard takes), and every failure is one line naming the URL: a
    stalled or cut connection must not pass for a short shard or hang a training job.
    """

    def __init__(self, url: str, hub: bool) -> None:
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status  # type: ignore[attr-defined]

        self._url = url
        self._timeout = network_timeout()
        self._received = 0
        headers = build_hf_headers() if hub else {}
        self._context = get_session().stream("GET", url, headers=headers, timeout=self._timeout)
        with self._named_errors():
            response = self._context.__enter__()
        try:
            hf_raise_for_status(response)
        except BaseException as exc:
            self._context.__exit__(None, None, None)
            if getattr(exc, "response", None) is None:
                raise
            status = f"{exc.response.status_code} {exc.response.reason_phrase}".strip()  # type: ignore[attr-defined]
            raise ShardkitError(f"cannot read {url}: the server answered {status}") from None
        self._chunks = response.iter_bytes(_CHUNK)
        self._buffer = b""
        self._position = 0

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
        self._context.__exit__(None, None, None)


def _open(source: Source, relative: str) -> Any:
    if source.fsspec:  # one sequential read, in large blocks; failures name the URL
        fs, path = filesystem_for(source.locate(relative))
        return fs.open(path, "rb", block_size=8 << 20, cache_type="readahead")
    if source.remote:
        return _HttpReader(source.locate(relative), source.hub)
    return open(source.locate(relative), "rb", buffering=_CHUNK)


def read_manifest_from(source: Source) -> Manifest:
    reader = _open(source, MANIFEST_NAME)
    try:
        data = reader.read()
    finally:
        reader.close()
    try:
        return Manifest.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{source.locate(MANIFEST_NAME)} is not a shardkit manifest: {exc}") from None


def _open_random_access(source: Source, relative: str) -> Any:
    """A seekable file over a shard, read with ranged reads (fsspec) where it is remote."""
    where = source.locate(relative)
    if source.fsspec:
        fs, path = filesystem_for(where)
        return fs.open(path, "rb", block_size=8 << 20)
    if source.remote:
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        fs = http_filesystem(build_hf_headers() if source.hub else {})
        return fs.open(where, "rb", block_size=8 << 20)
    return open(where, "rb")


def iter_shard(
    source: Source, shard: str, file_column: str, fmt_name: str = "zip", manifest: Manifest | None = None
) -> Generator[dict[str, Any], None, None]:
    """The rows of one shard, in order: metadata fields plus ``{file_column: {"bytes", "path"}}``,
    as its format reads them (:meth:`.formats.base.ShardFormat.read_rows`). A shard read with
    ranged reads (Parquet) is held to its ``manifest``'s record (read from ``source`` if not given)."""
    fmt = format_named(fmt_name)
    record = ShardRecord(source.locate(shard), file_column)
    if fmt.random_access:
        manifest = manifest or read_manifest_from(source)
        recorded = next((s for s in manifest.shards if s.file == shard), None)
        record = ShardRecord(
            record.where,
            file_column,
            features=manifest.features or None,
            max_bytes=manifest.options.max_shard_bytes,
            bytes=recorded.bytes if recorded is not None else None,
            rows=recorded.rows if recorded is not None else None,
        )
        reader = _open_random_access(source, shard)
    else:
        reader = _open(source, shard)  # one forward-only read
    try:
        yield from fmt.read_rows(reader, record)
    finally:
        reader.close()


def _generate(
    shards: list[str], source: Source, file_column: str, fmt_name: str, manifest: Manifest
) -> Iterator[dict[str, Any]]:
    for shard in shards:
        yield from iter_shard(source, shard, file_column, fmt_name, manifest)


def stream(source: str, *, revision: str | None = None, split: str = "train") -> datasets.IterableDataset:
    """One split of a packed dataset as a ``datasets.IterableDataset`` with one shard per shard
    file; see the module doc. A split that is not there is a UsageError naming those that are."""
    import datasets

    where = resolve_source(source, revision)
    manifest = read_manifest_from(where)
    features = datasets.Features._from_yaml_list(manifest.features) if manifest.features else None
    file_column = manifest.modality
    if features is not None and file_column == "audio" and not _audio_feature_usable(datasets):
        log.warning(
            "audio cannot be decoded here (datasets 4+ needs torchcodec, 3.x librosa and soundfile):"
            " the 'audio' column holds each file's bytes and path"
        )
        features[file_column] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    return datasets.IterableDataset.from_generator(
        _generate,
        features=features,
        gen_kwargs={
            "shards": [s.file for s in manifest.shards_of(split)],
            "source": where,
            "file_column": file_column,
            "fmt_name": manifest.options.format,
            "manifest": manifest,  # not a list: every worker gets all of it (what Parquet shards are held to)
        },
        split=datasets.NamedSplit(split),
    )


def _audio_feature_usable(datasets: Any) -> bool:
    """Whether datasets' ``Audio`` feature can hold audio here.

    datasets 4.0+ needs torchcodec (and torch) even to pass an audio file's bytes through
    (``Audio.encode_example`` imports them); datasets 3.x has no ``TORCHCODEC_AVAILABLE`` flag
    and decodes with soundfile and librosa.
    """
    if hasattr(datasets.config, "TORCHCODEC_AVAILABLE"):
        return bool(datasets.config.TORCHCODEC_AVAILABLE)
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("soundfile", "librosa"))
