"""Input written the way users write it: tiny real images, metadata files, and the shipped example;
and the published bytes of an OUT_DIR, to compare whole outputs."""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from PIL import Image

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE_DIR = REPO_ROOT / "example_datasets" / "yfcc-mini"


def tiny_image(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (24, 16)) -> bytes:
    """A small real image whose bytes differ per seed."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    for _ in range(12):
        img.putpixel((rng.randrange(size[0]), rng.randrange(size[1])), tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    """Write rows (dicts, or raw strings taken as a whole line) as JSON Lines."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return path


def adding_up(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` (a parsed shards.json) with its totals and each split's rows, shards and bytes
    those of its shards: a test that changes a shard's record keeps the rest in agreement, as a
    forger would (readers refuse a manifest that does not add up before reading any shard)."""

    def counts(shards: list[dict[str, Any]]) -> dict[str, int]:
        return {"rows": sum(s["rows"] for s in shards), "shards": len(shards), "bytes": sum(s["bytes"] for s in shards)}

    manifest["totals"] = counts(manifest["shards"])
    for name, split in manifest.get("splits", {}).items():
        split.update(counts([s for s in manifest["shards"] if s.get("split", "train") == name]))
    return manifest


class Corpus:
    """An IMAGES_DIR with N small images and a matching metadata file."""

    def __init__(self, root: Path, n: int, *, with_keys: bool = False, fmt: str = "JPEG") -> None:
        self.root = root
        self.images = root / "images"
        self.images.mkdir(parents=True)
        self.rows: list[dict[str, Any]] = []
        ext = {"JPEG": ".jpg", "PNG": ".png"}[fmt]
        for i in range(n):
            rel = f"sub{i % 3}/img_{i:04d}{ext}"
            path = self.images / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(tiny_image(i, fmt))
            row: dict[str, Any] = {
                "file_name": rel,
                "caption": f"picture number {i}",
                "label": i % 5,
                "score": None if i % 4 == 0 else i / 10,
            }
            if with_keys:
                row["key"] = f"{(i * 2654435761) % 16**12:012x}"
            self.rows.append(row)
        self.meta = write_jsonl(root / "meta.jsonl", self.rows)

    def write_meta(self, rows: Iterable[Any], name: str = "meta.jsonl") -> Path:
        return write_jsonl(self.root / name, rows)


def shard_files(out_dir: Path) -> list[Path]:
    data = out_dir / "data"
    return sorted(data.glob("*.zip")) if data.is_dir() else []


def tree_bytes(out_dir: Path) -> dict[str, bytes]:
    """Every published file under OUT_DIR (not the .shardkit work dir), by relative path."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(out_dir):
        dirnames[:] = [d for d in dirnames if d != ".shardkit"]
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(out_dir))] = path.read_bytes()
    return out


def scaffold(output_dir: Path, **context: str) -> Path:
    """The hub-dataset template rendered into ``output_dir`` with ``context`` (``dataset_name``...),
    without questions, as ``shardkit new`` would make it; the repo's folder."""
    from cookiecutter.main import cookiecutter

    return Path(
        cookiecutter(
            str(REPO_ROOT / "templates" / "hub-dataset"),
            no_input=True,
            extra_context=context,
            output_dir=str(output_dir),
            default_config=True,
        )
    )
