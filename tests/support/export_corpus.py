"""Corpora shaped like real exports, for the test that the default ZIP output loads (issue 30).

Real metadata exports (YFCC-like: a ``split`` column of very uneven sizes, columns a split never
fills) are what made ``datasets.load_dataset(OUT)`` refuse the default ZIP output, at random:
datasets' imagefolder/audiofolder infers the types of ONE metadata file per split and compares
them across splits, and tiny shards can tip its choice of builder to ``json``. So both corpora
carry those shapes, each in a whole split:

* image: ``train`` 140 rows, ``validation`` 20, ``test`` 8; PNG, JPEG and WebP in every split;
  ``description`` null in every test row; ``accuracy`` (float, some written as JSON integers) null
  in every row outside train; ``tags`` ``[]`` throughout test; ``camera`` absent from every
  validation row (present elsewhere, sometimes null); ``views`` int, ``public`` bool, ``title``
  non-ASCII, ``label`` class names (one null);
* audio: ``train`` 30 rows, ``test`` 4; WAV and FLAC in both splits; ``description`` null in every
  test row, ``snr`` (float) null in every test row, ``tags`` ``[]`` throughout test, ``device``
  absent from every test row; ``seconds`` int, ``clean`` bool, ``label`` class names.

Keys are given (16 lowercase hex digits). :func:`expected_rows` is what every reader must return
per split, in the shape tests/splits_reader.py reports: key -> the file's sha256, every field's
value with its Python type (:func:`tests.compat_reader.typed`), and the label's class name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tests.compat_reader import typed
from tests.support.compat_corpus import clip
from tests.support.corpus import tiny_image, write_jsonl

#: Rows per split, in the order the metadata file lists them (interleaved, as exports are).
IMAGE_SPLITS = {"train": 140, "validation": 20, "test": 8}
AUDIO_SPLITS = {"train": 30, "test": 4}
IMAGE_KINDS = ("JPEG", "PNG", "WEBP")
AUDIO_KINDS = ("wav16", "flac")
_EXT = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "wav16": ".wav", "flac": ".flac"}
#: Class names in first-seen order (sorted order differs: they are numbered ant=0 ... zebra=4).
IMAGE_LABELS = ("zebra", "cat", "dog", "ant", "mouse")
AUDIO_LABELS = ("speech", "music", "noise")
TITLES = ("Sonnenuntergang über dem Fluß", "café ☕ 東京 🌸", "Plain title", "Ελληνικά και ñ", "emoji 🐈‍⬛ only")
LABEL_COLUMN = "label"


def _interleaved(sizes: dict[str, int]) -> list[str]:
    """Each row's split, spread through the file as an export lists them (not split by split)."""
    total = sum(sizes.values())
    left = dict(sizes)
    order = []
    for i in range(total):
        # the split furthest behind its share of the rows so far comes next
        split = max(left, key=lambda s: (left[s] / sizes[s] if sizes[s] else 0, -list(sizes).index(s)))
        if i % 7 == 3 and left.get("train"):  # not a perfect pattern
            split = "train"
        order.append(split)
        left[split] -= 1
    assert all(n == 0 for n in left.values())
    return order


def _key(modality: str, i: int) -> str:
    return hashlib.sha256(f"{modality}-{i}".encode()).hexdigest()[:16]


def image_rows() -> list[dict[str, Any]]:
    """The image corpus's metadata rows, as written to its JSONL file."""
    rows = []
    counts = dict.fromkeys(IMAGE_SPLITS, 0)
    for i, split in enumerate(_interleaved(IMAGE_SPLITS)):
        n = counts[split]
        counts[split] += 1
        kind = IMAGE_KINDS[(i + n) % len(IMAGE_KINDS)]
        row: dict[str, Any] = {
            "key": _key("image", i),
            "file_name": f"{kind.lower()}/{split[:3]}_{i:03d}{_EXT[kind]}",
            "split": split,
            "title": f"{TITLES[i % len(TITLES)]} #{i}",
            "description": None if split == "test" or i % 5 == 0 else f"taken on day {i}, near the lake",
            # whole numbers written as JSON integers in some rows: the column is float
            "accuracy": (None if split != "train" else (i % 4 if i % 6 == 0 else round(i / 7, 3))),
            "tags": [] if split == "test" or i % 4 == 0 else [f"tag{i % 9}", "outdoor"][: 1 + i % 2],
            "views": i * 37 + 2**40,
            "public": i % 3 != 0,
            "label": None if i == 17 else IMAGE_LABELS[i % len(IMAGE_LABELS)],
        }
        if split != "validation":
            row["camera"] = None if i % 11 == 0 else f"Canon EOS {300 + i % 4}D"
        rows.append(row)
    return rows


def audio_rows() -> list[dict[str, Any]]:
    """The audio corpus's metadata rows, as written to its JSONL file."""
    rows = []
    counts = dict.fromkeys(AUDIO_SPLITS, 0)
    for i, split in enumerate(_interleaved(AUDIO_SPLITS)):
        n = counts[split]
        counts[split] += 1
        kind = AUDIO_KINDS[n % len(AUDIO_KINDS)]  # both kinds in every split, alternating
        row: dict[str, Any] = {
            "key": _key("audio", i),
            "file_name": f"{kind}/{split}_{i:03d}{_EXT[kind]}",
            "split": split,
            "title": f"{TITLES[i % len(TITLES)]} #{i}",
            "description": None if split == "test" else f"recorded in room {i % 4}",
            "snr": None if split == "test" else (12 if i % 5 == 0 else round(10 + i / 3, 2)),
            "tags": [] if split == "test" or i % 3 == 0 else [f"t{i % 4}"],
            "seconds": 1 + i % 9,
            "clean": i % 2 == 0,
            "label": AUDIO_LABELS[i % len(AUDIO_LABELS)],
        }
        if split != "test":
            row["device"] = f"mic-{i % 3}"
        rows.append(row)
    return rows


def build(root: Path, modality: str) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Write the corpus under ``root``: (files folder, metadata file, its rows)."""
    files = root / "files"
    rows = image_rows() if modality == "image" else audio_rows()
    for i, row in enumerate(rows):
        path = files / row["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = path.parent.name
        if modality == "image":
            path.write_bytes(tiny_image(i, kind.upper(), (10 + i % 7 * 3, 8 + i % 5 * 2)))
        else:
            path.write_bytes(clip(i, kind))
    return files, write_jsonl(root / "meta.jsonl", rows), rows


#: The published type of each field (besides file_name and split), by corpus. A float column
#: gives floats (a row's JSON ``2`` comes back as ``2.0``); the label column gives integers.
FLOAT_COLUMNS = {"image": ("accuracy",), "audio": ("snr",)}


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every column of the rows (a column some rows lack included), without file_name and split."""
    return list(dict.fromkeys(k for row in rows for k in row if k not in ("file_name", "split")))


def class_names(rows: list[dict[str, Any]]) -> list[str]:
    """The names ``--class-label label`` publishes: every label given, in sorted order."""
    return sorted({row[LABEL_COLUMN] for row in rows if row[LABEL_COLUMN] is not None})


def expected_rows(files: Path, meta: Path, modality: str) -> dict[str, dict[str, Any]]:
    """What every reader must return: split -> key -> {"sha256", "fields", "labels"}.

    ``fields`` are every column but file_name and split, typed (a column absent from a row is
    None; the float columns are floats; the label is its class's number, -1 for none), and
    ``labels`` maps the label column back to its name, as ``features["label"].int2str`` gives it."""
    rows = [json.loads(line) for line in meta.read_text(encoding="utf-8").splitlines()]
    names = class_names(rows)
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        fields = {column: row.get(column) for column in columns(rows)}
        for column in FLOAT_COLUMNS[modality]:
            fields[column] = None if fields[column] is None else float(fields[column])
        label = row[LABEL_COLUMN]
        fields[LABEL_COLUMN] = -1 if label is None else names.index(label)
        out.setdefault(row["split"], {})[row["key"]] = {
            "sha256": hashlib.sha256((files / row["file_name"]).read_bytes()).hexdigest(),
            "fields": typed(fields),
            "labels": {LABEL_COLUMN: label},
        }
    return out
