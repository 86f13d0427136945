"""A nested layout's manifest (issue 36), on the packed example moved into nested folders.

The packed example's 16 shards (``data/3.zip``...) are moved as a split of 10,000 shards or more
would be (``data/30/3.zip``, the folder's rows in ``metadata/30.jsonl``, each shard's part its
``metadata_range``): verify, ``shardkit.stream``, the datasets 3.6 loading script and remux read
it exactly as the flat one, and every reader refuses in one line a manifest whose parts do not fill
their folders' files, or a shard in a folder that is not its name's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardkit
from shardkit.errors import ManifestError
from shardkit.manifest import parse_manifest
from tests.support.corpus import tree_bytes
from tests.support.readback import DS36_PYTHON, expected_rows, read_with
from tests.test_streaming import digest_rows

SCRIPTS = Path(sys.executable).parent
LOADER = "yfcc_mini_loader.py"
IDENTITY = "tests.remux_functions:identity"


def nested_copy(packed: Path, dest: Path) -> Path:
    """A copy of the packed example with its shards nested, each in its name's folder
    (``data/30/3.zip``), its rows the one part of ``metadata/30.jsonl``."""
    repo = dest / "yfcc-mini"
    shutil.copytree(packed, repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    manifest = json.loads((repo / "shards.json").read_text())
    offsets: dict[str, int] = {}
    parts: dict[str, bytes] = {}
    for shard in manifest["shards"]:
        name = shard["file"].removeprefix("data/")  # "3.zip"
        folder = name.split(".")[0].ljust(2, "0")[:2]
        (repo / "data" / folder).mkdir(exist_ok=True)
        (repo / shard["file"]).rename(repo / "data" / folder / name)
        rows = (repo / shard["metadata"]).read_bytes()
        (repo / shard["metadata"]).unlink()
        metadata = f"metadata/{folder}.jsonl"
        start = offsets.get(metadata, 0)
        parts[metadata] = parts.get(metadata, b"") + rows
        offsets[metadata] = start + len(rows)
        shard.update(file=f"data/{folder}/{name}", metadata=metadata, metadata_range=[start, start + len(rows)])
    for metadata, data in parts.items():
        (repo / metadata).write_bytes(data)
    # (its __shard__ column names the flat paths; a manifest may have no table, as older ones)
    (repo / manifest.pop("metadata_table")).unlink()
    del manifest["metadata_table_sha256"]
    (repo / "shards.json").write_text(json.dumps(manifest, indent=1))
    return repo


def test_a_nested_layout_is_read_as_the_flat_one_by_verify_stream_and_the_36_script(
    packed_template: Path, tmp_path: Path
) -> None:
    repo = nested_copy(packed_template, tmp_path)
    assert sorted(p.name for p in (repo / "metadata").iterdir()) == [f"{d}0.jsonl" for d in "0123456789abcdef"]
    verified = subprocess.run(
        [str(SCRIPTS / "shardkit"), "verify", str(repo), "--deep", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert digest_rows(shardkit.stream(str(repo))) == expected_rows()
    got = read_with(DS36_PYTHON, repo / LOADER, True, tmp_path / "cache")
    assert got["rows"] == expected_rows() and got["n_shards"] == 16
    # remux reads it as the flat one: the same rows in the same order, so the same shards.
    remuxed = {}
    for name, source in (("flat", packed_template), ("nested", repo)):
        remuxed[name] = tmp_path / name / "out"
        remuxed[name].parent.mkdir()
        done = subprocess.run(
            [str(SCRIPTS / "shardkit"), "remux", str(source), str(remuxed[name]), "--map", IDENTITY, "--no-decode"],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert tree_bytes(remuxed["nested"]) == tree_bytes(remuxed["flat"])
    rows = json.loads((remuxed["nested"] / "shards.json").read_text())["totals"]["rows"]
    assert rows == len(expected_rows())


Mutation = Callable[[dict[str, Any]], None]


def _set(index: int, field: str, value: Any) -> Mutation:
    def change(m: dict[str, Any]) -> None:
        m["shards"][index][field] = value

    return change


def _drop(index: int, field: str) -> Mutation:
    return lambda m: m["shards"][index].pop(field)


CASES: dict[str, tuple[Mutation, str]] = {
    "no part": (_drop(3, "metadata_range"), "shard 'data/30/3.zip' has no metadata_range"),
    "part not from 0": (
        _set(3, "metadata_range", [5, 40]),
        "shard 'data/30/3.zip': metadata_range starts at 5, where the part before it in metadata/30.jsonl ends at 0",
    ),
    "part backwards": (_set(3, "metadata_range", [40, 5]), "metadata_range is [40, 5], not [start, end] with end"),
    "part a string": (_set(3, "metadata_range", "0-40"), "metadata_range is '0-40', not [start, end]"),
    "part past any file": (_set(3, "metadata_range", [0, 2**64]), "metadata_range is [0, 18446744073709551616], not"),
    "folder not its name's": (_set(3, "file", "data/31/3.zip"), "shards[3].file is 'data/31/3.zip', not data/"),
    "metadata of its own": (
        _set(3, "metadata", "metadata/30/3.jsonl"),
        "has metadata 'metadata/30/3.jsonl', not 'metadata/30.jsonl'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_nested_manifest_whose_parts_are_wrong_is_refused_in_one_line(
    packed_template: Path, tmp_path: Path, case: str
) -> None:
    repo = nested_copy(packed_template, tmp_path)
    manifest = json.loads((repo / "shards.json").read_text())
    mutate, words = CASES[case]
    mutate(manifest)
    data = json.dumps(manifest).encode()
    with pytest.raises(ManifestError) as raised:
        parse_manifest(data, "shards.json")
    assert str(raised.value).startswith("shards.json: ") and words in str(raised.value), str(raised.value)
    (repo / "shards.json").write_bytes(data)
    script = subprocess.run(
        [DS36_PYTHON, "-c", _SCRIPT_READ, str(repo / LOADER), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    last = script.stderr.strip().splitlines()[-1]
    assert script.returncode != 0 and ("data/30/3.zip" in last or "data/31/3.zip" in last), script.stderr[-2000:]


def test_a_part_that_stops_short_of_its_folders_file_is_reported_by_verify(
    packed_template: Path, tmp_path: Path
) -> None:
    """The parts are contiguous (the manifest checks), but bytes after the last one belong to no shard."""
    repo = nested_copy(packed_template, tmp_path)
    with (repo / "metadata" / "30.jsonl").open("ab") as f:
        f.write(b'{"key": "30000000000000000000000000000000"}\n')
    verified = subprocess.run(
        [str(SCRIPTS / "shardkit"), "verify", str(repo), "-q"], capture_output=True, text=True, timeout=300, check=False
    )
    assert verified.returncode != 0
    assert "metadata/30.jsonl: 44 bytes after the last shard's rows" in verified.stdout + verified.stderr


_SCRIPT_READ = """
import sys, datasets
ds = datasets.load_dataset(sys.argv[1], split="train", streaming=True, cache_dir=sys.argv[2], trust_remote_code=True)
for _ in ds:
    pass
"""
