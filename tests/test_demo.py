"""The README's first command, `bash scripts/demo.sh`, runs end to end (scaffold, pack, push, stream back)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.corpus import REPO_ROOT
from tests.support.readme_blocks import fenced_blocks, output_of, output_problem

pytestmark = pytest.mark.slow  # every test here takes over about 3 s

#: README's picture of the demo's output shows the clone as this folder.
SHOWN_ROOT = "/path/to/shardkit/"


def test_demo_scaffolds_packs_pushes_and_streams_every_row_back(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    # The venv running this test, as it is: the demo must not re-install shardkit into it.
    env.update(
        SHARDKIT_DEMO_DIR=str(tmp_path / "demo-output"),
        SHARDKIT_VENV=str(Path(sys.executable).parent.parent),
        SHARDKIT_VENV_READY="1",
    )
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
    # README shows this output: the same lines, up to times, ports and ids.
    blocks = fenced_blocks("README.md")
    shown = output_of(blocks, next(b for b in blocks if b.first_line.startswith("bash scripts/demo.sh")))
    assert shown is not None
    problem = output_problem(shown.text.replace(SHOWN_ROOT, ""), out.replace(f"{tmp_path}/", ""))
    assert problem is None, f"{shown.where} shows the demo's output, but: {problem}"
    # Run again: both steps resume, nothing is written or sent twice.
    again = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to do: 18 shards (300 rows, 1.7 MB) are up to date" in again.stdout
    assert "is up to date (44 files already there)" in again.stdout
    assert "read 300 rows from 18 shards" in again.stdout
