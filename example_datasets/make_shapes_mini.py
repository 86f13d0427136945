"""Generate example_datasets/shapes-mini: a small labelled image dataset with splits.

    python example_datasets/make_shapes_mini.py [--count 150] [--seed 0] [--out example_datasets/shapes-mini]

Each image is one shape (circle, square or triangle) in a colour on a plain background, drawn
with Pillow from a seeded random generator (no network). The files sit in the folder-per-class
layout most labelled collections come in (``<class>/<n>.jpg``); ``metadata.jsonl`` gives each
file its ``label`` (the class name), its ``split`` (about 70% train, 15% validation, 15% test)
and two more columns, ``colour`` and ``size_px``. It shows ``pack-shards --class-label label``
and splits (README.md, "A labelled dataset with splits").

The generated files are committed (JPEG bytes can differ between Pillow versions), so running
this is only needed to change them.
"""

from __future__ import annotations

import argparse
import json
import os
import random

from PIL import Image, ImageDraw

CLASSES = ["circle", "square", "triangle"]
COLOURS = {"red": (200, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 200), "orange": (230, 140, 30)}


def draw(shape: str, colour: tuple[int, int, int], size: int, rng: random.Random) -> Image.Image:
    image = Image.new("RGB", (64, 64), (235, 235, 230))
    d = ImageDraw.Draw(image)
    x, y = rng.randint(2, 62 - size), rng.randint(2, 62 - size)
    if shape == "circle":
        d.ellipse((x, y, x + size, y + size), fill=colour)
    elif shape == "square":
        d.rectangle((x, y, x + size, y + size), fill=colour)
    else:
        d.polygon([(x + size // 2, y), (x, y + size), (x + size, y + size)], fill=colour)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "shapes-mini"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for i in range(args.count):
        label = CLASSES[i % len(CLASSES)]
        colour = rng.choice(sorted(COLOURS))
        size = rng.randint(16, 48)
        file_name = f"{label}/{i:04d}.jpg"
        path = os.path.join(args.out, "images", file_name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        draw(label, COLOURS[colour], size, rng).save(path, quality=85)
        roll = rng.random()
        split = "train" if roll < 0.7 else "validation" if roll < 0.85 else "test"
        rows.append({"file_name": file_name, "label": label, "split": split, "colour": colour, "size_px": size})
    with open(os.path.join(args.out, "metadata.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
