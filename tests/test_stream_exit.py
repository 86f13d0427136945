"""Leaving ``shardkit.stream`` early prints nothing at exit (issue 34).

A script that takes a few rows and ends (``next(iter(ds))``, a ``break``) leaves its reads
suspended with their streams open. Python closed those at interpreter shutdown, after logging and
httpx were torn down, and printed an "Exception ignored in: <generator object ...>" traceback per
open piece. Each test runs a script in a process of its own that leaves streams open in every way
a training script does (the first row; a shuffled stream with several pieces open, in the middle;
decoded on 2 threads, held or dropped as a ``break`` drops it; after ``map``; through a torch
DataLoader without workers), from a folder,
a URL and the Hub, for ZIP, tar and Parquet; its stderr must be empty, its exit code 0, and the
rows it read before leaving exactly those a read in this process gives (bytes, values, types).

Run as a script (``python -m tests.test_stream_exit SOURCE...``) it is that process: it prints the
rows it read of each source as JSON and ends with every stream still open (one process reads the
three formats' sources: a process of its own each was three times torch's import).
"""

from __future__ import annotations

import gc
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: How a script leaves a stream: (stream options, what it does to the dataset, rows it reads).
LEAVINGS: dict[str, tuple[dict[str, Any], str, int]] = {
    "after the first row": ({}, "iterate", 1),
    "shuffled, several pieces open, in the middle": ({"shuffle_seed": 5, "shuffle_shards": 4}, "iterate", 40),
    "decoded on 2 threads, in the middle": ({"shuffle_seed": 5, "decode_threads": 2}, "iterate", 70),
    "after map": ({"shuffle_seed": 5}, "map", 30),
    "through a DataLoader without workers": ({"shuffle_seed": 5}, "dataloader", 9),
    "decoded on 2 threads, left by a break": ({"shuffle_seed": 5, "decode_threads": 2}, "break", 70),
}


def row_digest(row: dict[str, Any]) -> list[Any]:
    """A row as [key, sha256 of the file's bytes (a decoded image: of its pixels), the other
    fields as JSON, their types]."""
    row = dict(row)
    image = row.pop("image")
    data = image["bytes"] if isinstance(image, dict) else image.tobytes()
    types = {k: type(v).__name__ for k, v in sorted(row.items())}
    return [row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True), types]


def _tagged(row: dict[str, Any]) -> dict[str, Any]:
    return {"tag": row["key"][:3]}


def without_tag(row: list[Any]) -> list[Any]:
    """A row :func:`_tagged` added its field to, as it was before (the tag checked)."""
    fields = json.loads(row[2])
    assert fields.pop("tag") == row[0][:3]
    return [row[0], row[1], json.dumps(fields, sort_keys=True), {k: v for k, v in row[3].items() if k != "tag"}]


def opened(source: str, leaving: str) -> Iterator[dict[str, Any]]:
    """The rows of ``source`` as a script that leaves it ``leaving`` reads them."""
    import shardkit

    options, how, _ = LEAVINGS[leaving]
    ds = shardkit.stream(source, **options)
    if how == "map":
        ds = ds.map(_tagged)
    if how == "dataloader":
        from torch.utils.data import DataLoader

        return iter(DataLoader(ds, batch_size=None, num_workers=0))
    return iter(ds)


def first_rows(rows: Iterator[dict[str, Any]], leaving: str) -> list[list[Any]]:
    return [row_digest(next(rows)) for _ in range(LEAVINGS[leaving][2])]


def leave_streams_open(sources: list[str]) -> None:
    """Read the first rows of each of ``sources`` in every way of :data:`LEAVINGS`, print them
    (by source), and end with all of them open (held, as a script's globals hold them, until the
    interpreter exits; or dropped mid-read, as a loop left by a ``break`` inside a function drops
    its iterator)."""
    held = []
    read: dict[str, dict[str, list[list[Any]]]] = {}
    for source in sources:
        read[source] = {}
        for leaving in LEAVINGS:
            rows = opened(source, leaving)
            read[source][leaving] = first_rows(rows, leaving)
            if LEAVINGS[leaving][1] != "break":
                held.append(rows)  # else dropped here, as a loop left by a break drops its iterator
    gc.collect()  # what a dropped iteration leaves is freed now, mid-run, not only at exit
    globals()["held"] = held
    print(json.dumps(read))


def leave_in_a_process(sources: list[str], env: dict[str, str] | None) -> tuple[dict[str, Any], str]:
    """:func:`leave_streams_open` in a process of its own (one for every source: each is a
    Python start and torch's import); what it read, by source, and its stderr."""
    from tests.support.corpus import REPO_ROOT

    result = subprocess.run(
        [sys.executable, "-m", "tests.test_stream_exit", *sources],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@pytest.fixture(scope="module")
def folders(packed_template: Path, packed_example_tar_parquet: dict[str, Path]) -> dict[str, Path]:
    return {"zip": packed_template, **packed_example_tar_parquet}


@pytest.fixture(scope="module")
def expected(folders: dict[str, Path]) -> dict[str, dict[str, list[list[Any]]]]:
    """Per format, the rows each leaving reads, read in this process from the folder (the order is
    a function of the manifest: the same from a URL or the Hub); each row checked against the
    input: its file's bytes (or pixels), its values and their types."""
    from PIL import Image

    from tests.support.corpus import EXAMPLE_DIR

    inputs = {}
    for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        path = EXAMPLE_DIR / "images" / row.pop("file_name")
        with Image.open(path) as image:
            pixels = hashlib.sha256(image.tobytes()).hexdigest()
        row_bytes = row_digest({**row, "image": {"bytes": path.read_bytes()}})
        inputs[row["key"]] = (row_bytes, [row_bytes[0], pixels, *row_bytes[2:]])
    out: dict[str, dict[str, list[list[Any]]]] = {}
    for fmt, folder in folders.items():
        out[fmt] = {}
        for leaving, (_, how, count) in LEAVINGS.items():
            rows = opened(str(folder), leaving)
            got = first_rows(rows, leaving)
            close = getattr(rows, "close", None)
            if close is not None:
                close()
            assert len({row[0] for row in got}) == count
            for row in got:
                if how == "map":
                    row = without_tag(row)
                assert row in inputs[row[0]], (fmt, leaving, row[0])
            out[fmt][leaving] = got
    return out


def _served(kind: str, folders: dict[str, Path], tmp_path: Path) -> Any:
    from tests.test_training_stream import served

    return served(folders, kind, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folder", "url", "hub"])
def test_a_script_that_leaves_streams_early_exits_quietly(
    folders: dict[str, Path], expected: dict[str, dict[str, list[list[Any]]]], kind: str, tmp_path: Path
) -> None:
    with _served(kind, folders, tmp_path) as (sources, env):
        got, stderr = leave_in_a_process(list(sources.values()), env)
    assert stderr == "", f"{kind}: {stderr[-3000:]}"
    for fmt, source in sources.items():
        assert got[source] == expected[fmt], f"{kind} {fmt}"


if __name__ == "__main__":
    leave_streams_open(sys.argv[1:])
