"""The corpus the reader-compatibility tests pack and read back with every reader.

Built to catch what real metadata does to loaders (issue 18), not to look like the example:

* images: JPEG, PNG and WebP, unevenly spread over the shards (one shard JPEG only);
* shard ``0``: every ``score`` is a whole number written as a JSON integer (``2``), while the
  other shards write ``2.5``: the column is float64 and must come back as floats everywhere;
* shard ``1``: ``note`` is null in every row (a string elsewhere);
* ``big``: integers above 2**53 (a float64 would round them);
* ``tags``: lists of strings, some empty; ``flag``: booleans; ``caption``: non-ASCII text;
* audio: WAV int16, WAV float32 (IEEE float, format tag 3) and FLAC, mixed in every shard.

Keys are given, so each row's shard is its key's first hex digit (``--prefix-length 1``).
:func:`expected_rows` is what every reader must return: every file's bytes, and every field
with the value and Python type the card declares (a float column gives floats).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

from tests.compat_reader import typed
from tests.support.corpus import tiny_image, write_jsonl

#: Shard (first key digit) -> image formats of its rows, in order.
IMAGE_SHARDS = {
    "0": ["JPEG"] * 6,
    "1": ["JPEG", "PNG", "JPEG", "JPEG", "WEBP"],
    "2": ["PNG", "PNG", "WEBP", "JPEG"],
    "3": ["WEBP", "JPEG", "JPEG"],
}
AUDIO_SHARDS = {"0": ["wav16", "flac", "wavf32"], "1": ["flac", "wav16", "wavf32", "flac"], "2": ["wavf32", "wav16"]}
_EXT = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "wav16": ".wav", "wavf32": ".wav", "flac": ".flac"}
#: The fields every row has besides file_name and key, and their declared types.
FIELD_TYPES = {"caption": str, "score": float, "note": str, "big": int, "tags": list, "flag": bool}


def clip(seed: int, kind: str) -> bytes:
    """A short mono clip whose samples differ per seed."""
    import numpy as np
    import soundfile

    samples = np.array([0.5 * math.sin(i * (seed + 1) / 30) for i in range(400)], dtype="float32")
    buf = io.BytesIO()
    if kind == "flac":
        soundfile.write(buf, samples, 8000, format="FLAC", subtype="PCM_16")
    else:
        soundfile.write(buf, samples, 8000, format="WAV", subtype="FLOAT" if kind == "wavf32" else "PCM_16")
    return buf.getvalue()


def _row(shard: str, i: int, n: int) -> dict[str, Any]:
    whole = shard == "0"
    return {
        "key": f"{shard}{hashlib.sha256(f'{shard}-{i}'.encode()).hexdigest()[:15]}",
        "caption": f"café ☕ 東京 🌸 n°{n}",
        "score": (2 + i) if whole else (2.5 + i),  # JSON "2" in shard 0, "2.5" elsewhere
        "note": None if shard == "1" else f"note {n}",
        "big": 2**53 + 1 + n,
        "tags": [] if n % 3 == 0 else [f"t{n}", "x"],
        "flag": n % 2 == 0,
    }


def build(
    root: Path, modality: str = "image", *, scale: int = 1, image_size: tuple[int, int] = (24, 16)
) -> tuple[Path, Path]:
    """Write the corpus under ``root``; return (files folder, metadata file).

    ``scale`` repeats every shard's rows that many times (the bench reads a larger copy)."""
    files = root / "files"
    files.mkdir(parents=True)
    rows = []
    n = 0
    for shard, kinds in (IMAGE_SHARDS if modality == "image" else AUDIO_SHARDS).items():
        for i, kind in enumerate(kinds * scale):
            name = f"{kind.lower()}/item_{n:03d}{_EXT[kind]}"
            path = files / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(tiny_image(n, kind, image_size) if modality == "image" else clip(n, kind))
            rows.append({"file_name": name, **_row(shard, i, n)})
            n += 1
    return files, write_jsonl(root / "meta.jsonl", rows)


def expected_rows(files: Path, meta: Path) -> dict[str, Any]:
    """key -> {"sha256": the file's, "fields": typed(fields as declared)}."""
    out = {}
    for line in meta.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        data = (files / row.pop("file_name")).read_bytes()
        row["score"] = float(row["score"])  # the column is float64: a whole number comes back as 2.0
        out[row["key"]] = {"sha256": hashlib.sha256(data).hexdigest(), "fields": typed(row)}
    return out
