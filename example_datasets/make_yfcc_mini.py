"""Generate example_datasets/yfcc-mini: a small YFCC100M-shaped image dataset.

    python example_datasets/make_yfcc_mini.py [--count 300] [--seed 0] [--out example_datasets/yfcc-mini]

Images are drawn with Pillow from a seeded random generator (skies, hills, suns, houses), so
the script needs nothing but Pillow and no network. Metadata follows the published YFCC100M
record shape: hex ``key``, URL-encoded ``title``/``description`` with ``+`` for spaces,
comma-separated ``usertags``, nullable ``latitude``/``longitude``/``accuracy``, and so on.
Raw files sit where a crawl would put them (``photos/<uid>/<photoid>.jpg``), not in the
packed layout: turning them into shards is shardkit's job.

The generated files are committed (JPEG bytes can differ between Pillow versions, and the
keys of the packed shards should not), so running this is only needed to change them.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import urllib.parse

from PIL import Image, ImageDraw

WORDS = [
    "cat",
    "stairs",
    "beach",
    "sunset",
    "hills",
    "house",
    "garden",
    "bridge",
    "river",
    "snow",
    "city",
    "night",
    "dog",
    "bike",
    "market",
    "café",
    "tram",
    "harbour",
    "forest",
    "rain",
]
TITLES = [
    "Lana",
    "Weekend walk",
    "Café au lait",
    "Old bridge",
    "Morning light",
    "Rooftops",
    "Harbour at dusk",
    "Der Bahnhof",
    "Snow day",
    "Market stall",
    "Tram 28",
    "Garden party",
]
LICENSES = [
    ("Attribution-NonCommercial-ShareAlike License", "http://creativecommons.org/licenses/by-nc-sa/2.0/"),
    ("Attribution License", "http://creativecommons.org/licenses/by/2.0/"),
    ("Attribution-ShareAlike License", "http://creativecommons.org/licenses/by-sa/2.0/"),
]


def draw_scene(rng: random.Random, width: int, height: int) -> Image.Image:
    sky = tuple(rng.randint(60, 200) for _ in range(3))
    ground = tuple(rng.randint(20, 140) for _ in range(3))
    img = Image.new("RGB", (width, height), sky)
    d = ImageDraw.Draw(img)
    for y in range(height // 2):  # a vertical gradient in the sky
        shade = tuple(min(255, c + y // 3) for c in sky)
        d.line([(0, y), (width, y)], fill=shade)
    sun_r = rng.randint(8, 24)
    sx, sy = rng.randint(sun_r, width - sun_r), rng.randint(sun_r, height // 3)
    d.ellipse([sx - sun_r, sy - sun_r, sx + sun_r, sy + sun_r], fill=(250, 220, rng.randint(60, 160)))
    horizon = rng.randint(height // 2, 3 * height // 4)
    points = [(0, height)] + [(x, horizon + rng.randint(-20, 20)) for x in range(0, width + 32, 32)] + [(width, height)]
    d.polygon(points, fill=ground)
    for _ in range(rng.randint(1, 4)):  # houses
        w, h = rng.randint(20, 50), rng.randint(20, 45)
        x, y = rng.randint(0, width - w), horizon - h + rng.randint(0, 15)
        d.rectangle([x, y, x + w, y + h], fill=tuple(rng.randint(90, 240) for _ in range(3)))
        d.polygon([(x - 4, y), (x + w // 2, y - h // 2), (x + w + 4, y)], fill=(120, 40, 30))
    for _ in range(rng.randint(50, 150)):  # texture, so JPEG sizes vary like photos do
        x, y = rng.randint(0, width - 1), rng.randint(horizon, height - 1)
        d.point((x, y), fill=tuple(rng.randint(0, 255) for _ in range(3)))
    return img


def make_record(rng: random.Random, i: int) -> tuple[dict[str, object], str]:
    photoid = 364426 + i * 7919
    uid = f"{rng.randint(10000000, 99999999)}@N0{rng.randint(0, 8)}"
    tags = rng.sample(WORDS, rng.randint(0, 4))
    title = rng.choice(TITLES)
    description = f"{rng.choice(['lounging on', 'walking by', 'a view of', 'just'])} the {rng.choice(WORDS)}"
    geotagged = rng.random() < 0.4
    license_name, license_url = rng.choice(LICENSES)
    secret = hashlib.md5(f"secret{photoid}".encode()).hexdigest()[:10]
    file_name = f"photos/{uid}/{photoid}.jpg"
    record: dict[str, object] = {
        "file_name": file_name,
        "key": hashlib.md5(str(photoid).encode()).hexdigest(),
        "photoid": photoid,
        "uid": uid,
        "unickname": rng.choice(["emmanslayer", "jo.walker", "Ümit K", "pix_fan", "m&m"]),
        "datetaken": f"20{rng.randint(4, 9):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.0",
        "dateuploaded": str(1094564954 + i * 86400),
        "title": urllib.parse.quote_plus(title),
        "description": urllib.parse.quote_plus(description),
        "usertags": ",".join(tags),
        "machinetags": "",
        "latitude": round(rng.uniform(-60, 70), 6) if geotagged else None,
        "longitude": round(rng.uniform(-180, 180), 6) if geotagged else None,
        "accuracy": rng.randint(1, 16) if geotagged else None,
        "pageurl": f"http://www.flickr.com/photos/{uid}/{photoid}/",
        "downloadurl": "",
        "licensename": license_name,
        "licenseurl": license_url,
        "serverid": rng.randint(1, 9),
        "farmid": 1,
        "secret": secret,
        "secretoriginal": secret,
        "ext": "jpg",
        "marker": 0,
    }
    return record, file_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "yfcc-mini"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    images_dir = os.path.join(args.out, "images")
    os.makedirs(images_dir, exist_ok=True)
    total = 0
    with open(os.path.join(args.out, "metadata.jsonl"), "w", encoding="utf-8", newline="\n") as meta:
        for i in range(args.count):
            record, file_name = make_record(rng, i)
            width, height = rng.choice([(256, 192), (192, 256), (240, 240), (320, 200)])
            buf = io.BytesIO()
            draw_scene(rng, width, height).save(buf, format="JPEG", quality=rng.randint(70, 90))
            path = os.path.join(images_dir, file_name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(buf.getvalue())
            total += buf.tell()
            meta.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"wrote {args.count} images ({total / 1e6:.1f} MB) and metadata.jsonl to {args.out}")


if __name__ == "__main__":
    main()
