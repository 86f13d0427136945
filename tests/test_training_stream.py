"""``shardkit.stream`` for training (issue 23): a seeded order that is a pure function of seed,
epoch and dataset; exact resume in a new process (ZIP, tar, Parquet; folder, URL, Hub; with and
without a seed; in DataLoader workers); even rank splits that fetch only their share of bytes;
parallel decode; and datasets' map/filter/batch/with_format("torch") over it.

Every comparison is of whole rows: key, sha256 of the file's bytes, the other fields' values and
their Python types (tests/stream_resume.py's ``row_digest``), against the input or against an
uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardkit
from shardkit.errors import ManifestError, UsageError
from shardkit.formats.base import ShardRecord
from shardkit.formats.zip import ZipFormatError
from shardkit.location import Location
from shardkit.shardrows import iter_shard
from tests.http_server import RequestLog, serve_directory
from tests.hub_server import run_hub_server
from tests.stream_resume import row_digest
from tests.support.corpus import EXAMPLE_DIR, REPO_ROOT
from tests.support.readback import DS36_PYTHON
from tests.test_push import hub_env, push

FORMATS = ("zip", "tar", "parquet")
ROWS = 300  # the example dataset: 300 rows in 16 shards


@pytest.fixture(scope="module")
def folders(packed_template: Path, packed_example_tar_parquet: dict[str, Path]) -> dict[str, Path]:
    """The example packed in each format (16 shards each)."""
    return {"zip": packed_template, **packed_example_tar_parquet}


def input_digests() -> list[list[Any]]:
    """The example's rows as the input has them (metadata.jsonl and the image files), sorted."""
    rows = []
    for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        row["image"] = {"bytes": (EXAMPLE_DIR / "images" / row.pop("file_name")).read_bytes()}
        rows.append(row_digest(row))
    return sorted(rows)


def read(source: str, **options: Any) -> list[list[Any]]:
    """Every row of a stream, in its order, as digests."""
    ds = shardkit.stream(source, **options).decode(False)
    return [row_digest(row) for row in ds]


def keys_of(rows: list[list[Any]]) -> list[str]:
    return [row[0] for row in rows]


def shard_of(key: str) -> str:
    return key[0]  # the example packs into 16 shards by the key's first hex digit


# --- the order --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_seeded_order_is_every_row_once_and_a_function_of_seed_and_epoch(folders: dict[str, Path]) -> None:
    expected = input_digests()
    source = str(folders["zip"])
    plain = read(source)
    seeded = read(source, shuffle_seed=7)
    assert sorted(plain) == sorted(seeded) == expected  # bytes, values and types as packed
    assert read(source, shuffle_seed=7) == seeded  # the same seed, the same order
    assert keys_of(read(source, shuffle_seed=8)) != keys_of(seeded)
    ds = shardkit.stream(source, shuffle_seed=7).decode(False)
    ds.set_epoch(1)
    epoch1 = [row_digest(row) for row in ds]
    assert sorted(epoch1) == expected and keys_of(epoch1) != keys_of(seeded)
    ds.set_epoch(0)
    assert [row_digest(row) for row in ds] == seeded  # back to epoch 0: its order again
    # Every format gives the same order: the plan follows the manifest's shards and rows only.
    for fmt in ("tar", "parquet"):
        assert read(str(folders[fmt]), shuffle_seed=7) == seeded


def test_a_seeded_order_interleaves_the_rows_of_several_shards(folders: dict[str, Path]) -> None:
    plain = [shard_of(k) for k in keys_of(read(str(folders["zip"])))]
    assert sum(a != b for a, b in pairwise(plain)) == 15  # without a seed: shard after shard
    seeded = [shard_of(k) for k in keys_of(read(str(folders["zip"]), shuffle_seed=7))]
    first_unit = seeded[:60]  # the first unit merges 4 shards (shuffle_shards=4): about 75 rows
    assert len(set(first_unit)) == 4
    assert sum(a != b for a, b in pairwise(first_unit)) >= 25  # not one shard after another
    one_by_one = [shard_of(k) for k in keys_of(read(str(folders["zip"]), shuffle_seed=7, shuffle_shards=1))]
    assert one_by_one != plain and sorted(one_by_one) == sorted(plain)


def test_bad_options_are_usage_errors_saying_what_was_expected(folders: dict[str, Path]) -> None:
    source = str(folders["zip"])
    with pytest.raises(UsageError, match=r"0 <= rank < world_size, got rank=3, world_size=3$"):
        shardkit.stream(source, rank=3, world_size=3)
    with pytest.raises(UsageError, match="got rank=0, world_size=0"):
        shardkit.stream(source, world_size=0)
    with pytest.raises(UsageError, match=r"yfcc-mini is not a dataset packed by shardkit \(pack it with `pack-shards"):
        shardkit.stream(str(EXAMPLE_DIR))
    with pytest.raises(UsageError, match="shuffle_shards must be a whole number of at least 1, got 0"):
        shardkit.stream(source, shuffle_seed=1, shuffle_shards=0)
    with pytest.raises(
        UsageError, match=re.escape("shuffle_seed must be a whole number of at least 0 (or None), got -1")
    ):
        shardkit.stream(source, shuffle_seed=-1)
    with pytest.raises(UsageError, match=re.escape("got rank=0.5, world_size=2")):
        shardkit.stream(source, rank=0.5, world_size=2)  # type: ignore[arg-type]
    with pytest.raises(
        UsageError, match=re.escape("decode_threads must be a whole number of at least 1 (or None), got 0")
    ):
        shardkit.stream("/no/such/dataset", decode_threads=0)  # checked before anything is read
    with pytest.raises(UsageError, match="no split 'test'"):
        shardkit.stream(source, split="test", shuffle_seed=1)


# --- ranks --------------------------------------------------------------------------------------------


def requested_bytes(log: RequestLog, root: Path, suffix: str) -> int:
    """Bytes of shard files the server was asked for (what it sent): a whole file for a plain
    GET, the range's bytes for a ranged one."""
    total = 0
    for method, path, byte_range in log.entries:
        if method != "GET" or not path.endswith(suffix):
            continue
        size = (root / path.lstrip("/")).stat().st_size
        if byte_range is None:
            total += size
            continue
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", byte_range)
        assert match, byte_range
        first, last = match.groups()
        start = int(first) if first else size - int(last)
        end = min(int(last), size - 1) if first and last else size - 1
        total += end - start + 1
    return total


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [None, 7])
def test_three_ranks_get_even_disjoint_shares_and_fetch_about_their_share_of_bytes(
    folders: dict[str, Path], fmt: str, seed: int | None
) -> None:
    root = folders[fmt]
    shards = sorted((root / "data").glob(f"*.{fmt}"))
    total_bytes = sum(p.stat().st_size for p in shards)
    largest = max(p.stat().st_size for p in shards)
    parts, fetched = [], []
    with serve_directory(root) as (base, log):
        for rank in range(3):
            log.clear()
            parts.append(read(base, shuffle_seed=seed, rank=rank, world_size=3))
            fetched.append(requested_bytes(log, root, f".{fmt}"))
    assert [len(p) for p in parts] == [100, 100, 100]
    assert sorted(row for part in parts for row in part) == input_digests()  # disjoint, and every row once
    share = total_bytes / 3
    for got in fetched:
        if fmt == "zip":  # cut shards: the directory and metadata.jsonl, then only their members
            assert 0.9 * share < got < 1.15 * share, (got, share)
        elif fmt == "parquet":  # row groups of >= 64 KiB (about half of these tiny shards), and
            # every shard's footer in one 64 KiB read at its tail (the groups in it not read again)
            assert 0.9 * share < got < 1.25 * share, (got, share)
        else:  # tar: from the index point before a cut piece's first row (every row, here)
            assert 0.9 * share < got < 1.05 * share, (got, share)
    assert sum(fetched) < 1.2 * total_bytes and largest < share  # not every shard whole for each rank (3x)


def test_ranks_that_do_not_divide_the_rows_get_floor_or_ceil(folders: dict[str, Path]) -> None:
    parts = [keys_of(read(str(folders["zip"]), shuffle_seed=3, rank=r, world_size=7)) for r in range(7)]
    assert [len(p) for p in parts] == [43, 43, 43, 43, 43, 43, 42]  # 300 = 6 * 43 + 42
    assert sorted(row for part in parts for row in part) == sorted(row[0] for row in input_digests())


# --- exact resume, in new processes --------------------------------------------------------------------


def run_resume(cases: list[dict[str, Any]], tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Read every case in a process that is killed mid-read, then resume each saved state in a
    new process (tests/stream_resume.py); return what the second one read."""
    cases_file, states = tmp_path / "cases.json", tmp_path / "states.jsonl"
    cases_file.write_text(json.dumps(cases))

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tests.stream_resume", mode, str(cases_file), str(states)]
        return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)

    first = run("first")
    assert first.returncode == -9, first.stderr[-3000:]  # SIGKILL, with its streams open
    second = run("resume")
    assert second.returncode == 0, second.stderr[-3000:]
    return json.loads(second.stdout)  # type: ignore[no-any-return]


def resume_cases(sources: dict[str, str], loader: int = 0) -> list[dict[str, Any]]:
    """For each format: no seed over the whole split, and a seed, epoch 1, rank 1 of 2."""
    cases = []
    for fmt, source in sources.items():
        cases.append(
            {"name": f"{fmt}-plain", "source": source, "seed": None, "rank": 0, "world_size": 1, "epoch": 0}
            | ({"points": [1, 150, 299], "loader": 0} if not loader else {"points": [1, 40], "loader": loader})
        )
        cases.append(
            {"name": f"{fmt}-seeded", "source": source, "seed": 7, "rank": 1, "world_size": 2, "epoch": 1}
            | ({"points": [1, 64, 149], "loader": 0} if not loader else {"points": [2, 19], "loader": loader})
        )
    return cases


def assert_resumed_exactly(got: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    expected = input_digests()
    for case in cases:
        result = got[case["name"]]
        full = result["full"]
        wanted = ROWS if case["world_size"] == 1 else ROWS // case["world_size"]
        assert len(full) == wanted and all(row in expected for row in full), case["name"]
        assert len({json.dumps(row) for row in full}) == wanted, case["name"]  # no row twice
        assert sorted(result["resumed"]) == sorted(str(p) for p in case["points"]), case["name"]
        for point, rows in result["resumed"].items():
            assert rows == full, f"{case['name']} resumed after {point}"


@contextmanager
def served(
    sources: dict[str, Path], kind: str, tmp_path: Path
) -> Iterator[tuple[dict[str, str], dict[str, str] | None]]:
    """Each format's folder as a reader reaches it: the folder, a URL, or a Hub dataset."""
    if kind == "folder":
        yield {fmt: str(path) for fmt, path in sources.items()}, None
        return
    if kind == "url":
        with ExitStack() as stack:
            yield {fmt: stack.enter_context(serve_directory(path))[0] for fmt, path in sources.items()}, None
        return
    with run_hub_server(tmp_path / "hub") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        for fmt, path in sources.items():
            push(path, env, repo=f"tester/{fmt}")
        yield {fmt: f"tester/{fmt}" for fmt in sources}, env


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["folder", "url", "hub"])
def test_killed_and_resumed_in_a_new_process_reads_exactly_the_rest(
    folders: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    with served(folders, kind, tmp_path) as (sources, env):
        cases = resume_cases(sources)
        got = run_resume(cases, tmp_path, env)
    assert_resumed_exactly(got, cases)


@pytest.mark.slow
def test_resumed_inside_dataloader_workers(folders: dict[str, Path], tmp_path: Path) -> None:
    """torchdata's StatefulDataLoader, 2 workers: its state holds each worker's dataset state."""
    cases = resume_cases({fmt: str(folders[fmt]) for fmt in ("zip", "parquet")}, loader=2)
    got = run_resume(cases, tmp_path)
    assert_resumed_exactly(got, cases)


# --- reading part of a shard ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_part_of_a_shard_is_the_same_rows_as_the_whole_read(folders: dict[str, Path], fmt: str) -> None:
    location = Location(str(folders[fmt]), "folder")
    shard = f"data/3.{fmt}"
    whole = [row_digest(r) for r in iter_shard(location, shard, "image", fmt)]
    assert len(whole) > 12
    for start, stop in ((0, 5), (5, 12), (12, None), (len(whole) - 1, len(whole))):
        part = [row_digest(r) for r in iter_shard(location, shard, "image", fmt, start=start, stop=stop)]
        assert part == whole[start:stop], (start, stop)


def test_a_damaged_member_in_a_cut_zip_piece_is_an_error_naming_shard_and_member(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(folders["zip"], repo, ignore=shutil.ignore_patterns("lock"))
    location = Location(str(repo), "folder")
    rows = list(iter_shard(location, "data/3.zip", "image", "zip"))
    member = rows[7]["image"]["path"]
    shard = repo / "data" / "3.zip"
    data = bytearray(shard.read_bytes())
    at = data.index(rows[7]["image"]["bytes"])
    data[at + 100] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ZipFormatError, match=rf"data/3\.zip: CRC mismatch in member '{re.escape(member)}'"):
        list(iter_shard(location, "data/3.zip", "image", "zip", start=5, stop=9))
    data[-10] ^= 0xFF  # now the end record too
    shard.write_bytes(bytes(data))
    with pytest.raises(ZipFormatError, match=r"data/3\.zip: the end record .* is not what shardkit writes"):
        list(iter_shard(location, "data/3.zip", "image", "zip", start=5, stop=9))


def test_a_server_that_ignores_range_still_gives_each_rank_its_rows(folders: dict[str, Path]) -> None:
    """Cut pieces ask for byte ranges; a server that answers with the whole file is read past the
    bytes before the range, a chunk at a time."""
    with serve_directory(folders["zip"], honour_range=False) as (base, log):
        parts = [read(base, shuffle_seed=4, rank=r, world_size=3) for r in range(3)]
        assert any(byte_range for _, _, byte_range in log.entries)  # ranges were asked for, and ignored
    assert sorted(row for part in parts for row in part) == input_digests()


def zip_shard(path: Path, lines: list[dict[str, Any]], members: list[str]) -> ShardRecord:
    """A ZIP shard as shardkit writes it, from metadata lines and member names (each member's
    bytes: its name three times); the record a manifest would hold of it."""
    from shardkit.formats.zip import ZipWriter

    with path.open("wb") as f:
        zw = ZipWriter(f)
        zw.add("metadata.jsonl", "".join(json.dumps(line) + "\n" for line in lines).encode())
        for name in members:
            zw.add(name, name.encode() * 3)
        size = zw.close()
    return ShardRecord(str(path), "image", bytes=size, rows=len(members))


def cut_read(path: Path, record: ShardRecord, start: int, stop: int | None) -> list[tuple[str, int]]:
    from shardkit.formats import ZIP
    from shardkit.shardrows import ShardAt

    shard = ShardAt(Location(str(path.parent), "folder"), path.name)
    return [(row["image"]["path"], row["n"]) for row in ZIP.read_piece(shard, record, start, stop)]


def test_a_cut_zip_piece_is_held_to_what_a_whole_read_is(tmp_path: Path) -> None:
    names = [f"images/{i}.jpg" for i in range(6)]
    rows = [{"file_name": name, "n": i} for i, name in enumerate(names)]
    swapped = zip_shard(tmp_path / "swapped.zip", [rows[1], rows[0], *rows[2:4], rows[5], rows[4]], names)
    assert cut_read(tmp_path / "swapped.zip", swapped, 1, 5) == [(n, i) for i, n in enumerate(names)][1:5]
    assert cut_read(tmp_path / "swapped.zip", swapped, 3, 3) == []
    twice = zip_shard(tmp_path / "twice.zip", rows, [*names[:5], names[2]])
    with pytest.raises(ZipFormatError, match=r"twice\.zip: the directory lists member 'images/2\.jpg' twice"):
        cut_read(tmp_path / "twice.zip", twice, 1, 3)
    extra_line = zip_shard(tmp_path / "extra-line.zip", [*rows, {"file_name": "images/9.jpg", "n": 9}], names)
    with pytest.raises(ZipFormatError, match=r"extra-line\.zip: metadata\.jsonl has 7 rows; the directory lists 6"):
        cut_read(tmp_path / "extra-line.zip", extra_line, 2, None)


@pytest.mark.slow
def test_a_manifest_whose_shard_has_no_rows_is_refused_not_read_around(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(folders["zip"], repo, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    manifest = json.loads((repo / "shards.json").read_text())
    manifest["shards"][3]["rows"] = 0
    (repo / "shards.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=r"shards\.json: shard 'data/3\.zip': rows is 0, not a whole number"):
        shardkit.stream(str(repo), shuffle_seed=1)


# --- decode on threads; datasets' operations over the stream --------------------------------------------


def pixels(image: Any) -> str:
    return hashlib.sha256(np.asarray(image).tobytes()).hexdigest()


@pytest.mark.slow
def test_decode_threads_give_the_same_images_and_resume_exactly(folders: dict[str, Path]) -> None:
    source = str(folders["zip"])
    one = [(row["key"], pixels(row["image"])) for row in shardkit.stream(source, shuffle_seed=2)]
    threaded = shardkit.stream(source, shuffle_seed=2, decode_threads=2)
    assert [(row["key"], pixels(row["image"])) for row in threaded] == one
    threaded.set_epoch(1)
    epoch1 = [row["key"] for row in threaded]
    assert sorted(epoch1) == sorted(key for key, _ in one) and epoch1 != [key for key, _ in one]
    for rows_before in (1, 63, 64, 65, 101):  # inside and at the edges of the 64-row decode batches
        it = iter(threaded)
        head = [next(it)["key"] for _ in range(rows_before)]
        state = threaded.state_dict()
        again = shardkit.stream(source, shuffle_seed=2, decode_threads=2)
        again.set_epoch(1)
        again.load_state_dict(state)
        assert head + [row["key"] for row in again] == epoch1, rows_before


def test_map_filter_batch_and_torch_dataloader_workers_over_a_seeded_stream(folders: dict[str, Path]) -> None:
    import torch
    from torch.utils.data import DataLoader

    even = sorted(row[0] for row in input_digests() if json.loads(row[2])["photoid"] % 2 == 0)
    import datasets

    ds = shardkit.stream(str(folders["zip"]), shuffle_seed=5)
    features = ds.features.copy()
    del features["image"]
    features["pixels"] = datasets.Array3D((6, 8, 3), "uint8")
    ds = ds.map(
        lambda r: {"pixels": np.asarray(r["image"].convert("RGB").resize((8, 6)))},
        remove_columns=["image"],
        features=features,
    )
    ds = ds.filter(lambda r: r["photoid"] % 2 == 0).select_columns(["key", "photoid", "pixels"])
    batches = list(ds.batch(7))
    assert all(len(b["key"]) == 7 for b in batches[:-1]) and sorted(key for b in batches for key in b["key"]) == even
    from PIL import Image

    reference = {}  # key -> the input image, resized as the map does
    for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        with Image.open(EXAMPLE_DIR / "images" / row["file_name"]) as image:
            reference[row["key"]] = np.asarray(image.convert("RGB").resize((8, 6)))
    loader = DataLoader(ds.with_format("torch"), batch_size=4, num_workers=2)
    keys = []
    for batch in loader:
        assert batch["photoid"].dtype == torch.int64 and tuple(batch["pixels"].shape[1:]) == (6, 8, 3)
        assert not batch["pixels"].is_floating_point()  # datasets' torch format makes integers int64
        for key, tensor in zip(batch["key"], batch["pixels"], strict=True):
            assert np.array_equal(tensor.numpy(), reference[key])
        keys.extend(batch["key"])
    assert sorted(keys) == even


# --- datasets 3.6 -------------------------------------------------------------------------------------------

DS36_SCRIPT = r"""
import hashlib, json, sys
import shardkit
source = sys.argv[1]
def keys(ds):
    return [row["key"] for row in ds]
def stream(**kw):
    return shardkit.stream(source, **kw).decode(False)
ranks = [keys(stream(shuffle_seed=7, rank=r, world_size=3)) for r in range(3)]
ds = stream(shuffle_seed=7)
ds.set_epoch(2)
full = keys(ds)
it = iter(ds)
head = [next(it)["key"] for _ in range(123)]
state = ds.state_dict()
again = stream(shuffle_seed=7)
again.set_epoch(2)
again.load_state_dict(state)
rest = keys(again)
epoch0 = keys(stream(shuffle_seed=7))
def pixels(ds):
    return [hashlib.sha256(row["image"].tobytes()).hexdigest() for row in ds]
threaded = pixels(shardkit.stream(source, shuffle_seed=7, decode_threads=2))
one = pixels(shardkit.stream(source, shuffle_seed=7))
print(json.dumps({"ranks": ranks, "full": full, "resumed": head + rest, "epoch0": epoch0, "decoded": threaded == one}))
"""


@pytest.mark.slow
def test_datasets_36_reads_the_same_rows_resumes_and_splits(folders: dict[str, Path]) -> None:
    result = subprocess.run(
        [DS36_PYTHON, "-c", DS36_SCRIPT, str(folders["zip"])], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout)
    every = sorted(row[0] for row in input_digests())
    assert [len(r) for r in got["ranks"]] == [100, 100, 100] and sorted(
        key for rank in got["ranks"] for key in rank
    ) == every
    assert sorted(got["full"]) == every and got["resumed"] == got["full"] and got["epoch0"] != got["full"]
    assert got["decoded"]  # decode_threads=2 gives the pixels one thread gives


# --- the state guard: a state of another stream or epoch is refused ------------------------------------------

# Run by each datasets (5.x here, 3.6 and 4.0 in their venvs): saves a state after map at epoch 3,
# loads it into streams that differ in one thing each, and resumes it in the same stream.
GUARD_SCRIPT = r"""
import json, sys
import shardkit
from shardkit.errors import UsageError

zip_source, tar_source = sys.argv[1:3]
BASE = {"shuffle_seed": 7, "rank": 0, "world_size": 2}

def guarded(source, epoch, **options):
    ds = shardkit.stream(source, **options).select_columns(["key"]).map(lambda row: {"first": row["key"][0]})
    ds.set_epoch(epoch)
    return ds

def keys(ds):
    return [row["key"] for row in ds]

def without_identity(state):
    if isinstance(state, dict):
        return {k: without_identity(v) for k, v in state.items() if k != "shardkit"}
    return state

ds = guarded(zip_source, 3, **BASE)
rows = iter(ds)
head = [next(rows)["key"] for _ in range(25)]
state = ds.state_dict()
refused = {}
for name, source, epoch, options in [
    ("shuffle_seed", zip_source, 3, {**BASE, "shuffle_seed": 8}),
    ("rank", zip_source, 3, {**BASE, "rank": 1}),
    ("world_size", zip_source, 3, {**BASE, "world_size": 3}),
    ("shuffle_shards", zip_source, 3, {**BASE, "shuffle_shards": 2}),
    ("shuffle_window", zip_source, 3, {**BASE, "shuffle_window": 100}),
    ("no seed", zip_source, 3, {"rank": 0, "world_size": 2}),
    ("shards", tar_source, 3, BASE),
    ("decoded on threads", zip_source, 3, {**BASE, "decode_threads": 2}),
    ("epoch", zip_source, 0, BASE),
    ("world_size and epoch", zip_source, 0, {**BASE, "world_size": 4}),
]:
    other = guarded(source, epoch, **options)
    other.load_state_dict(state)
    try:
        iter(other)
        refused[name] = None
    except UsageError as exc:
        refused[name] = str(exc)
again = guarded(zip_source, 3, **BASE)
again.load_state_dict(state)
resumed = head + keys(again)
again.set_epoch(4)  # a resumed run goes on to its next epoch: that one starts from its beginning
next_epoch = keys(again)
ended = guarded(zip_source, 3, **BASE)
for _ in ended:
    pass
end_state = ended.state_dict()  # a checkpoint after the epoch's last row
after_end = guarded(zip_source, 4, **BASE)
after_end.load_state_dict(end_state)
next_after_end = keys(after_end)  # the next epoch, from its start
skipping = guarded(zip_source, 5, **BASE)
skipping.load_state_dict(end_state)
try:
    iter(skipping)
    refused["epoch after the end"] = None
except UsageError as exc:
    refused["epoch after the end"] = str(exc)
legacy = guarded(zip_source, 3, **BASE)
legacy.load_state_dict(without_identity(state))
print(json.dumps({
    "refused": refused,
    "resumed": resumed,
    "legacy": head + keys(legacy),
    "full": keys(guarded(zip_source, 3, **BASE)),
    "next_epoch": next_epoch,
    "next_after_end": next_after_end,
    "epoch4": keys(guarded(zip_source, 4, **BASE)),
}))
"""

REFUSALS = {
    "shuffle_seed": "this state was saved by a stream with shuffle_seed=7; this one has shuffle_seed=8",
    "rank": "this state was saved by a stream with rank=0; this one has rank=1",
    "world_size": "this state was saved by a stream with world_size=2; this one has world_size=3",
    "shuffle_shards": "this state was saved by a stream with shuffle_shards=4; this one has shuffle_shards=2",
    "shuffle_window": "this state was saved by a stream with shuffle_window=1024; this one has shuffle_window=100",
    "no seed": "this state was saved by a stream with shuffle_seed=7; this one has shuffle_seed=None",
    "shards": (
        "this state was saved by a stream with shards {}; this one has shards {} (other shards: another dataset,"
        " or this one packed again since)"
    ),
    "decoded on threads": ("this state was saved by a stream with decode_threads=None; this one has decode_threads=2"),
    "world_size and epoch": (
        "this state was saved by a stream with world_size=2, epoch=3; this one has world_size=4, epoch=0"
    ),
}
RESUME_HINT = " (resume with the stream the state was saved from)"
EPOCH_REFUSAL = "this state was saved at epoch 3; this stream is at epoch 0: call set_epoch(3) first"


def shards_identity(folder: Path) -> str:
    """The head of the sha256 a state records of a split's shards (the file, rows and sha256 of
    each, as the manifest lists them), computed here from the manifest."""
    manifest = json.loads((folder / "shards.json").read_text())
    shards = [[s["file"], s["rows"], s["sha256"]] for s in manifest["shards"]]
    return hashlib.sha256(json.dumps(shards).encode()).hexdigest()[:12]


@pytest.mark.slow
@pytest.mark.parametrize("python", ["5.x", "3.6", "4.0"])
def test_a_state_of_another_stream_or_epoch_is_refused_naming_what_differs(
    folders: dict[str, Path], python: str
) -> None:
    from tests.support.readback import DS40_PYTHON

    executable = {"5.x": sys.executable, "3.6": DS36_PYTHON, "4.0": DS40_PYTHON}[python]
    result = subprocess.run(
        [executable, "-c", GUARD_SCRIPT, str(folders["zip"]), str(folders["tar"])],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},  # the 4.0 venv has datasets, not shardkit
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout)
    shards = REFUSALS["shards"].format(shards_identity(folders["zip"]), shards_identity(folders["tar"]))
    expected = {name: message + RESUME_HINT for name, message in {**REFUSALS, "shards": shards}.items()}
    after_end = (
        "this state was saved at epoch 3 (at its end: its next epoch is 4); this stream is at epoch 5:"
        " call set_epoch(4) first"
    )
    assert got["refused"] == expected | {"epoch": EPOCH_REFUSAL, "epoch after the end": after_end}
    assert got["next_after_end"] == got["epoch4"]  # a checkpoint at an epoch's end resumes the next one whole
    assert got["resumed"] == got["full"] and len(got["full"]) == ROWS // 2  # the same stream: exactly the rest
    assert got["next_epoch"] == got["epoch4"] != got["full"]
    # A state of an earlier shardkit (no identity recorded): resumed, with a warning.
    assert got["legacy"] == got["full"]
    assert result.stderr.count("this state records no stream options (saved by an earlier shardkit)") == 1


@pytest.mark.slow
def test_dataloader_workers_refuse_a_state_of_another_stream(folders: dict[str, Path]) -> None:
    """torchdata's StatefulDataLoader hands each worker its dataset's state: the worker refuses it
    (torch raises the worker's UsageError again in the main process, with the worker's traceback)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(seed: int) -> Any:
        ds = shardkit.stream(str(folders["zip"]), shuffle_seed=seed, shuffle_shards=1).select_columns(["key"])
        return StatefulDataLoader(ds, batch_size=4, num_workers=2)

    first = iter(loader_7 := loader(7))
    for _ in range(5):
        next(first)
    state = loader_7.state_dict()
    other = loader(8)
    other.load_state_dict(state)
    with pytest.raises(UsageError) as raised:
        next(iter(other))
    lines = str(raised.value).splitlines()  # the worker's traceback, readable: a line each
    assert re.fullmatch(r"Caught UsageError in DataLoader worker process \d+\.", lines[0]) and len(lines) > 3, lines
    assert lines[-1] == (
        "shardkit.errors.UsageError: this state was saved by a stream with shuffle_seed=7; this one has"
        " shuffle_seed=8 (resume with the stream the state was saved from)"
    )


def derivations() -> dict[str, Any]:
    """datasets' ways of deriving a dataset from another, each as a function of the stream."""
    import datasets

    def cast(ds: Any) -> Any:
        features = ds.features.copy()
        features["image"] = datasets.Image(decode=False)
        return ds.cast(features)

    return {
        "map": lambda ds: ds.map(lambda row: {"n": 1}),
        "filter": lambda ds: ds.filter(lambda row: row["photoid"] % 2 == 0),
        "batch": lambda ds: ds.batch(3),
        "decode": lambda ds: ds.decode(False),
        "with_format": lambda ds: ds.with_format("numpy"),
        "select_columns": lambda ds: ds.select_columns(["key"]),
        "remove_columns": lambda ds: ds.remove_columns(["image"]),
        "rename_column": lambda ds: ds.rename_column("key", "id"),
        "rename_columns": lambda ds: ds.rename_columns({"key": "id"}),
        "cast_column": lambda ds: ds.cast_column("image", datasets.Image(decode=False)),
        "cast": cast,
        "shuffle": lambda ds: ds.shuffle(seed=1, buffer_size=10),
        "take": lambda ds: ds.take(50),
        "skip": lambda ds: ds.skip(5),
        "shard": lambda ds: ds.shard(2, 0),
        "repeat": lambda ds: ds.repeat(2),
        "reshard": lambda ds: ds.reshard(),
        "several in a row": lambda ds: ds.decode(False).map(lambda row: {"n": 1}).select_columns(["key", "n"]),
    }


#: Derivations also tried over decode_threads=2 (itself a derivation: a map over the stream).
OVER_DECODE_THREADS = ("map", "with_format", "several in a row")


def test_datasets_derived_from_a_stream_refuse_a_state_of_another_epoch(folders: dict[str, Path]) -> None:
    source = str(folders["zip"])
    for name, derive in derivations().items():
        for decode_threads in (None, 2) if name in OVER_DECODE_THREADS else (None,):
            saved = derive(shardkit.stream(source, shuffle_seed=7, decode_threads=decode_threads))
            saved.set_epoch(1)
            for _ in saved if decode_threads else [next(iter(saved))]:
                pass  # decoded: to the end (datasets' async map leaves a stream left early pending)
            state = saved.state_dict()
            other = derive(shardkit.stream(source, shuffle_seed=7, decode_threads=decode_threads))
            other.load_state_dict(state)
            refusal = "this state was saved at epoch 1; this stream is at epoch 0: call set_epoch(1) first"
            with pytest.raises(UsageError, match=f"^{re.escape(refusal)}$"):
                iter(other)
            other.set_epoch(1)  # then it resumes: after the first row, or at the end
            assert next(iter(other)) if not decode_threads else list(other) == [], (name, decode_threads)


# --- several splits -------------------------------------------------------------------------------------------


def pack_with_splits(out: Path, splits: list[str]) -> dict[str, list[list[Any]]]:
    """The example's first rows packed with a ``split`` column (row i in ``splits[i]``), and each
    split's input rows as digests, sorted."""
    lines = (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines()[: len(splits)]
    meta = out.with_suffix(".jsonl")
    rows: dict[str, list[list[Any]]] = {}
    with meta.open("w", encoding="utf-8") as f:
        for line, split in zip(lines, splits, strict=True):
            row = json.loads(line)
            f.write(json.dumps({**row, "split": split}) + "\n")
            row["image"] = {"bytes": (EXAMPLE_DIR / "images" / row.pop("file_name")).read_bytes()}
            rows.setdefault(split, []).append(row_digest(row))
    pack = Path(sys.executable).parent / "pack-shards"
    command = [str(pack), str(EXAMPLE_DIR / "images"), str(meta), "-o", str(out), "-q", "--prefix-length", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return {split: sorted(digests) for split, digests in rows.items()}


@pytest.mark.slow
def test_several_splits_are_refused_without_split_and_one_split_is_read_without(tmp_path: Path) -> None:
    uneven = ["train"] * 290 + ["validation"] * 9 + ["test"]
    expected = pack_with_splits(tmp_path / "uneven", uneven)
    source = str(tmp_path / "uneven")
    message = (
        f"{source} has 3 splits (train, validation, test): a stream reads one; pass split= to choose,"
        " e.g. shardkit.stream(..., split='train')"
    )
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        shardkit.stream(source)
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        shardkit.stream(source, shuffle_seed=1, rank=1, world_size=2)
    for split, rows in expected.items():
        assert sorted(read(source, split=split)) == rows, split
        assert sorted(read(source, split=split, shuffle_seed=3)) == rows, split
    # A state of one split does not resume another: the split and its shards differ.
    ds = shardkit.stream(source, split="train").decode(False)
    next(iter(ds))
    other = shardkit.stream(source, split="validation").decode(False)
    other.load_state_dict(ds.state_dict())
    with pytest.raises(
        UsageError,
        match=(
            r"^this state was saved by a stream with split='train', shards \w+;"
            r" this one has split='validation', shards \w+ \(resume with"
        ),
    ):
        iter(other)
    # One split, whatever its name: read without split=.
    only = pack_with_splits(tmp_path / "only", ["validation"] * 20)
    assert sorted(read(str(tmp_path / "only"))) == only["validation"]
