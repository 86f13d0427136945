"""Rows/s of every reader in the compatibility matrix (issue 18), on a larger copy of its corpus.

    python bench/bench_readers.py [--scale 60] [--image-size 256] [--workdir bench-output/readers]

Builds tests/support/compat_corpus.py's corpus ``--scale`` times over (images of ``--image-size``
pixels, a flat colour with a few random pixels, so small files: the figures are per-row costs
of each reader, not of moving bytes; and 50 ms audio clips), packs it as zip, tar and
parquet, pushes each to the tests' Hub-API server on 127.0.0.1, and reads every cell of
tests/test_compat.py's matrix once with tests/compat_reader.py, in the venv of each datasets
version (.venv-ds36, .venv-ds40, this one). A cell's time is load_dataset (or shardkit.stream)
plus iterating every row without decoding plus hashing each file: what a consumer's first
epoch costs before decoding. Prints one line per cell (rows/s and whether every row, byte, value
and type matched) and a Markdown table for docs/performance.md. Compare within one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.hub_server import run_hub_server  # noqa: E402
from tests.support import compat_corpus  # noqa: E402
from tests.test_compat import CANNOT, DS40_PYTHON, FORMATS, MODALITIES, READER, Packed, _cells  # noqa: E402

DS36_PYTHON = os.environ.get("SHARDKIT_DS36_PYTHON", str(REPO_ROOT / ".venv-ds36" / "bin" / "python"))
SCRIPTS = Path(sys.executable).parent


def _run(*args: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=1800, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(args[:3])}... failed:\n{result.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=int, default=60)
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench-output" / "readers")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    with run_hub_server(args.workdir / "hub") as hub:
        packed = Packed(args.workdir, hub.url)
        for modality in MODALITIES:
            size = (args.image_size, args.image_size)
            files, meta = compat_corpus.build(
                args.workdir / f"in-{modality}", modality, scale=args.scale, image_size=size
            )
            packed.expected[modality] = compat_corpus.expected_rows(files, meta)
            for fmt in FORMATS:
                out = args.workdir / "repos" / f"compat-{modality}-{fmt}"
                if fmt == "zip":
                    _run(
                        str(SCRIPTS / "shardkit"), "new", "--no-input", f"dataset_name={out.name}",
                        "namespace=tester", f"modality={modality}", "-o", str(out.parent),
                    )  # fmt: skip
                _run(str(SCRIPTS / "pack-shards"), str(files), str(meta), "-o", str(out), "--format", fmt, "-q")
                packed.folders[modality, fmt] = out
                packed.shards[modality, fmt] = len(list((out / "data").glob(f"*.{fmt}")))
                _run(
                    str(SCRIPTS / "shardkit"),
                    "push",
                    str(out),
                    "--repo",
                    packed.repo(modality, fmt),
                    "-q",
                    env=packed.env(),
                )
        table: list[tuple[str, str, dict[str, Any]]] = []
        for venv, python in (("3.6", DS36_PYTHON), ("4.0", DS40_PYTHON), ("5.x", sys.executable)):
            cells = [{**cell, "repeat": 1} for cell in _cells(packed, venv)]
            result = subprocess.run(
                [python, str(READER)], input=json.dumps(cells), capture_output=True, text=True, env=packed.env()
            )
            if result.returncode:
                raise SystemExit(result.stderr[-3000:])
            results = json.loads(result.stdout.strip().splitlines()[-1])
            for cell in cells:
                run = results[cell["id"]]["runs"][0]
                modality, fmt, reader = cell["id"].split("/")[:3]
                if "error" in run:
                    cannot = CANNOT.get((venv, modality, fmt, reader))
                    run["verdict"] = f"cannot ({cannot})" if cannot and cannot in run["traceback"] else run["error"]
                else:
                    exact = run["rows"] == packed.expected[modality] and not run["duplicates"]
                    run["verdict"] = "exact" if exact else "DIFFERS"
                    run["rate"] = len(run["rows"]) / run["seconds"]
                table.append((venv, cell["id"], run))
                rate = f"{run['rate']:8.0f} rows/s" if "rate" in run else " " * 15
                print(f"datasets {venv:4} {cell['id']:38} {rate}  shards {run.get('n_shards')}  {run['verdict']}")
    rows = {m: len(packed.expected[m]) for m in MODALITIES}
    print(
        f"\n{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()};"
        f" {rows['image']} images of {args.image_size}x{args.image_size} px, {rows['audio']} audio clips;"
        " Hub-API server on 127.0.0.1\n"
    )
    print("| datasets | cell (modality/format/reader/where/mode) | rows/s | n_shards | result |")
    print("|---|---|---|---|---|")
    for venv, cell_id, run in table:
        rate = f"{run['rate']:,.0f}" if "rate" in run else "-"
        shards = run.get("n_shards") if run.get("n_shards") is not None else "-"
        print(f"| {venv} | {cell_id} | {rate} | {shards} | {run['verdict'][:60]} |")


if __name__ == "__main__":
    main()
