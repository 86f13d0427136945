"""Reading a shard's files for the writer, in row order, with their CRC-32.

Every file is opened through :func:`~shardkit.inputfile.open_inside` and compared with what the
check saw, so a file rewritten or swapped since (for a symlink to a file outside IMAGES_DIR, say)
is refused, never published.

Files are taken in row order, as far ahead of the writer as a fixed ring buffer allows
(:class:`Ring`, ``--read-buffer``), and read by a thread pool (``--read-threads``), in batches
of consecutive rows, so a cold cache or a network filesystem has many reads in flight. On a
local disk (ext4, XFS, btrfs, F2FS) each file is first tried on the writer's thread without
waiting for the disk (``RWF_NOWAIT``): a file the kernel holds whole in memory is read there and
then, because handing a file that is already in memory to a thread costs more CPU than reading
it (docs/performance.md). Any other file (not in memory, or changed since the check) goes to the
pool; a filesystem that refuses the flag is not asked again. Network and FUSE filesystems are
never tried this way: opening a file there waits for a server, which the pool's threads do in
parallel and which must not stall the writer. Which thread reads a file depends on the
filesystem and on what the kernel holds, never on timings, and never changes what the writer
receives: every row in order with its file's bytes and CRC-32, or, at the turn of the first
file that cannot be read as checked, the error naming it. Memory is the ring's,
whatever the files weigh; a file larger than half the ring is copied in chunks by the writer at
its turn (:class:`BigFile`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .inputfile import OutsideImagesDir, SourceChanged, open_inside, stamp
from .localdisk import on_local_disk
from .staging import StagedRow
from .streamio import crc32
from .threads import interruptible_pool

#: Linux's flag for a read that returns at once with what the page cache holds (None elsewhere).
#: Tests set it (a documented seam) to run the other system's path.
NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)
COPY_CHUNK = 4 << 20  # read size for a file too big for the ring
#: Files are read ahead in batches of consecutive rows: one thread-pool task per batch, not per
#: file (a task per 100 KB file cost more CPU in thread hand-offs than the reading itself).
#: A batch closes at whichever limit it reaches first, when the reader must wait for the
#: writer, or before a file read on the writer's thread (rows stay in order).
READ_BATCH_BYTES = 1 << 20
READ_BATCH_ROWS = 32


class Ring:
    """A fixed buffer handed out in contiguous regions, freed in the order they were taken.

    The reader takes a region per file and the writer consumes files in order, so regions
    come back first-in first-out. Reading into one long-lived buffer, instead of a new bytes
    object per file, keeps memory flat and avoids a page fault storm per file.

    Regions go round the whole buffer even when one at a time is live (a writer that keeps up
    with the reads): reading every file into the same few pages made the kernel's copy into
    them slower per byte, and a pack's system CPU higher (measured with perf: docs/performance.md).

    ``in_use`` is what the live regions hold and ``most_in_use`` the most they ever held: the
    reader's memory, never more than ``capacity``.
    """

    def __init__(self, capacity: int) -> None:
        self.buffer = memoryview(bytearray(capacity))
        self.capacity = capacity
        self._regions: deque[tuple[int, int]] = deque()  # (start, size), oldest first
        self._tail = 0
        self.in_use = 0
        self.most_in_use = 0

    def take(self, size: int) -> memoryview | None:
        """A region of ``size`` bytes, or None until older regions are released."""
        if size > self.capacity:
            return None
        if not self._regions:  # all free: go on from the tail all the same (see above)
            start = self._tail if self._tail + size <= self.capacity else 0
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
        self.in_use += size
        self.most_in_use = max(self.most_in_use, self.in_use)
        return self.buffer[start : start + size]

    def release_oldest(self) -> None:
        self.in_use -= self._regions.popleft()[1]

    def reset(self) -> None:
        self._regions.clear()
        self._tail = 0
        self.in_use = 0


class _ThreadState(threading.local):
    ring: Ring | None = None


_state = _ThreadState()


def _ring_for(capacity: int) -> Ring:
    """This thread's ring, reused from shard to shard (allocating 32 MB per shard costs a second)."""
    ring = _state.ring
    if ring is None or ring.capacity != capacity:
        ring = _state.ring = Ring(capacity)
    ring.reset()
    return ring


def forget_ring() -> None:
    """Never reuse this thread's ring: reads still in flight (a shard that failed) may land in it."""
    _state.ring = None


#: What the reader gives the writer per row: the row, its file's path, and either the file's
#: bytes (a ring region, valid until the next item is asked for) with their CRC-32, or, for a file
#: too big for the ring, a :class:`BigFile` to copy at its turn (and 0).
Fetched = tuple[StagedRow, str, "memoryview | BigFile", int]


def _opened(row: StagedRow, path: str, inside: str) -> int:
    """The row's file, open through a descriptor inside IMAGES_DIR, as the check saw it."""
    try:
        fd, st = open_inside(path, inside)
    except OutsideImagesDir as exc:
        raise SourceChanged(f"{exc} (metadata line {row.line}): refused") from None
    except OSError as exc:
        raise SourceChanged(f"{path} (metadata line {row.line}): cannot read: {exc.strerror}") from exc
    if row.stamp and stamp(st) != row.stamp:
        os.close(fd)
        whole = row.file_offset < 0
        how = f"{st.st_size} bytes, {row.size} when checked" if whole and st.st_size != row.size else "modified since"
        raise _changed(row, path, how)
    return fd


def _changed(row: StagedRow, path: str, how: str) -> SourceChanged:
    where = path if row.file_offset < 0 else f"{path}, bytes {row.file_offset} to {row.file_offset + row.size}"
    return SourceChanged(
        f"{where} (metadata line {row.line}): file changed since it was checked ({how}); nothing of it was"
        " published: re-run to pack it as it is now"
    )


def _check_key(row: StagedRow, path: str, digest: str) -> None:
    """A row keyed by its file's hash: the bytes written must be the bytes hashed."""
    if row.content_keyed and not digest.startswith(row.key):
        raise _changed(row, path, f"its bytes no longer hash to its key {row.key}")


def _rehashed(row: StagedRow) -> bool:
    """Whether the writer hashes this row's bytes again: a content key staged without the CRC-32
    of the bytes the check hashed (by an earlier shardkit). With that CRC, the writer compares the
    CRC it computes anyway (:func:`_check_crc`): the file is hashed once, at the check."""
    return row.content_keyed and row.crc < 0


def _check_crc(row: StagedRow, path: str, crc: int) -> None:
    """A content-keyed row: the bytes written must be the bytes the check hashed for its key."""
    if row.content_keyed and row.crc >= 0 and crc != row.crc:
        raise _changed(row, path, f"its bytes are not those hashed for its key {row.key}")


def read_file(row: StagedRow, path: str, inside: str, region: memoryview) -> int:
    """Read a file into its region, through one descriptor inside IMAGES_DIR (``inside``); its CRC-32.

    Checks the file is still as checked: its stamp, its size (the read asks for one byte more,
    so a grown file shows without another read: a regular file's read comes back short only at
    its end) and, for a content key, that the bytes read are those hashed (their CRC-32). A row
    that is a byte range of its file (:attr:`~.staging.StagedRow.file_offset`) is read from where
    it starts.
    """
    size = 0
    fd = _opened(row, path, inside)
    start = max(row.file_offset, 0)
    try:
        # A byte range ends inside its file: its stamp, not a byte more, says it is as checked.
        spare = [bytearray(1)] if row.file_offset < 0 else []
        want = len(region)
        while size < want:  # one call per file, unless a read comes back short before the end
            n = os.preadv(fd, [region[size:], *spare], start + size)
            size += n
            if not n:
                break
    except OSError as exc:
        raise SourceChanged(f"{path} (metadata line {row.line}): cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if size != row.size:
        raise _changed(row, path, f"{size} bytes, {row.size} when checked")
    return _checked_crc(row, path, region)


def _checked_crc(row: StagedRow, path: str, region: memoryview) -> int:
    if _rehashed(row):
        _check_key(row, path, hashlib.sha256(region).hexdigest())
    crc = crc32(region)
    _check_crc(row, path, crc)
    return crc


class NoWaitRefused(Exception):
    """This filesystem does not take ``RWF_NOWAIT``."""


def tries_in_memory_first(images_dir: str) -> bool:
    """Whether files under ``images_dir`` are first tried on the writer's thread (see the module
    docstring): on Linux, on a local disk."""
    return NOWAIT is not None and on_local_disk(images_dir)


def read_if_in_memory(row: StagedRow, path: str, inside: str, region: memoryview) -> int | None:
    """Read a file into its region if the kernel holds all of it in memory: its CRC-32; else None
    (not in memory, or anything unexpected: :func:`read_file` then reads it, and names whatever
    is wrong). Opened and checked as :func:`read_file` opens and checks. Raises
    :class:`NoWaitRefused` where the filesystem does not take the flag."""
    assert NOWAIT is not None
    fd = _opened(row, path, inside)
    try:
        if row.file_offset < 0:
            n = os.preadv(fd, [region, bytearray(1)], 0, NOWAIT)
        else:
            n = os.preadv(fd, [region], row.file_offset, NOWAIT)
    except BlockingIOError:
        return None  # the read would wait for the disk
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise NoWaitRefused from None
        raise SourceChanged(f"{path} (metadata line {row.line}): cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return _checked_crc(row, path, region) if n == row.size else None


class BigFile:
    """A file too big for the ring, copied at its turn in chunks through one descriptor.

    Read twice through that descriptor: once for the CRC-32 (which a ZIP member's header
    carries before its data), once to copy, checking the copied bytes have that CRC (and, for
    a content key, hash to the key), so what is published is what the header describes.
    """

    def __init__(self, row: StagedRow, path: str, inside: str) -> None:
        self.row, self.path, self.inside = row, path, inside
        self._fd = -1
        self.crc = 0

    def __enter__(self) -> BigFile:
        self._fd = _opened(self.row, self.path, self.inside)
        try:
            self.crc = self._pass(None)
            _check_crc(self.row, self.path, self.crc)
        except BaseException:
            os.close(self._fd)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)

    def copy_to(self, write: Callable[[bytes], object]) -> None:
        digest = hashlib.sha256() if _rehashed(self.row) else None
        if self._pass(write, digest) != self.crc:
            raise _changed(self.row, self.path, "rewritten while it was copied")
        if digest is not None:
            _check_key(self.row, self.path, digest.hexdigest())

    def read_all(self) -> bytes:
        chunks: list[bytes] = []
        self.copy_to(chunks.append)
        return b"".join(chunks)

    def _pass(self, write: Callable[[bytes], object] | None, digest: Any = None) -> int:
        crc = 0
        offset = 0
        start = max(self.row.file_offset, 0)
        try:
            while offset < self.row.size:
                chunk = os.pread(self._fd, min(COPY_CHUNK, self.row.size - offset), start + offset)
                if not chunk:
                    break
                crc = crc32(chunk, crc)
                if digest is not None:
                    digest.update(chunk)
                if write is not None:
                    write(chunk)
                offset += len(chunk)
            # (a byte range ends inside its file: more bytes after it are the next row's)
            grown = offset == self.row.size and self.row.file_offset < 0 and os.pread(self._fd, 1, offset)
        except OSError as exc:
            raise SourceChanged(f"{self.path} (metadata line {self.row.line}): cannot read: {exc.strerror}") from exc
        if offset != self.row.size or grown:
            raise _changed(self.row, self.path, "its size changed while it was copied")
        return crc


_Wanted = tuple[StagedRow, str, "memoryview | None"]  # a row, its file's path, the region to read it into


class _Reader:
    """One shard's files, in row order; see the module's docstring."""

    def __init__(
        self, rows: Iterable[StagedRow], images_dir: str, pool: ThreadPoolExecutor, threads: int, ring: Ring
    ) -> None:
        self.rows = rows
        self.images_root = os.path.join(images_dir, "")  # + a checked file_name: relative, no ".."
        self.inside = os.path.join(os.path.realpath(images_dir), "")  # where every file read must be
        self.pool = pool
        # Bounded in bytes by the ring and in count here: tiny files would otherwise put tens
        # of thousands of reads (and their bookkeeping) in flight.
        self.max_in_flight = threads * 2 * READ_BATCH_ROWS
        self.ring = ring
        self.big = max(ring.capacity // 2, 1)  # larger files are copied in chunks at their turn (BigFile)
        self.in_memory_first = tries_in_memory_first(images_dir)

    def read_batch(self, batch: list[_Wanted]) -> list[int | Exception]:
        """Read a batch's files (on a pool thread): per row, in order, the CRC-32 or the error
        that stopped the batch there, raised at that row's turn so the rows before it are still
        delivered whichever thread failed when. A file too big for the ring (no region) is read
        by the writer, at its turn."""
        answers: list[int | Exception] = []
        for row, path, region in batch:
            try:
                answers.append(0 if region is None else read_file(row, path, self.inside, region))
            except Exception as exc:  # handed to the writer's thread, raised at this row's turn
                answers.append(exc)
                break
        return answers

    def __iter__(self) -> Iterator[Fetched]:
        ring = self.ring
        # (row, path, region, its batch's future or None when read here, its place in the batch
        # or what the read here gave), oldest first
        window: deque[tuple[StagedRow, str, memoryview | None, Future[list[int | Exception]] | None, Any]] = deque()
        batch: list[_Wanted] = []  # not yet sent: newer than the window
        batch_bytes = 0

        def send() -> None:
            nonlocal batch, batch_bytes
            future = self.pool.submit(self.read_batch, batch)
            window.extend((row, path, region, future, i) for i, (row, path, region) in enumerate(batch))
            batch, batch_bytes = [], 0

        def oldest() -> Iterator[Fetched]:
            """The oldest row in flight, once read (its region is free again once the next is asked for)."""
            row, path, region, future, i = window.popleft()
            answer = i if future is None else future.result()[i]
            if isinstance(answer, Exception):
                raise answer
            yield row, path, region if region is not None else BigFile(row, path, self.inside), answer
            if region is not None:
                ring.release_oldest()

        for row in self.rows:
            path = self.images_root + row.source
            region = None
            while (window or batch) and (
                len(window) + len(batch) >= self.max_in_flight
                or (row.size <= self.big and (region := ring.take(row.size)) is None)
            ):
                if batch:  # what is waited for must be on its way
                    send()
                yield from oldest()
            if row.size <= self.big and region is None:
                region = ring.take(row.size)  # nothing is in flight: the ring is free
            if region is not None and self.in_memory_first:
                crc: int | Exception | None
                try:
                    crc = read_if_in_memory(row, path, self.inside, region)
                except NoWaitRefused:
                    crc, self.in_memory_first = None, False  # a fact of this filesystem: not asked again
                except Exception as exc:  # raised at this row's turn, after the rows before it
                    crc = exc
                if crc is not None:
                    if batch:  # rows still go out in order: what came before is on its way first
                        send()
                    window.append((row, path, region, None, crc))
                    continue
            batch.append((row, path, region))
            batch_bytes += row.size
            if batch_bytes >= READ_BATCH_BYTES or len(batch) >= READ_BATCH_ROWS:
                send()
        if batch:
            send()
        while window:
            yield from oldest()


@contextlib.contextmanager
def read_in_order(
    rows: Iterable[StagedRow], images_dir: str, *, threads: int, ring_bytes: int
) -> Iterator[Iterator[Fetched]]:
    """The rows with their files' bytes and CRC-32, in order: read ahead on ``threads`` threads
    into a ring of ``ring_bytes`` (this thread's, reused from shard to shard)."""
    with interruptible_pool(threads, "shardkit-read") as pool:
        yield iter(_Reader(rows, images_dir, pool, threads, _ring_for(ring_bytes)))
