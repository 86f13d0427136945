"""Read a dataset back the way a user would, twice: datasets.load_dataset(..., streaming=True),
then shardkit.stream (one request per shard, one shard per ZIP).

Usage: stream_back.py SOURCE [MANIFEST]  (SOURCE: a packed folder or a Hub repo id; MANIFEST:
the shards.json that says how many rows to expect, by default SOURCE/shards.json).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read(label: str, rows: Iterable[dict[str, Any]], manifest: dict[str, Any], started: float, show: int) -> None:
    count = 0
    first_at = 0.0
    for row in rows:
        width, height = row["image"].size  # decoded, as a training loop would
        if count == 0:
            first_at = time.perf_counter() - started
        if count < show:
            title = urllib.parse.unquote_plus(row.get("title") or "")
            tags = row.get("usertags") or "-"
            print(f"  {row['key']}  {width}x{height}  title={title!r}  tags={tags}")
        count += 1
    elapsed = time.perf_counter() - started
    expected = manifest["totals"]["rows"]
    print(
        f"{label}: read {count} rows from {manifest['totals']['shards']} shard"
        f"{'' if manifest['totals']['shards'] == 1 else 's'} in {elapsed:.2f} s "
        f"({count / elapsed:,.0f} images/s, first row after {first_at:.2f} s)"
    )
    if count != expected:
        sys.exit(f"error: the manifest lists {expected} rows but {count} were read")


def main(source: str, manifest_path: str) -> None:
    from datasets import load_dataset

    import shardkit

    manifest = json.loads(Path(manifest_path).read_text())
    started = time.perf_counter()
    read("load_dataset", load_dataset(source, split="train", streaming=True), manifest, started, show=3)
    started = time.perf_counter()
    splits = sorted({shard.get("split", "train") for shard in manifest["shards"]})
    rows = itertools.chain.from_iterable(shardkit.stream(source, split=split) for split in splits)  # one split each
    read("shardkit.stream", rows, manifest, started, show=0)


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else "demo-output/yfcc-mini"
    main(source, sys.argv[2] if len(sys.argv) > 2 else str(Path(source) / "shards.json"))
