"""Pack and check at Hub scale (issue 36): pack-shards run as a user runs it, on millions of rows.

    python bench/bench_scale.py --check-rows 0 --keep     # pack at scale: 2M tiny files, > 20,000 shards
    python bench/bench_scale.py --rows 0 --flat-check     # check phase, YFCC100M-shaped, 1M and 10M rows
    python bench/bench_scale.py --rows 20000 --shards 11000 --check-rows 200000 --flat-check   # smoke run

Pack at scale (--rows N; 0 skips it). Builds N distinct files of 200-500 bytes (a JPEG header, the
row number, random bytes: pack does not decode) in 1,000 folders, and a metadata.jsonl: spread hex
keys (sha256 of the row number), a caption, a column null in 99 rows of 100. The build is timed
apart, never as pack time; with --keep the corpus (and its marker) stays in --workdir for the next
run. Two dry runs over the first 5,000 rows give what a shard and a row cost, from which
--target-shard-size is set for about --shards shards (--max-shard-size: twice that); past 10,000,
a split's shards go into folders named by their names' first hex digits. Then
`pack-shards --dry-run --json` over all rows (check and plan) gives the plan's `hub` figures, and
`pack-shards --json` packs (fsync on). The bench then counts the files written (data/, metadata/
and the rest but .shardkit/) and the fullest folder's entries, and fails unless they are under
the Hub's 100,000 files and 10,000 entries a folder.

Check phase at YFCC100M's shape (--check-rows N; 0 skips it). N rows of YFCC100M's 23 columns
(../shared/notes/yfcc-shape.md: URL-encoded titles and descriptions, tags, about half without
coordinates), 32-hex keys. pack refuses two rows naming one file (staging.repeated_files), but a
file is its path, and symlinks inside IMAGES_DIR are allowed: IMAGES_DIR holds 1,000 real files in
files/ and N/1,000 folder symlinks to it (s00000 -> files...), so each row names a path of its own
and N rows need N/1,000 inodes. A row then costs a cached realpath per folder and one lstat, as
a real file does when the filesystem's metadata is in memory (a cold disk's stats are not
measured). `pack-shards --dry-run` checks, sorts and plans every row and writes nothing. The plan
encodes each shard's metadata table in memory, so its shards are sized to hold as many rows as
pack's default 500 MB target holds of --check-file-size files (YFCC100M: 2 TB / 100M rows = 20
KB). --flat-check runs it at N/10 and at N: does memory grow with rows? --yfcc-pack then packs
the N rows for real (each file 200-500 bytes, so shards of that many rows are small): what the
write phase and the finish (each shard's rows, metadata.parquet) cost a YFCC-shaped row.

Every run starts after os.sync(). For each: wall time, the phases pack reports, rows/s, peak RSS
of the process tree and of its largest process (sampled every 50 ms from /proc), CPU seconds of
pack and of every other process meanwhile (a shared, busy machine skews everything), and the
most disk the run took (free space, sampled with the RSS). Prints a table, the Hub figures and a
line on the machine (--json: JSON too). Compare within one run. Disk: about 6 KB a row for the
pack (a tiny file takes a 4 KB block), 2.7 KB a row for the check (the metadata, 0.7 KB, and pack's
staging); the bench stops first if the disk has less.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from bench_pack import SCRIPTS, compile_shardkit, process_rss
from bench_training_stream import machine_busy

HUB_MAX_FILES = 100_000  # the Hub's limits (shardkit.hubplan), restated: the bench checks the repo on its own
HUB_MAX_FOLDER_ENTRIES = 10_000
SAMPLE_SECONDS = 0.05
CALIBRATION_ROWS = 5_000
REAL_FILES = 1_000  # the YFCC-shaped corpus's real files; each folder symlink names them all
JPEG_HEAD = b"\xff\xd8\xff\xe0"
PACK_DISK_PER_ROW, CHECK_DISK_PER_ROW = 6_000, 2_700  # bytes, as the smoke runs took (see the docstring)
DEFAULT_TARGET_BYTES = 500_000_000  # pack's target shard size by default (half its 1 GB cap)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Run:
    """One pack-shards run, measured from outside."""

    what: str
    rows: int
    seconds: float
    phases: dict[str, float]
    peak_tree_mb: float
    peak_process_mb: float
    cpu_s: float  # pack-shards and its children
    others_cpu_s: float | None  # every other process on the machine meanwhile
    disk_mb: float  # the most disk space it took
    summary: dict[str, Any] = field(repr=False)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def run_pack(what: str, images: Path, meta: Path, out: Path, *options: str) -> Run:
    """Run pack-shards --json on ``meta``; sample its process tree's RSS and the free disk."""
    cmd = [str(SCRIPTS / "pack-shards"), str(images), str(meta), "-o", str(out), "--json", "--quiet", *options]
    os.sync()
    free = shutil.disk_usage(out.parent).free
    cpu_before = _cpu_now()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"tree": 0, "process": 0, "least_free": free}
    cpu_seen: dict[int, float] = {}  # each process's CPU seconds when last sampled
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss = process_rss(proc.pid)
            if rss:
                peak["tree"] = max(peak["tree"], sum(rss.values()))
                peak["process"] = max(peak["process"], max(rss.values()))
                cpu_seen.update(_process_cpu(rss))
            peak["least_free"] = min(peak["least_free"], shutil.disk_usage(out.parent).free)
            done.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr}")
    (machine, ours, kids), (machine_now, ours_now, kids_now) = cpu_before, _cpu_now()
    # Workers forked by pack's forkserver are not waited for by pack-shards, so their CPU is not
    # in this process's children's: what the samples saw of each process counts too.
    cpu = max(kids_now - kids, sum(cpu_seen.values()))
    others = None if machine is None or machine_now is None else machine_now - machine - cpu - (ours_now - ours)
    summary = json.loads(stdout)
    rows, phases = summary["rows"], summary.get("phase_seconds", {})
    disk = (free - peak["least_free"]) / 1e6
    return Run(what, rows, seconds, phases, peak["tree"] / 1e6, peak["process"] / 1e6, cpu, others, disk, summary)


def _process_cpu(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds (user and system) each of ``pids`` has spent so far, from /proc/<pid>/stat."""
    cpu = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            cpu[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return cpu


def _cpu_now() -> tuple[float | None, float, float]:
    """CPU seconds so far: of the machine (None off Linux), of this process, of its ended children."""
    ours, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return machine_busy(), ours.ru_utime + ours.ru_stime, kids.ru_utime + kids.ru_stime


def build_tiny_corpus(root: Path, rows: int, seed: int) -> tuple[Path, Path, float]:
    """``rows`` distinct files of 200-500 bytes and their metadata.jsonl; seconds to build (0: reused)."""
    images, meta, marker = root / "images", root / "metadata.jsonl", root / f"built-{rows}-{seed}"
    if marker.exists():
        return images, meta, 0.0
    shutil.rmtree(root, ignore_errors=True)
    images.mkdir(parents=True)
    rng = random.Random(seed)
    payload = rng.randbytes(8192)
    t = time.perf_counter()
    with open(meta, "w") as f:
        for i in range(rows):
            folder = f"{i % 1000:03d}"
            if i < 1000:
                (images / folder).mkdir()
            size = rng.randrange(200, 500)
            start = rng.randrange(len(payload) - size)
            name = f"{folder}/{i:08d}.jpg"
            fd = os.open(images / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, JPEG_HEAD + i.to_bytes(8, "little") + payload[start : start + size])
            os.close(fd)
            key = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()[:32]
            note = f'"row {i} has a note"' if i % 100 == 7 else "null"
            f.write(f'{{"file_name": "{name}", "key": "{key}", "caption": "tiny file {i}", "note": {note}}}\n')
    marker.write_text(f"{rows} rows\n")
    return images, meta, time.perf_counter() - t


def shard_costs(images: Path, meta: Path, work: Path) -> tuple[float, float]:
    """What a shard costs with no rows and what a row costs, in plan bytes: two dry runs over the
    first rows, one shard and many (a plan's bytes are its shards' fixed part plus its rows')."""
    sample = work / "sample.jsonl"
    with open(meta) as src, open(sample, "w") as dst:
        lines = [line for _, line in zip(range(CALIBRATION_ROWS), src, strict=False)]
        dst.writelines(lines)
    rows = len(lines)
    plans = []
    for target in ("1GB", "40000"):
        run = run_pack("calibration", images, sample, work / "calibrate", "--dry-run", "--target-shard-size", target)
        plans.append((run.summary["shards"], run.summary["bytes"]))
    (one, total_one), (many, total_many) = plans
    fixed = (total_many - total_one) / (many - one)
    return fixed, (total_one - fixed * one) / rows


def pack_at_scale(args: argparse.Namespace, report: dict[str, Any]) -> list[Run]:
    work = args.workdir / "pack"
    images, meta, built = build_tiny_corpus(work / "corpus", args.rows, args.seed)
    report["corpus"] = {"rows": args.rows, "build_s": built}
    fixed, per_row = shard_costs(images, meta, work)
    target = math.ceil(fixed + per_row * args.rows / args.shards)
    sizes = ["--target-shard-size", str(target), "--max-shard-size", str(2 * target), "--jobs", str(args.jobs)]
    report["shard_sizes"] = {"fixed_bytes": fixed, "row_bytes": per_row, "target": target, "max": 2 * target}
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    planned = run_pack("pack --dry-run (check + plan)", images, meta, out, "--dry-run", *sizes)
    hub = planned.summary["hub"]
    report["hub_planned"] = hub
    if planned.summary["shards"] <= HUB_MAX_FOLDER_ENTRIES:
        print(f"the plan has {planned.summary['shards']:,} shards: none nested (> 10,000 nest)", file=sys.stderr)
    packed = run_pack("pack", images, meta, out, *sizes)
    report["hub_written"] = written = count_repo(out)
    report["shards"] = packed.summary["shards"]
    if written["files"] >= HUB_MAX_FILES or written["fullest_entries"] >= HUB_MAX_FOLDER_ENTRIES:
        raise SystemExit(f"the packed repo breaks a Hub limit: {written}")
    if not args.keep:
        shutil.rmtree(work)
    return [planned, packed]


def count_repo(out: Path) -> dict[str, Any]:
    """The files a push would publish (all but .shardkit/) and the fullest folder, counted on disk."""
    counts = {"files": 0, "data_files": 0, "metadata_files": 0, "data_folders": 0}
    fullest, entries = "", -1
    for folder, dirs, files in os.walk(out):
        rel = os.path.relpath(folder, out)
        if rel == ".":
            dirs[:] = [d for d in dirs if d != ".shardkit"]
        top = rel.split(os.sep)[0]
        counts["files"] += len(files)
        if top in ("data", "metadata"):
            counts[f"{top}_files"] += len(files)
        counts["data_folders"] += top == "data" and rel != "data" and bool(files)  # folders of shards
        if len(dirs) + len(files) > entries:
            fullest, entries = rel, len(dirs) + len(files)
    return {**counts, "fullest_folder": fullest, "fullest_entries": entries}


def yfcc_images(root: Path, rows: int) -> Path:
    """REAL_FILES real files in files/, and folder symlinks s00000... to it: a path for each row."""
    images, real = root / "images", root / "images" / "files"
    real.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    for i in range(REAL_FILES):
        path = real / f"{i:04d}.jpg"
        if not path.exists():
            path.write_bytes(JPEG_HEAD + rng.randbytes(rng.randrange(200, 500)))
    for j in range(math.ceil(rows / REAL_FILES)):
        link = images / f"s{j:05d}"
        if not link.is_symlink():
            link.symlink_to("files", target_is_directory=True)
    return images


def yfcc_pools(rng: random.Random) -> dict[str, list[str]]:
    """Values of YFCC100M's free-text columns, as JSON strings: titles, URL-encoded descriptions
    (half empty), user tags, machine tags (mostly empty), users, licenses."""
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]

    def text(most: int) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, most)))

    def plus(s: str) -> str:
        return json.dumps(urllib.parse.quote_plus(s))

    licenses = ["Attribution License", "Attribution-NonCommercial-ShareAlike License", "All Rights Reserved"]
    return {
        "title": [plus(text(6)) if rng.random() < 0.9 else '""' for _ in range(5000)],
        "description": [plus(text(60)) if rng.random() < 0.5 else '""' for _ in range(5000)],
        "usertags": [json.dumps(",".join(text(12).split())) if rng.random() < 0.6 else '""' for _ in range(5000)],
        "machinetags": [json.dumps(f"vision:{text(1)}=0{rng.randint(50, 99)}") for _ in range(50)] + ['""'] * 450,
        "user": [
            f'"uid": "{rng.randint(10**7, 10**8)}@N0{rng.randint(0, 8)}", "unickname": "{text(1)}"' for _ in range(2000)
        ],
        "license": [json.dumps(name) for name in licenses],
    }


def yfcc_line(i: int, rng: random.Random, pools: dict[str, list[str]]) -> str:
    """One YFCC100M-shaped metadata row (as in ../shared/notes/yfcc-shape.md), for row ``i``."""
    geo = rng.random() < 0.48
    lat, lon, acc = (f"{rng.uniform(-60, 70):.6f}", f"{rng.uniform(-180, 180):.6f}", str(rng.randint(1, 16)))
    taken = f"{rng.randint(2000, 2014)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} 10:47:16.0"
    secret = f"{rng.getrandbits(40):010x}"
    return (
        f'{{"file_name": "s{i // REAL_FILES:05d}/{i % REAL_FILES:04d}.jpg", "accuracy": {acc if geo else "null"},'
        f' "datetaken": "{taken}", "dateuploaded": "{1094564954 + i * 9}",'
        f' "description": {rng.choice(pools["description"])}, "downloadurl": "", "ext": "jpg",'
        f' "farmid": {rng.randint(1, 9)}, "key": "{hashlib.md5(i.to_bytes(8, "little")).hexdigest()}",'
        f' "latitude": {lat if geo else "null"}, "licensename": {rng.choice(pools["license"])},'
        f' "licenseurl": "", "longitude": {lon if geo else "null"}, "machinetags": {rng.choice(pools["machinetags"])},'
        f' "marker": {int(rng.random() < 0.01)}, "pageurl": "", "photoid": {364426 + i}, "secret": "{secret}",'
        f' "secretoriginal": "{secret}", "serverid": {rng.randint(1, 9000)}, "title": {rng.choice(pools["title"])},'
        f' {rng.choice(pools["user"])}, "usertags": {rng.choice(pools["usertags"])}}}\n'
    )


def yfcc_metadata(root: Path, rows: int, seed: int) -> tuple[Path, float]:
    """``rows`` YFCC-shaped rows (the same first rows at every size); seconds to write (0: reused)."""
    meta, marker = root / f"yfcc-{rows}.jsonl", root / f"yfcc-{rows}-{seed}.built"
    if marker.exists():
        return meta, 0.0
    rng = random.Random(seed)
    pools = yfcc_pools(rng)
    t = time.perf_counter()
    with open(meta, "w", buffering=1 << 20) as f:
        for i in range(rows):
            f.write(yfcc_line(i, rng, pools))
    marker.write_text(f"{rows} rows\n")
    return meta, time.perf_counter() - t


def check_at_yfcc_shape(args: argparse.Namespace, report: dict[str, Any]) -> list[Run]:
    work = args.workdir / "yfcc"
    sizes = [args.check_rows // 10, args.check_rows] if args.flat_check else [args.check_rows]
    images = yfcc_images(work, max(sizes))
    metas = []
    for rows in sizes:
        meta, built = yfcc_metadata(work, rows, args.seed)
        metas.append(meta)
        report.setdefault("yfcc_metadata", []).append({"rows": rows, "mb": meta.stat().st_size / 1e6, "build_s": built})
    # Shards of as many rows as pack's default target holds of --check-file-size files: the plan
    # encodes each shard's metadata table in memory, so the rows a shard holds set the peak.
    fixed, per_row = shard_costs(images, metas[0], work)
    rows_per_shard = round(DEFAULT_TARGET_BYTES / (args.check_file_size + per_row))
    target = ["--target-shard-size", str(math.ceil(fixed + per_row * rows_per_shard))]
    report["yfcc_rows_per_shard"] = rows_per_shard
    runs = []
    for rows, meta in zip(sizes, metas, strict=True):
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        what = f"check, YFCC shape, {rows:,} rows"
        runs.append(run_pack(what, images, meta, out, "--dry-run", "--jobs", str(args.jobs), *target))
    if args.yfcc_pack:  # the same rows packed for real: the write and the finish at YFCC's shape
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        what = f"pack, YFCC shape (tiny files), {sizes[-1]:,} rows"
        runs.append(run_pack(what, images, metas[-1], out, "--jobs", str(args.jobs), *target))
        shutil.rmtree(out)
    if not args.keep:
        shutil.rmtree(work)
    return runs


def print_table(runs: list[Run]) -> None:
    head = "what|rows|wall s|check s|plan s|write s|finish s|rows/s|tree MB|largest MB|CPU s|others' CPU s|disk MB"
    print(f"| {head.replace('|', ' | ')} |\n|{'---|' * (head.count('|') + 1)}")
    for r in runs:
        phases = [f"{r.phases[p]:.1f}" if p in r.phases else "-" for p in ("check", "plan", "write", "finish")]
        figures = [f"{x:,.0f}" for x in (r.rows_per_s, r.peak_tree_mb, r.peak_process_mb, r.cpu_s)]
        others = "-" if r.others_cpu_s is None else f"{r.others_cpu_s:.0f}"
        cells = [r.what, f"{r.rows:,}", f"{r.seconds:.1f}", *phases, *figures, others, f"{r.disk_mb:,.0f}"]
        print(f"| {' | '.join(cells)} |")


def print_figures(report: dict[str, Any], runs: list[Run]) -> None:
    if "corpus" in report:
        c, s = report["corpus"], report["shard_sizes"]
        built = f"built in {c['build_s']:.0f} s ({c['rows'] / c['build_s']:,.0f} files/s)" if c["build_s"] else "reused"
        print(
            f"\ntiny-file corpus: {c['rows']:,} files, {built}; a shard costs {s['fixed_bytes']:,.0f} B and a row"
            f" {s['row_bytes']:,.0f} B: --target-shard-size {s['target']:,} --max-shard-size {s['max']:,}"
        )
        h, w = report["hub_planned"], report["hub_written"]
        print(
            f"Hub, planned (--dry-run): {report['shards']:,} shards, {h['files']:,} files at most"
            f" (limit {h['max_files']:,}), fullest folder {h['fullest_folder']} {h['fullest_folder_entries']:,}"
            f" entries (limit {h['max_folder_entries']:,}), {h['commits']:,} commits of {h['files_per_commit']};"
            f" nested splits: {', '.join(s['name'] for s in h['splits'] if s['nested']) or 'none'}"
        )
        print(
            f"Hub, written: {w['files']:,} files ({w['data_files']:,} in data/, {w['metadata_files']:,} in metadata/),"
            f" {w['data_folders']:,} folders of shards in data/, fullest folder {w['fullest_folder']}/"
            f" {w['fullest_entries']:,} entries: within the limits"
        )
    for m in report.get("yfcc_metadata", []):
        built = f"written in {m['build_s']:.0f} s" if m["build_s"] else "reused"
        print(
            f"YFCC-shaped metadata: {m['rows']:,} rows, {m['mb']:,.0f} MB"
            f" ({m['mb'] * 1e6 / m['rows']:.0f} B a row), {built}; planned in shards of"
            f" {report['yfcc_rows_per_shard']:,} rows"
        )
    checks = [r for r in runs if r.what.startswith("check")]
    rates = ", ".join(f"{r.rows / r.phases['check']:,.0f}" for r in checks)
    if checks:
        print(f"check phase: {rates} rows/s (rows / its check seconds)")
    if len(checks) == 2:
        small, large = checks
        print(
            f"memory in rows: {large.rows / small.rows:.0f}x the rows, {large.peak_tree_mb / small.peak_tree_mb:.2f}x"
            f" the tree's peak, {large.peak_process_mb / small.peak_process_mb:.2f}x the largest process's"
        )


def check_disk(args: argparse.Namespace) -> None:
    """Stop now, not an hour in, if the disk cannot hold the corpora and the runs."""
    pack, check = args.rows * PACK_DISK_PER_ROW, args.check_rows * CHECK_DISK_PER_ROW * (1.1 if args.flat_check else 1)
    need, free = (pack + check if args.keep else max(pack, check)), shutil.disk_usage(args.workdir).free
    if need > free:
        raise SystemExit(f"{args.workdir}: about {need / 1e9:.0f} GB needed, {free / 1e9:.0f} GB free (fewer rows?)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="tiny files to pack (0: skip the pack)")
    parser.add_argument("--shards", type=int, default=21_000, help="shards the pack's plan aims at (> 10,000 nests)")
    parser.add_argument("--check-rows", type=int, default=10_000_000, help="YFCC-shaped rows to check (0: skip)")
    parser.add_argument(
        "--check-file-size",
        type=int,
        default=20_000,
        help="bytes of an image the check's shards are sized for (YFCC100M: 2 TB / 100M rows)",
    )
    parser.add_argument("--flat-check", action="store_true", help="check at --check-rows / 10 too: memory in rows")
    parser.add_argument(
        "--yfcc-pack",
        action="store_true",
        help="pack --check-rows YFCC rows for real too (their files are tiny): write and finish at that shape",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pack-shards --jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("bench-output/scale"))
    parser.add_argument("--keep", action="store_true", help="leave corpora (reused next time) and output in --workdir")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.workdir = args.workdir.resolve()
    check_disk(args)
    compile_shardkit()
    load = os.getloadavg()[0]
    report: dict[str, Any] = {}
    runs = []
    if args.rows:
        runs += pack_at_scale(args, report)
    if args.check_rows:
        runs += check_at_yfcc_shape(args, report)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {machine}, Python {platform.python_version()}, load {load:.1f} at the start;"
        f" --jobs {args.jobs}, fsync on, the corpora in the page cache as their build or a reading left them"
    )
    print_table(runs)
    print_figures(report, runs)
    if args.json:
        print(json.dumps({"machine": machine, **report, "runs": [asdict(r) | {"summary": None} for r in runs]}))


if __name__ == "__main__":
    main()
