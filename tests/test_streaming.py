"""``shardkit.stream``: one shard per ZIP, one request per shard, from a folder, a URL or the Hub."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import pytest
from datasets.distributed import split_dataset_by_node

import shardkit
from shardkit.formats.base import ShardRecord
from shardkit.formats.zip import ZIP, ZipFormatError, ZipWriter
from tests.http_server import serve_directory
from tests.support.readback import expected_rows


def digest_rows(ds: Any) -> list[list[str]]:
    """Rows as tests/support/readback.py reports them: key, sha256 of the file bytes, the other fields."""
    rows = []
    for row in ds.cast_column("image", datasets.Image(decode=False)):
        data = row.pop("image")["bytes"]
        rows.append([row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True)])
    return sorted(rows)


def test_folder_every_row_and_byte_one_shard_per_zip(packed_template: Path) -> None:
    ds = shardkit.stream(str(packed_template))
    assert isinstance(ds, datasets.IterableDataset)
    assert ds.n_shards == 16
    assert digest_rows(ds) == expected_rows()
    first = next(iter(ds))
    assert first["image"].size[0] > 0  # decoded lazily, as a PIL image, when a row is read
    assert isinstance(first["latitude"], float | None)


def test_http_one_plain_get_per_shard(packed_template: Path) -> None:
    with serve_directory(packed_template) as (base, log):
        ds = shardkit.stream(base)
        rows = digest_rows(ds)
        requests = list(log.entries)
    assert rows == expected_rows()
    zips = [r for r in requests if r[1].endswith(".zip")]
    assert len(zips) == 16 and all(method == "GET" and rng is None for method, _, rng in zips)
    assert len(requests) == 17  # + shards.json: 17 requests for 300 images


def test_shuffle_reorders_shards_and_rows_and_set_epoch_reshuffles(packed_template: Path) -> None:
    ds = shardkit.stream(str(packed_template)).select_columns(["key"])
    plain = [r["key"] for r in ds]
    shuffled = ds.shuffle(seed=7, buffer_size=50)
    once = [r["key"] for r in shuffled]
    shuffled.set_epoch(1)
    again = [r["key"] for r in shuffled]
    assert sorted(once) == sorted(again) == sorted(plain)
    assert once != plain and again != once


def test_split_by_node_gives_each_rank_whole_shards(packed_template: Path) -> None:
    ds = shardkit.stream(str(packed_template)).select_columns(["key"])
    parts = [split_dataset_by_node(ds, rank=r, world_size=2) for r in (0, 1)]
    assert [p.n_shards for p in parts] == [8, 8]
    keys = [[row["key"] for row in p] for p in parts]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(row["key"] for row in ds)


def test_a_damaged_shard_is_an_error_naming_it(packed_template: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(packed_template, repo, ignore=shutil.ignore_patterns("lock"))
    shard = repo / "data" / "5.zip"
    data = bytearray(shard.read_bytes())
    end_record = len(data) - 22  # no ZIP comment: the end record is the last 22 bytes
    (cd_start,) = struct.unpack_from("<I", data, end_record + 16)  # where the central directory starts
    data[cd_start - 100] ^= 0xFF  # inside the last member's bytes
    shard.write_bytes(bytes(data))
    with pytest.raises(ZipFormatError, match=r"data/5.zip: CRC mismatch in member 'images/"):
        for _ in shardkit.stream(str(repo)):
            pass


def _zip_shard(path: Path, rows: list[dict[str, Any]], members: list[str], tail: str = "") -> None:
    """A shard as shardkit writes it: metadata.jsonl (the rows, then ``tail``), then a member per
    name in ``members``."""
    metadata = "".join(json.dumps(row) + "\n" for row in rows) + tail
    with open(path, "wb") as f:
        zw = ZipWriter(f)
        zw.add("metadata.jsonl", metadata.encode())
        for name in members:
            zw.add(name, name.encode() * 3)
        zw.close()


def _format_rows(path: Path) -> Iterator[dict[str, Any]]:
    """A hand-made shard's rows as the ZIP format reads them (no manifest: shardkit's readers,
    iter_shard, also hold each row to one)."""
    with open(path, "rb") as f:
        yield from ZIP.read_rows(f, ShardRecord(str(path), "image"))


def _rows_of(tmp_path: Path, shard: str) -> list[tuple[str, Any]]:
    return [(row["image"]["path"], row["n"]) for row in _format_rows(tmp_path / shard)]


def test_a_shard_whose_rows_are_in_another_order_than_its_members_still_pairs_them_by_name(
    tmp_path: Path,
) -> None:
    names = [f"images/{i}.jpg" for i in range(5)]
    rows = [{"file_name": name, "n": i} for i, name in enumerate(names)]
    _zip_shard(tmp_path / "in-order.zip", rows, names)
    _zip_shard(tmp_path / "swapped.zip", [rows[0], rows[2], rows[1], rows[4], rows[3]], names)
    expected = [(name, i) for i, name in enumerate(names)]
    assert _rows_of(tmp_path, "in-order.zip") == expected
    assert _rows_of(tmp_path, "swapped.zip") == expected


def test_a_member_without_its_row_or_a_row_without_its_member_is_an_error(tmp_path: Path) -> None:
    names = [f"images/{i}.jpg" for i in range(3)]
    rows = [{"file_name": name, "n": i} for i, name in enumerate(names)]
    _zip_shard(tmp_path / "extra-member.zip", rows[:2], names)
    _zip_shard(tmp_path / "extra-row.zip", rows, names[:2])
    with pytest.raises(ZipFormatError, match=r"extra-member.zip: .*member 'images/2.jpg' has no row in metadata"):
        _rows_of(tmp_path, "extra-member.zip")
    with pytest.raises(ZipFormatError, match=r"extra-row.zip: .*1 row\(s\) in metadata.jsonl have no member"):
        _rows_of(tmp_path, "extra-row.zip")


def test_a_reader_that_stops_early_parses_only_the_rows_it_reads(tmp_path: Path) -> None:
    """The card's preview reads the first rows of each shard: rows are parsed as their members
    come (a broken last line shows only to a reader that gets there)."""
    names = [f"images/{i}.jpg" for i in range(3)]
    rows = [{"file_name": name, "n": i} for i, name in enumerate(names[:2])]
    _zip_shard(tmp_path / "s.zip", rows, names, tail="{not json\n")
    reader = _format_rows(tmp_path / "s.zip")
    assert next(reader)["n"] == 0
    reader.close()
    with pytest.raises(ZipFormatError, match=r"s\.zip: metadata\.jsonl line 3 is not a JSON object with a file_name"):
        _rows_of(tmp_path, "s.zip")


def test_unknown_source_is_a_usage_error() -> None:
    from shardkit.errors import UsageError

    with pytest.raises(UsageError, match="is not a folder, an http"):
        shardkit.stream("no such folder/or repo/at all")


HUB_READ = r"""
import hashlib, json, sys
import datasets, shardkit
ds = shardkit.stream(sys.argv[1], revision=sys.argv[2] if len(sys.argv) > 2 else None)
rows = []
for row in ds.cast_column("image", datasets.Image(decode=False)):
    data = row.pop("image")["bytes"]
    rows.append([row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True)])
print(json.dumps({"n_shards": ds.n_shards, "rows": sorted(rows)}))
"""


@pytest.mark.slow
def test_from_the_hub_by_id_and_by_hf_url(packed_template: Path, tmp_path: Path) -> None:
    from tests.hub_server import WRITE_TOKEN
    from tests.test_push import hub_env, pushed_copy

    with pushed_copy(packed_template, tmp_path) as (hub, _):
        env = hub_env(hub.url, tmp_path / "reader-home", token=WRITE_TOKEN)
        for args in (["tester/yfcc-mini"], ["hf://datasets/tester/yfcc-mini@script"]):
            result = subprocess.run(
                [sys.executable, "-c", HUB_READ, *args], capture_output=True, text=True, env=env, timeout=300
            )
            assert result.returncode == 0, result.stderr[-3000:]
            got = json.loads(result.stdout)
            assert got["n_shards"] == 16 and got["rows"] == expected_rows()
        shard_gets = [e for e in hub.log.entries if e[1].endswith(".zip")]
    assert len(shard_gets) == 2 * 16  # one request per shard, per read
