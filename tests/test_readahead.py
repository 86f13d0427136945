"""The writer's file reader (shardkit.readahead): files read ahead into a ring buffer, on the
writer's thread when the kernel holds them in memory, else on threads.

Every test asserts what the writer receives (each row in order with its file's bytes and CRC-32,
or the error naming the file), how often each file is opened, and what the ring held; never which
thread read what, nor how long anything took. Whether a file is "in memory" is decided by the
``cache`` fixture, not by the page cache: each test that reads runs both ways.
"""

from __future__ import annotations

import errno
import os
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit import localdisk, readahead
from shardkit.inputfile import stamp
from shardkit.readahead import READ_BATCH_ROWS, SourceChanged, read_in_order
from shardkit.staging import StagedRow

RING = 1 << 16  # files over 32 KiB are too big for it: checksummed, then copied by the writer


def make_rows(folder: Path, sizes: list[int]) -> list[StagedRow]:
    folder.mkdir(exist_ok=True)
    rows = []
    for i, size in enumerate(sizes):
        name = f"f{i:04d}.bin"
        (folder / name).write_bytes(bytes((i + j) % 251 for j in range(size)))
        rows.append(StagedRow(f"{i:08x}", i + 1, size, ".bin", name, "{}"))
    return rows


def read_all(
    rows: list[StagedRow], folder: Path, *, threads: int = 4, ring: int = RING, got: list[str] | None = None
) -> list[tuple[str, bytes, int]]:
    """What the writer receives, copied out of the ring; each row's name also goes to ``got`` as
    it arrives, so a test that ends in an error sees what came before it."""
    out = []
    with read_in_order(rows, str(folder), threads=threads, ring_bytes=ring) as files:
        for row, path, data, crc in files:
            assert path == os.path.join(folder, row.source)
            if got is not None:
                got.append(row.source)
            if isinstance(data, readahead.BigFile):  # copied at its turn, through one descriptor
                with data:
                    out.append((row.source, data.read_all(), data.crc))
            else:
                out.append((row.source, bytes(data), crc))
    return out


def expected(rows: list[StagedRow], folder: Path) -> list[tuple[str, bytes, int]]:
    out = []
    for row in rows:
        data = (folder / row.source).read_bytes()
        out.append((row.source, data, zlib.crc32(data)))
    return out


@pytest.fixture(params=["in memory", "on disk"])
def cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every file in memory (a read without waiting gets it all), or none (such a read would wait)."""
    real = os.preadv

    def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
        if flags and request.param == "on disk":
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(readahead, "NOWAIT", 8)  # as on Linux, also where the system has no such flag
    monkeypatch.setattr(readahead, "tries_in_memory_first", lambda images_dir: True)  # a local disk
    return str(request.param)


def opens_per_file(cache: str) -> int:
    """A file in memory is opened once, by the writer's thread; any other once there to try, once to read."""
    return 1 if cache == "in memory" else 2


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each file was opened for reading, by any thread."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    real = readahead.open_inside

    def open_inside(path: str, inside: str) -> tuple[int, os.stat_result]:
        with lock:
            counts[os.path.basename(path)] += 1
        return real(path, inside)

    monkeypatch.setattr(readahead, "open_inside", open_inside)
    return counts


class CountingRing(readahead.Ring):
    """A ring that remembers every ring the reader made (its accounting is the ring's own)."""

    made: ClassVar[list[CountingRing]] = []

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        CountingRing.made.append(self)


@pytest.fixture
def rings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CountingRing]]:
    readahead.forget_ring()  # a ring this thread kept from an earlier test is not counted
    monkeypatch.setattr(CountingRing, "made", [])
    monkeypatch.setattr(readahead, "Ring", CountingRing)
    yield CountingRing.made
    readahead.forget_ring()


@pytest.mark.parametrize("threads", [1, 4])
def test_every_file_in_order_with_its_crc(opened: Counter[str], cache: str, tmp_path: Path, threads: int) -> None:
    sizes = [1 + (i * 7919) % 9000 for i in range(192)]
    sizes[5] = sizes[150] = RING // 2 + 1  # too big for the ring
    rows = make_rows(tmp_path / "files", sizes)
    assert read_all(rows, tmp_path / "files", threads=threads) == expected(rows, tmp_path / "files")
    # A file too big for the ring is opened once, by the writer at its turn.
    big = {rows[5].source, rows[150].source}
    assert opened == {row.source: 1 if row.source in big else opens_per_file(cache) for row in rows}


def test_more_files_than_are_read_ahead_at_once_each_read_once(
    opened: Counter[str], cache: str, rings: list[CountingRing], tmp_path: Path
) -> None:
    threads = 2
    rows = make_rows(tmp_path / "files", [100] * (12 * threads * 2 * READ_BATCH_ROWS))
    assert read_all(rows, tmp_path / "files", threads=threads) == expected(rows, tmp_path / "files")
    assert opened == {row.source: opens_per_file(cache) for row in rows}
    [ring] = rings
    assert 0 < ring.most_in_use <= ring.capacity


def test_memory_is_the_rings_whatever_the_files_weigh(cache: str, rings: list[CountingRing], tmp_path: Path) -> None:
    """Files weighing many times the ring: every one delivered in a region of the ring, the
    regions live at once never more than the ring holds, and the ring full at times."""
    rows = make_rows(tmp_path / "files", [300 + (i * 37) % 1700 for i in range(400)])  # 7 rings' worth
    delivered = []
    with read_in_order(rows, str(tmp_path / "files"), threads=4, ring_bytes=RING) as files:
        [ring] = rings
        for row, _, data, crc in files:
            assert isinstance(data, memoryview) and data.obj is ring.buffer.obj  # no copy of its own
            assert ring.in_use <= ring.capacity
            delivered.append((row.source, bytes(data), crc))
    assert delivered == expected(rows, tmp_path / "files")
    # Read ahead as far as the ring allows: a region is refused only when neither free stretch
    # (after the newest region, before the oldest) holds the next file.
    assert ring.capacity == RING and RING - 2 * 2000 < ring.most_in_use <= RING


def test_the_ring_is_reused_from_shard_to_shard(
    opened: Counter[str], cache: str, rings: list[CountingRing], tmp_path: Path
) -> None:
    rows = make_rows(tmp_path / "files", [100] * 256)
    shards = [rows[i : i + 10] for i in range(0, len(rows), 10)]  # each far smaller than what is read ahead
    for shard in shards:
        assert read_all(shard, tmp_path / "files") == expected(shard, tmp_path / "files")
    assert opened == {row.source: opens_per_file(cache) for row in rows}
    assert len(rings) == 1  # one ring for this thread, not one per shard


def test_reads_that_come_back_short_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A network filesystem may return fewer bytes than asked before the end: the reader asks again."""
    real = os.preadv

    def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
        return (
            real(fd, [memoryview(buffers[0])[:7]], offset, flags)
            if len(buffers[0]) > 7
            else real(fd, buffers, offset, flags)
        )

    monkeypatch.setattr(os, "preadv", preadv)
    rows = make_rows(tmp_path / "files", [1 + (i * 31) % 500 for i in range(100)])
    assert read_all(rows, tmp_path / "files") == expected(rows, tmp_path / "files")


def test_a_filesystem_that_refuses_the_flag_is_asked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel or filesystem refuses RWF_NOWAIT, every file is read all the same, on the
    threads, and the filesystem is asked once per shard, not once per file."""
    real = os.preadv
    flagged: list[int] = []

    def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
        if flags:
            flagged.append(flags)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(readahead, "NOWAIT", 8)
    monkeypatch.setattr(readahead, "tries_in_memory_first", lambda images_dir: True)
    rows = make_rows(tmp_path / "files", [100] * 192)
    assert read_all(rows, tmp_path / "files") == expected(rows, tmp_path / "files")
    assert flagged == [8]


@pytest.mark.parametrize("filesystem", ["nfs4", "fuse.sshfs", "tmpfs", None])
def test_files_on_other_filesystems_are_read_on_the_threads_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: Counter[str], filesystem: str | None
) -> None:
    """A network or FUSE filesystem (or one shardkit cannot name) is never asked RWF_NOWAIT, and
    no file there is opened on the writer's thread: each is opened once, by a reading thread."""
    real = os.preadv
    flagged: list[int] = []

    def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
        if flags:
            flagged.append(flags)
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(readahead, "NOWAIT", 8)
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: filesystem)
    rows = make_rows(tmp_path / "files", [100] * 96)
    assert read_all(rows, tmp_path / "files") == expected(rows, tmp_path / "files")
    assert flagged == []
    assert opened == {row.source: 1 for row in rows}


def test_files_on_a_local_disk_are_tried_in_memory_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readahead, "NOWAIT", 8)
    for filesystem in ("ext4", "xfs", "btrfs", "f2fs"):
        monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder, fs=filesystem: fs)
        assert readahead.tries_in_memory_first(str(tmp_path))
    monkeypatch.setattr(readahead, "NOWAIT", None)  # not Linux
    assert not readahead.tries_in_memory_first(str(tmp_path))


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("change", ["grown", "shrunk", "removed"])
def test_a_file_changed_since_the_check_is_an_error_naming_it_at_its_turn(
    cache: str, tmp_path: Path, threads: int, change: str
) -> None:
    rows = make_rows(tmp_path / "files", [100] * 10)
    victim = tmp_path / "files" / rows[6].source
    if change == "removed":
        victim.unlink()
        message = r"cannot read: No such file or directory"
    else:
        victim.write_bytes(victim.read_bytes() + b"x" if change == "grown" else victim.read_bytes()[:-1])
        message = rf"file changed since it was checked \({101 if change == 'grown' else 99} bytes"
    got: list[str] = []
    with pytest.raises(SourceChanged, match=rf"f0006\.bin \(metadata line 7\): {message}"):
        read_all(rows, tmp_path / "files", threads=threads, got=got)
    assert got == [row.source for row in rows[:6]]  # the rows before it, in order; none after


def ranged_rows(folder: Path, sizes: list[int], per_file: int) -> tuple[list[StagedRow], list[bytes]]:
    """Rows that are byte ranges of files (remux's staging: ``per_file`` rows a file), stamped as
    the check stamps them, and each row's bytes."""
    folder.mkdir(exist_ok=True)
    rows, datas = [], []
    for first in range(0, len(sizes), per_file):
        name = f"rows{first:04d}.bin"
        chunk = [
            bytes((i * 7 + j) % 251 for j in range(sizes[i])) for i in range(first, min(first + per_file, len(sizes)))
        ]
        (folder / name).write_bytes(b"".join(chunk))
        checked = stamp(os.stat(folder / name))
        offset = 0
        for i, data in enumerate(chunk, first):
            rows.append(StagedRow(f"{i:08x}", i + 1, len(data), ".bin", name, "{}", stamp=checked, file_offset=offset))
            datas.append(data)
            offset += len(data)
    return rows, datas


@pytest.mark.parametrize("threads", [1, 4])
def test_byte_ranges_of_a_file_are_read_as_their_rows(cache: str, tmp_path: Path, threads: int) -> None:
    sizes = [1 + (i * 7919) % 9000 for i in range(100)]
    sizes[5] = sizes[63] = RING // 2 + 1  # too big for the ring: copied in chunks, from where the range starts
    rows, datas = ranged_rows(tmp_path / "files", sizes, per_file=32)
    got = read_all(rows, tmp_path / "files", threads=threads)
    assert [data for _, data, _ in got] == datas
    assert [crc for _, _, crc in got] == [zlib.crc32(data) for data in datas]


def test_a_file_of_byte_ranges_rewritten_since_the_check_is_an_error_naming_it(cache: str, tmp_path: Path) -> None:
    rows, _ = ranged_rows(tmp_path / "files", [100] * 20, per_file=8)
    victim = tmp_path / "files" / rows[9].source  # rows 8 to 15
    victim.write_bytes(victim.read_bytes()[::-1])  # as many bytes, others
    got: list[str] = []
    changed = r"rows0008\.bin, bytes 0 to 100 \(metadata line 9\): file changed since it was checked \(modified since"
    with pytest.raises(SourceChanged, match=changed):
        read_all(rows, tmp_path / "files", got=got)
    assert len(got) == 8  # the rows of the first file, in order; none after


def test_the_first_bad_file_in_row_order_is_the_one_named(cache: str, tmp_path: Path) -> None:
    """Several bad files, read on several threads: the error is the first one's, at its turn."""
    rows = make_rows(tmp_path / "files", [100] * (4 * READ_BATCH_ROWS))
    for row in rows[READ_BATCH_ROWS + 3 :: 7]:
        (tmp_path / "files" / row.source).unlink()
    first = rows[READ_BATCH_ROWS + 3]
    got: list[str] = []
    with pytest.raises(SourceChanged, match=rf"{first.source} \(metadata line {first.line}\): cannot read"):
        read_all(rows, tmp_path / "files", threads=4, got=got)
    assert got == [row.source for row in rows[: READ_BATCH_ROWS + 3]]


@settings(max_examples=200, deadline=None)
@given(st.integers(16, 4096), st.lists(st.tuples(st.integers(1, 2048), st.booleans()), max_size=300))
def test_ring_regions_never_overlap_and_come_back_in_order(capacity: int, ops: list[tuple[int, bool]]) -> None:
    ring = readahead.Ring(capacity)
    live: list[tuple[int, int]] = []  # (start, size), oldest first, as the ring sees them
    for size, release_first in ops:
        if release_first and live:
            ring.release_oldest()
            live.pop(0)
        size = min(size, capacity)
        region = ring.take(size)
        while region is None and live:  # the writer frees the oldest until there is room
            ring.release_oldest()
            live.pop(0)
            region = ring.take(size)
        assert region is not None and len(region) == size
        start = _offset(ring, region)
        for other_start, other_size in live:
            assert start + size <= other_start or other_start + other_size <= start
        live.append((start, size))
        assert ring.in_use == sum(size for _, size in live) <= capacity
        assert ring.in_use <= ring.most_in_use <= capacity


def test_reads_go_round_the_ring() -> None:
    """A writer that keeps up takes one region at a time, and still not the same one each time."""
    ring = readahead.Ring(1000)
    starts = []
    for _ in range(12):
        region = ring.take(300)
        assert region is not None
        starts.append(_offset(ring, region))
        ring.release_oldest()
    assert starts[:4] == [0, 300, 600, 0]
    assert ring.in_use == 0 and ring.most_in_use == 300


def _offset(ring: readahead.Ring, region: memoryview) -> int:
    import ctypes

    base = ctypes.addressof(ctypes.c_char.from_buffer(ring.buffer))
    return ctypes.addressof(ctypes.c_char.from_buffer(region)) - base
