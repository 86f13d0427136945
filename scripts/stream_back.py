"""Read a dataset back the way a user would: datasets.load_dataset(..., streaming=True).

Usage: stream_back.py SOURCE [MANIFEST]  (SOURCE: a packed folder or a Hub repo id; MANIFEST:
the shards.json that says how many rows to expect, by default SOURCE/shards.json).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from pathlib import Path


def main(source: str, manifest_path: str) -> None:
    from datasets import load_dataset

    manifest = json.loads(Path(manifest_path).read_text())
    started = time.perf_counter()
    ds = load_dataset(source, split="train", streaming=True)
    count = 0
    first_at = 0.0
    for row in ds:
        width, height = row["image"].size  # decoded, as a training loop would
        if count == 0:
            first_at = time.perf_counter() - started
        if count < 3:
            title = urllib.parse.unquote_plus(row.get("title") or "")
            tags = row.get("usertags") or "-"
            print(f"  {row['key']}  {width}x{height}  title={title!r}  tags={tags}")
        count += 1
    elapsed = time.perf_counter() - started
    expected = manifest["totals"]["rows"]
    print(
        f"read {count} rows from {manifest['totals']['shards']} shards in {elapsed:.2f} s "
        f"({count / elapsed:,.0f} images/s, first row after {first_at:.2f} s)"
    )
    if count != expected:
        sys.exit(f"error: the manifest lists {expected} rows but {count} were read")


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else "demo-output/yfcc-mini"
    main(source, sys.argv[2] if len(sys.argv) > 2 else str(Path(source) / "shards.json"))
