"""The writer's file reader (shardkit.fetch): inline while files are in memory, else read ahead.

Whether a file is "in memory" is what the kernel answers to a read with RWF_NOWAIT. The tests
decide that answer per file (a wrapper around os.preadv), so they run the same on any
filesystem, including one that cannot answer at all (tmpfs on some kernels).
"""

from __future__ import annotations

import errno
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit import fetch
from shardkit.fetch import MAX_MISSES, MODE_WINDOW, SourceChanged, read_in_order
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


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[str], bool]], list[tuple[str, str]]]:
    """Decide which files a RWF_NOWAIT read finds in memory; return the log of (file, thread) reads."""

    def install(in_memory: Callable[[str], bool]) -> list[tuple[str, str]]:
        real = os.preadv
        reads: list[tuple[str, str]] = []

        def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            if offset == 0:
                reads.append((name, threading.current_thread().name))
            if flags & fetch._NOWAIT:
                if not in_memory(name):
                    raise BlockingIOError(errno.EAGAIN, "would wait for the disk")
                flags &= ~fetch._NOWAIT
            return real(fd, buffers, offset, flags)

        monkeypatch.setattr(os, "preadv", preadv)
        monkeypatch.setattr(fetch, "_NOWAIT", getattr(os, "RWF_NOWAIT", 0x8))
        return reads

    return install


def read_all(rows: list[StagedRow], folder: Path, *, start_inline: bool) -> list[tuple[str, bytes, int]]:
    fetch._state.inline = start_inline
    fetch._state.seen = fetch._state.misses = 0
    out = []
    with read_in_order(rows, str(folder), threads=4, ring_bytes=RING) as files:
        for row, path, data, crc in files:
            assert path == os.path.join(folder, row.source)
            if isinstance(data, fetch.BigFile):  # copied at its turn, through one descriptor
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


def inline_reads(reads: list[tuple[str, str]]) -> list[str]:
    """The files read on this thread, once each (a file not in memory is asked for twice)."""
    return list(dict.fromkeys(name for name, thread in reads if thread == threading.current_thread().name))


@pytest.mark.parametrize("start_inline", [True, False])
def test_both_ways_give_every_file_in_order_with_its_crc(memory, tmp_path: Path, start_inline: bool) -> None:  # type: ignore[no-untyped-def]
    memory(lambda name: True)
    sizes = [1 + (i * 7919) % 9000 for i in range(3 * MODE_WINDOW)]
    sizes[5] = sizes[150] = RING // 2 + 1  # too big for the ring
    rows = make_rows(tmp_path / "files", sizes)
    assert read_all(rows, tmp_path / "files", start_inline=start_inline) == expected(rows, tmp_path / "files")


def test_files_in_memory_are_read_inline_after_one_window(memory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reads = memory(lambda name: True)
    rows = make_rows(tmp_path / "files", [100] * (12 * MODE_WINDOW))  # more than are read ahead at once
    assert read_all(rows, tmp_path / "files", start_inline=False) == expected(rows, tmp_path / "files")
    names = [row.source for row in rows]
    assert set(inline_reads(reads)) >= set(names[-4 * MODE_WINDOW :])  # the first reads chose the way
    assert not set(inline_reads(reads)) & set(names[:MODE_WINDOW])  # read ahead until then
    assert fetch._state.inline  # and the next shard on this thread starts inline


def test_the_choice_counts_files_across_small_shards(memory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reads = memory(lambda name: True)
    rows = make_rows(tmp_path / "files", [100] * (4 * MODE_WINDOW))
    shards = [rows[i : i + 10] for i in range(0, len(rows), 10)]  # each far smaller than a window
    assert read_all(shards[0], tmp_path / "files", start_inline=False) == expected(shards[0], tmp_path / "files")
    for shard in shards[1:]:
        with read_in_order(shard, str(tmp_path / "files"), threads=4, ring_bytes=RING) as files:
            assert [(row.source, bytes(data), crc) for row, _, data, crc in files] == expected(  # type: ignore[arg-type]
                shard, tmp_path / "files"
            )
    assert set(inline_reads(reads)) >= {row.source for row in rows[-MODE_WINDOW:]}


def test_files_from_the_disk_are_read_ahead_again(memory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    every = MODE_WINDOW // (MAX_MISSES + 1)  # one more miss per window than inline allows
    reads = memory(lambda name: int(name[1:5]) % every != 0)
    rows = make_rows(tmp_path / "files", [100] * (4 * MODE_WINDOW))
    assert read_all(rows, tmp_path / "files", start_inline=True) == expected(rows, tmp_path / "files")
    names = [row.source for row in rows]
    assert set(inline_reads(reads)) >= set(names[:MODE_WINDOW])  # started inline: missed files too
    assert not set(inline_reads(reads)) & set(names[MODE_WINDOW + 1 :])  # then read ahead
    assert not fetch._state.inline


def test_a_few_misses_keep_the_reader_inline(memory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reads = memory(lambda name: int(name[1:5]) % (MODE_WINDOW // MAX_MISSES) != 1)  # MAX_MISSES per window
    rows = make_rows(tmp_path / "files", [100] * (4 * MODE_WINDOW))
    assert read_all(rows, tmp_path / "files", start_inline=True) == expected(rows, tmp_path / "files")
    assert inline_reads(reads) == [row.source for row in rows]


def test_without_rwf_nowait_every_file_is_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.preadv
    refused: list[int] = []

    def preadv(fd: int, buffers: list[memoryview | bytearray], offset: int, flags: int = 0) -> int:
        if flags:
            refused.append(fd)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(fetch, "_NOWAIT", getattr(os, "RWF_NOWAIT", 0x8))
    rows = make_rows(tmp_path / "files", [100] * (3 * MODE_WINDOW))
    threads: dict[str, str] = {}  # file: the thread that read it
    real_read_file = fetch.read_file

    def read_file(row: StagedRow, path: str, *args: object) -> tuple[int, bool | None]:
        threads[os.path.basename(path)] = threading.current_thread().name
        return real_read_file(row, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(fetch, "read_file", read_file)
    assert read_all(rows, tmp_path / "files", start_inline=True) == expected(rows, tmp_path / "files")
    assert 1 <= len(refused) <= 4  # asked once per reading thread at most, then never again
    first, *rest = [threads[row.source] for row in rows]
    assert first == threading.current_thread().name  # the first file, read inline, found out
    assert all(name.startswith("shardkit-read") for name in rest)
    assert not fetch._state.inline


@pytest.mark.parametrize("start_inline", [True, False])
@pytest.mark.parametrize("change", ["grown", "shrunk"])
def test_a_file_changed_since_the_check_is_an_error_naming_it(
    memory, tmp_path: Path, start_inline: bool, change: str
) -> None:  # type: ignore[no-untyped-def]
    memory(lambda name: True)
    rows = make_rows(tmp_path / "files", [100] * 10)
    victim = tmp_path / "files" / rows[6].source
    victim.write_bytes(victim.read_bytes() + b"x" if change == "grown" else victim.read_bytes()[:-1])
    size = 101 if change == "grown" else 99
    with pytest.raises(
        SourceChanged, match=rf"f0006\.bin \(metadata line 7\): file changed since it was checked \({size} bytes"
    ):
        read_all(rows, tmp_path / "files", start_inline=start_inline)


@settings(max_examples=200, deadline=None)
@given(st.integers(16, 4096), st.lists(st.tuples(st.integers(1, 2048), st.booleans()), max_size=300))
def test_ring_regions_never_overlap_and_come_back_in_order(capacity: int, ops: list[tuple[int, bool]]) -> None:
    ring = fetch.Ring(capacity)
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


def test_reads_go_round_the_ring() -> None:
    """Inline reads take one region at a time, and still not the same one each time."""
    ring = fetch.Ring(1000)
    starts = []
    for _ in range(12):
        region = ring.take(300)
        assert region is not None
        starts.append(_offset(ring, region))
        ring.release_oldest()
    assert starts[:4] == [0, 300, 600, 0]


def _offset(ring: fetch.Ring, region: memoryview) -> int:
    import ctypes

    base = ctypes.addressof(ctypes.c_char.from_buffer(ring.buffer))
    return ctypes.addressof(ctypes.c_char.from_buffer(region)) - base
