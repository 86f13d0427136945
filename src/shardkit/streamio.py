"""Small pieces the container formats (:mod:`.zipformat`, :mod:`.tarformat`) share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO


def read_exact(stream: BinaryIO, n: int, what: str, error: type[ValueError]) -> bytes:
    """Exactly ``n`` bytes from a forward-only stream; ``error`` names ``what`` if it ends first."""
    chunks = []
    remaining = n
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise error(f"truncated: stream ended inside {what}")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


@dataclass
class CountingOutput:
    """Writes to a binary stream, counting bytes; ``sink`` receives every byte (e.g. a hash's update)."""

    out: BinaryIO
    sink: Callable[[bytes | memoryview], object] | None = None
    _offset: int = 0

    def _emit(self, data: bytes | memoryview) -> None:
        self.out.write(data)
        if self.sink is not None:
            self.sink(data)
        self._offset += len(data)
