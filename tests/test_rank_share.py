"""Every rank of ``shardkit.stream(..., rank=r, world_size=w)`` fetches about its share (issue 34):
within 1.2x of the bytes of its rows' files, for ZIP, tar (through the index of row offsets its
manifest holds) and Parquet (row groups of about 1/64 of a shard), on data shaped like a real
export: files of 50-100 KB of random bytes, mixed extensions, shards of uneven row counts."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shardkit
from shardkit.errors import ShardkitError
from shardkit.formats.base import ShardFormatError
from shardkit.location import Location
from shardkit.pack import PackConfig, pack
from shardkit.shardrows import iter_shard
from shardkit.verify import verify
from tests.http_server import RequestLog, serve_directory
from tests.hub_server import run_hub_server
from tests.stream_resume import row_digest
from tests.test_push import hub_env, push
from tests.test_training_stream import requested_bytes

FORMATS = ("zip", "tar", "parquet")
#: Rows per shard: by the key's first hex digit (prefix length 1), uneven.
SHARD_ROWS = {"1": 23, "4": 58, "7": 31, "9": 47, "b": 20, "e": 39}
EXTENSIONS = (".jpg", ".png", ".webp", ".JPG")


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """Input files of 50-100 KB random bytes with mixed extensions, and each row's file size by key."""
    root = tmp_path_factory.mktemp("export")
    images = root / "images"
    images.mkdir()
    rng = random.Random(34)
    sizes: dict[str, int] = {}
    lines = []
    for digit, count in SHARD_ROWS.items():
        for i in range(count):
            key = f"{digit}{rng.getrandbits(124):031x}"
            name = f"{digit}-{i}{rng.choice(EXTENSIONS)}"
            data = rng.randbytes(rng.randrange(50_000, 100_000))
            (images / name).write_bytes(data)
            sizes[key] = len(data)
            lines.append({"file_name": name, "key": key, "caption": f"row {i}", "n": i, "score": i / 7})
    (root / "metadata.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return root, sizes


@pytest.fixture(scope="module")
def packed(export: tuple[Path, dict[str, int]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root, _ = export
    out = {}
    for fmt in FORMATS:
        folder = tmp_path_factory.mktemp(fmt) / "ds"
        config = PackConfig(
            str(root / "images"), str(root / "metadata.jsonl"), str(folder), prefix_length=1, format=fmt, jobs=1
        )
        pack(config)
        out[fmt] = folder
    return out


def expected_rows(folder: Path) -> list[list[Any]]:
    """Every row of the dataset, read whole shard by shard, as digests (bytes, values and types)."""
    location = Location(str(folder), "folder")
    fmt = folder.joinpath("shards.json").read_text()
    manifest = json.loads(fmt)
    name = manifest["format"].split(".")[1].split("/")[0]
    return sorted(
        row_digest(row) for shard in manifest["shards"] for row in iter_shard(location, shard["file"], "image", name)
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_rank_fetches_within_1_2x_of_its_rows_bytes(
    packed: dict[str, Path], export: tuple[Path, dict[str, int]], fmt: str
) -> None:
    root = packed[fmt]
    manifest = json.loads((root / "shards.json").read_text())
    assert sorted(s["rows"] for s in manifest["shards"]) == sorted(SHARD_ROWS.values())
    sizes = export[1]
    expected = expected_rows(root)
    assert len(expected) == sum(SHARD_ROWS.values())
    ratios = {}
    with serve_directory(root) as (base, log):
        for world in (2, 3, 5):
            for seed in (None, 7):
                parts = []
                for rank in range(world):
                    log.clear()
                    ds = shardkit.stream(base, shuffle_seed=seed, rank=rank, world_size=world).decode(False)
                    rows = [row_digest(row) for row in ds]
                    parts.append(rows)
                    own = sum(sizes[row[0]] for row in rows)
                    got = requested_bytes(log, root, f".{fmt}")
                    ratios[(world, seed, rank)] = got / own
                counts = sorted(len(p) for p in parts)
                assert counts[-1] - counts[0] <= 1, counts  # floor or ceil of rows / world
                assert sorted(row for part in parts for row in part) == expected  # disjoint and covering
    worst = max(ratios, key=ratios.__getitem__)
    print(f"{fmt}: fetched/own bytes per rank from {min(ratios.values()):.3f} to {ratios[worst]:.3f}")
    assert ratios[worst] <= 1.2, (worst, ratios[worst])


def ranges_of(log: RequestLog, suffix: str) -> list[str | None]:
    return [byte_range for method, path, byte_range in log.entries if method == "GET" and path.endswith(suffix)]


def test_a_cut_tar_piece_is_one_ranged_read_from_the_index_point(packed: dict[str, Path]) -> None:
    root = packed["tar"]
    manifest = json.loads((root / "shards.json").read_text())
    shard = next(s for s in manifest["shards"] if s["rows"] == 58)
    every, offsets = shard["row_offsets_every"], shard["row_offsets"]
    assert every == 1 and len(offsets) == 58 and offsets[0] == 0  # 58 rows: every row indexed
    whole = [row_digest(r) for r in iter_shard(Location(str(root), "folder"), shard["file"], "image", "tar")]
    with serve_directory(root) as (base, log):
        location = Location(base, "http")
        part = [row_digest(r) for r in iter_shard(location, shard["file"], "image", "tar", start=10, stop=20)]
        assert part == whole[10:20]
        assert ranges_of(log, ".tar") == [f"bytes={offsets[10]}-{offsets[20] - 1}"]  # its rows' bytes, no more
        log.clear()
        tail = [row_digest(r) for r in iter_shard(location, shard["file"], "image", "tar", start=50)]
        assert tail == whole[50:]
        assert ranges_of(log, ".tar") == [f"bytes={offsets[50]}-{shard['bytes'] - 1}"]  # to the end blocks
        log.clear()
        assert [row_digest(r) for r in iter_shard(location, shard["file"], "image", "tar")] == whole
        assert ranges_of(log, ".tar") == [None]  # a whole shard: one plain GET, as before


def test_a_tar_index_with_fewer_points_than_rows_reads_from_the_point_before(tmp_path: Path) -> None:
    """A shard of more than 64 rows is indexed every ceil(rows / 64) rows: a piece starts at the
    point at or before its first row and ends at the point at or after its last."""
    images = tmp_path / "images"
    images.mkdir()
    lines = []
    for i in range(150):
        (images / f"{i}.jpg").write_bytes(bytes([i]) * 700)
        lines.append({"file_name": f"{i}.jpg", "key": f"a{i:07x}"})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    pack(PackConfig(str(images), str(tmp_path / "m.jsonl"), str(out), format="tar", jobs=1))
    shard = json.loads((out / "shards.json").read_text())["shards"][0]
    assert shard["rows"] == 150 and shard["row_offsets_every"] == 3 and len(shard["row_offsets"]) == 50
    offsets = shard["row_offsets"]
    with serve_directory(out) as (base, log):
        rows = list(iter_shard(Location(base, "http"), shard["file"], "image", "tar", start=31, stop=40))
        assert [r["key"] for r in rows] == [f"a{i:07x}" for i in range(31, 40)]
        assert ranges_of(log, ".tar") == [f"bytes={offsets[10]}-{offsets[14] - 1}"]  # rows 30..41


def with_index_off(folder: Path, tmp_path: Path, change: Any) -> tuple[Path, dict[str, Any]]:
    """A copy of a packed tar dataset whose manifest's index of its largest shard is changed."""
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("lock"))
    manifest = json.loads((copy / "shards.json").read_text())
    shard = max(manifest["shards"], key=lambda s: s["rows"])
    change(shard["row_offsets"])
    (copy / "shards.json").write_text(json.dumps(manifest, indent=1))
    return copy, shard


def test_a_wrong_offset_in_the_index_is_an_error_naming_the_shard(packed: dict[str, Path], tmp_path: Path) -> None:
    def off(offsets: list[int]) -> None:
        offsets[10] += 512  # the block after the row's first header

    copy, shard = with_index_off(packed["tar"], tmp_path, off)
    location = Location(str(copy), "folder")
    where = re.escape(str(copy / shard["file"]))
    with pytest.raises(ShardFormatError, match=rf"^{where}: .*offset {shard['row_offsets'][10]}"):
        list(iter_shard(location, shard["file"], "image", "tar", start=10, stop=12))
    assert len(list(iter_shard(location, shard["file"], "image", "tar"))) == shard["rows"]  # a whole read: no index
    report = verify(str(copy))
    assert [p.format() for p in report.problems] == [
        f"{shard['file']}: the manifest's row_offsets put row 10 at byte {shard['row_offsets'][10]};"
        f" it begins at byte {shard['row_offsets'][10] - 512}"
    ]


def test_an_index_that_is_not_one_is_refused_with_the_manifest(packed: dict[str, Path], tmp_path: Path) -> None:
    copy, shard = with_index_off(packed["tar"], tmp_path, lambda offsets: offsets.reverse())
    with pytest.raises(ShardkitError, match=rf"shard '{shard['file']}': row_offsets\[0\] is \d+, not a whole number"):
        shardkit.stream(str(copy))


def test_tar_datasets_packed_before_the_index_are_read_from_the_shard_start(
    packed: dict[str, Path], tmp_path: Path
) -> None:
    """A manifest without row_offsets (shardkit before the index): a cut piece reads its shard
    from the front, as before, with the same rows; an update keeps such a shard without one."""

    def strip(offsets: list[int]) -> None:
        offsets.clear()

    copy = tmp_path / "old"
    shutil.copytree(packed["tar"], copy, ignore=shutil.ignore_patterns("lock"))
    manifest = json.loads((copy / "shards.json").read_text())
    for shard in manifest["shards"]:
        del shard["row_offsets"], shard["row_offsets_every"]
    (copy / "shards.json").write_text(json.dumps(manifest, indent=1))
    shard = max(manifest["shards"], key=lambda s: s["rows"])
    whole = [row_digest(r) for r in iter_shard(Location(str(packed["tar"]), "folder"), shard["file"], "image", "tar")]
    with serve_directory(copy) as (base, log):
        part = [row_digest(r) for r in iter_shard(Location(base, "http"), shard["file"], "image", "tar", start=30)]
        assert part == whole[30:]
        assert ranges_of(log, ".tar") == [None]  # the whole shard, from its start
    assert verify(str(copy)).ok


def asked_bytes(log: RequestLog, sizes: dict[str, int]) -> int:
    """Bytes of the files ``sizes`` names (by the end of their path) the server was asked for."""
    total = 0
    for method, path, byte_range in log.entries:
        size = next((n for name, n in sizes.items() if path.endswith("/" + name)), None)
        if method != "GET" or size is None:
            continue
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range or f"bytes=0-{size - 1}")
        assert match, byte_range
        total += min(int(match.group(2)), size - 1) - int(match.group(1)) + 1
    return total


HUB_READER = """
import json, sys
import shardkit
ds = shardkit.stream("tester/share", rank=1, world_size=3).decode(False)
print(json.dumps([row["key"] for row in ds]))
"""


def test_a_tar_rank_over_the_hub_fetches_about_its_share(
    packed: dict[str, Path], export: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    manifest = json.loads((packed["tar"] / "shards.json").read_text())
    with run_hub_server(tmp_path / "hub") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        push(packed["tar"], env, repo="tester/share")
        hub.log.clear()
        result = subprocess.run(
            [sys.executable, "-c", HUB_READER], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stderr
        asked = asked_bytes(hub.log, {s["file"]: s["bytes"] for s in manifest["shards"]})
    keys = json.loads(result.stdout)
    assert len(keys) in (72, 73)  # 218 rows / 3
    own = sum(export[1][key] for key in keys)
    assert own < asked <= 1.2 * own, (asked, own)


def small_export(folder: Path, keys: list[str]) -> tuple[str, str]:
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, key in enumerate(keys):
        (images / f"{key}.jpg").write_bytes(key.encode() * (50 + i))
        lines.append({"file_name": f"{key}.jpg", "key": key})
    (folder / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(images), str(folder / "m.jsonl")


def test_an_update_keeps_an_unchanged_tar_shards_index_and_indexes_the_rewritten(tmp_path: Path) -> None:
    keys = [f"a{i:07x}" for i in range(80)] + [f"b{i:07x}" for i in range(30)]
    out = tmp_path / "out"
    pack(PackConfig(*small_export(tmp_path / "in", keys), str(out), prefix_length=1, format="tar", jobs=1))
    before = {s["file"]: s for s in json.loads((out / "shards.json").read_text())["shards"]}
    assert before["data/a.tar"]["row_offsets_every"] == 2 and len(before["data/a.tar"]["row_offsets"]) == 40
    summary = pack(
        PackConfig(
            *small_export(tmp_path / "in2", [*keys, "b1000000"]),
            str(out),
            prefix_length=1,
            format="tar",
            jobs=1,
            update=True,
        )
    )
    assert summary.kept_shards == 1
    after = {s["file"]: s for s in json.loads((out / "shards.json").read_text())["shards"]}
    assert after["data/a.tar"] == before["data/a.tar"]  # kept, with its index
    assert after["data/b.tar"]["rows"] == 31 and len(after["data/b.tar"]["row_offsets"]) == 31
    assert verify(str(out)).ok


@pytest.mark.parametrize(
    ("fmt", "change", "words"),
    [
        ("parquet", {"row_offsets_every": 1, "row_offsets": [0]}, "has row_offsets, which shardkit writes for tar"),
        ("tar", {"row_offsets_every": 2}, r"row_offsets is a list of 23, not a list of 12 offsets \(one per 2 rows\)"),
        ("tar", {"row_offsets_every": 0}, "row_offsets_every is 0, not a whole number from 1 to"),
        ("tar", {"row_offsets": None}, r"row_offsets is null, not a list of \d+ offsets"),
    ],
)
def test_a_manifest_index_shardkit_would_not_write_is_refused(
    packed: dict[str, Path], tmp_path: Path, fmt: str, change: dict[str, Any], words: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(packed[fmt], copy, ignore=shutil.ignore_patterns("lock"))
    manifest = json.loads((copy / "shards.json").read_text())
    manifest["shards"][0].update(change)
    (copy / "shards.json").write_text(json.dumps(manifest, indent=1))
    with pytest.raises(ShardkitError, match=rf"shards\.json: shard '{manifest['shards'][0]['file']}'.*{words}"):
        shardkit.stream(str(copy))


def test_parquet_groups_hold_about_a_64th_of_their_shard_and_older_layouts_still_read(
    packed: dict[str, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    root = packed["parquet"]
    manifest = json.loads((root / "shards.json").read_text())
    assert manifest["layout"] == 5
    for shard in manifest["shards"]:  # groups close at 64 KiB here (over 1/64 of these shards)
        metadata = pq.ParquetFile(root / shard["file"]).metadata
        groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        assert sum(groups) == shard["rows"] and max(groups) <= 2, groups  # files of 50-100 KB
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("lock"))
    manifest["layout"] = 4  # a Parquet dataset of layout 4 (groups of 100 rows) is read as before
    (copy / "shards.json").write_text(json.dumps(manifest, indent=1))
    assert len(list(shardkit.stream(str(copy), rank=1, world_size=2).decode(False))) == 109
    manifest["layout"] = 6
    (copy / "shards.json").write_text(json.dumps(manifest, indent=1))
    with pytest.raises(ShardkitError, match=r"shards\.json: layout is 6, not 4 or 5, the layouts shardkit reads$"):
        shardkit.stream(str(copy))


def test_a_server_that_ignores_range_still_gives_each_tar_rank_its_rows(packed: dict[str, Path]) -> None:
    expected = expected_rows(packed["tar"])
    with serve_directory(packed["tar"], honour_range=False) as (base, log):
        parts = [
            [row_digest(row) for row in shardkit.stream(base, shuffle_seed=4, rank=r, world_size=3).decode(False)]
            for r in range(3)
        ]
        assert any(byte_range for _, _, byte_range in log.entries)  # ranges were asked for, and ignored
    assert sorted(row for part in parts for row in part) == expected
