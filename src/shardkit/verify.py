"""``verify``: check a packed OUT_DIR against its manifest, shard by shard, member by member.

For every shard the manifest names, in one front-to-back read of the file:

* it exists, has the recorded size and sha256, and is within the manifest's cap;
* its ZIP structure is the subset shardkit writes (stored members, sizes and CRC in every local
  header, safe names), every CRC matches, and the central directory lists the same members;
* ``metadata.jsonl`` is the first member, and its rows and the other members agree one to one:
  each row's ``file_name`` is a member, each member has a row, keys are unique, ascending, in
  the shard's key prefix, within the recorded first/last key, and name their member;
* ``metadata/<stem>.jsonl`` holds the same bytes as the ``metadata.jsonl`` inside;
* with ``deep``, every image decodes (Pillow) and every WAV file parses (other audio is counted, not decoded).

And for the whole: shards' key ranges do not overlap, totals add up, and ``data/`` and
``metadata/`` hold nothing the manifest does not name. Problems are collected, not raised:
each names its file (and member), so one run lists everything wrong.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import time
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from .errors import UsageError
from .manifest import MANIFEST_NAME, Manifest, ManifestShard, read_manifest
from .metadata import can_decode, decode_problem, member_name
from .progress import NullProgress, Progress
from .threads import interruptible_pool
from .zipformat import ZipFormatError, iter_members

METADATA_MEMBER = "metadata.jsonl"


@dataclass(frozen=True)
class Problem:
    file: str  # "data/3f.zip", "metadata/3f.jsonl", "shards.json"
    message: str
    member: str | None = None

    def format(self) -> str:
        return f"{self.file}: {self.member}: {self.message}" if self.member else f"{self.file}: {self.message}"


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

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha256.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


@dataclass
class _ShardResult:
    rows: int = 0
    decoded: int = 0
    not_decoded: int = 0
    keys: tuple[str, str] | None = None
    problems: list[Problem] = field(default_factory=list)


def _check_rows(shard: ManifestShard, text: str, prefix: str, problems: list[Problem]) -> dict[str, str]:
    """Parse metadata.jsonl; return member name -> key. Row problems go to ``problems``."""
    rows: dict[str, str] = {}
    previous = ""
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{METADATA_MEMBER} line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            problems.append(Problem(shard.file, f"invalid JSON: {exc}", where))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str) or "key" not in row:
            problems.append(Problem(shard.file, "row is not an object with 'file_name' and 'key'", where))
            continue
        name, key = row["file_name"], str(row["key"])
        if name in rows:
            problems.append(Problem(shard.file, f"file_name {name!r} appears twice", where))
        if key <= previous:
            problems.append(Problem(shard.file, f"key {key} is not above the previous row's ({previous})", where))
        previous = max(previous, key)
        if not key.startswith(prefix):
            problems.append(Problem(shard.file, f"key {key} is not in this shard's prefix {prefix!r}", where))
        if name != member_name(key, os.path.splitext(name)[1]):
            problems.append(Problem(shard.file, f"file_name {name!r} is not where key {key} belongs", where))
        rows[name] = key
    return rows


def _check_shard(out_dir: str, shard: ManifestShard, cap: int, deep: bool) -> _ShardResult:
    result = _ShardResult()
    problems = result.problems
    path = os.path.join(out_dir, shard.file)
    prefix = os.path.basename(shard.file).split(".")[0].split("-")[0]
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        problems.append(Problem(shard.file, "missing"))
        return result
    if size != shard.bytes:
        problems.append(Problem(shard.file, f"{size} bytes, the manifest says {shard.bytes}"))
    if size > cap:
        problems.append(Problem(shard.file, f"{size} bytes, over the cap of {cap}"))

    rows: dict[str, str] | None = None
    keys: list[str] = []
    walked: list[tuple[str, int, int]] = []
    inner_metadata = b""
    with open(path, "rb") as raw:
        reader = _HashingReader(raw)
        try:
            for member in iter_members(reader, check_crc=False):  # type: ignore[arg-type]
                walked.append((member.name, member.size, member.crc))
                if zlib.crc32(member.data) != member.crc:
                    problems.append(
                        Problem(shard.file, "CRC mismatch: the bytes are not what was written", member.name)
                    )
                if rows is None:
                    if member.name != METADATA_MEMBER:
                        problems.append(Problem(shard.file, f"first member is {member.name!r}, not {METADATA_MEMBER}"))
                        rows = {}
                    else:
                        inner_metadata = member.data
                        rows = _check_rows(shard, member.data.decode("utf-8", "replace"), prefix, problems)
                        keys = sorted(rows.values())
                        continue
                if rows.pop(member.name, None) is None:
                    problems.append(Problem(shard.file, "member has no row in metadata.jsonl", member.name))
                if deep:
                    ext = os.path.splitext(member.name)[1]
                    if not can_decode(ext):
                        result.not_decoded += 1
                    elif problem := decode_problem(io.BytesIO(member.data), ext):
                        problems.append(Problem(shard.file, problem, member.name))
                    else:
                        result.decoded += 1
            reader.drain()
        except ZipFormatError as exc:
            problems.append(Problem(shard.file, f"not a sound shard: {exc}"))
            reader.drain()
    if reader.sha256.hexdigest() != shard.sha256:
        problems.append(Problem(shard.file, "sha256 differs from the manifest's"))
    for name in sorted(rows or {}):
        problems.append(Problem(shard.file, "row in metadata.jsonl has no member", name))

    try:  # the central directory must describe the members met walking front to back
        with zipfile.ZipFile(path) as zf:
            listed = [(i.filename, i.file_size, i.CRC) for i in zf.infolist()]
        if listed != walked:
            problems.append(Problem(shard.file, "the central directory does not list the members the file holds"))
    except (zipfile.BadZipFile, OSError) as exc:
        problems.append(Problem(shard.file, f"central directory unreadable: {exc}"))

    result.rows = max(len(walked) - 1, 0)
    if result.rows != shard.rows:
        problems.append(Problem(shard.file, f"{result.rows} members, the manifest says {shard.rows} rows"))
    if keys:
        result.keys = (keys[0], keys[-1])
        if result.keys != (shard.first_key, shard.last_key):
            problems.append(
                Problem(
                    shard.file, f"keys run {keys[0]}..{keys[-1]}, the manifest says {shard.first_key}..{shard.last_key}"
                )
            )

    meta_path = os.path.join(out_dir, shard.metadata)
    try:
        with open(meta_path, "rb") as f:
            outer = f.read()
        if outer != inner_metadata:
            problems.append(Problem(shard.metadata, f"differs from the {METADATA_MEMBER} inside {shard.file}"))
        if hashlib.sha256(outer).hexdigest() != shard.metadata_sha256:
            problems.append(Problem(shard.metadata, "sha256 differs from the manifest's"))
    except FileNotFoundError:
        problems.append(Problem(shard.metadata, "missing"))
    return result


def _check_whole(out_dir: str, manifest: Manifest, results: list[_ShardResult], report: VerifyReport) -> None:
    named = {s.file for s in manifest.shards} | {s.metadata for s in manifest.shards}
    for sub, suffix in (("data", ".zip"), ("metadata", ".jsonl")):
        folder = os.path.join(out_dir, sub)
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if name.endswith(suffix) and f"{sub}/{name}" not in named:
                    report.problems.append(Problem(f"{sub}/{name}", f"not named in {MANIFEST_NAME}"))
    ranges = sorted((r.keys, s.file) for r, s in zip(results, manifest.shards, strict=True) if r.keys)
    for (a, file_a), (b, file_b) in itertools.pairwise(ranges):
        if b[0] <= a[1]:
            report.problems.append(Problem(file_b, f"its keys overlap those of {file_a}: rows are not unique"))
    totals = manifest.to_json()["totals"]
    if totals["rows"] != sum(s.rows for s in manifest.shards):
        report.problems.append(Problem(MANIFEST_NAME, "totals do not add up"))


def verify(
    out_dir: str, *, deep: bool = False, threads: int | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Check OUT_DIR against its manifest; return every problem found (the report is ``ok`` if none)."""
    progress = progress or NullProgress()
    started = time.perf_counter()
    out_dir = os.path.abspath(out_dir)
    if not os.path.isdir(out_dir):
        raise UsageError(f"OUT_DIR {out_dir!r} is not a folder")
    try:
        manifest = read_manifest(out_dir)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{os.path.join(out_dir, MANIFEST_NAME)} is not a shardkit manifest: {exc}") from None
    if manifest is None:
        raise UsageError(f"{out_dir} has no {MANIFEST_NAME}: nothing to verify (pack it first)")
    report = VerifyReport(out_dir=out_dir, shards=len(manifest.shards), deep=deep)
    cap = manifest.options.max_shard_bytes
    threads = threads or min(4, os.cpu_count() or 1)
    progress.start("verifying" + (" (deep)" if deep else ""), total=sum(s.bytes for s in manifest.shards), unit="B")
    results: list[_ShardResult] = []
    with interruptible_pool(threads, "verify") as pool:
        for shard, result in zip(
            manifest.shards,
            pool.map(lambda s: _check_shard(out_dir, s, cap, deep), manifest.shards),
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
    _check_whole(out_dir, manifest, results, report)
    report.seconds = time.perf_counter() - started
    return report
