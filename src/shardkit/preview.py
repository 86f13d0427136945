"""A contact sheet for the dataset card: the first images of the first shards, with captions.

Read the way every shardkit reader reads: each shard front to back. The sheet is a JPEG at the
repo root (``preview.jpg``), embedded in README.md's shardkit section. Deterministic for a given
Pillow version. Only for image datasets.
"""

from __future__ import annotations

import io
import json
import os
import urllib.parse
from collections.abc import Generator, Iterator
from typing import Any

from .formats import ZIP, ShardFormat
from .tarformat import iter_tar_members
from .zipformat import iter_members

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


def shard_rows(path: str, fmt: ShardFormat) -> Generator[tuple[bytes, dict[str, Any]], None, None]:
    """(file bytes, metadata row) of a local shard, in order, read front to back."""
    with open(path, "rb") as f:
        if fmt.name == "zip":
            rows: dict[str, dict[str, Any]] = {}
            for member in iter_members(f):
                if member.name == "metadata.jsonl":
                    for line in member.data.decode("utf-8").splitlines():
                        row = json.loads(line)
                        rows[row["file_name"]] = row
                    continue
                yield member.data, rows.get(member.name, {})
        elif fmt.name == "tar":
            row = {}
            for tar_member in iter_tar_members(f):
                if tar_member.name.endswith(".json"):
                    row = json.loads(tar_member.data)
                else:
                    yield tar_member.data, row
        else:
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(f)
            file_column = parquet.schema_arrow.names[0]
            for batch in parquet.iter_batches(batch_size=16):
                for record in batch.to_pylist():
                    yield record.pop(file_column)["bytes"], record


def _samples(out_dir: str, shard_files: list[str], limit: int, fmt: ShardFormat) -> Iterator[tuple[bytes, str]]:
    """Up to ``limit`` (image bytes, caption), an even share from each shard: a wide look."""
    quota = max(1, -(-limit // max(len(shard_files), 1)))
    taken = 0
    for shard in shard_files:
        rows = shard_rows(os.path.join(out_dir, shard), fmt)
        for from_this_shard, (data, row) in enumerate(rows, 1):
            yield data, caption_of(row)
            taken += 1
            if taken >= limit:
                rows.close()
                return
            if from_this_shard >= quota:
                break
        rows.close()


def write_preview(out_dir: str, shard_files: list[str], *, count: int = 12, fmt: ShardFormat = ZIP) -> str | None:
    """Write ``preview.jpg`` from up to ``count`` images; return its name, or None if none decode."""
    from PIL import Image, ImageDraw, ImageFont, ImageOps

    tiles: list[tuple[Image.Image, str]] = []
    for data, caption in _samples(out_dir, shard_files, count, fmt):
        try:
            with Image.open(io.BytesIO(data)) as img:
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
    path = os.path.join(out_dir, PREVIEW_NAME)
    tmp = path + ".partial"
    sheet.save(tmp, format="JPEG", quality=85)
    os.replace(tmp, path)
    return PREVIEW_NAME
