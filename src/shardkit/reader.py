"""``shardkit.stream``: read a packed dataset as a ``datasets.IterableDataset``, one shard per file.

Each ZIP or tar shard is read front to back from one forward-only stream: a single HTTP GET per
shard on the Hub or any web server (no Range requests, no central directory), or one ``open()``
on disk. ZIP members are CRC-checked, tar headers checksummed, and unsafe names refused.
Parquet shards need their footer first, so they are read row group by row group through
ranged reads (fsspec). Every format yields the same columns: the file column (``image`` or
``audio``), ``key``, then the fields. Images are yielded as bytes and decoded only when a row
is formatted, as ``datasets`` does.

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

from .check import SOURCE_PATH_COLUMN
from .errors import ShardkitError, UsageError, listed, source_note
from .formats import METADATA_MEMBER
from .manifest import MANIFEST_NAME, Manifest
from .metadata import EXT_RE, KEY_RE
from .store import filesystem_for, http_filesystem, is_url, network_failure, network_timeout
from .streamio import jsonl_lines
from .tarformat import TarFormatError, iter_tar_members
from .zipformat import ZipFormatError, iter_members

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
    """A forward-only file over one streaming GET: what :func:`iter_members` needs, one request.

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


def iter_shard(
    source: Source, shard: str, file_column: str, fmt_name: str = "zip", manifest: Manifest | None = None
) -> Generator[dict[str, Any], None, None]:
    """The rows of one shard, in order: metadata fields plus ``{file_column: {"bytes", "path"}}``.
    A Parquet shard is held to its ``manifest``'s record (read from ``source`` if not given)."""
    if fmt_name == "tar":
        yield from _iter_tar_shard(source, shard, file_column)
        return
    if fmt_name == "parquet":
        yield from _iter_parquet_shard(source, shard, file_column, manifest or read_manifest_from(source))
        return
    reader = _open(source, shard)
    rows: _ZipRows | None = None

    def note(name: str) -> str:
        return rows.note(name) if rows is not None else ""  # before metadata.jsonl no row is known

    try:
        for member in iter_members(reader, note=note):
            if rows is None:
                if member.name != METADATA_MEMBER:
                    raise ZipFormatError(f"the first member is {member.name!r}, not {METADATA_MEMBER}")
                try:
                    rows = _ZipRows(jsonl_lines(member.data.decode("utf-8")))
                except UnicodeDecodeError:
                    raise ZipFormatError(f"{METADATA_MEMBER} is not UTF-8 text") from None
                continue
            row = rows.take(member.name)
            if row is None:
                raise ZipFormatError(f"member {member.name!r} has no row in {METADATA_MEMBER}")
            row[file_column] = {"bytes": member.data, "path": member.name}
            yield row
        if rows is not None and (left := rows.left()):
            raise ZipFormatError(f"{len(left)} row(s) in {METADATA_MEMBER} have no member: {listed(left, 3)}")
    except ZipFormatError as exc:
        raise ZipFormatError(f"{source.locate(shard)}: {exc}") from None
    finally:
        reader.close()


class _ZipRows:
    """The rows of a ZIP shard's ``metadata.jsonl``, handed out by member name.

    shardkit writes the rows in the order of the members, so each row is parsed only when its
    member comes (a reader that stops early, like the card's preview, parses a few of a
    shard's rows, not all); rows in another order are matched by name.
    """

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        self._next = 0  # the next line, while the rows come in member order
        self._by_name: dict[str, dict[str, Any]] | None = None  # once they do not
        self._sources: dict[str, Any] = {}  # the source_path of each row taken, for messages after it

    def take(self, name: str) -> dict[str, Any] | None:
        if self._by_name is None and self._next < len(self._lines):
            row = _metadata_row(self._lines[self._next], self._next)
            if row["file_name"] == name:
                self._next += 1
                del row["file_name"]
                self._remember(name, row)
                return row
            self._by_name = {}
            for number, line in enumerate(self._lines[self._next :], self._next):
                other = _metadata_row(line, number)
                other_name = other.pop("file_name")
                if other_name in self._by_name:
                    raise ZipFormatError(f"{METADATA_MEMBER} has two rows for member {other_name!r}")
                self._by_name[other_name] = other
        taken = self._by_name.pop(name, None) if self._by_name is not None else None
        if taken is not None:
            self._remember(name, taken)
        return taken

    def _remember(self, name: str, row: dict[str, Any]) -> None:
        if SOURCE_PATH_COLUMN in row:
            self._sources[name] = row[SOURCE_PATH_COLUMN]

    def note(self, name: str) -> str:
        """What follows member ``name`` in a message: its row's source, if the row is known
        (taken, or the next in order, or matched by name) and has one; never raises."""
        if name in self._sources:
            return source_note(self._sources[name])
        if self._by_name is not None:
            return source_note((self._by_name.get(name) or {}).get(SOURCE_PATH_COLUMN))
        if self._next < len(self._lines):
            try:
                row = json.loads(self._lines[self._next])
            except (ValueError, RecursionError):
                return ""
            if isinstance(row, dict) and row.get("file_name") == name:
                return source_note(row.get(SOURCE_PATH_COLUMN))
        return ""

    def left(self) -> list[str]:
        """The rows no member has taken, as a message names them: member name, then source."""
        if self._by_name is not None:
            rows = list(self._by_name.items())
        else:
            pending = enumerate(self._lines[self._next :], self._next)
            rows = [(row.pop("file_name"), row) for row in (_metadata_row(line, i) for i, line in pending)]
        return [name + source_note(row.get(SOURCE_PATH_COLUMN)) for name, row in rows]


def _metadata_row(line: str, index: int) -> dict[str, Any]:
    """Row ``index`` (0-based) of a ZIP shard's metadata.jsonl: a JSON object with a file_name."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # a hostile row nested too deep for the parser
        row = None
    if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
        raise ZipFormatError(f"{METADATA_MEMBER} line {index + 1} is not a JSON object with a file_name")
    return row


def _iter_tar_shard(source: Source, shard: str, file_column: str) -> Iterator[dict[str, Any]]:
    reader = _open(source, shard)
    row: dict[str, Any] | None = None  # the row its .json member gave, until its file comes

    def note(name: str) -> str:
        return source_note(row.get(SOURCE_PATH_COLUMN)) if row is not None and row.get("file_name") == name else ""

    try:
        for member in iter_tar_members(reader, note=note):
            if row is None:
                if not member.name.endswith(".json"):
                    raise TarFormatError(f"member {member.name!r} has no .json before it")
                try:
                    row = json.loads(member.data)
                except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
                    row = None
                if not isinstance(row, dict):
                    raise TarFormatError(f"member {member.name!r} is not a JSON object") from None
                continue
            name = row.pop("file_name", None)
            if name != member.name:
                expected = f"{name!r}{source_note(row.get(SOURCE_PATH_COLUMN))}"
                raise TarFormatError(f"member {member.name!r} follows the row for {expected}")
            row[file_column] = {"bytes": member.data, "path": member.name}
            yield row
            row = None
        if row is not None:
            expected = f"{row.get('file_name')!r}{source_note(row.get(SOURCE_PATH_COLUMN))}"
            raise TarFormatError(f"the last row's file {expected} is missing")
    except TarFormatError as exc:
        raise TarFormatError(f"{source.locate(shard)}: {exc}") from None
    finally:
        reader.close()


def _iter_parquet_shard(source: Source, shard: str, file_column: str, manifest: Manifest) -> Iterator[dict[str, Any]]:
    """A Parquet shard's rows, each row group checked before it is decoded (see :mod:`.parquetformat`).

    The manifest's cap, the shard's recorded size and rows and the columns its features declare
    are what the shard is held to."""
    from .parquetformat import ParquetShardError, arrow_schema, open_parquet_shard

    recorded = next((s for s in manifest.shards if s.file == shard), None)
    schema = arrow_schema(manifest.features) if manifest.features else None
    where = source.locate(shard)
    with contextlib.ExitStack() as stack:
        if source.fsspec:
            fs, path = filesystem_for(where)
            f = stack.enter_context(fs.open(path, "rb", block_size=8 << 20))
        elif source.remote:
            from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

            fs = http_filesystem(build_hf_headers() if source.hub else {})
            f = stack.enter_context(fs.open(where, "rb", block_size=8 << 20))
        else:
            f = stack.enter_context(open(where, "rb"))
        try:
            parquet = open_parquet_shard(f, max_bytes=manifest.options.max_shard_bytes, schema=schema)
            if recorded is not None and (parquet.size, parquet.num_rows) != (recorded.bytes, recorded.rows):
                raise ParquetShardError(
                    f"{parquet.size} bytes and {parquet.num_rows} rows, the manifest says {recorded.bytes} and"
                    f" {recorded.rows}"
                )
            for row in parquet.rows():
                # The path as shardkit writes it, <key><ext> (never a path to follow).
                file_path, key = (row.get(file_column) or {}).get("path"), row.get("key")
                if not (
                    isinstance(file_path, str)
                    and isinstance(key, str)
                    and KEY_RE.match(key)
                    and file_path.startswith(key)
                    and EXT_RE.match(file_path[len(key) :])
                ):
                    named = f"row {row.get('key')!r}{source_note(row.get(SOURCE_PATH_COLUMN))}"
                    raise ShardkitError(f"{where}: {named} names its file {file_path!r}, not <key><ext>")
                yield row
        except ParquetShardError as exc:
            raise ParquetShardError(f"{where}: {exc}") from None


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
