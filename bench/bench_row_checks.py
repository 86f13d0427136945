"""What holding every row to the manifest costs ``shardkit.stream`` (issue 31): rows/s with and without.

    python bench/bench_row_checks.py [--rows 20000] [--file-bytes 256] [--rounds 5]
                                     [--workdir bench-output/row-checks]

Packs ``--rows`` rows of small files (``--file-bytes`` random bytes, 256 by default: the figure
is then the per-row cost of the reader, not of moving bytes, the checks' worst case) and 24
metadata columns like the shipped example's (strings, integers, floats, some null) as zip, tar
and parquet in a local folder, then reads each with
``shardkit.stream`` (files not decoded), ``--rounds`` times with the row checks
(:mod:`shardkit.rowcheck`) and as many without (``ShardRowCheck.rows`` passing rows through),
alternating, and prints the best round of each (rows per second of the process's CPU time: on a
shared machine its wall time is not its own), their ratio, and the checks' own cost per row
(:meth:`ShardRowCheck.problem` alone, best of 20 passes over one shard's rows already read).
Compare within one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCRIPTS = Path(sys.executable).parent
FORMATS = ("zip", "tar", "parquet")


def make_input(folder: Path, rows: int, file_bytes: int) -> tuple[Path, Path]:
    """``rows`` files of ``file_bytes`` random bytes and their metadata lines (seeded: the same every run)."""
    rng = random.Random(31)
    images = folder / "images"
    images.mkdir(parents=True)
    meta = folder / "metadata.jsonl"
    with open(meta, "w", encoding="utf-8") as f:
        for i in range(rows):
            name = f"{i:06d}.jpg"
            (images / name).write_bytes(rng.randbytes(file_bytes))
            row: dict[str, Any] = {"file_name": name, "photoid": 1000 + i, "uid": f"{rng.randrange(10**8)}@N0{i % 9}"}
            row |= {f"text{j}": f"word{rng.randrange(1000)}+{j}" for j in range(12)}
            row |= {f"count{j}": rng.randrange(1 << 20) for j in range(5)}
            row |= {"latitude": rng.uniform(-90, 90) if i % 3 else None, "longitude": rng.uniform(-180, 180)}
            row |= {"accuracy": rng.randrange(16) if i % 3 else None, "marker": 0, "title": None}
            f.write(json.dumps(row) + "\n")
    return images, meta


def _rows(source: str) -> Iterator[dict[str, Any]]:
    import datasets

    import shardkit

    return iter(shardkit.stream(source).cast_column("image", datasets.Image(decode=False)))


def read_rate(source: str) -> float:
    """Rows per second of this process's CPU time (the machine may be shared: wall time is not its own)."""
    started = time.process_time()
    count = sum(1 for _ in _rows(source))
    return count / (time.process_time() - started)


def check_cost(source: str, fmt: str) -> float:
    """Microseconds :meth:`ShardRowCheck.problem` takes per row, over the first shard's rows as
    the format reads them (what the check is given)."""
    from shardkit.location import Location
    from shardkit.shardrows import dataset_rows, iter_shard, read_manifest_from

    location = Location.parse(source)
    manifest = read_manifest_from(location)
    shard = manifest.shards[0]
    rows = list(iter_shard(location, shard.file, manifest.modality, fmt, manifest))
    check = dataset_rows(manifest).shard(shard.file, shard.file, file_column=manifest.modality)
    rounds, best = 20, float("inf")
    for _ in range(rounds):
        check.previous = ""
        started = time.process_time()
        for row in rows:
            if (problem := check.problem(row)) is not None:
                raise SystemExit(f"{shard.file}: {problem}")
        best = min(best, time.process_time() - started)
    return best / len(rows) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--file-bytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("bench-output") / "row-checks")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    images, meta = make_input(args.workdir / "in", args.rows, args.file_bytes)
    from shardkit.rowcheck import ShardRowCheck

    checked = ShardRowCheck.rows

    def unchecked(self: ShardRowCheck, rows: Iterator[dict[str, Any]], first: int) -> Iterator[dict[str, Any]]:
        return rows

    print(
        f"{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()};"
        f" {args.rows} rows of {args.file_bytes} B files, 24 columns; best of {args.rounds} rounds each, alternating\n"
    )
    print("| format | rows/CPU-s with the checks | rows/CPU-s without | change | the checks alone, CPU-µs/row |")
    print("|---|---|---|---|---|")
    for fmt in FORMATS:
        out = args.workdir / fmt
        cmd = [str(SCRIPTS / "pack-shards"), str(images), str(meta), "-o", str(out), "--format", fmt, "-q"]
        subprocess.run([*cmd, "--target-shard-size", "2MB"], check=True, timeout=1800)
        best = {"with": 0.0, "without": 0.0}
        read_rate(str(out))  # a first read warms the page cache and the imports
        for _ in range(args.rounds):
            for label, rows_method in (("with", checked), ("without", unchecked)):
                ShardRowCheck.rows = rows_method  # type: ignore[method-assign]
                try:
                    best[label] = max(best[label], read_rate(str(out)))
                finally:
                    ShardRowCheck.rows = checked  # type: ignore[method-assign]
        change = best["with"] / best["without"] - 1
        cost = check_cost(str(out), fmt)
        print(f"| {fmt} | {best['with']:,.0f} | {best['without']:,.0f} | {change:+.1%} | {cost:.1f} |")


if __name__ == "__main__":
    main()
