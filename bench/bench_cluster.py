"""Where the time of a pack goes, and what a Dask cluster changes: the figures behind the
docs/reference.md's cluster estimate.

    python bench/bench_cluster.py [--files 100000] [--mean-size 20000] [--workdir bench-output]

The default corpus has the shape of the motivating collection scaled down 1000x (2 TB in 100M
images is 20 KB a file; here 100,000 files, 2 GB). On it, in one run, with a warm cache:

* check phase  - ``pack-shards --dry-run``: read and check every row, stat every file, sort and
                 plan. Timed in one process (``--jobs 1``), in N processes, and on the Dask
                 cluster: its row checks run in byte ranges of the metadata file, one task
                 each; the merge of the sorted runs and the plan stay on the client;
* pack         - ``pack-shards --jobs N``, and ``--executor dask`` on a ``distributed.LocalCluster``
                 of N worker processes with one thread each on this machine: the same work, so
                 the difference is the cost of the Dask machinery. The write phase is the pack
                 minus its check phase.

From the two local check timings it splits the check phase into its serial part (the merge and
the plan, on the client) and its per-row part, which divides over cores. It then extrapolates
to ``--target-rows`` rows of ``--target-bytes`` bytes on clusters of nodes like this one, with
the aggregate storage bandwidth each needs. Compare within one run; a shared filesystem's stat
and read speeds are not this machine's local disk, so treat the extrapolation as a lower bound.
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
from bench_pack import SCRIPTS, compile_shardkit, make_corpus, run_with_peak_rss


def pack_seconds(images: Path, meta: Path, out: Path, *options: str) -> tuple[float, float, dict[str, object]]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(SCRIPTS / "pack-shards"), str(images), str(meta), "-o", str(out), "--json", "--quiet", *options]
    seconds, peak, stdout, _ = run_with_peak_rss(cmd)
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
    compile_shardkit()

    from distributed import LocalCluster

    corpus_dir = args.workdir / f"corpus-{args.files}x{args.mean_size}"
    images, meta, _, total = make_corpus(corpus_dir, args.files, args.mean_size, args.seed)
    mb = total / 1e6
    out = args.workdir / "cluster-out"
    n = args.jobs
    pack_seconds(images, meta, out, "--jobs", str(n))  # warm the page cache and the imports

    check_1, _, _ = pack_seconds(images, meta, out, "--dry-run", "--jobs", "1")
    check_n, _, _ = pack_seconds(images, meta, out, "--dry-run", "--jobs", str(n))
    local_s, local_rss, summary = pack_seconds(images, meta, out, "--jobs", str(n))
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        dask = ("--executor", "dask", "--scheduler", cluster.scheduler_address)
        pack_seconds(images, meta, out, *dask)  # warm the workers
        check_dask, _, _ = pack_seconds(images, meta, out, "--dry-run", *dask)
        dask_s, dask_rss, _ = pack_seconds(images, meta, out, *dask)
    shutil.rmtree(out, ignore_errors=True)

    rows = args.files
    local_write = max(local_s - check_n, 1e-9)
    dask_write = max(dask_s - check_dask, 1e-9)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    print(
        f"{time.strftime('%Y-%m-%d')}, {machine}, Python {platform.python_version()}; {rows:,} files,"
        f" {mb:,.0f} MB ({mb * 1e3 / rows:.0f} KB a file), {summary['shards']} shards, jobs/workers={n}, warm cache"
    )
    print(f"| {'what':<44} | {'seconds':>8} | {'files/s':>9} | {'MB/s':>6} | {'client RSS':>10} |")
    print(f"|{'-' * 46}|{'-' * 10}|{'-' * 11}|{'-' * 8}|{'-' * 12}|")
    for name, seconds, rss in (
        ("check phase, 1 process (--dry-run --jobs 1)", check_1, None),
        (f"check phase, --jobs {n}", check_n, None),
        (f"check phase on Dask, {n} workers", check_dask, None),
        (f"local pack, --jobs {n}", local_s, local_rss),
        ("  its write phase", local_write, None),
        (f"Dask pack, {n} workers x 1 thread", dask_s, dask_rss),
        ("  its write phase", dask_write, None),
    ):
        shown_rss = f"{rss:.0f} MB" if rss is not None else "-"
        print(f"| {name:<44} | {seconds:>8.1f} | {rows / seconds:>9,.0f} | {mb / seconds:>6,.0f} | {shown_rss:>10} |")
    print(f"Dask write phase / local write phase = {local_write / dask_write:.2f} (1.00: no Dask overhead)")

    # The check phase is serial (merge, plan) + per-row work that divides over cores:
    # check_1 = serial + per_row, check_n = serial + per_row / n.
    serial = max((n * check_n - check_1) / (n - 1), 0.0) if n > 1 else check_1
    per_row = max(check_1 - serial, 0.0)
    scale = args.target_rows / rows
    node_files_s = rows / dask_write
    node_mb_s = mb / dask_write
    print(
        f"check phase = {serial:.1f} s serial on the client (merge, plan) + {per_row:.1f} s of per-row work"
        f" that divides over cores; write phase per node: {node_files_s:,.0f} files/s, {node_mb_s:,.0f} MB/s"
    )
    print(
        f"\n{args.target_rows / 1e6:,.0f}M rows, {args.target_bytes / 1e12:,.1f} TB, on nodes like this one"
        f" ({os.cpu_count()} cores each):"
    )
    header = ("nodes", "check hours", "write hours", "total hours", "storage bandwidth")
    print(f"| {header[0]:>5} | {header[1]:>11} | {header[2]:>11} | {header[3]:>11} | {header[4]:>20} |")
    print(f"|{'-' * 7}|{'-' * 13}|{'-' * 13}|{'-' * 13}|{'-' * 22}|")
    for nodes in (1, 4, 16, 64):
        check_h = (serial + per_row / (n * nodes)) * scale / 3600
        write_h = (dask_write / nodes) * scale / 3600
        bandwidth = f"{node_mb_s * nodes * 2 / 1e3:,.1f} GB/s read+write"
        print(f"| {nodes:>5} | {check_h:>11.1f} | {write_h:>11.1f} | {check_h + write_h:>11.1f} | {bandwidth:>20} |")


if __name__ == "__main__":
    sys.exit(main())
