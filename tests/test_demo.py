"""The README's first command, `bash scripts/demo.sh`, runs end to end (scaffold, pack, push, stream back)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_demo_scaffolds_packs_pushes_and_streams_every_row_back(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(SHARDKIT_DEMO_DIR=str(tmp_path / "demo"), SHARDKIT_VENV=str(Path(sys.executable).parent.parent))
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    for step in ("== shardkit new", "== pack-shards", "== shardkit verify", "== shardkit push", "== stream it back"):
        assert step in out
    assert "packed 300 rows into 18 shards" in out
    assert "verified 18 shards, 300 rows, 1.7 MB, 300 files decoded in" in out
    assert "pushed 44 files" in out and "/datasets/demo/yfcc-mini" in out
    assert "load_dataset: read 300 rows from 18 shards" in out
    assert "shardkit.stream: read 300 rows from 18 shards" in out
    # Run again: both steps resume, nothing is written or sent twice.
    again = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to do: 18 shards (300 rows, 1.7 MB) are up to date" in again.stdout
    assert "is up to date (44 files already there)" in again.stdout
    assert "read 300 rows from 18 shards" in again.stdout
