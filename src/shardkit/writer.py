"""Stage 4: write one planned shard, atomically.

A shard is ``metadata.jsonl`` first (so a front-to-back reader knows every row before the
first image), then one stored member per row in key order. The shard's rows are read from
the staging file in three streaming passes (CRC of metadata.jsonl, its bytes, the members), so
memory does not grow with rows per shard. Files are read ahead on a thread pool within a byte
budget; a file larger than the budget is copied in chunks.

Everything is written under ``.shardkit/tmp`` and renamed into ``data/`` and ``metadata/`` only
when complete (after fsync), so a run that dies never leaves a finished-looking shard that is
not. The size is checked against the plan: a shard that is not exactly as planned is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass

from .errors import ShardkitError
from .metadata import member_name
from .plan import METADATA_MEMBER, ShardPlan
from .staging import StagedRow, iter_staged
from .zipformat import ZipWriter

DEFAULT_READ_THREADS = 8
DEFAULT_PREFETCH_BYTES = 32 << 20
_COPY_CHUNK = 4 << 20


class SourceChanged(ShardkitError):
    """A file changed between the check and the write."""


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker (thread, process, or remote) needs to write one shard."""

    plan: ShardPlan
    staging_path: str
    images_dir: str
    out_dir: str
    tmp_dir: str
    read_threads: int = DEFAULT_READ_THREADS
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES
    fsync: bool = True


@dataclass(frozen=True)
class ShardResult:
    file: str  # "data/3f.zip", relative to OUT_DIR
    metadata: str  # "metadata/3f.jsonl"
    rows: int
    bytes: int
    sha256: str
    metadata_sha256: str
    first_key: str
    last_key: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def metadata_path_for(plan: ShardPlan) -> str:
    return f"metadata/{plan.stem}.jsonl"


def _rows(job: ShardJob) -> Iterator[StagedRow]:
    return iter_staged(job.staging_path, job.plan.offset, job.plan.rows)


def _read_file(path: str, row: StagedRow, whole: bool) -> tuple[bytes | None, int]:
    """Read a file (or only checksum it, if too big to hold), checking it still has its size."""
    try:
        with open(path, "rb") as f:
            if whole:
                data = f.read()
                size, crc = len(data), zlib.crc32(data)
            else:
                data, size, crc = None, 0, 0
                while chunk := f.read(_COPY_CHUNK):
                    size += len(chunk)
                    crc = zlib.crc32(chunk, crc)
    except OSError as exc:
        raise SourceChanged(f"{path} (metadata line {row.line}): cannot read: {exc.strerror}") from exc
    if size != row.size:
        raise SourceChanged(
            f"{path} (metadata line {row.line}): file changed while packing ({size} bytes, {row.size} when checked)"
        )
    return data, crc


def _prefetched(job: ShardJob, pool: ThreadPoolExecutor) -> Iterator[tuple[StagedRow, str, bytes | None, int]]:
    """Rows with their file bytes and CRC, read ahead within the byte budget, in order."""
    window: deque[tuple[StagedRow, str, Future[tuple[bytes | None, int]]]] = deque()
    in_flight = 0
    big = max(job.prefetch_bytes // 2, 1)
    for row in _rows(job):
        path = os.path.join(job.images_dir, row.source)
        whole = row.size <= big
        while window and in_flight + row.size > job.prefetch_bytes:
            done_row, done_path, future = window.popleft()
            in_flight -= done_row.size if done_row.size <= big else 0
            yield (done_row, done_path, *future.result())
        window.append((row, path, pool.submit(_read_file, path, row, whole)))
        in_flight += row.size if whole else 0
    while window:
        done_row, done_path, future = window.popleft()
        yield (done_row, done_path, *future.result())


def _copy_streaming(zw: ZipWriter, path: str, row: StagedRow, crc: int) -> None:
    """Copy a big file in chunks; its CRC (computed just before) must still match."""
    check = 0
    with open(path, "rb") as f:
        remaining = row.size
        while remaining:
            chunk = f.read(min(_COPY_CHUNK, remaining))
            if not chunk:
                break
            zw.write_data(chunk)
            check = zlib.crc32(chunk, check)
            remaining -= len(chunk)
    if remaining or check != crc:
        raise SourceChanged(f"{path} (metadata line {row.line}): file changed while packing")


def _fsync_close(f: object, fsync: bool) -> None:
    f.flush()  # type: ignore[attr-defined]
    if fsync:
        os.fsync(f.fileno())  # type: ignore[attr-defined]
    f.close()  # type: ignore[attr-defined]


def write_shard(job: ShardJob) -> ShardResult:
    """Write one shard and its metadata file; return what the manifest records of it."""
    plan = job.plan
    os.makedirs(job.tmp_dir, exist_ok=True)
    tmp_zip = os.path.join(job.tmp_dir, f"{plan.stem}.zip.partial")
    tmp_meta = os.path.join(job.tmp_dir, f"{plan.stem}.jsonl.partial")
    final_zip = os.path.join(job.out_dir, plan.name)
    meta_rel = metadata_path_for(plan)
    final_meta = os.path.join(job.out_dir, meta_rel)
    try:
        # Pass 1: size and CRC of metadata.jsonl, which goes first and so must be known first.
        meta_crc = 0
        meta_size = 0
        for row in _rows(job):
            line = (row.metadata_line + "\n").encode("utf-8")
            meta_crc = zlib.crc32(line, meta_crc)
            meta_size += len(line)

        digest = hashlib.sha256()
        meta_digest = hashlib.sha256()
        with open(tmp_zip, "wb", buffering=1 << 20) as out, open(tmp_meta, "wb", buffering=1 << 20) as meta_out:
            zw = ZipWriter(out, sink=digest.update)
            # Pass 2: metadata.jsonl inside the ZIP, and the same bytes in metadata/.
            zw.start_member(METADATA_MEMBER, meta_size, meta_crc)
            for row in _rows(job):
                line = (row.metadata_line + "\n").encode("utf-8")
                zw.write_data(line)
                meta_out.write(line)
                meta_digest.update(line)
            # Pass 3: the members, read ahead on a thread pool.
            with ThreadPoolExecutor(max_workers=job.read_threads) as pool:
                for row, path, data, crc in _prefetched(job, pool):
                    zw.start_member(member_name(row.key, row.ext), row.size, crc)
                    if data is not None:
                        zw.write_data(data)
                    else:
                        _copy_streaming(zw, path, row, crc)
            total = zw.close()
            _fsync_close(meta_out, job.fsync)
            _fsync_close(out, job.fsync)
        if total != plan.bytes:
            raise ShardkitError(f"internal error: {plan.name} has {total} bytes, the plan said {plan.bytes}")
        os.makedirs(os.path.dirname(final_meta), exist_ok=True)
        os.makedirs(os.path.dirname(final_zip), exist_ok=True)
        os.replace(tmp_meta, final_meta)
        os.replace(tmp_zip, final_zip)  # the shard exists only once it is whole
    except BaseException:
        for leftover in (tmp_zip, tmp_meta):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        raise
    return ShardResult(
        file=plan.name,
        metadata=meta_rel,
        rows=plan.rows,
        bytes=total,
        sha256=digest.hexdigest(),
        metadata_sha256=meta_digest.hexdigest(),
        first_key=plan.first_key,
        last_key=plan.last_key,
    )
