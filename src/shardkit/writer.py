"""Write one planned shard, atomically.

The layout inside the shard is the format's (:meth:`.formats.base.ShardFormat.write`, in
:mod:`.formats.zip`, :mod:`.formats.tar`, :mod:`.formats.parquet`); this module is the frame
around it: the rows from the staging file, their files read by :mod:`.readahead` (into a fixed
ring buffer, ahead of the writer; a file larger than half of it is copied in chunks), and the
temporary files put into place.

The shard file itself goes through :class:`~shardkit.shardfile.ShardFile` (aligned chunks, hashed
and written by threads, ``O_DIRECT`` on local filesystems). Everything is written under
``.shardkit/tmp`` and renamed into ``data/`` and ``metadata/`` only when complete (after fsync),
so a run that dies never leaves a finished-looking shard that is not; for an OUT_DIR URL, the
finished files are uploaded instead (:mod:`.location`). The size is checked against the plan: a
shard that is not exactly as planned is an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from .errors import ShardkitError, naming, naming_errors
from .formats import format_named
from .formats.base import RowFile
from .location import Location
from .manifest import ManifestShard, metadata_file_of, rows_written_to
from .plan import ShardPlan
from .readahead import BigFile, Fetched, forget_ring, read_in_order
from .shardfile import ShardFile
from .staging import StagedRow, iter_published_lines, iter_staged

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
    #: The shard's metadata table, for formats that hold one (ZIP's metadata.parquet), encoded by
    #: the packer: a file in its staging folder, or for an OUT_DIR URL the bytes themselves.
    table_path: str = ""
    table: bytes | None = None


def fsync_close(f: BinaryIO, fsync: bool) -> None:
    """Flush, fsync when asked, close (a seam: a test's Dask worker slows it to stop a task there)."""
    f.flush()
    if fsync:
        os.fsync(f.fileno())
    f.close()


class _RowFile:
    """A row and its file's bytes as :mod:`.readahead` read them (:class:`~.formats.base.RowFile`)."""

    def __init__(self, row: StagedRow, data: memoryview | BigFile, crc: int) -> None:
        self.key, self.ext, self.size, self.metadata_line = row.key, row.ext, row.size, row.metadata_line
        self._data = data
        # A big file's CRC is known once it is open: the caller opens it before handing it over.
        self.crc = data.crc if isinstance(data, BigFile) else crc

    def copy_to(self, write: Callable[[bytes | memoryview], object]) -> None:
        if isinstance(self._data, BigFile):
            self._data.copy_to(write)
        else:
            write(self._data)

    def read_all(self) -> bytes:
        return self._data.read_all() if isinstance(self._data, BigFile) else bytes(self._data)


class _ShardRows:
    """One job's rows for the format's writer (:class:`~.formats.base.ShardRows`): the staged
    lines, the files read ahead, and ``metadata/<stem>.jsonl`` hashed as it is written."""

    def __init__(self, job: ShardJob, meta: BinaryIO) -> None:
        self.job = job
        self.name = job.plan.name
        self.features = job.features
        self.planned_bytes = job.plan.bytes
        self._meta = meta
        self.digest = hashlib.sha256()
        self.row_offsets_every = 0
        self.row_offsets: tuple[int, ...] = ()

    def published_lines(self) -> Iterator[bytes]:
        return iter_published_lines(self.job.staging_path, self.job.plan.offset, self.job.plan.rows)

    @contextlib.contextmanager
    def files(self) -> Iterator[Iterator[RowFile]]:
        job = self.job
        rows = iter_staged(job.staging_path, job.plan.offset, job.plan.rows)
        ring = job.prefetch_bytes
        with contextlib.ExitStack() as stack:
            fetched = stack.enter_context(
                read_in_order(rows, job.images_dir, threads=job.read_threads, ring_bytes=ring)
            )
            yield stack.enter_context(contextlib.closing(_opened_files(fetched)))

    def record_line(self, line: bytes) -> None:
        self._meta.write(line)
        self.digest.update(line)

    def record_row_offsets(self, every: int, offsets: list[int]) -> None:
        self.row_offsets_every, self.row_offsets = every, tuple(offsets)

    def metadata_table(self) -> bytes:
        if self.job.table is not None:
            return self.job.table
        with open(self.job.table_path, "rb") as f:
            return f.read()


def _opened_files(fetched: Iterator[Fetched]) -> Generator[RowFile, None, None]:
    """Each fetched row as a :class:`_RowFile`; a file too big for the ring stays open (its one
    descriptor) while the format writes it, until the next row is asked for."""
    for row, _, data, crc in fetched:
        if isinstance(data, BigFile):
            with data:
                yield _RowFile(row, data, crc)
        else:
            yield _RowFile(row, data, crc)


def write_shard(job: ShardJob) -> ManifestShard:
    """Write one shard and its metadata file; return what the manifest records of it."""
    plan = job.plan
    fmt = format_named(job.format)
    location = Location.out_dir(job.out_dir)
    tmp_dir = job.tmp_dir or os.path.join(tempfile.gettempdir(), "shardkit")  # "": this machine's own
    os.makedirs(tmp_dir, exist_ok=True)
    # Names of this attempt's own: a cluster may run a task again while a worker it gave up on
    # still writes (both attempts write the same bytes, each renames a whole file into place).
    attempt = secrets.token_hex(4)
    tmp_shard = os.path.join(tmp_dir, f"{plan.stem}{fmt.suffix}.{attempt}.partial")
    tmp_meta = os.path.join(tmp_dir, f"{plan.stem}.jsonl.{attempt}.partial")
    tmp_staged = os.path.join(tmp_dir, f"{plan.stem}.tsv.{attempt}.partial")
    meta_rel = rows_written_to(plan.name, metadata_file_of(plan.name, plan.split))
    try:
        if job.staged is not None:
            with naming_errors(tmp_staged), open(tmp_staged, "wb") as f:
                f.write(job.staged)
            job = replace(job, staging_path=tmp_staged, plan=replace(plan, offset=0), staged=None)
        meta_out = open(tmp_meta, "wb", buffering=1 << 20)  # noqa: SIM115 - closed below, never over an error
        try:
            rows = _ShardRows(job, meta_out)
            out = ShardFile(tmp_shard, fsync=job.fsync)
            try:
                total = fmt.write(out, rows)
                shard_sha256 = out.close()
            finally:
                out.abort()  # a no-op after close
            fsync_close(meta_out, job.fsync)
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
        location.put(tmp_meta, meta_rel, fsync=job.fsync)
        location.put(tmp_shard, plan.name, fsync=job.fsync)  # the shard exists only once it is whole
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
        metadata=metadata_file_of(plan.name, plan.split),
        rows=plan.rows,
        bytes=total,
        sha256=shard_sha256,
        metadata_sha256=rows.digest.hexdigest(),
        first_key=plan.first_key,
        last_key=plan.last_key,
        split=plan.split,
        input_sha256=plan.input_sha256,
        row_offsets_every=rows.row_offsets_every,
        row_offsets=rows.row_offsets,
    )
