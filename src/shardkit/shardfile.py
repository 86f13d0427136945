"""The shard file being written: bytes gathered in aligned chunks, hashed and written by threads.

Writing a shard through the page cache costs more CPU than anything else the writer does: the
kernel copies every byte into the cache, then its write-back walks it again (figures for both
ways in docs/performance.md). So
:class:`ShardFile` copies what it is given into chunks of page-aligned memory; a thread hashes
each full chunk (sha256, which frees the GIL) and another writes it with ``O_DIRECT`` straight
to the device, while the caller fills the next chunk. The last chunk is written padded to the
block size and the file truncated to its real length.

``O_DIRECT`` is used only on local block filesystems known to honour it (ext2/3/4, XFS, btrfs,
F2FS: :func:`.localdisk.on_local_disk`). Elsewhere (NFS, FUSE, tmpfs, macOS) smaller chunks go
through the page cache, and every 32 MiB written are handed to ``posix_fadvise(DONTNEED)`` so
their write-back starts now rather than all at the fsync (and packing terabytes does not churn
the page cache). If the kernel still refuses an ``O_DIRECT`` write, that chunk and the rest are
written the buffered way.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import queue
import threading

from .errors import naming
from .localdisk import on_local_disk

# Chunk sizes: O_DIRECT writes need chunks large enough for the device (smaller ones were
# slower), and the smallest of those keeps a worker's memory down; page-cache writes cost the
# least CPU in small pieces, which the kernel copies while they are still in the CPU's cache
# (the measurements: docs/performance.md, "Figures behind design choices").
DIRECT_CHUNK = (2 << 20, 3)  # bytes per chunk, chunks: one being filled, one hashed, one written (4 or 6: alike)
CACHED_CHUNK = (256 << 10, 8)
WRITEBACK_BYTES = 32 << 20  # page cache only: how often write-back is started (as the writer always did)
_ALIGN = 4096  # O_DIRECT needs offsets, lengths and addresses aligned to the device's block size
#: The flag that bypasses the page cache (0 where the system has none; tests set it: a seam).
O_DIRECT = getattr(os, "O_DIRECT", 0)

_local = threading.local()


def direct_io_for(folder: str) -> bool:
    """Whether shard files in ``folder`` are written with O_DIRECT."""
    if not O_DIRECT or os.environ.get("SHARDKIT_NO_DIRECT_IO"):
        return False
    return on_local_disk(folder)


def _chunks(size: int, count: int) -> list[mmap.mmap]:
    """This thread's chunk buffers, reused from shard to shard (page-aligned: anonymous mmaps)."""
    mine: dict[int, list[mmap.mmap]] = _local.__dict__.setdefault("chunks", {})
    if size not in mine:
        mine[size] = [mmap.mmap(-1, size) for _ in range(count)]
    return mine[size]


class ShardFile:
    """A new file written in order through :meth:`write`; :meth:`close` returns its sha256.

    On any error, call :meth:`abort` (the caller removes the file).
    """

    def __init__(self, path: str, *, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        self.size = 0
        self.digest = hashlib.sha256()
        self.direct = direct_io_for(os.path.dirname(os.path.abspath(path)))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fd = -1
        if self.direct:
            try:
                self._fd = os.open(path, flags | O_DIRECT, 0o644)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = False  # the filesystem refuses O_DIRECT after all
        if self._fd < 0:
            self._fd = os.open(path, flags, 0o644)
        self.chunk_bytes, count = DIRECT_CHUNK if self.direct else CACHED_CHUNK
        self._free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        for chunk in _chunks(self.chunk_bytes, count):
            self._free.put(memoryview(chunk))
        self._full: queue.SimpleQueue[tuple[memoryview, int, int] | None] = queue.SimpleQueue()  # to hash
        self._hashed: queue.SimpleQueue[tuple[memoryview, int, int] | None] = queue.SimpleQueue()  # to write
        self._error: BaseException | None = None
        self._current = self._free.get()
        self._fill = 0
        self._handed = 0  # bytes handed to the threads
        self._advised = 0  # page cache only: bytes whose write-back was started
        # Hashing and writing each have a thread, so a chunk is hashed while the one before it
        # is written (one thread doing both spends the sum of the two per chunk).
        self._threads = [
            threading.Thread(target=self._hash_chunks, name="shardkit-shard-hash", daemon=True),
            threading.Thread(target=self._write_chunks, name="shardkit-shard-write", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if isinstance(data, memoryview) and data.format != "B":
            data = data.cast("B")
        n = len(data)
        if n <= self.chunk_bytes - self._fill:  # the common case: fits the chunk being filled
            self._current[self._fill : self._fill + n] = data
            self._fill += n
            if self._fill == self.chunk_bytes:
                self._hand_off()
            return n
        view = memoryview(data)
        done = 0
        while done < n:
            take = min(self.chunk_bytes - self._fill, n - done)
            self._current[self._fill : self._fill + take] = view[done : done + take]
            self._fill += take
            done += take
            if self._fill == self.chunk_bytes:
                self._hand_off()
        return n

    def _hand_off(self) -> None:
        if self._error is not None:
            raise self._error
        self._full.put((self._current, self._fill, self._handed))
        self._handed += self._fill
        self._current = self._free.get()  # the threads always give chunks back, even after an error
        self._fill = 0

    def _hash_chunks(self) -> None:
        while (item := self._full.get()) is not None:
            chunk, length, _ = item
            try:
                if self._error is None:
                    self.digest.update(chunk[:length])
            except BaseException as exc:  # handed to the caller at its next write or close
                self._error = exc
            finally:
                self._hashed.put(item)  # on to the writing thread, which gives the chunk back
        self._hashed.put(None)

    def _write_chunks(self) -> None:
        while (item := self._hashed.get()) is not None:
            chunk, length, offset = item
            try:
                if self._error is None:
                    self._write_at(chunk, length, offset)
            except BaseException as exc:  # handed to the caller at its next write or close
                self._error = self._named(exc)
            finally:
                self._free.put(chunk)

    def _write_at(self, chunk: memoryview, length: int, offset: int) -> None:
        if self.direct:
            padded = -(-length // _ALIGN) * _ALIGN  # the last chunk: padding, truncated at close
            try:
                self.pwrite_all(chunk[:padded], offset)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._stop_direct()  # the filesystem took the open but not the write: go buffered
        self.pwrite_all(chunk[:length], offset)
        end = offset + length
        if self.fsync and end - self._advised >= WRITEBACK_BYTES and hasattr(os, "posix_fadvise"):
            # Start the write-back of what was written since the last call (not all at the fsync).
            os.posix_fadvise(self._fd, self._advised, end - self._advised, os.POSIX_FADV_DONTNEED)
            self._advised = end

    def pwrite_all(self, data: memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset`` (the writer thread's one write; a test's seam)."""
        while data:
            written = os.pwrite(self._fd, data, offset)
            data = data[written:]
            offset += written

    def _stop_direct(self) -> None:
        import fcntl

        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~O_DIRECT)
        self.direct = False

    def close(self) -> str:
        """Write what is left, wait for the threads, truncate, fsync; return the sha256 (hex)."""
        total = self._handed + self._fill
        if self._fill:
            self._full.put((self._current, self._fill, self._handed))
            self._fill = 0
        self._finish_threads()
        try:
            if self._error is not None:
                raise self._error
            try:
                if os.fstat(self._fd).st_size != total:
                    os.ftruncate(self._fd, total)  # drop the last chunk's padding
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as exc:
                raise self._named(exc) from None
        finally:
            self._close_fd()
        self.size = total
        return self.digest.hexdigest()

    def _named(self, exc: BaseException) -> BaseException:
        """An OSError from a write on the descriptor, naming the file (as one from open() would)."""
        if isinstance(exc, OSError) and exc.errno is not None:
            return naming(exc, self.path)
        return exc

    def abort(self) -> None:
        """Stop the threads and close the file (what was written stays for the caller to remove)."""
        self._finish_threads()
        self._close_fd()

    @property
    def stopped(self) -> bool:
        """The file is closed and its threads have ended (after :meth:`close` or :meth:`abort`)."""
        return self._fd < 0 and not any(thread.is_alive() for thread in self._threads)

    def _close_fd(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def _finish_threads(self) -> None:
        if self._threads[0].is_alive():
            self._full.put(None)  # the hashing thread passes it on to the writing one
        for thread in self._threads:
            thread.join()
