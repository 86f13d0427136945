"""A contact sheet for the dataset card: the first images of the first shards, with captions.

Read the way every shardkit reader reads (:func:`shardkit.shardrows.iter_shard`): each shard front
to back. The sheet is a JPEG at the repo root (``preview.jpg``), embedded in README.md's
shardkit section. Each image is shown as a viewer shows it (upright by its EXIF orientation,
transparency over the cell's background, high bit depths scaled to 8 bits), each caption in
any script (:mod:`shardkit.captionfont`). Deterministic for given Pillow and font versions.
Only for image datasets.
"""

from __future__ import annotations

import io
import logging
import os
import urllib.parse
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import captionfont
from .formats import ZIP, ShardFormat
from .location import Location
from .manifest import Manifest, write_atomic
from .shardrows import iter_shard

if TYPE_CHECKING:
    from PIL import Image

log = logging.getLogger(__name__)

PREVIEW_NAME = "preview.jpg"
CAPTION_COLUMNS = ("caption", "title", "text", "description", "label", "class", "category")
# The sheet's geometry, public with cell_image and preview_samples: the seam the preview tests
# hold each cell's pixels and captions to (tests/test_preview.py).
CELL = 160
_COLUMNS = 4
BACKGROUND = (240, 240, 240)  # around an image that does not fill its cell, and under its transparency
_CAPTION_SIZE = 12  # pixels per em
CAPTION_LINES = 2
LINE_PITCH = 16  # Noto Sans's ascent and descent at 12 px, with CJK and emoji glyphs inside them
MARGIN = 4
TEXT_HEIGHT = MARGIN + CAPTION_LINES * LINE_PITCH + MARGIN
_HIGH_BIT_DEPTH = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")
_ALPHA = ("RGBA", "LA", "PA", "RGBa")


def caption_of(row: dict[str, Any]) -> str:
    """The caption: the first caption-like column, URL-decoded if it looks URL-encoded (the sheet
    cuts it to its cell), else the start of the row's key."""
    for column in CAPTION_COLUMNS:
        value = row.get(column)
        if value is None or value == "":
            continue
        text = str(value)
        if "+" in text and " " not in text:
            text = urllib.parse.unquote_plus(text)
        return text
    return str(row.get("key", ""))[:12]


def preview_samples(
    source: Location,
    shard_files: list[str],
    limit: int,
    fmt: ShardFormat,
    labels: dict[str, list[str]],
    manifest: Manifest | None = None,
) -> Iterator[tuple[bytes, str, str]]:
    """Up to ``limit`` (image bytes, caption, where: shard and key), an even share from each shard: a wide look.
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
            yield row.pop("image")["bytes"], caption_of(row), f"{shard} row {row.get('key')}"
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
    from PIL import Image, ImageDraw

    source = shards_at or Location(os.path.abspath(out_dir), "folder")
    tiles: list[tuple[Image.Image, str]] = []
    for data, caption, where in preview_samples(source, shard_files, count, fmt, labels or {}, manifest):
        try:
            tile = cell_image(data)
        except Exception as e:  # not an image Pillow knows (a check at pack time is optional): left out
            log.info("%s is left out of %s: %s", where, PREVIEW_NAME, e)
            continue
        tiles.append((tile, caption))
    if not tiles:
        return None
    columns = min(_COLUMNS, len(tiles))
    rows = (len(tiles) + columns - 1) // columns
    sheet = Image.new("RGB", (columns * CELL, rows * (CELL + TEXT_HEIGHT)), (255, 255, 255))
    for i, (tile, caption) in enumerate(tiles):
        x, y = (i % columns) * CELL, (i // columns) * (CELL + TEXT_HEIGHT)
        sheet.paste(tile, (x, y))
        # Drawn on a layer of the caption's cell: no glyph reaches past it, however tall.
        ink = Image.new("L", (CELL, TEXT_HEIGHT), 0)
        laid = captionfont.wrap(caption, size=_CAPTION_SIZE, room=CELL - 2 * MARGIN, lines=CAPTION_LINES)
        captionfont.draw_lines(
            ImageDraw.Draw(ink), (MARGIN, MARGIN), laid, size=_CAPTION_SIZE, pitch=LINE_PITCH, fill=255
        )
        sheet.paste((30, 30, 30), (x, y + CELL, x + CELL, y + CELL + TEXT_HEIGHT), mask=ink)
    encoded = io.BytesIO()
    sheet.save(encoded, format="JPEG", quality=85)
    write_atomic(os.path.join(out_dir, PREVIEW_NAME), encoded.getvalue())
    return PREVIEW_NAME


def cell_image(data: bytes) -> Image.Image:
    """``data`` as a viewer shows it, fitted to a cell: the first frame, upright by its EXIF
    orientation, in 8-bit RGB over the cell's background."""
    from PIL import Image, ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a damaged EXIF block: Pillow reads what it can, and says so on stderr
        img = Image.open(io.BytesIO(data))
        # A JPEG decodes at 1/2 to 1/8 scale where that still fills a cell (draft mode).
        with img:
            img.draft("RGB", (CELL, CELL))
            upright = ImageOps.exif_transpose(img)
    if upright.mode in _HIGH_BIT_DEPTH:  # as floats: Pillow resizes I;16B's bytes as if little-endian
        upright = _eight_bit(ImageOps.contain(upright.convert("F"), (CELL, CELL)))
    if upright.mode in _ALPHA or "transparency" in upright.info:
        over = Image.new("RGBA", upright.size, (*BACKGROUND, 255))
        upright = Image.alpha_composite(over, upright.convert("RGBA"))
    return ImageOps.pad(upright.convert("RGB"), (CELL, CELL), color=BACKGROUND)


def _eight_bit(img: Image.Image) -> Image.Image:
    """A 16-bit, 32-bit or float grey image in 8 bits, its lowest value black and its highest
    white: Pillow's own conversion clips at 255 (a 16-bit image is all white), and a 12-bit
    sensor's or a depth map's values do not span the type's range. A flat image is mid grey."""
    import numpy as np
    from PIL import Image

    values = np.asarray(img, dtype=np.float64)
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    scaled = (values - low) * (255 / (high - low)) if high > low else np.full(values.shape, 128.0)
    return Image.fromarray(np.nan_to_num(scaled, nan=0.0).clip(0, 255).round().astype(np.uint8))
