"""``verify``: check a packed OUT_DIR against its manifest, shard by shard, member by member.

For every ZIP shard the manifest names, in one front-to-back read of the file:

* it exists, has the recorded size and sha256, and is within the manifest's cap;
* its ZIP structure is exactly what shardkit writes (stored members, each header byte for byte
  as the writer makes it, safe names, members back to back, a central directory listing exactly
  those members at their offsets, nothing after the end record), and every CRC matches;
* ``metadata.parquet`` (``metadata.jsonl`` before layout 4) is the first member, and its rows
  and the other members agree one to one: each row's ``file_name`` is a member, each member has
  a row, keys are unique, ascending, in the shard's range (its key prefix, or from its name to
  the next shard's: :class:`.plan.KeyRange`), within the recorded first/last key, and name
  their member; each row holds only the columns the features declare, each value of its
  declared type (:mod:`.rowcheck`, what every reader holds each row to);
* ``metadata/<stem>.jsonl`` holds the same rows as ``metadata.parquet`` (values compared as
  typed; before layout 4, the same bytes as ``metadata.jsonl``);
* with ``deep``, every image decodes (Pillow) and every audio file libsndfile reads decodes (soundfile;
  other audio is counted, not decoded).

A tar shard gets the same checks in its terms: ustar headers exactly as shardkit writes them,
each member's CRC record matching its bytes (shards from before CRC records have none), nothing
after the end blocks, each ``<key>.json`` followed by the file its ``file_name`` names, the .json
members' bytes equal to ``metadata/<stem>.jsonl``, and the manifest's index of the shard (its
``row_offsets``, where a cut piece is read from) at the rows' real first headers. A Parquet
shard is read row group by row group: each row's path and typed fields must equal its line in
``metadata/<stem>.jsonl``, keys as above.

And for the whole: shards' keys as read do not overlap, ``data/`` and ``metadata/`` hold
nothing the manifest does not name, and ``metadata.parquet`` holds every shard's rows, in order,
within its key range. Problems are collected, not raised: each names its file (and member), so
one run lists everything wrong. The manifest itself is checked whole first
(:func:`.manifest.read_manifest_at`: its fields, totals, splits and recorded key ranges); one that
is not shardkit's is one error line, and no shard is read.

The walk over one shard is its format's (:meth:`.formats.base.ShardFormat.verify_shard`); this
module runs the walks over the manifest, gives them the checks every format shares (the rows'
keys and names, the deep decode) and makes the report.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from .decode import can_decode, decode_problem
from .errors import UsageError, listed, source_note
from .formats import ShardFormat
from .formats.base import Walk, source_of_row
from .hashing import sha256_stream
from .location import (
    Location,
    bare_hub_id,
    bounded_hub_requests,
    network_timeout,
)
from .manifest import MANIFEST_NAME, Manifest, ManifestShard, read_manifest_at, read_published_rows
from .outdir import unnamed_files
from .progress import NullProgress, Progress
from .rowcheck import DatasetRows, ShardRowCheck
from .rowrules import SOURCE_PATH_COLUMN
from .streamio import jsonl_lines
from .table import table_problems
from .threads import interruptible_pool


@dataclass(frozen=True)
class Problem:
    file: str  # "data/3f.zip", "metadata/3f.jsonl", "shards.json"
    message: str
    member: str | None = None
    #: The row's source_path (--keep-source-path), where the problem is one row's and it has one:
    #: only ever shown, as :func:`.errors.source_note` shows it.
    source: str | None = None
    #: A file the deep check could not decode: where every problem is one, the shards are as
    #: packed (their sha256 agrees) and the input held the files so (:func:`repair_advice`).
    undecodable: bool = False

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
    #: One line of what to do about the problems (:func:`repair_advice`); None when there are none.
    advice: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["seconds"] = round(self.seconds, 3)
        data["problems"] = [{**asdict(p), "text": p.format()} for p in self.problems]
        return data


@dataclass
class _ShardResult:
    rows: int = 0
    decoded: int = 0
    not_decoded: int = 0
    keys: tuple[str, str] | None = None
    problems: list[Problem] = field(default_factory=list)


def _text_lines(data: str | bytes) -> list[str | None]:
    """JSON lines (:func:`.streamio.jsonl_lines`), those of ``bytes`` decoded one by one (None: not UTF-8)."""
    if isinstance(data, str):
        return list(jsonl_lines(data))
    lines: list[str | None] = []
    for line in data.removesuffix(b"\n").split(b"\n") if data else []:
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(None)
    return lines


def _check_rows(
    shard: ManifestShard, data: str | bytes, rows_check: ShardRowCheck, problems: list[Problem], where_name: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Parse metadata lines (``bytes``: each must be UTF-8) and hold each row to the manifest
    (:mod:`.rowcheck`); return file_name -> key, and file_name -> source_path for the rows that
    have one. Row problems go to ``problems``."""
    rows: dict[str, str] = {}
    sources: dict[str, str] = {}
    for number, line in enumerate(_text_lines(data), 1):
        where = f"{where_name} line {number}"
        if line is None:
            problems.append(Problem(shard.file, "not UTF-8", where))
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            problems.append(Problem(shard.file, f"invalid JSON: {exc}", where))
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
            problems.append(Problem(shard.file, "row is not an object with a 'file_name'", where))
            continue
        name, source = row["file_name"], source_of_row(row, SOURCE_PATH_COLUMN)
        if name in rows:
            problems.append(Problem(shard.file, f"file_name {name!r} appears twice", where, source))
        if (problem := rows_check.problem(row)) is not None:
            problems.append(Problem(shard.file, problem, where, source))
            if not isinstance(row.get("key"), str):
                continue
        rows[name] = row["key"]
        if source is not None:
            sources[name] = source
    return rows, sources


def _decode(result: _ShardResult, shard: ManifestShard, name: str, data: bytes, source: str | None) -> None:
    """The deep check of one file (its row's ``source`` for the message)."""
    ext = os.path.splitext(name)[1]
    if not can_decode(ext):
        result.not_decoded += 1
    elif problem := decode_problem(io.BytesIO(data), ext):
        result.problems.append(Problem(shard.file, problem, name, source, undecodable=True))
    else:
        result.decoded += 1


@dataclass
class _Check:
    """One shard being verified, as its format's walk sees it (:class:`~.formats.base.ShardCheck`)."""

    location: Location
    shard: ManifestShard
    fmt: ShardFormat
    rows_check: ShardRowCheck
    deep: bool
    result: _ShardResult
    feature_list: list[dict[str, Any]]

    @property
    def shard_file(self) -> str:
        return self.shard.file

    @property
    def features(self) -> list[dict[str, Any]]:
        return self.feature_list

    @property
    def metadata_file(self) -> str:
        return self.shard.metadata

    def open(self, relative: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        if relative == self.shard.metadata:  # read whole by the walks: never more than a metadata file
            return contextlib.nullcontext(io.BytesIO(read_published_rows(self.location, self.shard)))
        return self.location.open_random(relative)

    def problem(
        self, message: str, member: str | None = None, source: str | None = None, *, file: str | None = None
    ) -> None:
        self.result.problems.append(Problem(file or self.shard.file, message, member, source))

    def check_rows(self, data: str | bytes, where: str) -> tuple[dict[str, str], dict[str, str]]:
        return _check_rows(self.shard, data, self.rows_check, self.result.problems, where)

    def file(self, name: str, data: bytes, source: str | None) -> None:
        if self.deep:
            _decode(self.result, self.shard, name, data, source)


def walk_shard(
    location: Location,
    shard: ManifestShard,
    fmt: ShardFormat,
    rows_check: ShardRowCheck,
    features: list[dict[str, Any]],
    *,
    deep: bool = True,
) -> tuple[Walk, list[Problem]]:
    """``fmt.verify_shard`` on one shard at ``location`` as verify runs it, without verify's
    checks of the walk against the manifest: the walk and the problems found on the way. The
    seam through which a format's author tests its verify_shard (tests/test_format_interface.py)."""
    result = _ShardResult()
    return fmt.verify_shard(_Check(location, shard, fmt, rows_check, deep, result, features)), result.problems


def _check_shard(
    location: Location, shard: ManifestShard, manifest: Manifest, rules: DatasetRows, deep: bool
) -> _ShardResult:
    result = _ShardResult()
    problems = result.problems
    rows_check = rules.shard(shard.file, shard.file, file_column=None)
    cap = manifest.options.max_shard_bytes
    fmt = manifest.options.shard_format
    size = location.size(shard.file)
    if size is None:
        problems.append(Problem(shard.file, "missing"))
        return result
    if size != shard.bytes:
        problems.append(Problem(shard.file, f"{size} bytes, the manifest says {shard.bytes}"))
    if size > cap:
        problems.append(Problem(shard.file, f"{size} bytes, over the cap of {cap}"))

    walk = fmt.verify_shard(_Check(location, shard, fmt, rows_check, deep, result, manifest.features))
    if walk.sha256 != shard.sha256:
        problems.append(Problem(shard.file, "sha256 differs from the manifest's"))
    result.rows = walk.members
    if result.rows != shard.rows:
        problems.append(Problem(shard.file, f"{result.rows} members, the manifest says {shard.rows} rows"))
    index_problem = _index_problem(shard, walk.row_starts) if walk.row_starts is not None else None
    if index_problem is not None:
        problems.append(Problem(shard.file, index_problem))
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
        outer = read_published_rows(location, shard)
        if walk.metadata is not None and outer != walk.metadata:
            problems.append(Problem(shard.metadata, f"differs from {fmt.metadata_inside} {shard.file}"))
        if hashlib.sha256(outer).hexdigest() != shard.metadata_sha256:
            problems.append(Problem(shard.metadata, "sha256 differs from the manifest's"))
    except FileNotFoundError:
        problems.append(Problem(shard.metadata, "missing"))
    return result


def _index_problem(shard: ManifestShard, row_starts: list[int]) -> str | None:
    """Where the manifest's index of a shard (``row_offsets``) differs from where its rows begin,
    as walked; None where it has none."""
    if not shard.row_offsets:
        return None
    indexed = row_starts[:: shard.row_offsets_every]
    for point, (recorded, real) in enumerate(zip(shard.row_offsets, indexed, strict=False)):
        if recorded != real:
            row = point * shard.row_offsets_every
            return f"the manifest's row_offsets put row {row} at byte {recorded}; it begins at byte {real}"
    if len(indexed) != len(shard.row_offsets):
        return f"the manifest's row_offsets index {len(shard.row_offsets)} rows; the shard's rows make {len(indexed)}"
    return None


def check_whole(location: Location, manifest: Manifest, results: list[_ShardResult], report: VerifyReport) -> None:
    """The checks of the dataset as a whole, after every shard's (a seam: a test stops verify here)."""
    named = {s.file for s in manifest.shards} | {s.metadata for s in manifest.shards}
    sizes = {rel: size for sub in ("data", "metadata") for rel, size in location.find(sub).items()}
    present = sorted(sizes)
    report.problems.extend(Problem(rel, f"not named in {MANIFEST_NAME}") for rel in unnamed_files(present, named))
    # A nested folder's metadata file holds its shards' parts and nothing else.
    ends: dict[str, int] = {}
    for shard in manifest.shards:
        if shard.metadata_range is not None:
            ends[shard.metadata] = max(ends.get(shard.metadata, 0), shard.metadata_range[1])
    for rel, end in ends.items():
        if sizes.get(rel, end) > end:
            report.problems.append(Problem(rel, f"{sizes[rel] - end} bytes after the last shard's rows"))
    # Each split's shards hold key ranges that do not overlap (splits are cut by key apart).
    ranges = sorted((s.split, r.keys, s.file) for r, s in zip(results, manifest.shards, strict=True) if r.keys)
    for (split_a, a, file_a), (split_b, b, file_b) in itertools.pairwise(ranges):
        if split_a == split_b and b[0] <= a[1]:
            report.problems.append(Problem(file_b, f"its keys overlap those of {file_a}: rows are not unique"))
    if manifest.metadata_table is not None:
        try:
            with location.open_random(manifest.metadata_table) as f:
                rows = [(s.file, s.rows, s.first_key, s.last_key) for s in manifest.shards]
                found = table_problems(f, rows)
            with location.open_random(manifest.metadata_table) as f:
                digest = sha256_stream(f)
        except FileNotFoundError:
            found = ["missing"]
        else:
            if not found and manifest.metadata_table_sha256 not in (None, digest):
                found = ["sha256 differs from the manifest's: it does not hold the packed rows"]
        report.problems.extend(Problem(manifest.metadata_table, message) for message in found)


def verify(
    out_dir: str, *, deep: bool = False, threads: int | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Check OUT_DIR (a folder, the fsspec URL a pack wrote to, or a Hub dataset:
    ``hf://datasets/ns/name``, or ``ns/name`` when no folder of that name is here) against its
    manifest; return every problem found (the report is ``ok`` if none). At ``hf://``
    huggingface_hub's requests are bounded as a push's are (:func:`.location.bounded_hub_requests`)."""
    location = Location.out_dir(out_dir, writing=False)
    hub = location.url.startswith("hf://")
    with bounded_hub_requests(network_timeout()) if hub else contextlib.nullcontext():
        return _verify(location, deep, threads, progress, given=out_dir)


def _verify(
    location: Location, deep: bool, threads: int | None, progress: Progress | None, *, given: str
) -> VerifyReport:
    progress = progress or NullProgress()
    started = time.perf_counter()
    out_dir = location.url
    if location.is_local and not os.path.isdir(out_dir):  # a URL has no folder to check: its manifest tells
        raise UsageError(f"OUT_DIR {out_dir!r} is not a folder")
    manifest = read_manifest_at(location)
    if manifest is None:
        if bare_hub_id(given):  # the user may have meant a folder: say where it was looked for
            from huggingface_hub import constants

            raise UsageError(
                f"no folder {given} here, and the Hub dataset {given} ({out_dir} at {constants.ENDPOINT}) has no"
                f" {MANIFEST_NAME}: nothing to verify (check the folder's name, or pack and push it first)"
            )
        raise UsageError(f"{out_dir} has no {MANIFEST_NAME}: nothing to verify (pack it first)")
    report = VerifyReport(out_dir=out_dir, shards=len(manifest.shards), deep=deep)
    rules = DatasetRows(manifest)
    threads = threads or min(4, os.cpu_count() or 1)
    progress.start("verifying" + (" (deep)" if deep else ""), total=sum(s.bytes for s in manifest.shards), unit="B")
    results: list[_ShardResult] = []
    with interruptible_pool(threads, "verify") as pool:
        for shard, result in zip(
            manifest.shards,
            pool.map(lambda s: _check_shard(location, s, manifest, rules, deep), manifest.shards),
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
    check_whole(location, manifest, results, report)
    report.advice = repair_advice(location, manifest, report.problems)
    report.seconds = time.perf_counter() - started
    return report


#: The most files :func:`repair_advice` names in its ``rm`` (the problems above name them all).
ADVICE_FILES_SHOWN = 8


def repair_advice(location: Location, manifest: Manifest, problems: list[Problem]) -> str | None:
    """One line of what to do about ``problems`` (None if there are none). What it says was tried
    (tests/test_paths.py): a re-run of the same pack writes again every shard that is missing, or
    whose size or modification time changed since it was written (and metadata.parquet, every
    time), and keeps the others by the sha256 recorded then (:class:`.outdir.HashCache`); a shard
    damaged in place can keep both, so the damaged files are to be removed first. A Hub dataset
    (or an http(s) copy) is repaired from a local OUT_DIR: ``shardkit push`` uploads every file
    whose sha256 differs from the Hub's."""
    if not problems:
        return None
    repo = re.fullmatch(r"hf://datasets/([^@/]+/[^@/]+).*", location.url)
    read_only = bool(repo) or not location.repaired_in_place  # repaired from a local copy
    publish = (
        f"`shardkit push FOLDER --repo {repo.group(1)}`: push uploads every file whose sha256 differs"
        if repo
        else f"publish FOLDER again where {location.url} is served from"
    )
    if all(p.undecodable for p in problems):  # (a damaged shard would also differ from its sha256)
        pack_again = "the pack into its local FOLDER" if read_only else "the pack command"
        then = f", then {publish}" if read_only else ""
        return (
            "to repair: the shards are as packed (each has its recorded sha256), so the input gave these files so:"
            " replace or drop them in the input (the member is named by its row's key; --keep-source-path names the"
            f" file), then re-run {pack_again} with --update (it rewrites the shards whose rows changed){then};"
            " `pack-shards --check-images` refuses such files before packing"
        )
    named = {s.file for s in manifest.shards} | {s.metadata for s in manifest.shards}
    unnamed = sorted({p.file for p in problems if p.file not in named and p.file != manifest.metadata_table})
    missing = {p.file for p in problems if p.file in named and p.message == "missing"}
    damaged = sorted({p.file for p in problems if p.file in named} - missing)
    steps = []
    if unnamed:
        where = "the repo" if read_only else "data/ and metadata/"
        steps.append(f"move {listed(unnamed, 3)} out of {where} (shardkit removes no file it did not write)")
        if len(unnamed) == len({p.file for p in problems}):
            return "to repair: " + steps[0]
    if read_only:
        steps.append(
            "pack the same input into a local FOLDER (or repair the one it was packed in, as `shardkit verify FOLDER`"
            f" says), then {publish}"
        )
        return "to repair: " + "; ".join(steps)
    # What a re-run of pack compares a kept shard by, besides its presence (see outdir.shard_problem,
    # url_shard_problem): a local file's size and time (its hash is read again only if they changed),
    # an object's size.
    kept_by, changed, them = (
        ("size and time are", "size or time", "them") if location.is_local else ("size is", "size", "it")
    )
    if damaged:
        paths = [location.where(rel) for rel in damaged]
        shown = " ".join(map(shlex.quote, paths)) if len(paths) <= ADVICE_FILES_SHOWN else "the files named above"
        verb = "rm" if location.is_local else "remove"
        steps.append(f"{verb} {shown} (pack keeps a shard whose {kept_by} as written, and damage can leave {them} so)")
    steps.append(
        f"re-run the same pack command: it writes again every shard that is missing or whose {changed} changed,"
        " and keeps the others"
    )
    return "to repair: " + "; then ".join(steps)
