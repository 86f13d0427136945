"""A packed dataset's parts, from wherever it is (a folder, a URL, the Hub): its manifest, and the
rows of one shard as its format reads them. What ``shardkit.stream``, remux and the card's
preview share; one shard is read front to back in one request (Parquet: footer, then ranges), a
cut piece of one by its format's ranged reads (ZIP: its directory; tar: the manifest's index of
row offsets; Parquet: the row groups that hold it).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, BinaryIO

from .errors import UsageError
from .formats import ShardFormat, format_named
from .formats.base import ShardRecord
from .location import Location
from .manifest import MANIFEST_NAME, Manifest, read_manifest_at
from .rowcheck import DatasetRows


def read_manifest_from(location: Location) -> Manifest:
    """The manifest at ``location``, checked (:func:`.manifest.read_manifest_at`); one line when there is none."""
    manifest = read_manifest_at(location)
    if manifest is None:
        raise UsageError(
            f"{location.where(MANIFEST_NAME)} does not exist: {location.url} is not a dataset packed by shardkit"
            " (pack it with `pack-shards IMAGES_DIR META_JSONL -o OUT_DIR`)"
        )
    return manifest


class ShardAt:
    """One shard of a :class:`Location`, as a format reads it (:class:`.formats.base.ShardSource`):
    also the seam through which tests read a piece of a shard file with a format's read_piece."""

    def __init__(self, location: Location, shard: str) -> None:
        self.location = location
        self.shard = shard

    def open(self) -> BinaryIO:
        return self.location.open(self.shard)

    def open_random(self) -> BinaryIO:
        return self.location.open_random(self.shard, exact=True)

    def open_range(self, start: int, end: int) -> BinaryIO:
        return self.location.open_range(self.shard, start, end)


def iter_shard(
    source: Location,
    shard: str,
    file_column: str,
    fmt_name: str = "zip",
    manifest: Manifest | None = None,
    *,
    start: int = 0,
    stop: int | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Rows ``start`` to ``stop`` (default: all) of one shard, in order: metadata fields plus
    ``{file_column: {"bytes", "path"}}``, as its format reads them
    (:meth:`.formats.base.ShardFormat.read_piece`). The shard is held to its ``manifest``'s record
    (read from ``source`` if not given), and each row to the manifest (:mod:`.rowcheck`)."""
    fmt = format_named(fmt_name)
    manifest = manifest or read_manifest_from(source)
    recorded = next((s for s in manifest.shards if s.file == shard), None)
    record = ShardRecord(
        source.where(shard),
        file_column,
        features=manifest.features or None,
        max_bytes=manifest.options.max_shard_bytes,
        bytes=recorded.bytes if recorded is not None else None,
        rows=recorded.rows if recorded is not None else None,
        row_offsets_every=recorded.row_offsets_every if recorded is not None else 0,
        row_offsets=recorded.row_offsets if recorded is not None else (),
    )
    return _checked_rows(fmt, source, shard, record, manifest, start, stop)


def _checked_rows(
    fmt: ShardFormat,
    source: Location,
    shard: str,
    record: ShardRecord,
    manifest: Manifest,
    start: int,
    stop: int | None,
) -> Generator[dict[str, Any], None, None]:
    """The piece's rows as its format reads them, each held to the manifest (:mod:`.rowcheck`):
    the one place every row ``shardkit.stream``, remux and the preview get passes through."""
    check = dataset_rows(manifest).shard(shard, record.where, file_column=record.file_column)
    rows = fmt.read_piece(ShardAt(source, shard), record, start, stop)
    try:
        yield from check.rows(rows, start)
    finally:
        rows.close()  # a read left early (a break, an error) closes its stream


_last_rules: tuple[Manifest, DatasetRows] | None = None


def dataset_rows(manifest: Manifest) -> DatasetRows:
    """The row rules of ``manifest`` (:class:`.rowcheck.DatasetRows`), built once for the manifest
    a stream reads shard after shard (the last one asked for is kept)."""
    global _last_rules
    last = _last_rules
    if last is not None and last[0] is manifest:
        return last[1]
    rules = DatasetRows(manifest)
    _last_rules = (manifest, rules)
    return rules
