"""The CPU-bound augmentation bench_remux.py runs in every tool, Pillow alone (no torchvision).

Each row's image is decoded, cropped at random (a scale of 0.7-1.0 of its area, an aspect ratio of 3/4-4/3)
and resized to 256x256 px, mirrored with a chance of one in two, and sharpened. The randomness of a row comes
from its ``id`` column, so every tool gives each row the same image whatever its batch or worker.

    shardkit remux SOURCE OUT --map bench/remux_augment.py:augment

``augment`` returns PIL images (shardkit encodes them, JPEG quality 90 by default); ``augment_to_jpeg`` returns
their JPEG bytes at quality 90, for the tools that write the bytes themselves.
"""

from __future__ import annotations

import io
import math
import random
from typing import Any

from PIL import Image, ImageFilter

SIZE = 256
SCALE = (0.7, 1.0)
RATIO = (3 / 4, 4 / 3)
JPEG_QUALITY = 90


def augment_image(image: Image.Image, row_id: int) -> Image.Image:
    """Random resized crop to SIZE px, random horizontal mirror, sharpen; seeded by the row's id."""
    rng = random.Random(row_id)
    image = image.convert("RGB")  # decodes the JPEG
    width, height = image.size
    area = width * height * rng.uniform(*SCALE)
    ratio = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
    crop_w = min(width, round(math.sqrt(area * ratio)))
    crop_h = min(height, round(math.sqrt(area / ratio)))
    left, top = rng.randint(0, width - crop_w), rng.randint(0, height - crop_h)
    image = image.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + crop_w, top + crop_h))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image.filter(ImageFilter.SHARPEN)


def augment(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A batch (a dict of lists, ``image`` as PIL images) with every image augmented."""
    return {**batch, "image": [augment_image(im, i) for im, i in zip(batch["image"], batch["id"], strict=True)]}


def jpeg(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def augment_to_jpeg(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``augment``, its images as ``{"bytes", "path"}`` of JPEG quality 90 (datasets' Image feature's form)."""
    out = augment(batch)
    return {**out, "image": [{"bytes": jpeg(im), "path": None} for im in out["image"]]}
