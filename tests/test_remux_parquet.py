"""A Parquet source (what ``push_to_hub`` writes) read by remux with pyarrow (:mod:`shardkit.remuxparquet`):
the rows, values and types datasets gives, from any position; a remux of it stopped part-way
resumes after its last committed batch to the bytes of a run never stopped, on 1 or 2 workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest

from shardkit.remuxparquet import parquet_splits
from tests.support.corpus import REPO_ROOT, tiny_image, tree_bytes

SCRIPTS = Path(sys.executable).parent
LABELS = ["cat", "dog", "fox"]


def _source(folder: Path) -> Path:
    """Two Parquet files of uneven row groups (datasets' features in their schema): images of
    mixed formats, a ClassLabel, a column null throughout the second file, lists of varying length."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=LABELS),
            "n": datasets.Value("int64"),
            "note": datasets.Value("string"),
            "tags": datasets.Sequence(datasets.Value("string")),
        }
    )
    data = folder / "data"
    data.mkdir(parents=True)
    for index, (first, count, groups) in enumerate([(0, 23, 7), (23, 9, 4)]):
        rows = {
            "image": [
                {"bytes": tiny_image(n, fmt="PNG" if n % 3 == 0 else "JPEG"), "path": None}
                for n in range(first, first + count)
            ],
            "label": [n % 3 for n in range(first, first + count)],
            "n": list(range(first, first + count)),
            "note": [None if index == 1 else f"row {n}" for n in range(first, first + count)],
            "tags": [[f"t{k}" for k in range(n % 4)] for n in range(first, first + count)],
        }
        table = datasets.Dataset.from_dict(rows, features=features).data.table
        pq.write_table(table, data / f"train-0000{index}-of-00002.parquet", row_group_size=groups)
    return folder


def _datasets_rows(folder: Path) -> list[dict[str, Any]]:
    ds = datasets.load_dataset(str(folder), split="train", streaming=True)
    return list(ds.cast_column("image", datasets.Image(decode=False)))


def test_rows_values_and_types_are_datasets_own_from_any_position(tmp_path: Path) -> None:
    folder = _source(tmp_path / "src")
    expected = _datasets_rows(folder)
    split = (parquet_splits(str(folder), None, None) or {})["train"]
    assert split.n_shards == 2 and isinstance(split.features["label"], datasets.ClassLabel)
    got = list(split)
    assert got == expected and len(got) == 32
    assert [type(v) for v in got[0].values()] == [type(v) for v in expected[0].values()]
    assert got[30]["note"] is None and got[2]["tags"] == ["t0", "t1"] and isinstance(got[0]["image"]["bytes"], bytes)
    for stop in (0, 5, 7, 22, 23, 24, 31, 32):  # inside a row group, at its edge, at a file's edge, at the end
        split = (parquet_splits(str(folder), None, None) or {})["train"]
        rows = iter(split)
        for _ in range(stop):
            next(rows)
        position = json.loads(json.dumps(split.state_dict()))
        resumed = (parquet_splits(str(folder), None, None) or {})["train"]
        resumed.load_state_dict(position)
        assert list(resumed) == expected[stop:], stop


def _remux(source: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPTS / "shardkit"), "remux", str(source), str(out), "--json", "-q", "--batch-size", "5", *args]
    env = {**(env or os.environ), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


@pytest.mark.slow
def test_a_stopped_remux_of_a_parquet_source_resumes_to_the_bytes_of_one_never_stopped(tmp_path: Path) -> None:
    source = _source(tmp_path / "src")
    identity = ("--map", "tests.remux_functions:fail_on_n", "--no-decode")
    plain = tmp_path / "plain" / "out"
    plain.parent.mkdir()
    first = _remux(source, plain, *identity, "-j", "2")
    assert first.returncode == 0, first.stderr
    out = tmp_path / "out"
    # One worker: every batch before the failing one is committed (with two, which are depends on
    # which finished first); then the run resumes on two.
    stopped = _remux(source, out, *identity, "-j", "1", env={**os.environ, "REMUX_TEST_FAIL_ON_N": "27"})
    assert stopped.returncode == 1 and "stopped at n=27" in stopped.stderr and "rows 25..29" in stopped.stderr
    record = json.loads((out / ".shardkit" / "remux" / "parts" / "train.json").read_text())
    assert record["rows_in"] == 25 and record["position"] == {"file": 1, "row": 2} and not record["finished"]
    record["position"] = {"file": 99, "row": 0}  # a position no file has: read through, with a warning
    (out / ".shardkit" / "remux" / "parts" / "train.json").write_text(json.dumps(record))
    resumed = _remux(source, out, *identity, "-j", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "where an earlier run stopped does not load" in resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["resumed_rows"] == 25 and summary["rows_in"] == summary["rows_out"] == 32
    assert tree_bytes(out) == tree_bytes(plain)
