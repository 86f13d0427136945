"""SHA-256 of files: the content keys, the manifest's shard hashes, the Hub's LFS ids."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import IO

from .streamio import crc32

_HASH_CHUNK = 1 << 20


def sha256_file(path: str) -> str:
    """The hex sha256 of a file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        return sha256_fd(fd)
    finally:
        os.close(fd)


def sha256_fd(fd: int) -> str:
    """The hex sha256 of what is left to read in an open file (several run at once on the check threads).

    Read with ``readv`` into this thread's reused buffer: a buffered ``read`` would allocate
    a chunk for every file and copy it twice.
    """
    return _hash_fd(fd, None)[0]


def sha256_crc32_fd(fd: int) -> tuple[str, int]:
    """:func:`sha256_fd` and the CRC-32 of the same bytes, in one read: a content key's file is
    hashed once, at the check; the writer compares the CRC-32 it computes anyway with this one."""
    return _hash_fd(fd, crc32)


def _hash_fd(fd: int, crc: Callable[[memoryview, int], int] | None) -> tuple[str, int]:
    buffer: memoryview | None = getattr(_hash_buffers, "buffer", None)
    if buffer is None:
        buffer = _hash_buffers.buffer = memoryview(bytearray(_FILE_HASH_CHUNK))
    digest = hashlib.sha256()
    value = 0
    while n := os.readv(fd, [buffer]):
        digest.update(buffer[:n])
        if crc is not None:
            value = crc(buffer[:n], value)
    return digest.hexdigest(), value


_hash_buffers = threading.local()
_FILE_HASH_CHUNK = 256 << 10  # per thread: 8 check threads hold 2 MiB


def sha256_stream(f: IO[bytes]) -> str:
    """The hex sha256 of what is left in an open binary file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    while chunk := f.read(_HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()
