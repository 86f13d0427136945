"""Small pieces the container formats (:mod:`.formats.zip`, :mod:`.formats.tar`) share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO, Protocol

try:  # ISA-L's CRC-32 (PCLMUL/VPCLMUL): the same values as zlib's, faster, and it frees the GIL too
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheels
    from zlib import crc32

__all__ = ["CountingOutput", "Output", "crc32", "decode_member_name", "jsonl_lines", "read_exact"]


class Output(Protocol):
    """Where a container format writes: a binary file, or :class:`shardkit.shardfile.ShardFile`."""

    def write(self, data: bytes | memoryview, /) -> int: ...


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


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text, split at "\n" only: str.splitlines would also split
    inside a value holding U+2028, U+0085 or a form feed, which JSON leaves unescaped."""
    return text.removesuffix("\n").split("\n") if text else []


def decode_member_name(raw: bytes, offset: int, unsafe: re.Pattern[str], error: type[ValueError]) -> str:
    """A member name as stored at ``offset``: UTF-8, not empty, nothing ``unsafe`` matches."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"the member name at offset {offset} is not valid UTF-8: {raw!r}") from None
    if not name or unsafe.search(name):
        raise error(f"unsafe member name {name!r} at offset {offset}")
    return name


@dataclass
class CountingOutput:
    """Writes to a binary stream, counting bytes."""

    out: Output
    _offset: int = 0

    def _emit(self, data: bytes | memoryview) -> None:
        self.out.write(data)
        self._offset += len(data)
