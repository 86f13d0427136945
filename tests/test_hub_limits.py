"""The repo a pack plans, against the Hub's limits for one repository (issue 36): a plan over
one is refused before anything is written, in one line with the option and a value that fit;
--dry-run shows the repo's files, its fullest folder and the commits a push needs."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from shardkit.cli import ByteSize
from shardkit.hubplan import limit_problem, nested, repo_plan
from shardkit.plan import PlanEntry, plan_shards
from tests.support.corpus import EXAMPLE_DIR

BIN = Path(sys.executable).parent


def pack(images: Path, meta: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "pack-shards"), str(images), str(meta), "-o", str(out), "-j", "1", *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_plan_whose_keys_crowd_one_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """10,001 one-row shards nest in folders by their names' first hex digits, but keys counted
    up from 0 (not spread as hashes are) put them all in one: refused in one line naming the
    folder, the count, the limit and a --target-shard-size that fits; exit 2; no OUT_DIR left
    (the value's fit: the test below)."""
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
        "error: data/00000000/ would hold 10,001 shards (the keys given crowd there); the Hub allows fewer than"
        " 10,000 entries in a folder; --target-shard-size "
    ), refused.stderr
    assert not out.exists()
    assert refused.stderr.rstrip().endswith("or more (now 1) makes fewer")


def _spread(i: int) -> str:
    return f"{i * 0x9E3779B1 % 2**32:08x}{i:024x}"


@pytest.mark.parametrize(
    ("rows", "key", "cost", "max_shard"),
    [
        (10_001, lambda i: f"{i:032x}", 120, 20_000),  # crowded in one folder: at most 10,000 shards
        (100_000, _spread, 1_000, 2_500),  # over the repo's 100,000 files (shards, 256 metadata files)
        (200_000, _spread, 100, 300),  # the same, with a larger cap
        (120_000, _spread, 40_000, 10**9),
    ],
)
def test_the_target_a_refusal_gives_plans_a_layout_within_the_limits(
    rows: int, key: Callable[[int], str], cost: int, max_shard: int
) -> None:
    """The planner, given the --target-shard-size the refusal names (and --max-shard-size, when it
    says so), cuts the split into few enough shards."""
    entries = sorted((PlanEntry(key(i), cost) for i in range(rows)), key=lambda e: e.key)
    before = nested(plan_shards(entries, max_shard_bytes=max_shard, target_shard_bytes=1))
    problem = limit_problem(repo_plan(before), target_bytes=1, max_shard_bytes=max_shard, prefix_length=0)
    assert problem is not None and problem.startswith(
        "data/0000" if rows == 10_001 else f"the repo would hold up to {rows + 256 + 7:,} files"
    )
    fix = ByteSize().convert(problem.split("--target-shard-size ")[1].split()[0], None, None)  # as the CLI reads it
    cap = max(max_shard, fix)
    assert ("--max-shard-size at least as large" in problem) == (fix > max_shard)
    after = nested(plan_shards(entries, max_shard_bytes=cap, target_shard_bytes=fix))
    assert limit_problem(repo_plan(after), target_bytes=fix, max_shard_bytes=cap, prefix_length=0) is None


def test_more_shards_than_a_folder_holds_are_nested_by_their_names_first_hex_digits() -> None:
    """Up to 9,999 shards stay in the split's folder (the Hub takes fewer than 10,000 entries in
    one); from 10,000 each goes in a folder named by the first two hex digits of its name (a
    shorter name's padded with 0s), in the names' order."""
    entries = sorted((PlanEntry(_spread(i), 100) for i in range(10_000)), key=lambda e: e.key)
    flat = plan_shards(entries[:9_999], max_shard_bytes=10**6, target_shard_bytes=1, folder="data/train")
    assert nested(flat) == flat
    shards = plan_shards(entries, max_shard_bytes=10**6, target_shard_bytes=1, folder="data/train")
    placed = nested(shards)
    assert [s.name.rsplit("/", 1)[1] for s in placed] == [s.name.rsplit("/", 1)[1] for s in shards]
    folders = [s.name.split("/")[2] for s in placed]
    stems = [s.name.rsplit("/", 1)[1].removesuffix(".zip") for s in placed]
    assert all(f == stem.ljust(2, "0")[:2] for f, stem in zip(folders, stems, strict=True))
    assert folders == sorted(folders) and len(set(folders)) == 256
    assert placed[0].name == "data/train/00/0.zip"
    repo = repo_plan(placed)
    assert (repo.fullest_folder, repo.fullest_entries) == ("data/train/", 256)  # its folders
    assert max(folders.count(f) for f in set(folders)) < 100
    assert [(s.folder, s.nested) for s in repo.splits] == [("data/train/", True)]


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
        "splits": [
            {
                "name": "train",
                "shards": shards,
                "bytes": summary["bytes"],
                "folder": "data/",
                "nested": False,
                "files": 2 * shards,
                "fullest_folder": "data/",
                "fullest_entries": shards,
            }
        ],
    }
    text = pack(images, meta, out, "--dry-run", "--target-shard-size", "100KB")
    assert text.returncode == 0, text.stderr
    commits = math.ceil(files / 100)
    line = f"Hub: {files} files at most (limit 100,000); fullest folder data/: {shards} entries (limit 10,000);"
    assert f"{line} {commits} commit{'s' if commits > 1 else ''} of up to 100 files to push\n" in text.stdout
