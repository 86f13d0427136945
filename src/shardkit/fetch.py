"""Reading a shard's files for the writer, in row order, with their CRC-32.

Two ways, and the reader moves between them as it goes:

* **read ahead**: a thread pool reads the files ahead, in batches of consecutive rows, into a
  fixed ring buffer (:class:`Ring`), so a cold cache or a network filesystem has many reads in
  flight. Memory is the ring's, whatever the files weigh; a file larger than half the ring is
  only checksummed here and copied in chunks by the writer.
* **inline**: the writer's own thread reads each file when its turn comes. While the files are
  in the page cache (a warm cache, files just made), a read is a memory copy, and handing it to
  another thread costs more CPU than the copy (on the bench's 2-core VM, 1 GB of warm 100 KB
  files took 1.2-1.5 s to read on 8 threads, 0.2-0.3 s inline). Each inline read asks the
  kernel not to wait for the disk (``RWF_NOWAIT``); a file that is not all in memory is read
  there and then, from the disk.

Reads ahead ask with ``RWF_NOWAIT`` first too, so the reader learns when the files come from
memory; every :data:`MODE_WINDOW` files it chooses its way by how many of the last ones were
(see :data:`MAX_MISSES`). Where the kernel or the filesystem cannot answer (``RWF_NOWAIT``
unsupported: tmpfs, NFS, FUSE, macOS), every file is read ahead. The mode, and the count
towards the next choice, carry over from one shard to the next on the same thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from .errors import ShardkitError
from .staging import StagedRow
from .streamio import crc32
from .threads import interruptible_pool

COPY_CHUNK = 4 << 20  # read size for a file too big for the ring
#: Files are read ahead in batches of consecutive rows: one thread-pool task per batch, not per
#: file (a task per 100 KB file cost more CPU in thread hand-offs than the reading itself).
READ_BATCH_BYTES = 1 << 20
READ_BATCH_ROWS = 32
#: Every ``MODE_WINDOW`` files the reader chooses its way for the next ones: inline when at
#: most ``MAX_MISSES`` of the last ones were not all in memory (on the bench's VM the kernel
#: takes back about 2% of a warm corpus's pages within seconds; those few are read inline,
#: from the disk, at their turn).
MODE_WINDOW = 64
MAX_MISSES = 4

_NOWAIT = getattr(os, "RWF_NOWAIT", 0)  # Linux 4.14+
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class SourceChanged(ShardkitError):
    """A file changed between the check and the write."""


#: What the reader gives the writer per row: the row, its file's path, the file's bytes (a ring
#: region, valid until the next item is asked for; None for a file too big for the ring) and CRC.
Fetched = tuple[StagedRow, str, "memoryview | None", int]


class Ring:
    """A fixed buffer handed out in contiguous regions, freed in the order they were taken.

    The reader takes a region per file and the writer consumes files in order, so regions
    come back first-in first-out. Reading into one long-lived buffer, instead of a new bytes
    object per file, keeps memory flat and avoids a page fault storm per file.

    Regions go round the whole buffer even when one at a time is taken (inline reads): reading
    every file into the same few pages made a pack's system CPU 1.6x on the bench's VM (the
    kernel's copy into them got 3x slower per byte, measured with perf).
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
        if not self._regions:  # all free: go on from the tail all the same (see below)
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
        return self.buffer[start : start + size]

    def release_oldest(self) -> None:
        self._regions.popleft()

    def reset(self) -> None:
        self._regions.clear()
        self._tail = 0


class _ThreadState(threading.local):
    ring: Ring | None = None
    # The reading mode and the evidence for the next choice carry over from shard to shard.
    inline = False  # read inline: the files lately were in memory
    seen = 0  # files of this mode window whose reads told whether they were in memory
    misses = 0  # of those, the ones that were not


_state = _ThreadState()


def _ring_for(capacity: int) -> Ring:
    """This thread's ring, reused from shard to shard (allocating 32 MB per shard costs a second)."""
    ring = _state.ring
    if ring is None or ring.capacity != capacity:
        ring = _state.ring = Ring(capacity)
    ring.reset()
    return ring


def _note(cached: bool | None) -> None:
    """Count a read's answer towards the next choice of mode (see MODE_WINDOW)."""
    if cached is not None:
        _state.seen += 1
        _state.misses += not cached


def forget_ring() -> None:
    """Never reuse this thread's ring: reads still in flight (a shard that failed) may land in it."""
    _state.ring = None


def read_file(path: str, line: int, expected: int, region: memoryview | None, nowait: bool) -> tuple[int, bool | None]:
    """Read a file into its region (or, for a file too big to hold, only checksum it).

    Returns the CRC-32 and whether the file came whole from memory (None: not known, without
    ``nowait`` or a region). Checks the file still has the size it had when checked: the read
    asks for one byte more than that, so a grown file shows without another read (a regular
    file's read comes back short only at its end).
    """
    crc = 0
    size = 0
    cached = None
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        try:
            if region is not None:
                spare = bytearray(1)
                want = len(region)
                if nowait:
                    cached = False
                    with contextlib.suppress(BlockingIOError):  # not all in memory: read it the slow way
                        size = os.preadv(fd, [region, spare], 0, _NOWAIT)
                        cached = size >= want
                while size < want:  # one call per file, unless a read comes back short before the end
                    n = os.preadv(fd, [region[size:], spare], size)
                    size += n
                    if not n:
                        break
                crc = crc32(region[: min(size, want)])
            else:
                while chunk := os.read(fd, COPY_CHUNK):
                    size += len(chunk)
                    crc = crc32(chunk, crc)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP and nowait:
            raise _NoWaitUnsupported from None
        raise SourceChanged(f"{path} (metadata line {line}): cannot read: {exc.strerror}") from exc
    if size != expected:
        raise SourceChanged(
            f"{path} (metadata line {line}): file changed while packing ({size} bytes, {expected} when checked)"
        )
    return crc, cached


_Wanted = tuple[StagedRow, str, "memoryview | None"]  # a row, its file's path, the region to read it into
_Answer = tuple[int, "bool | None"]  # what read_file returns: the CRC-32, whether it came from memory


class _NoWaitUnsupported(Exception):
    """The filesystem cannot say whether a read would wait (``RWF_NOWAIT``)."""


class _Reader:
    """One shard's files, in row order; see the module's docstring."""

    def __init__(
        self, rows: Iterable[StagedRow], images_dir: str, pool: ThreadPoolExecutor, threads: int, ring: Ring
    ) -> None:
        self.rows = rows
        self.images_root = os.path.join(images_dir, "")  # + a checked file_name: relative, no ".."
        self.pool = pool
        # Bounded in bytes by the ring and in count here: tiny files would otherwise put tens
        # of thousands of reads (and their bookkeeping) in flight.
        self.max_in_flight = threads * 2 * READ_BATCH_ROWS
        self.ring = ring
        self.big = max(ring.capacity // 2, 1)  # larger files are checksummed, then copied in chunks
        self.nowait = bool(_NOWAIT)

    def read(self, row: StagedRow, path: str, region: memoryview | None) -> _Answer:
        """Read one file (on any thread); a filesystem without RWF_NOWAIT turns it off for good."""
        if self.nowait:
            try:
                return read_file(path, row.line, row.size, region, True)
            except _NoWaitUnsupported:
                self.nowait = False
        return read_file(path, row.line, row.size, region, False)

    def read_batch(self, batch: list[_Wanted]) -> list[_Answer]:
        return [self.read(row, path, region) for row, path, region in batch]

    def __iter__(self) -> Iterator[Fetched]:
        ring = self.ring
        # (row, path, region, its batch's future, its place in the batch), oldest first
        window: deque[tuple[StagedRow, str, memoryview | None, Future[list[_Answer]], int]] = deque()
        batch: list[_Wanted] = []  # not yet sent: newer than the window
        batch_bytes = 0
        inline = _state.inline and self.nowait

        def send() -> None:
            nonlocal batch, batch_bytes
            future = self.pool.submit(self.read_batch, batch)
            window.extend((row, path, region, future, i) for i, (row, path, region) in enumerate(batch))
            batch, batch_bytes = [], 0

        def oldest() -> Iterator[Fetched]:
            """The oldest row in flight, once read (its region is free again once the next is asked for)."""
            done_row, done_path, done_region, future, i = window.popleft()
            crc, cached = future.result()[i]
            _note(cached)
            yield done_row, done_path, done_region, crc
            if done_region is not None:
                ring.release_oldest()

        def drain() -> Iterator[Fetched]:
            """Everything in flight, in order."""
            if batch:
                send()
            while window:
                yield from oldest()

        for row in self.rows:
            path = self.images_root + row.source
            if _state.seen >= MODE_WINDOW or (inline and not self.nowait):  # choose the way for the next files
                in_memory = _state.misses <= MAX_MISSES and self.nowait
                _state.seen = _state.misses = 0
                if in_memory and not inline:
                    yield from drain()  # what is in flight first, in order
                inline = in_memory
            if inline:
                region = ring.take(row.size) if row.size <= self.big else None  # the ring is empty
                crc, cached = self.read(row, path, region)
                _note(cached)
                yield row, path, region, crc
                if region is not None:
                    ring.release_oldest()
                continue
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
            batch.append((row, path, region))
            batch_bytes += row.size
            if batch_bytes >= READ_BATCH_BYTES or len(batch) >= READ_BATCH_ROWS:
                send()
        yield from drain()
        _state.inline = inline


@contextlib.contextmanager
def read_in_order(
    rows: Iterable[StagedRow], images_dir: str, *, threads: int, ring_bytes: int
) -> Iterator[Iterator[Fetched]]:
    """The rows with their files' bytes and CRC-32, in order: read inline or ahead on ``threads``
    threads into a ring of ``ring_bytes`` (this thread's, reused from shard to shard)."""
    with interruptible_pool(threads, "shardkit-read") as pool:
        yield iter(_Reader(rows, images_dir, pool, threads, _ring_for(ring_bytes)))
