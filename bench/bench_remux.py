"""Remux speed and memory: ``shardkit remux`` against a single datasets process and datasets' ``map(num_proc=2)``,
the same CPU-bound augmentation in each, on a source pushed with datasets as one large and as several small shards.

    python bench/bench_remux.py [--rows 5000] [--rounds 1] [--only large|small] [--workdir /tmp/bench-remux]

Builds ``--rows`` seeded JPEGs of 640x480 px (a smooth random field plus per-pixel noise, about 100 KB each, so
a decode costs what a photo's does) with an ``id``, a ClassLabel ``label`` (10 names) and a ``caption``, as a
``datasets.Dataset`` with ``Image()`` and ``ClassLabel`` features, and pushes it with ``push_to_hub`` to the
tests' Hub-API server on 127.0.0.1 twice: ``large`` in ONE Parquet shard (``num_shards=1``; about 500 MB at the
default size) and ``small`` in ``--small-shards`` shards. Every tool runs bench/remux_augment.py's augmentation
(Pillow: decode, random resized crop of scale 0.7-1.0 to 256 px, random mirror, sharpen; seeded by the row's id)
and writes each image as JPEG quality 90 with the other columns, in batches of 64 rows:

* shardkit j2 / j1 - ``shardkit remux REPO OUT --map bench/remux_augment.py:augment --jobs 2`` (and ``--jobs 1``:
                     one core's rate);
* datasets loop    - one process: ``load_dataset(REPO, split="train", streaming=True).iter(batch_size=64)``, the
                     function on each batch, pyarrow's ``ParquetWriter``;
* datasets map     - ``load_dataset(REPO, split="train")`` (its download), ``.map(fn, batched=True, batch_size=64,
                     num_proc=2)``, ``.to_parquet``.

Each tool runs as its own process (its imports, its download and its writing are timed: from start to exit),
with HF_HOME and XDG_CACHE_HOME in a fresh folder, so no run reads another's cache. Measured per run: wall
seconds, rows/s, the peak memory of the process tree (the sum of the RSS of the process and all its
descendants, sampled every 50 ms; shared pages count once per process) and of its largest process, the CPU of
the tool and of every other process on the machine (in cores: a busy machine skews everything, check that
column), and the machine's speed just before and after (sha256 MB/s on one core: each core of this VM switched
between two speeds, 2x apart, within seconds). Prints one table per layout (medians of ``--rounds``; memory: the
highest) and the issue's ratios, each the median of its rounds' with their range (the tools run in reverse order
every other round): shardkit j2 / datasets loop (target >= 1.8), j2 / (2 x j1) (>= 0.9), j2 / datasets map (> 1).
Every output is checked: as many rows as the source, and shardkit's shards.json keeps the ClassLabel's names.
Also printed: the CPU cost of creating a file in ``--workdir`` (shardkit stages a file per batch there, until
2026-11-27 a file per row; the datasets tools write a few large files): on the bench VM it ranged from 0.02 to
1 ms, between folders of one ext4 disk and from minute to minute. Compare within one run, never across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench_core_speeds import core_speed  # noqa: E402
from bench_training_stream import machine_busy, photo_like_jpeg  # noqa: E402

from tests.hub_server import WRITE_TOKEN, run_hub_server  # noqa: E402

SCRIPTS = Path(sys.executable).parent
SCRIPT = Path(__file__).resolve()
AUGMENT = SCRIPT.parent / "remux_augment.py"
NAMESPACE = "bench"
WIDTH, HEIGHT = 640, 480
JPEG_QUALITY = 85
NOISE = 20  # +- this much per pixel on a smooth base: about 100 KB per JPEG at quality 85
CLASS_NAMES = ["airplane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
BATCH = 64
TOOLS = ("shardkit-j2", "shardkit-j1", "datasets-loop", "datasets-map")
SAMPLE_SECONDS = 0.05


def make_source(root: Path, rows: int, seed: int) -> Path:
    """The source as a saved ``datasets.Dataset`` (image, id, label, caption), built once per size and seed."""
    import datasets
    import numpy as np

    saved = root / f"source-{rows}-{seed}"
    if (saved / "done").exists():
        return saved
    shutil.rmtree(root, ignore_errors=True)
    datasets.disable_progress_bars()

    def examples() -> Any:
        rng = np.random.default_rng(seed)
        for i in range(rows):
            jpeg = photo_like_jpeg(rng, (WIDTH, HEIGHT), cell=16, noise=NOISE, quality=JPEG_QUALITY)
            label = int(rng.integers(len(CLASS_NAMES)))
            yield {
                "image": {"bytes": jpeg, "path": f"{i:06d}.jpg"},
                "id": i,
                "label": label,
                "caption": f"a {CLASS_NAMES[label]}, photo {i}",
            }

    features = datasets.Features(
        {
            "image": datasets.Image(),
            "id": datasets.Value("int64"),
            "label": datasets.ClassLabel(names=CLASS_NAMES),
            "caption": datasets.Value("string"),
        }
    )
    ds = datasets.Dataset.from_generator(examples, features=features, cache_dir=str(root / "cache"))
    ds.save_to_disk(str(saved))
    shutil.rmtree(root / "cache", ignore_errors=True)
    (saved / "done").write_text("ok")
    return saved


def push_layouts(spec: dict[str, Any]) -> None:
    """Child: the saved source pushed with ``push_to_hub`` once per layout, in that layout's number of shards."""
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.load_from_disk(spec["source"])
    for repo, shards in spec["layouts"].items():
        ds.push_to_hub(repo, num_shards=shards)


def datasets_loop(spec: dict[str, Any]) -> None:
    """Child: one process streams the source in batches, augments each, writes with pyarrow's ParquetWriter."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(AUGMENT.parent))
    from remux_augment import augment_to_jpeg

    datasets.disable_progress_bars()
    ds = datasets.load_dataset(spec["repo"], split="train", streaming=True)
    writer = None
    for batch in ds.iter(batch_size=BATCH):
        out = augment_to_jpeg(batch)
        table = pa.table(
            {
                "image": pa.array([im["bytes"] for im in out["image"]], pa.binary()),
                "id": pa.array(out["id"], pa.int64()),
                "label": pa.array(out["label"], pa.int64()),
                "caption": pa.array(out["caption"], pa.string()),
            }
        )
        writer = writer or pq.ParquetWriter(spec["out"], table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()


def datasets_map(spec: dict[str, Any]) -> None:
    """Child: the whole source downloaded, mapped on 2 processes, written as one Parquet file."""
    import datasets

    sys.path.insert(0, str(AUGMENT.parent))
    from remux_augment import augment_to_jpeg

    datasets.disable_progress_bars()
    ds = datasets.load_dataset(spec["repo"], split="train")
    out = ds.map(augment_to_jpeg, batched=True, batch_size=BATCH, num_proc=2, features=ds.features)
    out.to_parquet(spec["out"])


CHILDREN = {"push": push_layouts, "datasets-loop": datasets_loop, "datasets-map": datasets_map}


def tool_command(tool: str, repo: str, out: Path) -> list[str]:
    if tool.startswith("shardkit-"):
        jobs = tool.removeprefix("shardkit-j")
        return [str(SCRIPTS / "shardkit"), "remux", repo, str(out), "--map", f"{AUGMENT}:augment", "-j", jobs, "-q"]
    return [sys.executable, str(SCRIPT), "--child", json.dumps({"tool": tool, "repo": repo, "out": str(out)})]


def watch_tree(pid: int, stop: threading.Event, seen: dict[str, Any]) -> None:
    """Every SAMPLE_SECONDS until ``stop``, over the tree under ``pid``: the highest sum of RSS and the highest RSS
    of one process (bytes), and each process's CPU seconds at its last sample (so less its last 50 ms)."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.wait(SAMPLE_SECONDS):
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        sizes = []
        for proc in procs:
            with contextlib.suppress(psutil.Error), proc.oneshot():  # it may exit between the listing and the read
                sizes.append(proc.memory_info().rss)
                times = proc.cpu_times()
                seen["cpu"][proc.pid] = times.user + times.system
        seen["tree"] = max(seen["tree"], sum(sizes))
        seen["proc"] = max(seen["proc"], max(sizes, default=0))


def create_cost(folder: Path, files: int = 500) -> float:
    """CPU milliseconds to create one empty file in ``folder`` (a remux staged a file per output row there until
    2026-11-27; on a disk whose inode allocation is slow, e.g. a crowded ext4 block group, that alone could cost
    more than the function)."""
    probe = folder / "create-probe"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir(parents=True)
    started = time.process_time()
    for i in range(files):
        os.close(os.open(probe / str(i), os.O_CREAT | os.O_WRONLY, 0o644))
    cost = (time.process_time() - started) * 1000 / files
    shutil.rmtree(probe)
    return cost


def run_measured(argv: list[str], env: dict[str, str], logs: Path) -> dict[str, float]:
    """Run ``argv`` to its end in ``logs`` (its output goes there; a repo id is not read as a folder): wall seconds,
    peak tree and process RSS (MB), its CPU and every other process's (cores), the machine's speed before and
    after (bench_core_speeds.py's one-core probe: probes that differ say the run's figures are the machine's luck
    as much as the tool's; probes that agree do not prove the speed held between them)."""
    seen: dict[str, Any] = {"tree": 0, "proc": 0, "cpu": {}}
    stop = threading.Event()
    os.sync()  # what the run before wrote is on disk: its writeback does not stall this run's fsyncs
    speed_before = core_speed()
    busy, here = machine_busy(), time.process_time()
    started = time.perf_counter()
    with open(logs / "stdout", "wb") as stdout, open(logs / "stderr", "wb") as stderr:
        proc = subprocess.Popen(argv, cwd=logs, env=env, stdout=stdout, stderr=stderr)
        watcher = threading.Thread(target=watch_tree, args=(proc.pid, stop, seen), daemon=True)
        watcher.start()
        code = proc.wait(timeout=3600)
    wall = time.perf_counter() - started
    stop.set()
    watcher.join()
    if code:
        raise SystemExit(f"{' '.join(argv[:4])} exited {code}:\n{(logs / 'stderr').read_text()[-3000:]}")
    tool_cpu = sum(seen["cpu"].values())
    here_cpu = time.process_time() - here  # the Hub-API server's threads and this sampling
    busy_after = machine_busy()
    other = float("nan") if busy is None or busy_after is None else (busy_after - busy - tool_cpu - here_cpu) / wall
    speed_after = core_speed()
    return {
        "speed_before": speed_before,
        "speed_after": speed_after,
        "seconds": wall,
        "tree_mb": seen["tree"] / 1e6,
        "proc_mb": seen["proc"] / 1e6,
        "cpu": tool_cpu / wall,
        "cpu_s": tool_cpu,
        "other": other,
    }


def output_rows(tool: str, out: Path) -> int:
    """Rows in a tool's output; for shardkit, also that its manifest keeps the label's ClassLabel names."""
    if tool.startswith("shardkit-"):
        from shardkit.schema import class_label_names

        manifest = json.loads((out / "shards.json").read_text())
        label = next((f for f in manifest["features"] if f.get("name") == "label"), {})
        if class_label_names(label) != CLASS_NAMES:
            raise SystemExit(f"{tool}: the output's label is {label.get('dtype')!r}, not the source's ClassLabel")
        return int(manifest["totals"]["rows"])
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(out).metadata.num_rows)


def measure(tool: str, repo: str, run_dir: Path, base_env: dict[str, str], rows: int) -> dict[str, float]:
    """One tool on one layout, from a fresh folder (its cache, its output), which is removed afterwards."""
    shutil.rmtree(run_dir, ignore_errors=True)
    home = run_dir / "home"
    home.mkdir(parents=True)
    out = run_dir / ("out" if tool.startswith("shardkit-") else "out.parquet")
    env = {**base_env, "HF_HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg")}
    got = run_measured(tool_command(tool, repo, out), env, run_dir)
    written = output_rows(tool, out)
    if written != rows:
        raise SystemExit(f"{tool} on {repo}: {written} rows written, the source has {rows}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return got


def summarize(runs: list[dict[str, float]], rows: int) -> dict[str, float]:
    """Medians of a tool's rounds (memory: the highest), with its rows/s (median, lowest, highest)."""
    rates = [rows / r["seconds"] for r in runs]
    out = {key: statistics.median(r[key] for r in runs) for key in ("seconds", "cpu", "cpu_s", "other")}
    out.update(tree_mb=max(r["tree_mb"] for r in runs), proc_mb=max(r["proc_mb"] for r in runs))
    out.update(rate=statistics.median(rates), rate_min=min(rates), rate_max=max(rates))
    return out


def print_layout(layout: str, shards: int, runs: dict[str, list[dict[str, float]]], rows: int, rounds: int) -> None:
    results = {t: summarize(r, rows) for t, r in runs.items()}
    print(f"\n{layout}: {shards} source shard{'s' if shards > 1 else ''}, {rows} rows, {rounds} round(s)")
    header = (
        f"{'tool':14} {'s':>7} {'rows/s':>7} {'range':>11} {'x j2':>5} {'tree MB':>8} {'proc MB':>8}"
        f" {'CPU s':>6} {'cpu':>5} {'othr':>5}"
    )
    print(header)
    print("-" * len(header))
    j2 = results.get("shardkit-j2")
    for tool, r in results.items():
        vs = f"{r['rate'] / j2['rate']:.2f}" if j2 else "-"
        print(
            f"{tool:14} {r['seconds']:>7.1f} {r['rate']:>7.1f} {r['rate_min']:>5.0f}-{r['rate_max']:<5.0f}"
            f" {vs:>5} {r['tree_mb']:>8.0f} {r['proc_mb']:>8.0f} {r['cpu_s']:>6.1f} {r['cpu']:>5.2f} {r['other']:>5.2f}"
        )
    if j2 is None:
        return
    checks = [
        ("shardkit j2 / datasets loop", "datasets-loop", 1, ">=", 1.8),
        ("shardkit j2 / (2 x shardkit j1)", "shardkit-j1", 2, ">=", 0.9),
        ("shardkit j2 / datasets map", "datasets-map", 1, ">", 1.0),
    ]
    for name, other, times, op, target in checks:
        if other not in results:
            continue
        # Per round (its runs are minutes apart, the order reversed every other round), then the median: the
        # machine's speed drifts less within a round than across the bench.
        ratios = [b["seconds"] / (times * a["seconds"]) for a, b in zip(runs["shardkit-j2"], runs[other], strict=True)]
        ratio = statistics.median(ratios)
        met = ratio >= target if op == ">=" else ratio > target
        spread = f" (rounds {min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
        print(f"  {name:32} {ratio:5.2f}{spread}  (target {op} {target}: {'met' if met else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=5000, help="source rows (default 5000: about 500 MB)")
    parser.add_argument("--small-shards", type=int, default=4, help="shards of the small layout (default 4)")
    parser.add_argument("--only", choices=("large", "small"), help="measure one layout alone")
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS), metavar="TOOL", help=f"of {TOOLS}")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every run; medians are reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-remux"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one tool (or the push), run in its own process
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        CHILDREN[spec["tool"]](spec)
        return

    import datasets

    import shardkit

    work = args.workdir.resolve()
    t0 = time.perf_counter()
    source = make_source(work / "source", args.rows, args.seed)
    size = sum(f.stat().st_size for f in source.glob("*.arrow"))
    layouts = {"large": 1, "small": args.small_shards}
    if args.only:
        layouts = {args.only: layouts[args.only]}
    print(f"source: {args.rows} JPEGs {WIDTH}x{HEIGHT}, {size / 1e6:.0f} MB in Arrow, {time.perf_counter() - t0:.0f} s")

    shutil.rmtree(work / "hub", ignore_errors=True)
    with run_hub_server(work / "hub", user=NAMESPACE) as hub:
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SHARDKIT_"))}
        paths = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        base_env.update(
            PYTHONPATH=os.pathsep.join(paths), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1"
        )
        repos = {layout: f"{NAMESPACE}/remux-{layout}" for layout in layouts}
        t0 = time.perf_counter()
        push = {"tool": "push", "source": str(source), "layouts": {repos[k]: n for k, n in layouts.items()}}
        home = work / "home-push"
        env = {**base_env, "HF_TOKEN": WRITE_TOKEN, "HF_HOME": str(home), "XDG_CACHE_HOME": str(home / "xdg")}
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--child", json.dumps(push)], env=env, capture_output=True, text=True
        )
        if result.returncode:
            raise SystemExit(f"push_to_hub failed:\n{result.stderr[-3000:]}")
        for layout, repo in repos.items():
            parquet = [f for f in hub.files(repo) if f.endswith(".parquet")]
            if len(parquet) != layouts[layout]:
                raise SystemExit(f"{repo}: push_to_hub wrote {len(parquet)} Parquet files, not {layouts[layout]}")
        pushed = ", ".join(f"{r} ({layouts[k]} shards)" for k, r in repos.items())
        print(f"pushed {pushed}, {time.perf_counter() - t0:.0f} s", flush=True)

        runs: dict[str, dict[str, list[dict[str, float]]]] = {k: {t: [] for t in args.tools} for k in layouts}
        load = os.getloadavg()[0]
        create_ms = create_cost(work)
        for round_ in range(args.rounds):
            for layout, repo in repos.items():
                # Every other round in reverse order: a machine that speeds up or slows down over the bench
                # does not favour the tool that always runs first.
                for tool in args.tools if round_ % 2 == 0 else reversed(args.tools):
                    got = measure(tool, repo, work / "run", base_env, args.rows)
                    runs[layout][tool].append(got)
                    print(
                        f"  round {round_ + 1} {layout} {tool}: {got['seconds']:.1f} s,"
                        f" {args.rows / got['seconds']:.1f} rows/s, tree {got['tree_mb']:.0f} MB, CPU"
                        f" {got['cpu_s']:.1f} s; sha256 {got['speed_before']:.0f} MB/s before,"
                        f" {got['speed_after']:.0f} after",
                        flush=True,
                    )

    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}, datasets {datasets.__version__}, shardkit from"
        f" {Path(shardkit.__file__).parent.parent}; load average before the runs"
        f" {load:.1f}; Hub-API server on 127.0.0.1 in this process; creating a file in {work}: {create_ms:.3f} CPU ms"
    )
    for layout, by_tool in runs.items():
        print_layout(layout, layouts[layout], by_tool, args.rows, args.rounds)
    print(
        "\ns: wall seconds from start to exit (imports, download, writing); range: rows/s of the rounds; x j2: rows/s"
        " over shardkit j2's;\ntree MB: peak of the summed RSS of the tool's processes; proc MB: of its largest;"
        "\nCPU s: the CPU seconds of the tool's processes (the same work on a busy machine or not); cpu: the same in"
        " cores (CPU s / s), othr: every other process's"
    )


if __name__ == "__main__":
    main()
