"""Training-stream speed over HTTP: rows/s of shardkit.stream (plain, shuffled, one rank of two, decoded on
1 to 4 threads) against datasets' own Parquet reader on the same images.

    python bench/bench_training_stream.py [--rows 2000] [--workdir /tmp/bench23]

Builds ``--rows`` seeded JPEGs of 512x384 px (smoothed noise, about 100 KB each, so a decode costs what a
photo's does) and a metadata.jsonl (``file_name``, ``label``), packs them as ZIP shards with pack-shards
(target size: a 16th of the corpus, so about 16 shards), writes the same rows as Parquet with embedded image
bytes in 16 files with datasets (``Dataset.from_generator(...).shard(...).to_parquet(...)``, what
``push_to_hub`` writes), and serves the work folder on 127.0.0.1 (tests/http_server.py, Range-capable, a
request log). Each reading runs in its own process (the clock starts after the imports, at the creation of
the dataset, and stops at its last row) and reads the whole split:

* plain / shuffled / split - ``shardkit.stream(url)``, with ``shuffle_seed=0``, rank 0 of ``world_size=2``,
  ``.decode(False)``: rows carry the image bytes;
* decoded, N threads       - ``shardkit.stream(url)`` (pixels decoded when a row is formatted, on the main
  thread) and ``shardkit.stream(url, decode_threads=N)`` (datasets' ``decode(num_threads=N)``);
* datasets parquet         - ``load_dataset("parquet", data_files=urls, split="train", streaming=True)``,
  ``.decode(False)``, then decoded (main thread, and ``decode(num_threads=2)``);
* pure decode              - no dataset, no server: Pillow decodes the JPEGs from memory on N threads, the
  ceiling of a decoded reading on this machine.

Each reading starts with datasets, Pillow, shardkit and (if installed) torch imported, as in a training job:
datasets imports torch when it creates an IterableDataset, a second or more on a small machine. Prints one
table: rows, seconds, seconds to the first row, rows/s, rows/s after the first row, MB/s of image bytes, the
ratio to datasets' Parquet reader (a no-decode reading against its no-decode reading, a decoded one against
its main-thread decoded one), the ratio of a threaded decode to the same reader's main-thread decode (rows/s
after the first row: the start is not decoding), the CPU
(in cores) of the reader's main thread, of the whole reader, of the server and of every other process on the
machine (a busy machine skews everything: check that column), and the requests (those without a Range
header) and the bytes they asked for. Every reading is checked: each expected row once. Compare within one
run, never across machines.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.http_server import RequestLog, serve_directory  # noqa: E402

SCRIPTS = Path(sys.executable).parent
SHARDS = 16
WIDTH, HEIGHT = 512, 384
JPEG_QUALITY = 85
NOISE = 36  # +- this much per pixel on a smooth base: about 100 KB per JPEG at quality 85

# (name, reader, decode threads: None no decode, 0 main thread, N a pool, shardkit.stream keyword arguments)
READINGS: list[tuple[str, str, int | None, dict[str, Any]]] = [
    ("plain", "shardkit", None, {}),
    ("shuffled", "shardkit", None, {"shuffle_seed": 0}),
    ("split (rank 0 of 2)", "shardkit", None, {"rank": 0, "world_size": 2}),
    ("decoded, 1 thread", "shardkit", 0, {}),
    ("decoded, 2 threads", "shardkit", 2, {}),
    ("decoded, 3 threads", "shardkit", 3, {}),
    ("decoded, 4 threads", "shardkit", 4, {}),
    ("datasets parquet", "parquet", None, {}),
    ("datasets parquet, decoded", "parquet", 0, {}),
    ("datasets parquet, decoded, 2 thr", "parquet", 2, {}),
]
PURE_DECODE_THREADS = (1, 2, 4)


def photo_like_jpeg(
    rng: Any, size: tuple[int, int] = (WIDTH, HEIGHT), cell: int = 8, noise: int = NOISE, quality: int = JPEG_QUALITY
) -> bytes:
    """A JPEG of a smooth random field (one colour per ``cell`` px, bicubic) plus +-``noise`` per pixel, drawn from
    ``rng`` (numpy's Generator): it decodes at a photo's cost."""
    import numpy as np
    from PIL import Image

    width, height = size
    base = rng.integers(0, 256, (height // cell, width // cell, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.BICUBIC))
    noisy = smooth.astype(np.int16) + rng.integers(-noise, noise + 1, smooth.shape, dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def make_corpus(root: Path, n: int, seed: int) -> tuple[Path, Path]:
    """``n`` JPEGs (smoothed noise plus per-pixel noise) under root/images and root/metadata.jsonl."""
    import numpy as np

    images, meta = root / "images", root / "metadata.jsonl"
    stamp = root / f"corpus-{n}-{seed}.done"
    if stamp.exists():
        return images, meta
    shutil.rmtree(root, ignore_errors=True)
    images.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    with open(meta, "w") as f:
        for i in range(n):
            rel = f"{i % 50:02d}/{i:06d}.jpg"
            (images / rel).parent.mkdir(exist_ok=True)
            (images / rel).write_bytes(photo_like_jpeg(rng))
            f.write(json.dumps({"file_name": rel, "label": i % 10}) + "\n")
    stamp.write_text("ok")
    return images, meta


def corpus_rows(images: Path, meta: Path) -> list[dict[str, Any]]:
    """Each row with its file's key (sha256[:32], what pack-shards names a row without a key) and size."""
    rows = []
    for line in meta.read_text().splitlines():
        row = json.loads(line)
        data = (images / row["file_name"]).read_bytes()
        rows.append({**row, "key": hashlib.sha256(data).hexdigest()[:32], "size": len(data)})
    return rows


def pack_zip(images: Path, meta: Path, out: Path, total_bytes: int) -> int:
    """pack-shards into ``out`` (a re-run resumes), target a 16th of the corpus; the number of shards."""
    target = max(total_bytes // SHARDS, 1)
    cmd = [SCRIPTS / "pack-shards", images, meta, "-o", out, "-q", "--target-shard-size", str(target)]
    subprocess.run([str(c) for c in cmd], check=True)
    return int(json.loads((out / "shards.json").read_text())["totals"]["shards"])


def write_parquet(images: Path, rows: list[dict[str, Any]], out: Path, cache: Path) -> list[Path]:
    """The rows as Parquet with embedded image bytes, written by datasets, in 16 files."""
    import datasets

    stamp = out / f"parquet-{len(rows)}.done"
    files = [out / "data" / f"train-{i:05d}-of-{SHARDS:05d}.parquet" for i in range(SHARDS)]
    if stamp.exists():
        return files
    shutil.rmtree(out, ignore_errors=True)
    (out / "data").mkdir(parents=True)
    datasets.disable_progress_bars()

    def examples() -> Any:
        for r in rows:
            data = (images / r["file_name"]).read_bytes()
            yield {"image": {"bytes": data, "path": r["file_name"]}, "key": r["key"], "label": r["label"]}

    features = datasets.Features(
        {"image": datasets.Image(), "key": datasets.Value("string"), "label": datasets.Value("int64")}
    )
    ds = datasets.Dataset.from_generator(examples, features=features, cache_dir=str(cache))
    for i, path in enumerate(files):
        ds.shard(SHARDS, i, contiguous=True).to_parquet(str(path))
    shutil.rmtree(cache, ignore_errors=True)
    stamp.write_text("ok")
    return files


def asked_bytes(log: RequestLog, root: Path) -> tuple[int, int, int]:
    """Requests in the log, those of them that are GETs without Range, and the bytes they all asked for (a GET
    without Range: the whole file, though a client may hang up sooner)."""
    with log.lock:
        entries = list(log.entries)
    total = whole = 0
    for method, path, range_header in entries:
        file = root / path.lstrip("/")
        if method != "GET" or not file.is_file():
            continue
        size = file.stat().st_size
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header or "")
        if not match or not (match.group(1) or match.group(2)):
            total += size
            whole += 1
        elif not match.group(1):
            total += min(int(match.group(2)), size)
        else:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            total += max(end - start + 1, 0)
    return len(entries), whole, total


def machine_busy() -> float | None:
    """CPU seconds all processes have spent so far (Linux /proc/stat; None elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int | None:
    """Connections the kernel has refused since boot because a listen backlog was full (Linux; None elsewhere)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=True))["ListenOverflows"])
    return None


def read_once(spec: dict[str, Any]) -> dict[str, Any]:
    """One reading, in this process: the keys of the rows it read, its wall and CPU seconds."""
    import datasets
    import PIL.Image
    import PIL.JpegImagePlugin  # noqa: F401  (imported before the clock starts)

    import shardkit

    if importlib.util.find_spec("torch") is not None:
        # datasets imports torch when it creates an IterableDataset (if torch is installed): a second or more that
        # a training job has spent before it creates its dataset.
        import torch  # noqa: F401
    datasets.disable_progress_bars()
    threads = spec["threads"]
    started, cpu_started, main_started = time.perf_counter(), time.process_time(), time.thread_time()
    if spec["reader"] == "shardkit":
        kwargs = dict(spec["kwargs"])
        if threads:
            kwargs["decode_threads"] = threads
        ds = shardkit.stream(spec["url"], **kwargs)
    else:
        ds = datasets.load_dataset("parquet", data_files=spec["urls"], split="train", streaming=True)
        if threads:
            ds = ds.decode(num_threads=threads)
    if threads is None:
        ds = ds.decode(False)
    keys = []
    first = None
    for row in ds:
        image = row["image"]
        if threads is None:
            if not image["bytes"]:
                raise RuntimeError(f"row {row['key']} has no image bytes")
        else:
            image.load()  # decoded already when the row was formatted (datasets' Image feature): a no-op
            if image.size != (WIDTH, HEIGHT):
                raise RuntimeError(f"row {row['key']} decoded to {image.size}")
        keys.append(row["key"])
        if first is None:
            first = time.perf_counter() - started
    return {
        "keys": keys,
        "seconds": time.perf_counter() - started,
        "first": first,
        "cpu": time.process_time() - cpu_started,
        "main_cpu": time.thread_time() - main_started,
    }


def pure_decode(spec: dict[str, Any]) -> dict[str, Any]:
    """Pillow decoding the corpus's JPEGs from memory on ``threads`` threads: no dataset, no server."""
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    blobs = [Path(p).read_bytes() for p in spec["files"]]

    def decode(data: bytes) -> tuple[int, int]:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image.size  # type: ignore[no-any-return]

    started, cpu_started = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(spec["threads"]) as pool:
        sizes = list(pool.map(decode, blobs))
    if any(size != (WIDTH, HEIGHT) for size in sizes):
        raise RuntimeError("an image decoded to the wrong size")
    return {"rows": len(sizes), "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu_started}


def run_child(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """One reading in its own process; with the CPU the server (this process) and every other
    process used meanwhile, in cores over the child's whole run."""
    import resource

    server, busy = time.process_time(), machine_busy()
    child, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    wall = time.perf_counter() - wall
    server = time.process_time() - server
    child_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = child_after.ru_utime + child_after.ru_stime - child.ru_utime - child.ru_stime
    busy_after = machine_busy()
    if result.returncode:
        raise SystemExit(f"{spec.get('name')} failed:\n{result.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    got["server_cpu"] = server / got["seconds"]
    got["other_cpu"] = None if busy is None or busy_after is None else (busy_after - busy - server - child_cpu) / wall
    return got


def _cell(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench23"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one reading, run in its own process
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(pure_decode(spec) if spec["reader"] == "pure" else read_once(spec)))
        return

    import datasets
    import PIL

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    images, meta = make_corpus(work / "corpus", args.rows, args.seed)
    rows = corpus_rows(images, meta)
    size_of = {r["key"]: r["size"] for r in rows}
    if len(size_of) != len(rows):
        raise SystemExit("two images have the same bytes: change --seed")
    total = sum(size_of.values())
    t1 = time.perf_counter()
    shards = pack_zip(images, meta, work / "serve" / "packed", total)
    t2 = time.perf_counter()
    parquet = write_parquet(images, rows, work / "serve" / "parquet", work / "hf-cache")
    t3 = time.perf_counter()
    print(
        f"corpus {len(rows)} JPEGs {WIDTH}x{HEIGHT}, {total / 1e6:.1f} MB ({total / len(rows) / 1e3:.0f} KB each)"
        f" {t1 - t0:.1f} s; pack {shards} ZIP shards {t2 - t1:.1f} s; parquet {len(parquet)} files {t3 - t2:.1f} s",
        flush=True,
    )

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SHARDKIT_"))}
    env.update(HF_HOME=str(work / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    results: list[dict[str, Any]] = []
    overflows = listen_overflows()
    with serve_directory(work / "serve") as (base, log):
        rank0: set[str] | None = None
        for name, reader, threads, kwargs in READINGS:
            spec = {
                "name": name,
                "reader": reader,
                "threads": threads,
                "kwargs": kwargs,
                "url": base + "packed/",
                "urls": [base + f"parquet/data/{p.name}" for p in parquet],
            }
            log.clear()
            got = run_child(spec, env)
            requests, whole, asked = asked_bytes(log, work / "serve")
            keys = got.pop("keys")
            if len(set(keys)) != len(keys) or not set(keys) <= size_of.keys():
                raise SystemExit(f"{name}: duplicate or unknown rows")
            if kwargs.get("world_size", 1) == 1 and len(keys) != len(rows):
                raise SystemExit(f"{name}: read {len(keys)} rows of {len(rows)}")
            if kwargs.get("world_size", 1) > 1:
                rank0 = set(keys)
            got.update(name=name, threads=threads, rows=len(keys), requests=requests, whole=whole, asked_mb=asked / 1e6)
            got["mb"] = sum(size_of[k] for k in keys) / 1e6
            results.append(got)
            print(f"  {name}: {len(keys)} rows in {got['seconds']:.2f} s", flush=True)
        if rank0 is not None and not 0.4 < len(rank0) / len(rows) < 0.6:
            raise SystemExit(f"rank 0 of 2 read {len(rank0)} rows of {len(rows)}")
    overflows_after = listen_overflows()

    files = [str(images / r["file_name"]) for r in rows[: min(len(rows), 500)]]
    pure = []
    for n in PURE_DECODE_THREADS:
        got = run_child({"name": f"pure decode {n}", "reader": "pure", "threads": n, "files": files}, env)
        pure.append({"name": f"pure decode, {n} thread{'s' if n > 1 else ''}", "threads": n, **got})

    rate = {r["name"]: r["rows"] / r["seconds"] for r in results}
    steady_rate = {r["name"]: (r["rows"] - 1) / (r["seconds"] - r["first"]) for r in results}
    # Decode threads against one thread: steady rates (after the first row), so that the start (the
    # manifest, the thread pool) counts as "1st s", not as decoding.
    one_thread = {"shardkit": steady_rate["decoded, 1 thread"], "parquet": steady_rate["datasets parquet, decoded"]}
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}, datasets {datasets.__version__}, Pillow {PIL.__version__};"
        f" {len(rows)} JPEGs ({total / len(rows) / 1e3:.0f} KB) in {shards} ZIP shards / {len(parquet)} Parquet"
        " files, HTTP on 127.0.0.1 (no added latency); cpu = CPU seconds / wall seconds"
    )
    if overflows is not None and overflows_after is not None and overflows_after > overflows:
        print(f"WARNING: {overflows_after - overflows} connections dropped on a full listen backlog (1 s stalls each)")
    header = (
        f"{'reading':32} {'rows':>5} {'s':>5} {'1st s':>5} {'rows/s':>6} {'steady':>6} {'MB/s':>5} {'x parq':>6}"
        f" {'x 1thr':>6}"
        f" {'main':>4} {'rdr':>4} {'srv':>4} {'othr':>4} {'reqs':>4} {'whole':>5} {'askMB':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ours = r["rows"] / r["seconds"]
        vs_parquet = ours / rate["datasets parquet" if r["threads"] is None else "datasets parquet, decoded"]
        reader = "parquet" if r["name"].startswith("datasets parquet") else "shardkit"
        steady = steady_rate[r["name"]]
        vs_one = f"{steady / one_thread[reader]:.2f}" if r["threads"] else "-"
        print(
            f"{r['name']:32} {r['rows']:>5} {r['seconds']:>5.2f} {r['first']:>5.2f} {ours:>6.0f} {steady:>6.0f}"
            f" {r['mb'] / r['seconds']:>5.0f} {vs_parquet:>6.2f} {vs_one:>6} {r['main_cpu'] / r['seconds']:>4.2f}"
            f" {r['cpu'] / r['seconds']:>4.2f} {r['server_cpu']:>4.2f} {_cell(r['other_cpu'], 4, 2)}"
            f" {r['requests']:>4} {r['whole']:>5} {r['asked_mb']:>5.0f}"
        )
    for p in pure:
        ours = p["rows"] / p["seconds"]
        vs_one = f"{ours / (pure[0]['rows'] / pure[0]['seconds']):.2f}"
        print(
            f"{p['name']:32} {p['rows']:>5} {p['seconds']:>5.2f} {'':>5} {ours:>6.0f} {'':>6} {'':>5} {'':>6}"
            f" {vs_one:>6} {'':>4} {p['cpu'] / p['seconds']:>4.2f} {'':>4} {_cell(p['other_cpu'], 4, 2)}"
        )
    print(
        "1st s: seconds to the first row; steady: rows/s after it; x parq: rows/s over datasets parquet's (no"
        " decode / decoded on the main thread);\nx 1thr: steady rows/s over the same reader's main-thread decode;"
        " main, rdr: the"
        " reader's main thread's and whole process's CPU, srv: the server's, othr: every other process's (in"
        " cores);\nreqs: requests, whole: GETs without Range, askMB: bytes asked for (a GET without Range: the whole"
        " file, though a client may hang up sooner)"
    )


if __name__ == "__main__":
    main()
