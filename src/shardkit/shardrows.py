"""A packed dataset's parts, from wherever it is (a folder, a URL, the Hub): its manifest, and the
rows of one shard as its format reads them. What ``shardkit.stream``, remux and the card's
preview share; one shard is read front to back in one request (Parquet: footer, then ranges).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from .errors import UsageError
from .formats import format_named
from .formats.base import ShardRecord
from .location import Location
from .manifest import MANIFEST_NAME, Manifest


def read_manifest_from(location: Location) -> Manifest:
    """The manifest at ``location``, read as a shard is (one GET over http(s))."""
    with location.open(MANIFEST_NAME) as reader:
        data = reader.read()
    try:
        return Manifest.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{location.where(MANIFEST_NAME)} is not a shardkit manifest: {exc}") from None


def iter_shard(
    source: Location, shard: str, file_column: str, fmt_name: str = "zip", manifest: Manifest | None = None
) -> Generator[dict[str, Any], None, None]:
    """The rows of one shard, in order: metadata fields plus ``{file_column: {"bytes", "path"}}``,
    as its format reads them (:meth:`.formats.base.ShardFormat.read_rows`). A shard read with
    ranged reads (Parquet) is held to its ``manifest``'s record (read from ``source`` if not given)."""
    fmt = format_named(fmt_name)
    record = ShardRecord(source.where(shard), file_column)
    if fmt.random_access:
        manifest = manifest or read_manifest_from(source)
        recorded = next((s for s in manifest.shards if s.file == shard), None)
        record = ShardRecord(
            record.where,
            file_column,
            features=manifest.features or None,
            max_bytes=manifest.options.max_shard_bytes,
            bytes=recorded.bytes if recorded is not None else None,
            rows=recorded.rows if recorded is not None else None,
        )
        reader = source.open_random(shard)
    else:
        reader = source.open(shard)  # one forward-only read
    try:
        yield from fmt.read_rows(reader, record)
    finally:
        reader.close()
