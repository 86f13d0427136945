"""Stage 4: write one planned shard, atomically.

A ZIP shard is ``metadata.jsonl`` first (so a front-to-back reader knows every row before the
first image), then one stored member per row in key order; its rows are read from the staging
file in three streaming passes (CRC of metadata.jsonl, its bytes, the members), so memory does
not grow with rows per shard. A tar shard is ``<key>.json`` then ``<key><ext>`` per row; a
Parquet shard is row groups of rows (see :mod:`.parquetformat`). The files are read by
:mod:`.fetch`: inline while they are in the page cache, else ahead on a thread pool within a
byte budget; a file larger than the budget is copied in chunks.

The shard file itself goes through :class:`~shardkit.shardfile.ShardFile` (aligned chunks, hashed
and written by threads, ``O_DIRECT`` on local filesystems). Everything is written under
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
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from .errors import ShardkitError, naming
from .fetch import BigFile, Fetched, forget_ring, read_in_order
from .formats import METADATA_MEMBER, PARQUET, TAR, ZIP, format_named
from .manifest import ManifestShard
from .plan import ShardPlan
from .shardfile import ShardFile
from .staging import iter_published_lines, iter_staged
from .store import store_for
from .streamio import crc32
from .tarformat import TarWriter
from .zipformat import ZipWriter

DEFAULT_READ_THREADS = 8
DEFAULT_PREFETCH_BYTES = 16 << 20


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
    max_shard_bytes: int | None = None  # checked on the written file where sizes are estimates (Parquet)
    features: list[dict[str, Any]] | None = None  # the card's features (Parquet types its columns by them)
    # The shard's staged rows themselves, for an OUT_DIR URL: a worker then needs no access to
    # the client's staging file (``staging_path`` is unused, ``plan.offset`` counts from 0).
    staged: bytes | None = None


def metadata_path_for(plan: ShardPlan) -> str:
    """``data/[<split>/]<stem><suffix>``'s metadata file: ``metadata/[<split>/]<stem>.jsonl``."""
    return f"metadata/{plan.name.removeprefix('data/').rsplit('.', 1)[0]}.jsonl"


def _read_ahead(job: ShardJob) -> contextlib.AbstractContextManager[Iterator[Fetched]]:
    """The shard's rows with their files' bytes and CRC-32, in order (see :mod:`.fetch`)."""
    rows = iter_staged(job.staging_path, job.plan.offset, job.plan.rows)
    return read_in_order(rows, job.images_dir, threads=job.read_threads, ring_bytes=job.prefetch_bytes)


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
        for row, _, data, crc in files:
            if isinstance(data, BigFile):
                with data:
                    zw.start_member(ZIP.member_name(row.key, row.ext), row.size, data.crc)
                    data.copy_to(zw.write_data)
            else:
                zw.start_member(ZIP.member_name(row.key, row.ext), row.size, crc)
                zw.write_data(data)
    return zw.close()


def _write_tar(job: ShardJob, out: ShardFile, meta: _MetadataFile) -> int:
    tw = TarWriter(out)
    with _read_ahead(job) as files:
        for row, _, data, crc in files:
            line = row.metadata_line.encode("utf-8")
            tw.add(f"{row.key}.json", line)
            meta.write(line + b"\n")
            if isinstance(data, BigFile):
                with data:
                    tw.start_member(TAR.member_name(row.key, row.ext), row.size, data.crc)
                    data.copy_to(tw.write_data)
            else:
                tw.start_member(TAR.member_name(row.key, row.ext), row.size, crc)
                tw.write_data(data)
    return tw.close()


def _write_parquet(job: ShardJob, out: ShardFile, meta: _MetadataFile) -> int:
    from .parquetformat import ParquetShardWriter

    if not job.features:
        raise ShardkitError(f"internal error: no features to type {job.plan.name}'s columns")
    pw = ParquetShardWriter(out, job.features)
    with _read_ahead(job) as files:
        for row, _, data, _ in files:
            if isinstance(data, BigFile):
                with data:
                    content = data.read_all()
            else:
                content = bytes(data)
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
        meta_out = open(tmp_meta, "wb", buffering=1 << 20)  # noqa: SIM115 - closed below, never over an error
        try:
            meta = _MetadataFile(meta_out)
            out = ShardFile(tmp_shard, fsync=job.fsync)
            try:
                total = _WRITERS[fmt.name](job, out, meta)
                shard_sha256 = out.close()
            finally:
                out.abort()  # a no-op after close
            _fsync_close(meta_out, job.fsync)
        except OSError as exc:  # a buffered file's error (disk full) does not name the file
            raise naming(exc, tmp_meta) from None
        finally:
            # Closing flushes the buffer, which on a full disk fails again: that second error
            # must not replace the first (which names the file).
            with contextlib.suppress(OSError):
                meta_out.close()
        if fmt.exact and total != plan.bytes:
            raise ShardkitError(f"internal error: {plan.name} has {total} bytes, the plan said {plan.bytes}")
        if not fmt.exact and job.max_shard_bytes is not None and total > job.max_shard_bytes:
            raise ShardkitError(
                f"{plan.name} came out at {total} bytes, over the max shard size {job.max_shard_bytes}"
                f" (Parquet sizes are estimated before writing; the estimate was {plan.bytes})."
                " Re-run with a smaller --target-shard-size."
            )
        store.put(tmp_meta, meta_rel, fsync=job.fsync)
        store.put(tmp_shard, plan.name, fsync=job.fsync)  # the shard exists only once it is whole
    except BaseException:
        # Reads still in flight may land in this ring after we leave: never reuse it.
        forget_ring()
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
        split=plan.split,
        input_sha256=plan.input_sha256,
    )
