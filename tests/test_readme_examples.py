"""The examples of README.md and of every page of docs/ run as written.

Every ```bash and ```python block of README.md and docs/*.md is run verbatim, in order, page by
page, in a scratch folder holding a copy of example_datasets/ (as a clone's root does), with the
venv's commands on PATH and HF_ENDPOINT/HF_TOKEN pointing at a Hub-API server on 127.0.0.1:
each exits 0, prints the lines the test expects of it (:data:`EXPECTED`), and prints what the
output block after it shows (``...`` standing for any lines; times, ports and ids masked). A
``print(...)  # text`` line of a Python block must print ``text``. A block that cannot run here
is listed in :data:`NOT_RUN` with the reason; a stale entry fails the test too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hub_server import run_hub_server
from tests.support.corpus import REPO_ROOT
from tests.support.readback import expected_rows, read_with
from tests.support.readme_blocks import Block, fenced_blocks, output_of, output_problem
from tests.test_push import hub_env

#: README.md and every page of the docs site (a new page's examples are run, or listed below);
#: not docs/incoming-*.md, text waiting to go into README.md (mkdocs.yml leaves them out too).
DOCS = [
    "README.md",
    *sorted(f"docs/{p.name}" for p in REPO_ROOT.glob("docs/*.md") if not p.name.startswith("incoming-")),
]

#: Blocks not run: (document, the heading above the block, how its first line starts, why).
NOT_RUN = [
    ("README.md", "Install", "git clone", "clones and installs: the test runs in the environment they make"),
    (
        "README.md",
        "Two commands",
        "bash scripts/demo.sh",
        "tests/test_demo.py runs the demo and checks README's "
        "picture of its output; CI runs scripts/test.sh, which runs this test",
    ),
    (
        "README.md",
        "Development",
        "bash scripts/test.sh",
        "runs the whole suite, this test included, and starts a server that runs until stopped",
    ),
    ("docs/reference.md", "Scaffold", "shardkit new  ", "asks its questions on a terminal"),
    (
        "docs/reference.md",
        "Write to a bucket",
        "export AWS_PROFILE",
        "needs a bucket and its credentials (tests/test_url_output.py packs to an S3 server on 127.0.0.1)",
    ),
    (
        "docs/reference.md",
        "Push to the Hub",
        "hf auth login",
        "logs in to the real Hub (README's quick start pushes to the test's server)",
    ),
    (
        "docs/reference.md",
        "Update a dataset",
        "pack-shards images/",
        "needs a folder packed before and an edited metadata file (tests/test_update.py)",
    ),
    (
        "docs/reference.md",
        "Preprocess once",
        "shardkit remux namespace/photos",
        "reads a Hub dataset of a placeholder name (tests/test_remux.py)",
    ),
    ("docs/reference.md", "Preprocess once", "# my_transforms.py", "a module for --map, not a script"),
    (
        "docs/reference.md",
        "Preprocess once",
        "from shardkit import RemuxConfig",
        "reads a Hub dataset of a placeholder name (tests/test_remux.py)",
    ),
    (
        "docs/reference.md",
        "Scale out",
        "pip install",
        "installs, and starts a cluster over shared storage (tests/test_cluster.py starts one on 127.0.0.1)",
    ),
    (
        "docs/reference.md",
        "Scale out",
        "from distributed import Client",
        "needs a Dask cluster (tests/test_cluster.py)",
    ),
    (
        "docs/performance.md",
        "Layout 4",
        "export PATH=.venv/bin",
        "the environment of a measurement: two commits' worktrees, named by $WORKTREE",
    ),
    (
        "docs/reference.md",
        "A labelled dataset",
        "import shardkit",
        "reads me/shapes-mini, which the block "
        "above only dry-runs (tests/test_splits_labels.py reads every split with every reader)",
    ),
    ("docs/reference.md", "Reading it back", "import shardkit", "reads a placeholder name (tests/test_streaming.py)"),
    (
        "docs/reference.md",
        "Training",
        "ds = shardkit.stream(",
        "a fragment: rank, world_size and epoch come from the training loop (tests/test_training_stream.py)",
    ),
    (
        "docs/reference.md",
        "Training",
        "from datasets import load_dataset",
        "reads a placeholder name (tests/test_compat.py)",
    ),
]

#: Lines a run block must print (on stdout): (document, how the block's first line starts, lines).
EXPECTED = [
    (
        "README.md",
        "shardkit new --no-input dataset_name=my-photos",
        [
            "plan: 300 rows -> 1 shard",
            "dry run: nothing written",
            "packed 300 rows into 1 shard",
            "verified 1 shard, 300 rows, 1.6 MB, 300 files decoded in",
            "my-photos: zip shards, split train: 2 of 300 rows shown (1 shard, 1.6 MB)",
            "/datasets/me/my-photos in 2 commits",
        ],
    ),
    (
        "docs/reference.md",
        "shardkit new --no-input dataset_name=shapes-mini",
        [
            "label                    ClassLabel: 0=circle, 1=square, 2=triangle",
            "plan: 150 rows -> 3 shards",
        ],
    ),
]

#: The cwd of the runs stands for a user's folder; README's output shows it as this one.
SHOWN_CWD = "/home/me"

PRINT_COMMENT = re.compile(r"^print\(.*\)\s+# (.*)$")


def listed(block: Block, doc: str, heading: str, first_line: str) -> bool:
    return block.doc == doc and block.heading.startswith(heading) and block.first_line.startswith(first_line)


def runnable(doc: str) -> list[Block]:
    return [
        b
        for b in fenced_blocks(doc)
        if b.lang in ("bash", "python") and not any(listed(b, *entry[:3]) for entry in NOT_RUN)
    ]


def expected_lines(block: Block) -> list[str]:
    return [line for doc, first, lines in EXPECTED if listed(block, doc, "", first) for line in lines]


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> str:
    """Run ``block`` as written; its stdout."""
    if block.lang == "bash":
        args = ["bash", "-euo", "pipefail", "-c", block.text]
    else:
        args = [sys.executable, "-c", block.text]
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{block.where} exits {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, f"{block.where}:\n{result.stderr}"
    return result.stdout.replace(str(cwd), SHOWN_CWD)


def test_every_block_is_run_or_listed_with_its_reason() -> None:
    blocks = [b for doc in DOCS for b in fenced_blocks(doc) if b.lang in ("bash", "python")]
    for doc, heading, first_line, reason in NOT_RUN:  # each names one block, and says why
        assert reason and len([b for b in blocks if listed(b, doc, heading, first_line)]) == 1, (doc, first_line)
    for doc, first_line, _ in EXPECTED:
        assert len([b for b in blocks if listed(b, doc, "", first_line)]) == 1, (doc, first_line)
    assert {"bash", "python"} <= {b.lang for b in runnable("README.md")}  # the quick start and its read-back run


@pytest.mark.slow
@pytest.mark.parametrize("doc", [doc for doc in DOCS if runnable(doc)])  # pages with no example start no server
def test_examples_run_as_written(doc: str, tmp_path: Path) -> None:
    cwd = tmp_path / "me"
    shutil.copytree(REPO_ROOT / "example_datasets", cwd / "example_datasets")
    blocks = fenced_blocks(doc)
    with run_hub_server(tmp_path / "hub", user="me") as hub:
        env = hub_env(hub.url, tmp_path / "hf-home")
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        for block in runnable(doc):
            printed = run_block(block, cwd, env)
            for line in expected_lines(block):
                assert line in printed, f"{block.where}: no {line!r} in:\n{printed}"
            shown = output_of(blocks, block)
            if shown is not None:
                problem = output_problem(shown.text, printed)
                assert problem is None, f"{shown.where} shows what {block.where} prints, but: {problem}"
            commented = [m.group(1) for m in map(PRINT_COMMENT.match, block.text.splitlines()) if m]
            assert printed.splitlines() == commented or block.lang == "bash", f"{block.where} printed:\n{printed}"
        if doc == "README.md":  # what the quick start pushed is the example, every row and byte
            # decode_num_threads=0: datasets 5 decodes hf:// media in threads unless told not to
            pushed = read_with(sys.executable, "me/my-photos", True, tmp_path / "cache", env=env, decode_num_threads=0)
            assert pushed["rows"] == expected_rows()


def test_an_output_block_is_held_to_every_line_it_shows() -> None:
    shown = "packed 300 rows into 18 shards (1.7 MB) in 0.7 s, 2 MB/s (plan 0.4 s)\n...\npushed to https://huggingface.co/datasets/me/x"
    printed = "packed 12 rows into 3 shards (1.2 MB) in 9.1 s, 5 MB/s (check 0.1 s, plan 1.0 s)\nA\nB\npushed to http://127.0.0.1:4123/datasets/me/x"
    assert output_problem(shown, printed) is None  # numbers, phases and the host vary; "..." is any lines
    reworded = printed.replace("packed 12 rows into", "wrote 12 rows to")
    assert "expected 'packed <n> rows into" in str(output_problem(shown, reworded))
    assert "no line like 'pushed to <host>/datasets/me/x'" in str(
        output_problem(shown, printed.replace("me/x", "me/y"))
    )
    assert "1 lines more than shown, from 'C'" in str(output_problem(shown, printed + "\nC"))
    assert output_problem(shown + "\n...", printed + "\nC") is None
    assert "line 1 is None" in str(output_problem(shown, ""))
