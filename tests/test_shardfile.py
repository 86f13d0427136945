"""The shard file: bytes in aligned chunks, hashed and written by threads, O_DIRECT where it may."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import threading
from pathlib import Path

import pytest

from shardkit import localdisk, shardfile
from shardkit.localdisk import filesystem_type
from shardkit.shardfile import CACHED_CHUNK, DIRECT_CHUNK, ShardFile

BIG, SMALL = DIRECT_CHUNK[0], CACHED_CHUNK[0]
# Sizes around every boundary: empty, one block, a chunk of either size and a byte either side,
# more chunks than there are buffers.
SIZES = [0, 1, 4095, 4096, 4097, SMALL - 1, SMALL, SMALL + 1, BIG - 1, BIG, BIG + 1, 3 * BIG + 12345]


def pieces(total: int, seed: int) -> list[bytes]:
    """``total`` bytes cut at random points, with some pieces larger than a chunk."""
    rng = random.Random(seed)
    data = rng.randbytes(total)
    out, at = [], 0
    while at < total:
        n = rng.choice([1, 30, 4096, 100_000, SMALL + 3, BIG + 7])
        out.append(data[at : at + n])
        at += n
    return out


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("total", SIZES)
def test_bytes_and_sha256_are_those_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool, total: int
) -> None:
    monkeypatch.setattr(shardfile, "direct_io_for", lambda folder: direct)
    data = pieces(total, total)
    path = tmp_path / "shard.zip.partial"
    f = ShardFile(str(path), fsync=total == BIG + 1)  # fsync costs seconds here; once is enough
    for piece in data:
        # bytes, and memoryviews of other formats, as pyarrow hands them
        assert f.write(memoryview(piece).cast("b") if len(piece) == 30 else piece) == len(piece)
    digest = f.close()
    expected = b"".join(data)
    assert path.read_bytes() == expected  # the last chunk's padding is gone
    assert digest == hashlib.sha256(expected).hexdigest()
    assert f.size == total
    f.abort()  # harmless after close


def test_a_refused_direct_write_falls_back_to_buffered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some filesystems take O_DIRECT at open and refuse the write (EINVAL): the chunk is written
    again the buffered way, and so are the rest."""
    monkeypatch.setattr(shardfile, "direct_io_for", lambda folder: True)
    monkeypatch.setattr(shardfile, "O_DIRECT", 0)  # so the open succeeds on any filesystem
    real = ShardFile.pwrite_all
    refused: list[int] = []

    def pwrite_all(self: ShardFile, data: memoryview, offset: int) -> None:
        if self.direct:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        real(self, data, offset)

    monkeypatch.setattr(ShardFile, "pwrite_all", pwrite_all)
    data = random.Random(1).randbytes(2 * BIG + 5)
    path = tmp_path / "shard"
    f = ShardFile(str(path), fsync=True)
    f.write(data)
    digest = f.close()
    assert refused == [0]
    assert not f.direct
    assert path.read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()


def test_a_chunk_is_hashed_while_the_one_before_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first chunk's write waits until the second chunk is hashed: one thread doing both would never get there."""
    second_hashed = threading.Event()
    waited: list[bool] = []
    real_pwrite = os.pwrite

    class CountingDigest:
        def __init__(self) -> None:
            self.inner = hashlib.sha256()
            self.updates = 0

        def update(self, data: memoryview) -> None:
            self.inner.update(data)
            self.updates += 1
            if self.updates == 2:
                second_hashed.set()

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        if offset == 0 and not waited:
            waited.append(second_hashed.wait(timeout=10))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    f = ShardFile(str(tmp_path / "shard"), fsync=False)
    f.digest = CountingDigest()  # type: ignore[assignment]
    data = os.urandom(2 * f.chunk_bytes + 10)
    f.write(data)
    assert f.close() == hashlib.sha256(data).hexdigest()
    assert waited == [True]


def test_a_write_error_reaches_the_caller() -> None:
    """/dev/full refuses every write (ENOSPC): the error the thread met is raised by write or close."""
    f = ShardFile("/dev/full", fsync=False)
    with pytest.raises(OSError) as caught:
        for _ in range(4):
            f.write(bytes(BIG))
        f.close()
    assert caught.value.errno == errno.ENOSPC
    f.abort()
    assert f.stopped  # closed, threads gone


def test_chunks_are_reused_after_an_aborted_file(tmp_path: Path) -> None:
    """A shard abandoned half-way (a source file changed) leaves the thread's chunks usable."""
    first = ShardFile(str(tmp_path / "a"), fsync=False)
    first.write(os.urandom(BIG + 10))
    first.abort()
    data = os.urandom(2 * BIG)
    second = ShardFile(str(tmp_path / "b"), fsync=False)
    second.write(data)
    second.close()
    assert (tmp_path / "b").read_bytes() == data


MOUNTS = """\
rootfs / rootfs rw 0 0
/dev/vda / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
server:/export /mnt/nfs nfs4 rw 0 0
/dev/vdb /mnt/nfs/local\\040disk xfs rw 0 0
"""


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("/", "ext4"),  # the later of two mounts on one point
        ("/home/me/data", "ext4"),
        ("/tmp", "tmpfs"),
        ("/tmp2/x", "ext4"),  # a prefix of the name, not of the path
        ("/mnt/nfs/shards", "nfs4"),
        ("/mnt/nfs/local disk/out", "xfs"),  # the longest mount point, spaces escaped as \040
    ],
)
def test_filesystem_type_is_that_of_the_longest_mount_point(folder: str, expected: str) -> None:
    assert filesystem_type(folder, MOUNTS) == expected


def test_direct_io_only_on_local_block_filesystems(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: "nfs4")
    assert not shardfile.direct_io_for("/anywhere")
    monkeypatch.setattr(localdisk, "filesystem_type_here", lambda folder: "xfs")
    assert shardfile.direct_io_for("/anywhere") == bool(shardfile.O_DIRECT)
    monkeypatch.setenv("SHARDKIT_NO_DIRECT_IO", "1")
    assert not shardfile.direct_io_for("/anywhere")
