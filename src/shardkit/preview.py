"""A contact sheet for the dataset card: the first images of the first shards, with captions.

Read the way every shardkit reader reads (:func:`shardkit.shardrows.iter_shard`): each shard front
to back. The sheet is a JPEG at the repo root (``preview.jpg``), embedded in README.md's
shardkit section. Deterministic for a given Pillow version. Only for image datasets.
"""

from __future__ import annotations

import io
import os
import urllib.parse
from collections.abc import Iterator
from typing import Any

from .formats import ZIP, ShardFormat
from .location import Location
from .manifest import Manifest, write_atomic
from .shardrows import iter_shard

PREVIEW_NAME = "preview.jpg"
CAPTION_COLUMNS = ("caption", "title", "text", "description", "label", "class", "category")
_CELL = 160
_TEXT_HEIGHT = 28
_COLUMNS = 4


def caption_of(row: dict[str, Any]) -> str:
    """A short caption: the first caption-like column, URL-decoded if it looks URL-encoded."""
    for column in CAPTION_COLUMNS:
        value = row.get(column)
        if value is None or value == "":
            continue
        text = str(value)
        if "+" in text and " " not in text:
            text = urllib.parse.unquote_plus(text)
        return text if len(text) <= 24 else text[:23] + "…"
    return str(row.get("key", ""))[:12]


def _samples(
    source: Location,
    shard_files: list[str],
    limit: int,
    fmt: ShardFormat,
    labels: dict[str, list[str]],
    manifest: Manifest | None = None,
) -> Iterator[tuple[bytes, str]]:
    """Up to ``limit`` (image bytes, caption), an even share from each shard: a wide look.
    ``labels``: ClassLabel columns' names, so a caption shows "cat", not the class number."""
    quota = max(1, -(-limit // max(len(shard_files), 1)))
    taken = 0
    for shard in shard_files:
        rows = iter_shard(source, shard, "image", fmt.name, manifest)
        for from_this_shard, row in enumerate(rows, 1):
            for column, names in labels.items():
                number = row.get(column)
                if isinstance(number, int):
                    row[column] = names[number] if 0 <= number < len(names) else None  # (-1: no label)
            yield row.pop("image")["bytes"], caption_of(row)
            taken += 1
            if taken >= limit:
                rows.close()
                return
            if from_this_shard >= quota:
                break
        rows.close()


def write_preview(
    out_dir: str,
    shard_files: list[str],
    *,
    count: int = 12,
    fmt: ShardFormat = ZIP,
    shards_at: Location | None = None,
    labels: dict[str, list[str]] | None = None,
    manifest: Manifest | None = None,
) -> str | None:
    """Write ``preview.jpg`` into the local folder ``out_dir`` from up to ``count`` images of the
    shards at ``shards_at`` (by default in ``out_dir``); return its name, or None if none decode.
    ``manifest``: the shards' (read from ``shards_at`` where a shard's reader needs it and it is
    not given: at a URL, the pack publishes it only after the preview)."""
    from PIL import Image, ImageDraw, ImageFont, ImageOps

    source = shards_at or Location(os.path.abspath(out_dir), "folder")
    tiles: list[tuple[Image.Image, str]] = []
    for data, caption in _samples(source, shard_files, count, fmt, labels or {}, manifest):
        try:
            with Image.open(io.BytesIO(data)) as img:
                # A JPEG decodes at 1/2 to 1/8 scale where that still fills a cell: a 12 MP
                # photo takes milliseconds, not a tenth of a second.
                img.draft("RGB", (_CELL, _CELL))
                tile = ImageOps.pad(img.convert("RGB"), (_CELL, _CELL), color=(240, 240, 240))
        except Exception:  # not an image Pillow knows: leave it out of the sheet
            continue
        tiles.append((tile, caption))
    if not tiles:
        return None
    columns = min(_COLUMNS, len(tiles))
    rows = (len(tiles) + columns - 1) // columns
    sheet = Image.new("RGB", (columns * _CELL, rows * (_CELL + _TEXT_HEIGHT)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for i, (tile, caption) in enumerate(tiles):
        x, y = (i % columns) * _CELL, (i // columns) * (_CELL + _TEXT_HEIGHT)
        sheet.paste(tile, (x, y))
        draw.text((x + 4, y + _CELL + 6), caption, fill=(30, 30, 30), font=font)
    encoded = io.BytesIO()
    sheet.save(encoded, format="JPEG", quality=85)
    write_atomic(os.path.join(out_dir, PREVIEW_NAME), encoded.getvalue())
    return PREVIEW_NAME
