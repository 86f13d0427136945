"""The repo a pack plans, against the Hub's limits for one repository (issue 36): a plan over
one is refused before anything is written, in one line with the option and a value that fit;
--dry-run shows the repo's files, its fullest folder and the commits a push needs."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from shardkit.cli import ByteSize
from shardkit.hubplan import limit_problem, repo_plan
from shardkit.plan import PlanEntry, plan_shards
from tests.support.corpus import EXAMPLE_DIR

BIN = Path(sys.executable).parent


def pack(images: Path, meta: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "pack-shards"), str(images), str(meta), "-o", str(out), "-j", "1", *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_plan_of_more_shards_than_a_folder_may_hold_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """10,001 one-row shards in data/: one line naming the folder, the count, the limit and a
    --target-shard-size that fits; exit 2; no OUT_DIR left (the value's fit: the test below)."""
    png = io.BytesIO()
    Image.new("L", (1, 1)).save(png, "PNG")
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(10_001):
        (images / f"{i}.png").write_bytes(png.getvalue())
        rows.append(json.dumps({"file_name": f"{i}.png", "key": f"{i:032x}"}))
    meta = tmp_path / "meta.jsonl"
    meta.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"

    refused = pack(images, meta, out, "--max-shard-size", "20KB", "--target-shard-size", "1", "-q")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith(
        "error: data/ would hold 10,001 shards, over the 10,000 entries the Hub allows in a folder;"
        " --target-shard-size "
    ), refused.stderr
    assert not out.exists()
    assert refused.stderr.rstrip().endswith("or more (now 1) makes fewer")


@pytest.mark.parametrize(
    ("rows", "cost", "max_shard"), [(10_001, 120, 20_000), (20_000, 1_000, 1_500), (30_000, 40_000, 10**9)]
)
def test_the_target_a_refusal_gives_plans_a_layout_within_the_limits(rows: int, cost: int, max_shard: int) -> None:
    """The planner, given the --target-shard-size the refusal names (and --max-shard-size, when it
    says so), cuts the split into few enough shards."""
    entries = [PlanEntry(f"{i * 0x9E3779B1 % 2**32:08x}{i:024x}", cost) for i in range(rows)]
    entries.sort(key=lambda e: e.key)
    before = plan_shards(entries, max_shard_bytes=max_shard, target_shard_bytes=1)
    problem = limit_problem(repo_plan(before), target_bytes=1, max_shard_bytes=max_shard, prefix_length=0)
    assert problem is not None and problem.startswith(f"data/ would hold {len(before):,} shards")
    fix = ByteSize().convert(problem.split("--target-shard-size ")[1].split()[0], None, None)  # as the CLI reads it
    cap = max(max_shard, fix)
    assert ("--max-shard-size at least as large" in problem) == (fix > max_shard)
    after = plan_shards(entries, max_shard_bytes=cap, target_shard_bytes=fix)
    assert (
        len(after) <= 10_000
        and limit_problem(repo_plan(after), target_bytes=fix, max_shard_bytes=cap, prefix_length=0) is None
    )


def test_a_dry_run_shows_the_repo_against_the_hubs_limits(tmp_path: Path) -> None:
    images, meta = EXAMPLE_DIR / "images", EXAMPLE_DIR / "metadata.jsonl"
    out = tmp_path / "out"
    dry = pack(images, meta, out, "--dry-run", "--json", "--target-shard-size", "100KB")
    assert dry.returncode == 0, dry.stderr
    summary = json.loads(dry.stdout)
    shards = summary["shards"]
    assert shards > 1 and not out.exists()
    files = 2 * shards + 7  # each shard and its metadata file; the card, manifest, table... at most
    assert summary["hub"] == {
        "files": files,
        "max_files": 100_000,
        "fullest_folder": "data/",
        "fullest_folder_entries": shards,
        "max_folder_entries": 10_000,
        "commits": math.ceil(files / 100),
        "files_per_commit": 100,
        "splits": [{"name": "train", "shards": shards, "bytes": summary["bytes"], "folder": "data/"}],
    }
    text = pack(images, meta, out, "--dry-run", "--target-shard-size", "100KB")
    assert text.returncode == 0, text.stderr
    commits = math.ceil(files / 100)
    line = f"Hub: {files} files at most (limit 100,000); fullest folder data/: {shards} shards (limit 10,000);"
    assert f"{line} {commits} commit{'s' if commits > 1 else ''} of up to 100 files to push\n" in text.stdout
