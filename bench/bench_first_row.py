"""What the first row of ``shardkit.stream`` costs in a fresh process, with and without the imports.

    python bench/bench_first_row.py [--rows 400] [--rounds 5] [--workdir /tmp/bench-first-row]

Packs ``--rows`` JPEGs of about 100 KB (bench_training_stream's corpus) as ZIP shards, serves them on
127.0.0.1 (tests/http_server.py), then starts a new Python process per reading and prints, per case, the
median over ``--rounds`` of:

* ``start``      - from the parent's spawn to the child's first line of code (the interpreter's own start);
* ``imported``   - what the case imports before it calls ``shardkit.stream`` (``import shardkit`` only,
  or datasets too, or datasets and torch too, as a training script has by then);
* ``first row``  - from the ``shardkit.stream(url)`` call to its first row (what the call still imports:
  datasets, and torch inside ``IterableDataset.__init__`` when torch is installed);
* ``total``      - spawn to first row.

The cases differ only by what was imported before the call: compare them within one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.bench_training_stream import SCRIPTS, make_corpus  # noqa: E402
from tests.http_server import serve_directory  # noqa: E402

CASES = {
    "nothing imported": [],
    "datasets imported": ["datasets"],
    "datasets and torch imported": ["datasets", "torch"],
}

CHILD = """
import time
began = time.perf_counter()
import importlib, importlib.util, json, sys
spec = json.loads(sys.argv[1])
import shardkit
for name in spec["imports"]:
    if importlib.util.find_spec(name) is not None:
        importlib.import_module(name)
imported = time.perf_counter()
ds = shardkit.stream(spec["url"]).decode(False)
row = next(iter(ds))
first = time.perf_counter()
assert row["image"]["bytes"], "a row without its image"
now = time.time()
print(json.dumps({"began": began, "imported": imported - began, "first": first - imported, "wall_at_first": now}))
"""


def one_reading(url: str, imports: list[str]) -> dict[str, float]:
    spawned = time.time()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps({"url": url, "imports": imports})],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode:
        raise SystemExit(f"the reading failed:\n{result.stderr[-3000:]}")
    got = json.loads(result.stdout.strip().splitlines()[-1])
    total = got["wall_at_first"] - spawned
    return {
        "start": total - got["imported"] - got["first"],
        "imported": got["imported"],
        "first": got["first"],
        "total": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-first-row"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    images, meta = make_corpus(args.workdir / "corpus", args.rows, seed=0)
    out = args.workdir / "packed"
    if not (out / "shards.json").exists():
        cmd = [str(SCRIPTS / "pack-shards"), str(images), str(meta), "-o", str(out), "-q"]
        subprocess.run(cmd, check=True)
    torch = importlib.util.find_spec("torch") is not None
    python = platform.python_version()
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.machine()}, Python {python}, torch installed: {torch}")
    print(f"{'case':<30} {'start s':>8} {'imported s':>11} {'first row s':>12} {'total s':>8}")
    with serve_directory(out) as (base, _log):
        results: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
        for _ in range(args.rounds):  # the cases alternate, so a busy moment hits them alike
            for case, imports in CASES.items():
                results[case].append(one_reading(base, imports))
    for case, runs in results.items():
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{case:<30} {median['start']:>8.2f} {median['imported']:>11.2f} {median['first']:>12.2f}"
            f" {median['total']:>8.2f}"
        )


if __name__ == "__main__":
    main()
