"""Streaming speed over HTTP: images/s, requests per image and time to the first example.

    python bench/bench_stream.py [--images 2000] [--workdir bench-output/stream]

Packs a seeded set of real JPEGs with shardkit, pushes it to the tests' Hub-API server on
127.0.0.1 (classic LFS, Range-capable resolve, request log), and reads it back, each reader in
its own process with an empty cache, decoding every image (Pillow ``load()``):

* per-member  - one fsspec ``zip://MEMBER::URL`` open per image (what forum users report as
                ~5 images/s); timed on a sample, it is that slow;
* imagefolder - ``load_dataset("ns/name", streaming=True)`` with datasets 5.x (no script);
* script 3.6  - the template's loading script, ``revision="script"``, in datasets 3.6;
* shardkit    - ``shardkit.stream("ns/name")``;
* parquet     - the same images as Parquet shards written by datasets (images embedded), read
                with ``load_dataset(..., streaming=True)`` (datasets 5.x's parquet builder);
* webdataset  - the same images as webdataset tars (``ShardWriter``), read with datasets 5.x's
                webdataset builder;
* shardkit tar / parquet - the same images packed with ``--format tar`` and ``--format parquet``,
                read with datasets 5.x's builtin builders (and the tar also with shardkit.stream).

The server answers on loopback with TCP_NODELAY after ``--rtt-ms`` (default 40 ms, a round trip
to a nearby CDN; 0 for bare loopback), so a reader pays for each request as it would on a real
network. The two per-member readers (per-member, imagefolder) read a ``--sample`` of images:
at several requests per image they are that slow. Compare ratios within one run, never
across machines.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.hub_server import WRITE_TOKEN, run_hub_server  # noqa: E402

SCRIPTS = Path(sys.executable).parent
DS36_PYTHON = os.environ.get("SHARDKIT_DS36_PYTHON", str(REPO_ROOT / ".venv-ds36" / "bin" / "python"))
REPO = "bench/stream"

# The same images as other layouts, written by the other tools and uploaded as they are:
# Parquet shards (datasets' writer, images embedded) and webdataset tars (ShardWriter).
OTHER_LAYOUTS = r"""
import io, json, math, sys
from pathlib import Path
import datasets, webdataset as wds
from huggingface_hub import HfApi
images, meta, out, shards = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
datasets.disable_progress_bars()
rows = [json.loads(line) for line in open(meta)]
total = sum((images / r["file_name"]).stat().st_size for r in rows)

def examples():
    for r in rows:
        yield {"image": {"bytes": (images / r["file_name"]).read_bytes(), "path": r["file_name"]},
               "caption": r["caption"], "label": r["label"]}

features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string"),
                              "label": datasets.Value("int64")})
ds = datasets.Dataset.from_generator(examples, features=features, cache_dir=str(out / "cache"))
(out / "parquet" / "data").mkdir(parents=True)
for i in range(shards):
    ds.shard(shards, i, contiguous=True).to_parquet(str(out / "parquet" / "data" / f"train-{i:05d}.parquet"))
(out / "wds" / "data").mkdir(parents=True)
with wds.ShardWriter(str(out / "wds" / "data" / "%05d.tar"), maxsize=total // shards + 1, verbose=0) as sink:
    for i, r in enumerate(rows):
        sink.write({"__key__": f"{i:08d}", "jpg": (images / r["file_name"]).read_bytes(),
                    "json": {"caption": r["caption"], "label": r["label"]}})
api = HfApi()
for name in ("parquet", "wds"):
    repo = f"bench/stream-{name}"
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=str(out / name))
"""

READER = r"""
import io, json, sys, time
mode, limit = sys.argv[1], int(sys.argv[2])
import datasets, fsspec, PIL.Image  # imports are not the reader's time: the clock starts after them
started = time.perf_counter()
first = None
count = 0

def seen():
    global first, count
    if first is None:
        first = time.perf_counter() - started
    count += 1

if mode == "per-member":
    import fsspec
    from PIL import Image
    base, names = sys.argv[3], json.loads(sys.argv[4])
    for shard, member in names[:limit]:
        with fsspec.open(f"zip://{member}::{base}{shard}", "rb") as f:
            Image.open(io.BytesIO(f.read())).load()
        seen()
else:
    if mode.startswith("shardkit"):
        import shardkit
        ds = shardkit.stream(sys.argv[3])
    else:
        from datasets import load_dataset
        kwargs = {"revision": "script", "trust_remote_code": True} if mode == "script" else {}
        ds = load_dataset(sys.argv[3], split="train", streaming=True, **kwargs)
    column = "jpg" if mode in ("webdataset", "sk-tar") else "image"
    for row in ds:
        row[column].load()
        seen()
        if count >= limit:
            break
print(json.dumps({"images": count, "seconds": time.perf_counter() - started, "first": first}))
"""


def make_images(root: Path, n: int, seed: int) -> tuple[Path, Path]:
    """Real JPEGs of noise (about 40 KB each, decoding costs what a photo's does) and metadata."""
    from PIL import Image

    images, meta = root / "images", root / "meta.jsonl"
    stamp = root / f"images-{n}-{seed}.done"
    if stamp.exists():
        return images, meta
    shutil.rmtree(root, ignore_errors=True)
    images.mkdir(parents=True)
    rng = random.Random(seed)
    with open(meta, "w") as f:
        for i in range(n):
            size = (rng.randrange(120, 200), rng.randrange(100, 160))
            img = Image.frombytes("RGB", size, rng.randbytes(size[0] * size[1] * 3))
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=85)
            rel = f"{i % 50:02d}/{i:06d}.jpg"
            (images / rel).parent.mkdir(exist_ok=True)
            (images / rel).write_bytes(buf.getvalue())
            f.write(json.dumps({"file_name": rel, "caption": f"noise {i}", "label": i % 10}) + "\n")
    stamp.write_text("ok")
    return images, meta


def run_reader(mode: str, source: str, limit: int, env: dict[str, str], *extra: str) -> dict[str, float]:
    python = DS36_PYTHON if mode == "script" else sys.executable
    result = subprocess.run(
        [python, "-c", READER, mode, str(limit), source, *extra], capture_output=True, text=True, env=env
    )
    if result.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--sample", type=int, default=150, help="images the two per-member readers read")
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=40,
        help="delay before every answer, as a network round trip (0: bare loopback)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench-output" / "stream")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    images, meta = make_images(args.workdir / "corpus", args.images, args.seed)
    shutil.rmtree(args.workdir / "repo", ignore_errors=True)
    repo_dir = args.workdir / "repo" / "stream"  # scaffolded with the template, then packed into
    for cmd in (
        [SCRIPTS / "shardkit", "new", "--no-input", "dataset_name=stream", "namespace=bench", "-o", repo_dir.parent],
        [SCRIPTS / "pack-shards", images, meta, "-o", repo_dir, "-q", "--target-shard-size", "5MB"],
    ):
        subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    for fmt in ("tar", "parquet"):  # the same rows, the same shard sizes, the other two formats
        cmd = [SCRIPTS / "pack-shards", images, meta, "-o", repo_dir.parent / f"stream-{fmt}", "-q"]
        subprocess.run([str(c) for c in [*cmd, "--target-shard-size", "5MB", "--format", fmt]], check=True)
    manifest = json.loads((repo_dir / "shards.json").read_text())
    shards = manifest["totals"]["shards"]
    members = []
    for shard in manifest["shards"]:
        for line in (repo_dir / shard["metadata"]).read_text().splitlines():
            members.append((shard["file"], json.loads(line)["file_name"]))
    random.Random(args.seed).shuffle(members)

    results = {}
    shutil.rmtree(args.workdir / "hub", ignore_errors=True)
    with run_hub_server(args.workdir / "hub", user=REPO.split("/")[0]) as hub:
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        base_env.update(HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1")
        for folder, repo in (
            (repo_dir, REPO),
            *((repo_dir.parent / f"stream-{f}", f"{REPO}-sk-{f}") for f in ("tar", "parquet")),
        ):
            subprocess.run(
                [str(SCRIPTS / "shardkit"), "push", str(folder), "--repo", repo, "-q"],
                check=True,
                env={**base_env, "HF_TOKEN": WRITE_TOKEN, "HF_HOME": str(args.workdir / "home-push")},
            )
        other = args.workdir / "other-layouts"
        shutil.rmtree(other, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-c", OTHER_LAYOUTS, str(images), str(meta), str(other), str(shards)],
            check=True,
            capture_output=True,
            env={**base_env, "HF_TOKEN": WRITE_TOKEN, "HF_HOME": str(args.workdir / "home-push")},
        )
        resolve = f"{hub.url}/datasets/{REPO}/resolve/main/"
        hub.faults.latency = args.rtt_ms / 1000
        runs = [
            ("per-member", resolve, args.sample, json.dumps(members[: args.sample])),
            ("imagefolder", REPO, args.sample, None),
            ("script", REPO, args.images, None),
            ("shardkit", REPO, args.images, None),
            ("parquet", f"{REPO}-parquet", args.images, None),
            ("webdataset", f"{REPO}-wds", args.images, None),
            ("sk-tar", f"{REPO}-sk-tar", args.images, None),
            ("sk-parquet", f"{REPO}-sk-parquet", args.images, None),
            ("shardkit-tar", f"{REPO}-sk-tar", args.images, None),
            ("shardkit-parquet", f"{REPO}-sk-parquet", args.images, None),
        ]
        for mode, source, limit, extra in runs:
            home = args.workdir / f"home-{mode}"
            shutil.rmtree(home, ignore_errors=True)
            hub.log.clear()
            got = run_reader(mode, source, limit, {**base_env, "HF_HOME": str(home)}, *([extra] if extra else []))
            got["requests"] = hub.log.count()
            results[mode] = got

    per_member_rate = results["per-member"]["images"] / results["per-member"]["seconds"]
    label = {
        "per-member": "per-member zip:// URLs",
        "imagefolder": "imagefolder, datasets 5.x",
        "script": "loading script, datasets 3.6",
        "shardkit": "shardkit.stream",
        "parquet": "Parquet (datasets' writer), datasets 5.x",
        "webdataset": "webdataset tars, datasets 5.x",
        "sk-tar": "shardkit --format tar, datasets 5.x",
        "sk-parquet": "shardkit --format parquet, datasets 5.x",
        "shardkit-tar": "shardkit --format tar, shardkit.stream",
        "shardkit-parquet": "shardkit --format parquet, shardkit.stream",
    }
    rows = []
    for mode, got in results.items():
        rate = got["images"] / got["seconds"]
        rows.append(
            {
                "reader": label[mode],
                "images": got["images"],
                "images_per_s": round(rate, 1),
                "x_per_member": round(rate / per_member_rate, 1),
                "requests_per_image": round(got["requests"] / got["images"], 4),
                "first_example_s": round(got["first"], 2),
            }
        )
    if args.json:
        print(json.dumps({"shards": shards, "images": args.images, "results": rows}))
        return
    cores, ram = os.cpu_count(), _ram_gib()
    print(
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {cores} cores, {ram} GiB RAM, Python"
        f" {platform.python_version()}; {args.images} JPEGs in {shards} shards, HTTP on 127.0.0.1 answering after"
        f" {args.rtt_ms:g} ms, every image decoded"
    )
    print("| reader | images | images/s | x per-member | requests/image | first example |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['reader']} | {r['images']} | {r['images_per_s']:,} | {r['x_per_member']} |"
            f" {r['requests_per_image']} | {r['first_example_s']} s |"
        )


def _ram_gib() -> int:
    import psutil

    return round(psutil.virtual_memory().total / 2**30)


if __name__ == "__main__":
    main()
