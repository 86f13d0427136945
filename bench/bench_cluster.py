"""Where the time of a pack goes, and what a Dask cluster changes: the figures behind the
README's cluster estimate.

    python bench/bench_cluster.py [--files 100000] [--mean-size 20000] [--workdir bench-output]

The default corpus has the shape of the motivating collection scaled down 1000x (2 TB in 100M
images is 20 KB a file; here 100,000 files, 2 GB). On it, in one run, with a warm cache:

* check phase  - ``pack-shards --dry-run``: read and check every row, stat every file, sort and
                 plan. This part runs on the client alone, whatever the executor;
* local pack   - ``pack-shards --jobs N``; its write phase is the total minus the check phase;
* dask pack    - ``pack-shards --executor dask`` on a ``distributed.LocalCluster`` of N worker
                 processes with one thread each on this machine: the same work as the local
                 pack, so the difference is the cost of the Dask machinery (task submission,
                 results, the worker check).

It then extrapolates to ``--target-rows`` rows of ``--target-bytes`` bytes: the client's check
time (serial) plus the write phase split over nodes like this one, and the aggregate storage
bandwidth each cluster size needs. Compare within one run; a shared filesystem's stat and
read speeds are not this machine's local disk, so treat the extrapolation as a lower bound.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import psutil
from bench_pack import SCRIPTS, make_corpus, run_with_peak_rss


def pack_seconds(images: Path, meta: Path, out: Path, *options: str) -> tuple[float, float, dict[str, object]]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(SCRIPTS / "pack-shards"), str(images), str(meta), "-o", str(out), "--json", "--quiet", *options]
    seconds, peak, stdout = run_with_peak_rss(cmd)
    return seconds, peak, json.loads(stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--mean-size", type=int, default=20_000, help="mean file size in bytes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("bench-output"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local jobs, and Dask workers")
    parser.add_argument("--target-rows", type=float, default=100e6)
    parser.add_argument("--target-bytes", type=float, default=2e12)
    args = parser.parse_args()

    from distributed import LocalCluster

    corpus_dir = args.workdir / f"corpus-{args.files}x{args.mean_size}"
    images, meta, _, total = make_corpus(corpus_dir, args.files, args.mean_size, args.seed)
    mb = total / 1e6
    out = args.workdir / "cluster-out"
    jobs = str(args.jobs)
    pack_seconds(images, meta, out, "--jobs", jobs)  # warm the page cache and the imports

    check_s, _, _ = pack_seconds(images, meta, out, "--dry-run")
    local_s, local_rss, summary = pack_seconds(images, meta, out, "--jobs", jobs)
    with LocalCluster(n_workers=args.jobs, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        pack_seconds(images, meta, out, "--executor", "dask", "--scheduler", address)  # warm the workers
        dask_s, dask_rss, _ = pack_seconds(images, meta, out, "--executor", "dask", "--scheduler", address)
    shutil.rmtree(out, ignore_errors=True)

    rows = args.files
    local_write_s = max(local_s - check_s, 1e-9)
    dask_write_s = max(dask_s - check_s, 1e-9)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    print(
        f"{time.strftime('%Y-%m-%d')}, {machine}, Python {platform.python_version()}; {rows:,} files,"
        f" {mb:,.0f} MB ({mb * 1e3 / rows:.0f} KB a file), {summary['shards']} shards, jobs/workers={args.jobs},"
        " warm cache"
    )
    print(f"| {'what':<40} | {'seconds':>8} | {'files/s':>9} | {'MB/s':>6} | {'client RSS':>10} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 11}|{'-' * 8}|{'-' * 12}|")
    for name, seconds, rss in (
        ("check phase (--dry-run, client only)", check_s, None),
        (f"local pack, --jobs {args.jobs}", local_s, local_rss),
        ("  its write phase", local_write_s, None),
        (f"dask pack, {args.jobs} workers x 1 thread", dask_s, dask_rss),
        ("  its write phase", dask_write_s, None),
    ):
        shown_rss = f"{rss:.0f} MB" if rss is not None else "-"
        print(f"| {name:<40} | {seconds:>8.1f} | {rows / seconds:>9,.0f} | {mb / seconds:>6,.0f} | {shown_rss:>10} |")
    print(f"dask write phase / local write phase = {local_write_s / dask_write_s:.2f} (1.00: no Dask overhead)")

    # Extrapolation: the check phase stays on one machine; the write phase divides over nodes.
    check_rate = rows / check_s
    node_files_s = rows / dask_write_s
    node_mb_s = mb / dask_write_s
    target_rows, target_mb = args.target_rows, args.target_bytes / 1e6
    check_h = target_rows / check_rate / 3600
    print(
        f"\n{target_rows / 1e6:,.0f}M rows, {target_mb / 1e6:,.1f} TB: check phase on the client"
        f" {check_h:.1f} h ({check_rate:,.0f} rows/s); write phase per node like this one:"
        f" {node_files_s:,.0f} files/s, {node_mb_s:,.0f} MB/s"
    )
    print(f"| {'nodes':>5} | {'write hours':>11} | {'total hours':>11} | {'storage bandwidth needed':>24} |")
    print(f"|{'-' * 7}|{'-' * 13}|{'-' * 13}|{'-' * 26}|")
    for nodes in (1, 4, 16, 64):
        write_h = target_rows / (node_files_s * nodes) / 3600
        bandwidth = f"{node_mb_s * nodes * 2 / 1e3:,.1f} GB/s read+write"
        print(f"| {nodes:>5} | {write_h:>11.1f} | {check_h + write_h:>11.1f} | {bandwidth:>24} |")


if __name__ == "__main__":
    sys.exit(main())
