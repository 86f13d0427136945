"""SHA-256 of files: the content keys, the manifest's shard hashes, the Hub's LFS ids."""

from __future__ import annotations

import hashlib
import os
import threading
from typing import IO

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
    buffer: memoryview | None = getattr(_hash_buffers, "buffer", None)
    if buffer is None:
        buffer = _hash_buffers.buffer = memoryview(bytearray(_FILE_HASH_CHUNK))
    digest = hashlib.sha256()
    while n := os.readv(fd, [buffer]):
        digest.update(buffer[:n])
    return digest.hexdigest()


_hash_buffers = threading.local()
_FILE_HASH_CHUNK = 256 << 10  # per thread: 8 check threads hold 2 MiB


def sha256_stream(f: IO[bytes]) -> str:
    """The hex sha256 of what is left in an open binary file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    while chunk := f.read(_HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()
