"""End to end: the real console script packs the example data; datasets reads every row back."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from datasets import Image, load_dataset

from tests.support.corpus import EXAMPLE_DIR
from tests.support.packing import pack_example


@pytest.fixture(scope="module")
def packed_example_and_input(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, dict[str, Any]], dict[str, bytes]]:
    """Pack the shipped example with `pack-shards`; return OUT_DIR and the input by key."""
    out = tmp_path_factory.mktemp("e2e") / "yfcc-mini"
    result = pack_example(out, "--json", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    rows = [json.loads(line) for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines()]
    assert summary["rows"] == len(rows) == 300
    by_key = {r["key"]: r for r in rows}
    files = {r["key"]: (EXAMPLE_DIR / "images" / r["file_name"]).read_bytes() for r in rows}
    return out, by_key, files


def _file_bytes(image: dict[str, Any]) -> bytes:
    if image.get("bytes"):
        return bytes(image["bytes"])
    with fsspec.open(image["path"], "rb") as f:
        return f.read()  # type: ignore[no-any-return]


def _check_rows(rows: list[dict[str, Any]], by_key: dict[str, dict[str, Any]], files: dict[str, bytes]) -> None:
    seen = set()
    for row in rows:
        key = row["key"]
        assert key not in seen
        seen.add(key)
        expected = {k: v for k, v in by_key[key].items() if k != "file_name"}
        got = {k: v for k, v in row.items() if k != "image"}
        assert got == expected
        assert _file_bytes(row["image"]) == files[key]
    assert seen == set(by_key)


@pytest.mark.slow
def test_streaming_load_gives_every_row_and_byte(packed_example_and_input: Any) -> None:
    out, by_key, files = packed_example_and_input
    ds = load_dataset(str(out), split="train", streaming=True)
    assert set(ds.features) == {"image", *next(iter(by_key.values())).keys()} - {"file_name"}
    assert ds.features["latitude"].dtype == "float64"  # null in early rows, a number later: declared
    _check_rows(list(ds.cast_column("image", Image(decode=False))), by_key, files)


@pytest.mark.slow
def test_streaming_decodes_images(packed_example_and_input: Any) -> None:
    out, _, _ = packed_example_and_input
    first = next(iter(load_dataset(str(out), split="train", streaming=True)))
    assert first["image"].size[0] > 0 and first["image"].format == "JPEG"


def test_non_streaming_load_gives_every_row_and_byte(packed_example_and_input: Any, tmp_path: Path) -> None:
    out, by_key, files = packed_example_and_input
    ds = load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 300
    _check_rows(list(ds.cast_column("image", Image(decode=False))), by_key, files)


def test_packed_repo_copied_elsewhere_still_loads(packed_example_and_input: Any, tmp_path: Path) -> None:
    out, by_key, _ = packed_example_and_input
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(".shardkit"))
    assert not os.path.exists(copy / ".shardkit")
    ds = load_dataset(str(copy), split="train", streaming=True)
    assert sum(1 for _ in ds) == len(by_key)
