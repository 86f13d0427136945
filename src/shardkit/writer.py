"""Stage 4: write one planned shard, atomically.

A ZIP shard is ``metadata.jsonl`` first (so a front-to-back reader knows every row before the
first image), then one stored member per row in key order; its rows are read from the staging
file in three streaming passes (CRC of metadata.jsonl, its bytes, the members), so memory does
not grow with rows per shard. A tar shard is ``<key>.json`` then ``<key><ext>`` per row; a
Parquet shard is row groups of rows (see :mod:`.parquetformat`). Files are read ahead on a
thread pool within a byte budget; a file larger than the budget is copied in chunks.

The shard file itself goes through :class:`~shardkit.shardfile.ShardFile` (aligned chunks, hashed
and written by a thread, ``O_DIRECT`` on local filesystems). Everything is written under
``.shardkit/tmp`` and renamed into ``data/`` and ``metadata/`` only when complete (after fsync),
so a run that dies never leaves a finished-looking shard that is not; for an OUT_DIR URL, the
finished files are uploaded instead (:mod:`.store`). The size is checked against the plan: a
shard that is not exactly as planned is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from .errors import ShardkitError
from .formats import METADATA_MEMBER, PARQUET, TAR, ZIP, format_named
from .manifest import ManifestShard
from .plan import ShardPlan
from .shardfile import ShardFile
from .staging import StagedRow, iter_published_lines, iter_staged
from .store import store_for
from .streamio import crc32
from .tarformat import TarWriter
from .threads import interruptible_pool
from .zipformat import ZipWriter

DEFAULT_READ_THREADS = 8
DEFAULT_PREFETCH_BYTES = 16 << 20
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
    format: str = "zip"
    max_shard_bytes: int = 0  # checked on the written file where sizes are estimates (Parquet)
    features: list[dict[str, Any]] | None = None  # the card's features (Parquet types its columns by them)
    # The shard's staged rows themselves, for an OUT_DIR URL: a worker then needs no access to
    # the client's staging file (``staging_path`` is unused, ``plan.offset`` counts from 0).
    staged: bytes | None = None


def metadata_path_for(plan: ShardPlan) -> str:
    return f"metadata/{plan.stem}.jsonl"


def _rows(job: ShardJob) -> Iterator[StagedRow]:
    return iter_staged(job.staging_path, job.plan.offset, job.plan.rows)


class _Ring:
    """A fixed buffer handed out in contiguous regions, freed in the order they were taken.

    The prefetcher takes a region per file and the writer consumes files in order, so regions
    come back first-in first-out. Reading into one long-lived buffer, instead of a new bytes
    object per file, keeps memory flat and avoids a page fault storm per file.
    """

    def __init__(self, capacity: int) -> None:
        self.buffer = memoryview(bytearray(capacity))
        self.capacity = capacity
        self._regions: deque[tuple[int, int]] = deque()  # (start, size), oldest first
        self._tail = 0

    def take(self, size: int) -> memoryview | None:
        """A region of ``size`` bytes, or None until older regions are released."""
        if size > self.capacity:
            return None
        if not self._regions:
            start = 0
        else:
            head = self._regions[0][0]
            # Wrapped when the newest region starts before the oldest one. (Comparing tail with
            # head cannot tell: after a wrap the tail can land exactly on the head.)
            wrapped = self._regions[-1][0] < head
            if not wrapped:  # free space is [tail, capacity) and [0, head)
                if self._tail + size <= self.capacity:
                    start = self._tail
                elif size <= head:
                    start = 0
                else:
                    return None
            elif self._tail + size <= head:  # free space is [tail, head)
                start = self._tail
            else:
                return None
        self._regions.append((start, size))
        self._tail = start + size
        return self.buffer[start : start + size]

    def release_oldest(self) -> None:
        self._regions.popleft()

    def reset(self) -> None:
        self._regions.clear()
        self._tail = 0


_local = threading.local()


def _ring_for(capacity: int) -> _Ring:
    """This thread's ring, reused from shard to shard (allocating 32 MB per shard costs a second)."""
    ring: _Ring | None = getattr(_local, "ring", None)
    if ring is None or ring.capacity != capacity:
        ring = _local.ring = _Ring(capacity)
    ring.reset()
    return ring


def _read_into(path: str, row: StagedRow, region: memoryview | None) -> int:
    """Read a file into its region (or, for a file too big to hold, only checksum it).

    Returns the CRC-32. Checks the file still has the size it had when checked.
    """
    crc = 0
    size = 0
    try:
        with open(path, "rb", buffering=0) as f:
            if region is not None:
                while size < len(region):
                    n = f.readinto(region[size:])
                    if not n:
                        break
                    size += n
                if size == len(region) and f.read(1):
                    size += 1  # grew: reported below
                crc = crc32(region[: min(size, len(region))])
            else:
                while chunk := f.read(_COPY_CHUNK):
                    size += len(chunk)
                    crc = crc32(chunk, crc)
    except OSError as exc:
        raise SourceChanged(f"{path} (metadata line {row.line}): cannot read: {exc.strerror}") from exc
    if size != row.size:
        raise SourceChanged(
            f"{path} (metadata line {row.line}): file changed while packing ({size} bytes, {row.size} when checked)"
        )
    return crc


def _prefetched(
    job: ShardJob, pool: ThreadPoolExecutor, ring: _Ring
) -> Iterator[tuple[StagedRow, str, memoryview | None, int]]:
    """Rows with their file bytes (a ring region) and CRC, read ahead, in order.

    A yielded region stays valid until the next item is asked for.
    """
    window: deque[tuple[StagedRow, str, memoryview | None, Future[int]]] = deque()
    big = max(ring.capacity // 2, 1)
    # Bounded in bytes by the ring and in count here: tiny files would otherwise put tens of
    # thousands of reads (and their bookkeeping) in flight.
    max_in_flight = job.read_threads * 8
    for row in _rows(job):
        path = os.path.join(job.images_dir, row.source)
        region = None
        while window and (
            len(window) >= max_in_flight or (row.size <= big and (region := ring.take(row.size)) is None)
        ):
            done_row, done_path, done_region, future = window.popleft()
            yield done_row, done_path, done_region, future.result()
            if done_region is not None:
                ring.release_oldest()
        if row.size <= big and region is None:
            region = ring.take(row.size)  # the window is empty: the ring is free
        window.append((row, path, region, pool.submit(_read_into, path, row, region)))
    while window:
        done_row, done_path, done_region, future = window.popleft()
        yield done_row, done_path, done_region, future.result()
        if done_region is not None:
            ring.release_oldest()


def _copy_streaming(zw: ZipWriter | TarWriter, path: str, row: StagedRow, crc: int) -> None:
    """Copy a big file in chunks; its CRC (computed just before) must still match."""
    check = 0
    with open(path, "rb") as f:
        remaining = row.size
        while remaining:
            chunk = f.read(min(_COPY_CHUNK, remaining))
            if not chunk:
                break
            zw.write_data(chunk)
            check = crc32(chunk, check)
            remaining -= len(chunk)
    if remaining or check != crc:
        raise SourceChanged(f"{path} (metadata line {row.line}): file changed while packing")


def _fsync_close(f: BinaryIO, fsync: bool) -> None:
    f.flush()
    if fsync:
        os.fsync(f.fileno())
    f.close()


class _MetadataFile:
    """``metadata/<stem>.jsonl``: every row's metadata line, hashed as written."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.digest = hashlib.sha256()

    def write(self, line: bytes) -> None:
        self.f.write(line)
        self.digest.update(line)


@contextlib.contextmanager
def _read_ahead(job: ShardJob) -> Iterator[Iterator[tuple[StagedRow, str, memoryview | None, int]]]:
    """The shard's rows with their files' bytes, read ahead on a thread pool into the ring buffer."""
    with interruptible_pool(job.read_threads, "shardkit-read") as pool:
        yield _prefetched(job, pool, _ring_for(job.prefetch_bytes))


def _write_zip(job: ShardJob, out: ShardFile, meta: _MetadataFile) -> int:
    plan = job.plan
    # Pass 1: size and CRC of metadata.jsonl, which goes first and so must be known first.
    meta_crc = 0
    meta_size = 0
    for line in iter_published_lines(job.staging_path, plan.offset, plan.rows):
        meta_crc = crc32(line, meta_crc)
        meta_size += len(line)
    zw = ZipWriter(out)
    # Pass 2: metadata.jsonl inside the ZIP, and the same bytes in metadata/.
    zw.start_member(METADATA_MEMBER, meta_size, meta_crc)
    for line in iter_published_lines(job.staging_path, plan.offset, plan.rows):
        zw.write_data(line)
        meta.write(line)
    # Pass 3: the members, read ahead on a thread pool into a fixed ring buffer.
    with _read_ahead(job) as files:
        for row, path, data, crc in files:
            zw.start_member(ZIP.member_name(row.key, row.ext), row.size, crc)
            if data is not None:
                zw.write_data(data)
            else:
                _copy_streaming(zw, path, row, crc)
    return zw.close()


def _write_tar(job: ShardJob, out: ShardFile, meta: _MetadataFile) -> int:
    tw = TarWriter(out)
    with _read_ahead(job) as files:
        for row, path, data, crc in files:
            line = row.metadata_line.encode("utf-8")
            tw.add(f"{row.key}.json", line)
            meta.write(line + b"\n")
            tw.start_member(TAR.member_name(row.key, row.ext), row.size)
            if data is not None:
                tw.write_data(data)
            else:
                _copy_streaming(tw, path, row, crc)
    return tw.close()


def _write_parquet(job: ShardJob, out: ShardFile, meta: _MetadataFile) -> int:
    from .parquetformat import ParquetShardWriter

    if not job.features:
        raise ShardkitError(f"internal error: no features to type {job.plan.name}'s columns")
    pw = ParquetShardWriter(out, job.features)
    with _read_ahead(job) as files:
        for row, path, data, crc in files:
            if data is not None:
                content = bytes(data)
            else:
                with open(path, "rb") as f:
                    content = f.read()
                if len(content) != row.size or crc32(content) != crc:
                    raise SourceChanged(f"{path} (metadata line {row.line}): file changed while packing")
            pw.add(row.metadata_line, content)
            meta.write(row.metadata_line.encode("utf-8") + b"\n")
    return pw.close()


_WRITERS = {ZIP.name: _write_zip, TAR.name: _write_tar, PARQUET.name: _write_parquet}


def write_shard(job: ShardJob) -> ManifestShard:
    """Write one shard and its metadata file; return what the manifest records of it."""
    plan = job.plan
    fmt = format_named(job.format)
    store = store_for(job.out_dir)
    tmp_dir = job.tmp_dir or os.path.join(tempfile.gettempdir(), "shardkit")  # "": this machine's own
    os.makedirs(tmp_dir, exist_ok=True)
    # Names of this attempt's own: a cluster may run a task again while a worker it gave up on
    # still writes (both attempts write the same bytes, each renames a whole file into place).
    attempt = secrets.token_hex(4)
    tmp_shard = os.path.join(tmp_dir, f"{plan.stem}{fmt.suffix}.{attempt}.partial")
    tmp_meta = os.path.join(tmp_dir, f"{plan.stem}.jsonl.{attempt}.partial")
    tmp_staged = os.path.join(tmp_dir, f"{plan.stem}.tsv.{attempt}.partial")
    meta_rel = metadata_path_for(plan)
    try:
        if job.staged is not None:
            with open(tmp_staged, "wb") as f:
                f.write(job.staged)
            job = replace(job, staging_path=tmp_staged, plan=replace(plan, offset=0), staged=None)
        with open(tmp_meta, "wb", buffering=1 << 20) as meta_out:
            meta = _MetadataFile(meta_out)
            out = ShardFile(tmp_shard, fsync=job.fsync)
            try:
                total = _WRITERS[fmt.name](job, out, meta)
                shard_sha256 = out.close()
            finally:
                out.abort()  # a no-op after close
            _fsync_close(meta_out, job.fsync)
        if fmt.exact and total != plan.bytes:
            raise ShardkitError(f"internal error: {plan.name} has {total} bytes, the plan said {plan.bytes}")
        if not fmt.exact and job.max_shard_bytes and total > job.max_shard_bytes:
            raise ShardkitError(
                f"{plan.name} came out at {total} bytes, over the max shard size {job.max_shard_bytes}"
                f" (Parquet sizes are estimated before writing; the estimate was {plan.bytes})."
                " Re-run with a smaller --target-shard-size."
            )
        store.put(tmp_meta, meta_rel, fsync=job.fsync)
        store.put(tmp_shard, plan.name, fsync=job.fsync)  # the shard exists only once it is whole
    except BaseException:
        # Reads still in flight may land in this ring after we leave: never reuse it.
        _local.ring = None
        for leftover in (tmp_shard, tmp_meta):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_staged)
    return ManifestShard(
        file=plan.name,
        metadata=meta_rel,
        rows=plan.rows,
        bytes=total,
        sha256=shard_sha256,
        metadata_sha256=meta.digest.hexdigest(),
        first_key=plan.first_key,
        last_key=plan.last_key,
    )
