"""``verify``: check a packed OUT_DIR against its manifest, shard by shard, member by member.

For every ZIP shard the manifest names, in one front-to-back read of the file:

* it exists, has the recorded size and sha256, and is within the manifest's cap;
* its ZIP structure is exactly what shardkit writes (stored members, each header byte for byte
  as the writer makes it, safe names, members back to back, a central directory listing exactly
  those members at their offsets, nothing after the end record), and every CRC matches;
* ``metadata.jsonl`` is the first member, and its rows and the other members agree one to one:
  each row's ``file_name`` is a member, each member has a row, keys are unique, ascending, in
  the shard's key prefix, within the recorded first/last key, and name their member;
* ``metadata/<stem>.jsonl`` holds the same bytes as the ``metadata.jsonl`` inside;
* with ``deep``, every image decodes (Pillow) and every audio file libsndfile reads decodes (soundfile;
  other audio is counted, not decoded).

A tar shard gets the same checks in its terms: ustar headers exactly as shardkit writes them,
each member's CRC record matching its bytes (shards from before CRC records have none), nothing
after the end blocks, each ``<key>.json`` followed by the file its ``file_name`` names, the .json
members' bytes equal to ``metadata/<stem>.jsonl``. A Parquet shard is read row group by row
group: each row's path and typed fields must equal its line in ``metadata/<stem>.jsonl``, keys
as above.

And for the whole: shards' key ranges do not overlap, totals add up, ``data/`` and
``metadata/`` hold nothing the manifest does not name, and ``metadata.parquet`` holds every
shard's rows, in order, within its key range. Problems are collected, not raised:
each names its file (and member), so one run lists everything wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from .check import SOURCE_PATH_COLUMN
from .errors import UsageError, source_note
from .formats import PARQUET, TAR, ZIP, ShardFormat
from .manifest import MANIFEST_NAME, Manifest, ManifestShard
from .metadata import can_decode, decode_problem, sha256_stream
from .outdir import unnamed_files
from .progress import NullProgress, Progress
from .store import LocalStore, ShardStore, store_for
from .streamio import crc32, jsonl_lines
from .table import table_problems
from .tarformat import TarFormatError, iter_tar_members
from .threads import interruptible_pool
from .zipformat import ZipFormatError, iter_members

METADATA_MEMBER = "metadata.jsonl"


@dataclass(frozen=True)
class Problem:
    file: str  # "data/3f.zip", "metadata/3f.jsonl", "shards.json"
    message: str
    member: str | None = None
    #: The row's source_path (--keep-source-path), where the problem is one row's and it has one:
    #: only ever shown, as :func:`.errors.source_note` shows it.
    source: str | None = None

    def format(self) -> str:
        if not self.member:
            return f"{self.file}: {self.message}"
        return f"{self.file}: {self.member}{source_note(self.source)}: {self.message}"


@dataclass
class VerifyReport:
    out_dir: str
    shards: int = 0
    rows: int = 0
    bytes: int = 0
    deep: bool = False
    decoded: int = 0  # files decoded by the deep check
    not_decoded: int = 0  # files the deep check has no decoder for (e.g. FLAC without soundfile)
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["seconds"] = round(self.seconds, 3)
        data["problems"] = [{**asdict(p), "text": p.format()} for p in self.problems]
        return data


class _HashingReader:
    """A forward-only reader that hashes everything read through it (one pass: walk + sha256)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.sound = True  # False once the walk over it met a shard that is not sound

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.raw.read(n)
        self.sha256.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


@contextlib.contextmanager
def _walking(
    store: ShardStore, shard: ManifestShard, problems: list[Problem], error: type[ValueError]
) -> Iterator[_HashingReader]:
    """A hashing reader over the shard file; a format ``error`` raised while walking it becomes a
    problem. Whatever the walk left unread is read too, so the sha256 covers the whole file."""
    with store.open(shard.file) as raw:
        reader = _HashingReader(raw)
        try:
            yield reader
        except error as exc:
            reader.sound = False
            problems.append(Problem(shard.file, f"not a sound shard: {exc}"))
        reader.drain()


@dataclass
class _ShardResult:
    rows: int = 0
    decoded: int = 0
    not_decoded: int = 0
    keys: tuple[str, str] | None = None
    problems: list[Problem] = field(default_factory=list)


def _source(row: object) -> str | None:
    """A row's source_path (``--keep-source-path``), for messages only; None if it has none."""
    source = row.get(SOURCE_PATH_COLUMN) if isinstance(row, dict) else None
    return source if isinstance(source, str) else None


def _check_rows(
    shard: ManifestShard, text: str, prefix: str, problems: list[Problem], fmt: ShardFormat, where_name: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Parse metadata lines; return file_name -> key, and file_name -> source_path for the rows
    that have one. Row problems go to ``problems``."""
    rows: dict[str, str] = {}
    sources: dict[str, str] = {}
    previous = ""
    for number, line in enumerate(jsonl_lines(text), 1):
        where = f"{where_name} line {number}"
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            problems.append(Problem(shard.file, f"invalid JSON: {exc}", where))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str) or "key" not in row:
            problems.append(Problem(shard.file, "row is not an object with 'file_name' and 'key'", where))
            continue
        name, key, source = row["file_name"], str(row["key"]), _source(row)
        if name in rows:
            problems.append(Problem(shard.file, f"file_name {name!r} appears twice", where, source))
        if key <= previous:
            problem = f"key {key} is not above the previous row's ({previous})"
            problems.append(Problem(shard.file, problem, where, source))
        previous = max(previous, key)
        if not key.startswith(prefix):
            problems.append(Problem(shard.file, f"key {key} is not in this shard's prefix {prefix!r}", where, source))
        if name != fmt.member_name(key, os.path.splitext(name)[1]):
            problem = f"file_name {name!r} is not where key {key} belongs"
            problems.append(Problem(shard.file, problem, where, source))
        rows[name] = key
        if source is not None:
            sources[name] = source
    return rows, sources


def _decode(result: _ShardResult, shard: ManifestShard, name: str, data: bytes, source: str | None) -> None:
    """The deep check of one file (its row's ``source`` for the message)."""
    ext = os.path.splitext(name)[1]
    if not can_decode(ext):
        result.not_decoded += 1
    elif problem := decode_problem(io.BytesIO(data), ext):
        result.problems.append(Problem(shard.file, problem, name, source))
    else:
        result.decoded += 1


@dataclass
class _Walk:
    """What walking one shard found, for the checks all formats share."""

    sha256: str
    members: int  # file members (rows' files) met
    keys: list[str]  # every row's key, sorted
    metadata: bytes | None  # the metadata lines the shard holds, to compare with metadata/; None: compared already


def _walk_zip(store: ShardStore, shard: ManifestShard, prefix: str, deep: bool, result: _ShardResult) -> _Walk:
    problems = result.problems
    rows: dict[str, str] | None = None
    sources: dict[str, str] = {}  # file_name -> source_path, once metadata.jsonl is read
    keys: list[str] = []
    members = 0
    inner_metadata = b""

    def note(name: str) -> str:
        return source_note(sources.get(name))

    # The walk also checks the central directory against the members (iter_members): what zipfile
    # and datasets read through it is then what was walked.
    with _walking(store, shard, problems, ZipFormatError) as reader:
        for member in iter_members(reader, check_crc=False, note=note):  # type: ignore[arg-type]
            members += 1
            if crc32(member.data) != member.crc:
                mismatch = "CRC mismatch: the bytes are not what was written"
                problems.append(Problem(shard.file, mismatch, member.name, sources.get(member.name)))
            if rows is None:
                if member.name != METADATA_MEMBER:
                    problems.append(Problem(shard.file, f"first member is {member.name!r}, not {METADATA_MEMBER}"))
                    rows = {}
                else:
                    inner_metadata = member.data
                    text = member.data.decode("utf-8", "replace")
                    rows, sources = _check_rows(shard, text, prefix, problems, ZIP, METADATA_MEMBER)
                    keys = sorted(rows.values())
                    continue
            if rows.pop(member.name, None) is None:
                problems.append(Problem(shard.file, "member has no row in metadata.jsonl", member.name))
            if deep:  # a member without a row has no source: sources holds rows' names only
                _decode(result, shard, member.name, member.data, sources.get(member.name))
    if reader.sound:  # else the walk stopped short: the rows left say nothing more
        for name in sorted(rows or {}):
            problems.append(Problem(shard.file, "row in metadata.jsonl has no member", name, sources.get(name)))
    return _Walk(reader.sha256.hexdigest(), max(members - 1, 0), keys, inner_metadata)


def _walk_tar(store: ShardStore, shard: ManifestShard, prefix: str, deep: bool, result: _ShardResult) -> _Walk:
    """``<key>.json`` then ``<key><ext>`` per row, the json naming the file that follows it."""
    problems = result.problems
    lines: list[bytes] = []
    files = 0
    expected: str | None = None  # the file_name the last .json announced
    source: str | None = None  # and its source_path

    def source_of(name: str) -> str | None:
        """The source of member ``name``'s row: known only for the file its .json announced."""
        return source if name == expected else None

    def note(name: str) -> str:
        return source_note(source_of(name))

    with _walking(store, shard, problems, TarFormatError) as reader:
        for member in iter_tar_members(reader, check_crc=False, note=note):  # type: ignore[arg-type]
            if member.crc is not None and crc32(member.data) != member.crc:
                mismatch = "CRC mismatch: the bytes are not what was written"
                problems.append(Problem(shard.file, mismatch, member.name, source_of(member.name)))
            if expected is None:
                if not member.name.endswith(".json"):
                    problems.append(Problem(shard.file, "file member without its .json before it", member.name))
                    files += 1
                    continue
                lines.append(member.data)
                try:
                    row = json.loads(member.data)
                    expected, source = str(row["file_name"]), _source(row)
                except (ValueError, KeyError, TypeError, RecursionError):
                    problems.append(Problem(shard.file, "not a JSON object with a file_name", member.name))
                    expected, source = "", None  # the row's problem is reported: not again for the file after it
                continue
            files += 1
            member_source = source_of(member.name)
            if member.name != expected and expected:
                problem = f"follows the row for {expected!r}{source_note(source)}"
                problems.append(Problem(shard.file, problem, member.name))
            expected = None
            if deep:
                _decode(result, shard, member.name, member.data, member_source)
    if expected is not None and reader.sound:
        problems.append(Problem(shard.file, f"the last row's file {expected!r}{source_note(source)} is missing"))
    text = b"\n".join(lines).decode("utf-8", "replace")
    keys = sorted(_check_rows(shard, text, prefix, problems, TAR, "row")[0].values())
    if not reader.sound:  # the rows read are only some: their keys and lines say nothing more
        return _Walk(reader.sha256.hexdigest(), files, [], None)
    metadata = b"".join(line + b"\n" for line in lines)
    return _Walk(reader.sha256.hexdigest(), files, keys, metadata)


def _same_value(a: Any, b: Any) -> bool:
    """A JSON value equals what Parquet returned for it (an absent struct field reads as null)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_same_value(a.get(k), b.get(k)) for k in a.keys() | b.keys())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _walk_parquet(store: ShardStore, shard: ManifestShard, prefix: str, deep: bool, result: _ShardResult) -> _Walk:
    """Every row against its metadata line (values compared as typed), in order. The shard is
    opened as every reader opens it (:func:`.parquetformat.open_parquet_shard`): each row group
    checked before it is decoded, each page's checksum verified."""
    from .parquetformat import ParquetShardError, open_parquet_shard

    problems = result.problems
    with store.open(shard.file) as raw:
        reader = _HashingReader(raw)
        reader.drain()
    try:
        with store.open(shard.metadata) as f:
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        text = ""  # reported by the shared check
    rows, _ = _check_rows(shard, text, prefix, problems, PARQUET, shard.metadata)
    lines = iter(jsonl_lines(text))
    count = 0
    try:
        with store.open(shard.file) as raw_file:
            parquet = open_parquet_shard(raw_file)
            file_column = parquet.columns[0] if parquet.columns else ""
            for record in parquet.rows(batch_size=64):
                count += 1
                content = record.pop(file_column, None) or {}
                name = str(content.get("path"))
                _compare_parquet_row(shard, count, name, record, next(lines, None), problems)
                if deep and content.get("bytes") is not None:
                    _decode(result, shard, name, content["bytes"], _source(record))
    except (ParquetShardError, OSError) as exc:
        problems.append(Problem(shard.file, f"not a sound shard: {exc}"))
    if next(lines, None) is not None:
        problems.append(Problem(shard.metadata, f"has more lines than {shard.file} has rows"))
    return _Walk(reader.sha256.hexdigest(), count, sorted(rows.values()), None)


def _compare_parquet_row(
    shard: ManifestShard, count: int, name: str, record: dict[str, Any], line: str | None, problems: list[Problem]
) -> None:
    """A Parquet row (its path ``name`` and typed fields) against its line in metadata/."""
    try:
        expected = json.loads(line) if line is not None else None
    except (ValueError, RecursionError):
        expected = {}  # _check_rows reported it
    source = _source(record)  # the shard's own row: the one the problem is about
    if not isinstance(expected, dict):
        problems.append(Problem(shard.file, f"row {count} has no line in {shard.metadata}", name, source))
        return
    if expected.pop("file_name", None) != name:
        problems.append(Problem(shard.file, f"row {count}: path differs from {shard.metadata}", name, source))
    if not _same_value(expected, record):
        problems.append(Problem(shard.file, f"row {count}: fields differ from {shard.metadata}", name, source))


_WALKERS = {"zip": _walk_zip, "tar": _walk_tar, "parquet": _walk_parquet}


def _check_shard(store: ShardStore, shard: ManifestShard, cap: int, deep: bool, fmt: ShardFormat) -> _ShardResult:
    result = _ShardResult()
    problems = result.problems
    prefix = os.path.basename(shard.file).split(".")[0].split("-")[0]
    size = store.size(shard.file)
    if size is None:
        problems.append(Problem(shard.file, "missing"))
        return result
    if size != shard.bytes:
        problems.append(Problem(shard.file, f"{size} bytes, the manifest says {shard.bytes}"))
    if size > cap:
        problems.append(Problem(shard.file, f"{size} bytes, over the cap of {cap}"))

    walk = _WALKERS[fmt.name](store, shard, prefix, deep, result)
    if walk.sha256 != shard.sha256:
        problems.append(Problem(shard.file, "sha256 differs from the manifest's"))
    result.rows = walk.members
    if result.rows != shard.rows:
        problems.append(Problem(shard.file, f"{result.rows} members, the manifest says {shard.rows} rows"))
    if walk.keys:
        result.keys = (walk.keys[0], walk.keys[-1])
        if result.keys != (shard.first_key, shard.last_key):
            problems.append(
                Problem(
                    shard.file,
                    f"keys run {walk.keys[0]}..{walk.keys[-1]}, the manifest says {shard.first_key}..{shard.last_key}",
                )
            )

    try:
        with store.open(shard.metadata) as f:
            outer = f.read()
        if walk.metadata is not None and outer != walk.metadata:
            inside = f"the {METADATA_MEMBER} inside" if fmt.name == "zip" else "the .json members of"
            problems.append(Problem(shard.metadata, f"differs from {inside} {shard.file}"))
        if hashlib.sha256(outer).hexdigest() != shard.metadata_sha256:
            problems.append(Problem(shard.metadata, "sha256 differs from the manifest's"))
    except FileNotFoundError:
        problems.append(Problem(shard.metadata, "missing"))
    return result


def _check_whole(store: ShardStore, manifest: Manifest, results: list[_ShardResult], report: VerifyReport) -> None:
    named = {s.file for s in manifest.shards} | {s.metadata for s in manifest.shards}
    present = [rel for sub in ("data", "metadata") for rel in store.files_under(sub)]
    report.problems.extend(Problem(rel, f"not named in {MANIFEST_NAME}") for rel in unnamed_files(present, named))
    # Each split's shards hold key ranges that do not overlap (splits are cut by key apart).
    ranges = sorted((s.split, r.keys, s.file) for r, s in zip(results, manifest.shards, strict=True) if r.keys)
    for (split_a, a, file_a), (split_b, b, file_b) in itertools.pairwise(ranges):
        if split_a == split_b and b[0] <= a[1]:
            report.problems.append(Problem(file_b, f"its keys overlap those of {file_a}: rows are not unique"))
    if manifest.metadata_table is not None:
        try:
            with store.open(manifest.metadata_table) as f:
                rows = [(s.file, s.rows, s.first_key, s.last_key) for s in manifest.shards]
                found = table_problems(f, rows)
            with store.open(manifest.metadata_table) as f:
                digest = sha256_stream(f)
        except FileNotFoundError:
            found = ["missing"]
        else:
            if not found and manifest.metadata_table_sha256 not in (None, digest):
                found = ["sha256 differs from the manifest's: it does not hold the packed rows"]
        report.problems.extend(Problem(manifest.metadata_table, message) for message in found)
    totals = manifest.to_json()["totals"]
    if totals["rows"] != sum(s.rows for s in manifest.shards):
        report.problems.append(Problem(MANIFEST_NAME, "totals do not add up"))


def verify(
    out_dir: str, *, deep: bool = False, threads: int | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Check OUT_DIR (a folder, or the fsspec URL a pack wrote to) against its manifest; return
    every problem found (the report is ``ok`` if none)."""
    progress = progress or NullProgress()
    started = time.perf_counter()
    store = store_for(out_dir)
    out_dir = store.location
    if isinstance(store, LocalStore) and not os.path.isdir(out_dir):
        raise UsageError(f"OUT_DIR {out_dir!r} is not a folder")
    try:
        with store.open(MANIFEST_NAME) as f:
            manifest: Manifest | None = Manifest.from_json(json.load(f))
    except FileNotFoundError:
        manifest = None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{out_dir}/{MANIFEST_NAME} is not a shardkit manifest: {exc}") from None
    if manifest is None:
        raise UsageError(f"{out_dir} has no {MANIFEST_NAME}: nothing to verify (pack it first)")
    report = VerifyReport(out_dir=out_dir, shards=len(manifest.shards), deep=deep)
    cap = manifest.options.max_shard_bytes
    fmt = manifest.options.shard_format
    threads = threads or min(4, os.cpu_count() or 1)
    progress.start("verifying" + (" (deep)" if deep else ""), total=sum(s.bytes for s in manifest.shards), unit="B")
    results: list[_ShardResult] = []
    with interruptible_pool(threads, "verify") as pool:
        for shard, result in zip(
            manifest.shards,
            pool.map(lambda s: _check_shard(store, s, cap, deep, fmt), manifest.shards),
            strict=True,
        ):
            results.append(result)
            report.rows += result.rows
            report.bytes += shard.bytes
            report.decoded += result.decoded
            report.not_decoded += result.not_decoded
            report.problems.extend(result.problems)
            progress.advance(shard.bytes, rows=result.rows, shards=len(results))
    progress.finish()
    _check_whole(store, manifest, results, report)
    report.seconds = time.perf_counter() - started
    return report
