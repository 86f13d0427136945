"""Per-batch functions the remux tests pass with --map tests.remux_functions:NAME."""

from __future__ import annotations

import os
import random
import time
from typing import Any

from PIL import Image, ImageOps

SIZE = (48, 32)


def resize_and_flip(batch: dict[str, list[Any]], seeds: list[int]) -> dict[str, list[Any]]:
    """Resize to 48x32 and mirror about half the rows, chosen by each row's seed; add `flipped`."""
    images, flipped = [], []
    for image, seed in zip(batch["image"], seeds, strict=True):
        out = image.convert("RGB").resize(SIZE)
        flip = random.Random(seed).random() < 0.5
        images.append(ImageOps.mirror(out) if flip else out)
        flipped.append(flip)
    return {**batch, "image": images, "flipped": flipped}


def two_crops_no_caption(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Two rows per input row (left and right halves), and the caption column dropped."""
    out: dict[str, list[Any]] = {"image": [], "half": [], "label": []}
    for image, label in zip(batch["image"], batch["label"], strict=True):
        w, h = image.size
        for half, box in (("left", (0, 0, w // 2, h)), ("right", (w // 2, 0, w, h))):
            out["image"].append(image.crop(box))
            out["half"].append(half)
            out["label"].append(label)
    return out


def slow_identity(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Re-encode as is, slowly: gives a test time to kill the run part-way."""
    time.sleep(float(os.environ.get("REMUX_TEST_SLEEP", "0.3")))
    return batch


def logged_holding(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The batch as it is; each call logs its first key to the file REMUX_TEST_LOG, and the batch
    holding the key REMUX_TEST_HOLD waits for the file REMUX_TEST_RELEASE (5 minutes at most)."""
    with open(os.environ["REMUX_TEST_LOG"], "a") as log:
        log.write(f"{batch['key'][0]}\n")
    if os.environ.get("REMUX_TEST_HOLD") in batch["key"]:
        deadline = time.monotonic() + 300
        while not os.path.exists(os.environ["REMUX_TEST_RELEASE"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    return batch


def not_a_batch(batch: dict[str, list[Any]]) -> list[Any]:
    return list(batch)


def nan_scores(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {**batch, "scores": [[1.0, float("nan")] for _ in batch["image"]]}


def two_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {**batch, "thumb": [Image.new("RGB", (4, 4)) for _ in batch["image"]]}


def empty_images(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Every image as no bytes at all."""
    return {**batch, "image": [b"" for _ in batch["image"]]}


def _check_label(label: Any) -> None:
    raise ValueError(f"my bug: label {label!r}")


def buggy(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Raises from a helper: the error must name the user's file and line."""
    _check_label(batch["label"][0] if "label" in batch else None)
    return batch


def identity(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The batch as it came."""
    return batch


def fail_on_n(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The batch as it came, unless it holds the row whose `n` is $REMUX_TEST_FAIL_ON_N: a run that
    stops part-way at a row the test chose."""
    fail = os.environ.get("REMUX_TEST_FAIL_ON_N")
    if fail is not None and int(fail) in batch["n"]:
        raise RuntimeError(f"stopped at n={fail}")
    return batch


def rename_animal(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The class label column under another name (its integers as they came)."""
    out = {name: values for name, values in batch.items() if name != "animal"}
    return {**out, "kind": batch["animal"]}
