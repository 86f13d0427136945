"""An ``http(s)://`` URL of a packed folder, read: each shard front to back with one GET.

Files are read with :class:`.reading.HttpReader` (one streaming GET, a ranged one for part of a
file) and, where a reader seeks (a Parquet shard, a ZIP's directory), :class:`.reading.HttpRandomFile`
(a ranged GET per read): both retry a transient failure and resume where it broke. Sizes and
listings go through fsspec's http(s) filesystem (:func:`.fsspec_url.http_filesystem`). Its
files are not repaired in place: a damaged dataset is published anew from a local copy.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from .base import register
from .fsspec_url import BLOCK, FsspecPlace, http_filesystem
from .reading import HttpRandomFile, HttpReader


class HttpUrl(FsspecPlace):
    """A packed folder an http(s) server serves."""

    kind = "http"
    repaired_in_place = False

    def headers(self) -> dict[str, str]:
        """The headers of every request here (none of its own)."""
        return {}

    def filesystem(self) -> tuple[Any, str]:
        return http_filesystem(self.headers()), self.url

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        # Not fsspec's http(s) file: its failures (a 429, a cut body) surface as FileNotFoundError
        # and are not retried. Not exact: large sequential blocks, as fsspec's read-ahead.
        return HttpRandomFile(self.where(rel), self.headers(), block=0 if exact else BLOCK)  # type: ignore[return-value]

    def open(self, rel: str) -> BinaryIO:
        return HttpReader(self.where(rel), self.headers())  # type: ignore[return-value]

    def open_range(self, rel: str, start: int, end: int) -> BinaryIO:
        # One ranged GET: the server sends those bytes only.
        return HttpReader(self.where(rel), self.headers(), byte_range=(start, end))  # type: ignore[return-value]


register(HttpUrl, "http", "https")
