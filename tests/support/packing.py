"""Packing in tests: a PackConfig for a :class:`~tests.support.corpus.Corpus`, the shipped
example packed with the `pack-shards` command as a user runs it, and an environment for S3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shardkit import PackConfig
from tests.support.cli import run_cli
from tests.support.corpus import EXAMPLE_DIR, Corpus, tree_bytes


def config_for(corpus: Corpus, out: Path, **options: Any) -> PackConfig:
    """The PackConfig that packs ``corpus`` into ``out``, with ``options`` (PackConfig's fields)."""
    return PackConfig(images_dir=str(corpus.images), metadata_path=str(corpus.meta), out_dir=str(out), **options)


def example_args(out_dir: Path | str, *options: str) -> list[str]:
    """`pack-shards`' arguments for the shipped example dataset into ``out_dir``, with ``options``.

    With ``--prefix-length 1`` unless the options choose the layout: the tests that use it were
    written for the example in 16 shards named by key prefix (``data/3.zip``); by default the
    1.6 MB example is one shard (a split smaller than the target), whose layout
    tests/test_default_zip_loads.py, test_plan.py and test_pack.py's by-size tests cover."""
    layout = () if {"--prefix-length", "--target-shard-size"} & set(options) else ("--prefix-length", "1")
    return [str(EXAMPLE_DIR / "images"), str(EXAMPLE_DIR / "metadata.jsonl"), "-o", str(out_dir), *layout, *options]


def pack_example(
    out_dir: Path | str, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `pack-shards` on the shipped example dataset into ``out_dir`` (:func:`example_args`),
    as a user would: in a process of its own."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "pack-shards"), *example_args(out_dir, *options)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )


def pack_example_here(out_dir: Path | str, *options: str) -> subprocess.CompletedProcess[str]:
    """:func:`pack_example` in this process (tests/support/cli.py), for the tests that pack and
    refuse the example many times over and look only at the exit code, the output and the files."""
    return run_cli("pack-shards", *example_args(out_dir, *options))


def packed_example_bytes(tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, bytes]:
    """The example packed locally into a folder called ``name`` (the card's title), as tree_bytes."""
    out = tmp_path_factory.mktemp("local") / name
    result = pack_example(out, "-q")
    assert result.returncode == 0, result.stderr
    return tree_bytes(out)


def s3_env(endpoint: str) -> dict[str, str]:
    """This environment with only test credentials and ``endpoint`` for S3 (nothing of the user's)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
        "NO_PROXY": "127.0.0.1",
    }
