"""Rows/s of shardkit.stream over HTTP with 1% of responses broken mid-body, as a ratio to a clean read.

    python bench/bench_stream_faults.py [--rows 2000] [--shards 100] [--broken 1] [--rounds 3]
        [--workdir /tmp/bench34] [--compare-src /work/main/src]

Builds ``--rows`` seeded JPEGs of about 100 KB (bench_training_stream.py's corpus), packs them as ZIP
shards (about ``--shards`` of them: one GET per shard, so that 1% of responses is about one per read),
serves them on 127.0.0.1 (tests/http_server.py) behind the fault proxy (tests/fault_proxy.py), and reads
the whole split with ``shardkit.stream(url).decode(False)``, each reading in its own process (the clock
starts at the dataset's creation, after the imports):

* clean  - the proxy passes everything through;
* faults - every ``100 / --broken``-th response to a shard is cut in the middle of its body, at a
  point drawn from a seeded RNG; shardkit waits (``SHARDKIT_RETRY_WAIT``, its default: 0.5 s, doubled
  after each failure in a row, half to all of it at random) and asks again from the next byte;
* clean, ``--compare-src`` - the clean reading with ``PYTHONPATH=DIR`` (another checkout's shardkit,
  e.g. before the retries), to show that a clean read costs the same.

The readings alternate, ``--rounds`` times. Every reading is checked against the first clean one:
the same rows (key and sha256 of the image bytes) in the same order. Prints each reading's rows/s,
the median of each kind, the faults injected, and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from bench_training_stream import SHARDS, make_corpus, pack_zip  # noqa: E402

from tests.fault_proxy import RANDOM, Fault, run_fault_proxy  # noqa: E402
from tests.http_server import serve_directory  # noqa: E402


def read_once(url: str) -> dict[str, Any]:
    """One reading, in this process: a digest of its rows in order, its seconds and rows."""
    import importlib.util

    import datasets

    import shardkit

    if importlib.util.find_spec("torch") is not None:  # datasets imports it at the dataset's creation
        import torch  # noqa: F401
    datasets.disable_progress_bars()
    started = time.perf_counter()
    digest = hashlib.sha256()
    rows = 0
    for row in shardkit.stream(url).decode(False):
        digest.update(row["key"].encode() + hashlib.sha256(row["image"]["bytes"]).digest())
        rows += 1
    return {"seconds": time.perf_counter() - started, "rows": rows, "digest": digest.hexdigest()}


def run_child(url: str, src: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(REPO_ROOT)])}
    result = subprocess.run(
        [sys.executable, __file__, "--child", url], capture_output=True, text=True, env=env, timeout=1800, check=False
    )
    if result.returncode:
        raise SystemExit(f"a reading failed:\n{result.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    got["retries_logged"] = result.stderr.count("asking again from there")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--broken", type=float, default=1.0, help="percent of shard responses cut mid-body")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench34"))
    parser.add_argument("--compare-src", type=Path, help="another checkout's src/: its clean reading too")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one reading, run in its own process
    args = parser.parse_args()
    if args.child:
        print(json.dumps(read_once(args.child)))
        return

    images, meta = make_corpus(args.workdir / "corpus", args.rows, args.seed)
    total = sum(p.stat().st_size for p in images.rglob("*.jpg"))
    packed = args.workdir / f"zip-{args.rows}-{args.shards}"
    # pack_zip aims at a SHARDS-th of what it is given: given this much, a --shards-th of the corpus.
    shards = pack_zip(images, meta, packed, total * SHARDS // args.shards)
    kinds = ["clean", "faults"] + (["clean, --compare-src"] if args.compare_src else [])
    results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    every = max(round(100 / args.broken), 1)
    injected = []
    with serve_directory(packed) as (base, _), run_fault_proxy(base) as proxy:
        url = proxy.url + "/"
        for _ in range(args.rounds):
            for kind in kinds:
                faults = proxy.set()
                if kind == "faults":
                    faults = proxy.set(Fault("cut_body", path=r"/data/", after=RANDOM, every=every, seed=len(injected)))
                src = args.compare_src if kind.endswith("--compare-src") else REPO_ROOT / "src"
                got = run_child(url, src)
                if kind == "faults":
                    injected.append(faults[0].hits)
                results[kind].append(got)
    reference = results["clean"][0]
    for kind, runs in results.items():
        for got in runs:
            if (got["rows"], got["digest"]) != (reference["rows"], reference["digest"]):
                raise SystemExit(f"{kind}: {got['rows']} rows, not the clean read's {reference['rows']} in its order")

    print(
        f"{args.rows} rows of ~100 KB, {shards} ZIP shards, {total / 1e6:.0f} MB; {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; every {every}th shard response cut"
    )
    medians = {}
    for kind, runs in results.items():
        rates = [got["rows"] / got["seconds"] for got in runs]
        medians[kind] = statistics.median(rates)
        shown = " ".join(f"{rate:7.0f}" for rate in rates)
        print(f"{kind:22} rows/s: {shown}   median {medians[kind]:7.0f}")
    retried = [got["retries_logged"] for got in results["faults"]]
    print(f"faults injected per faulty reading: {injected}; retries logged: {retried}")
    print(f"faults / clean: {medians['faults'] / medians['clean']:.3f}")
    if args.compare_src:
        print(f"clean / clean with {args.compare_src}: {medians['clean'] / medians['clean, --compare-src']:.3f}")
    print("every reading gave the clean read's rows, in its order")


if __name__ == "__main__":
    main()
