"""``shardkit remux`` keeps what its source says of its data: splits, class labels, card fields.

Sources: a shardkit dataset packed with train/validation/test splits and a ClassLabel whose
names are not in sorted order; a Parquet dataset written with datasets (two ClassLabel columns,
one row with datasets' "no label" -1) in a local folder; both again from the loopback Hub.
Every output split is compared with its source split row by row: keys, values, types, image
bytes (or sizes, when the function resizes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import datasets
import pytest

import shardkit
from shardkit.card import set_front_matter_keys, split_front_matter
from shardkit.pack import PackConfig, pack
from shardkit.schema import class_label_names
from tests.remux_functions import SIZE
from tests.support.corpus import tiny_image, tree_bytes, write_jsonl
from tests.test_remux import RESIZE, remux

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

IDENTITY = ("--map", "tests.remux_functions:identity", "--no-decode")
SPLITS = ["train", "validation", "test"]
ANIMALS = ["zebra", "ant", "cat", "bee"]
#: The source's ClassLabel order: the two names given first, the others after them, sorted.
SOURCE_NAMES = ["zebra", "ant", "bee", "cat"]
CARD = {
    "license": "cc-by-nc-4.0",
    "pretty_name": "Zoo Mini",
    "language": ["en"],
    "task_categories": ["image-classification"],
    "tags": ["shardkit", "animals"],
}


def _split_of(i: int) -> str:
    return "test" if i % 6 == 0 else "validation" if i % 6 == 1 else "train"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shardkit dataset of 36 rows in three splits, `animal` a ClassLabel (zebra, ant, bee, cat),
    several shards per split, and a card with a license, task, pretty name and tags."""
    root = tmp_path_factory.mktemp("zoo-src")
    images = root / "images"
    images.mkdir()
    rows = []
    for i in range(36):
        (images / f"{i:03d}.jpg").write_bytes(tiny_image(i))
        rows.append(
            {
                "file_name": f"{i:03d}.jpg",
                "key": hashlib.sha256(f"zoo {i}".encode()).hexdigest()[:16],
                "split": _split_of(i),
                "animal": None if i == 7 else ANIMALS[i % 4],
                "n": i,
                "caption": f"picture {i}",
                "score": None if i % 5 == 0 else i / 4,
            }
        )
    meta = write_jsonl(root / "meta.jsonl", rows)
    out = root / "zoo"
    config = PackConfig(
        str(images), str(meta), str(out), jobs=1, prefix_length=1, class_label="animal", class_names=("zebra", "ant")
    )
    pack(config)
    card = out / "README.md"
    card.write_text(set_front_matter_keys(card.read_text(encoding="utf-8"), CARD), encoding="utf-8")
    return out


def split_rows(path: Path | str, split: str) -> dict[str, dict[str, Any]]:
    """One split of a shardkit dataset by key, images as their bytes."""
    ds = shardkit.stream(str(path), split=split).cast_column("image", datasets.Image(decode=False))
    return {row["key"]: row for row in ds}


def typed(row: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """A row's values with their types: 1 and 1.0 or None and "" must not pass for one another."""
    return {name: (type(value).__name__, value) for name, value in row.items()}


def manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / "shards.json").read_text())  # type: ignore[no-any-return]


def front_matter(path: Path) -> dict[str, Any]:
    return split_front_matter((path / "README.md").read_text(encoding="utf-8"))[0]


def test_every_split_keeps_exactly_its_rows_labels_and_the_card(zoo: Path, tmp_path: Path) -> None:
    summary = remux(zoo, tmp_path / "a" / "out", *IDENTITY, "-j", "2")
    out = tmp_path / "a" / "out"
    source_shards = {s: manifest(zoo)["splits"][s]["shards"] for s in SPLITS}
    assert min(source_shards.values()) > 1  # several shards per split: each its own task
    assert summary["source_shards"] == sum(source_shards.values()) and summary["splits"] == SPLITS
    assert summary["rows_in"] == summary["rows_out"] == 36 and summary["class_label"] == "animal"
    assert set(manifest(out)["splits"]) == set(SPLITS)
    for split in SPLITS:
        source, output = split_rows(zoo, split), split_rows(out, split)
        assert len(source) == sum(1 for i in range(36) if _split_of(i) == split)
        assert {k: typed(r) for k, r in output.items()} == {k: typed(r) for k, r in source.items()}
    # The same names in the same order, so every integer means the class it meant.
    feature = next(f for f in manifest(out)["features"] if f["name"] == "animal")
    assert class_label_names(feature) == SOURCE_NAMES
    assert shardkit.stream(str(out), split="test").features["animal"].names == SOURCE_NAMES
    by_n = {r["n"]: r for s in SPLITS for r in split_rows(out, s).values()}
    assert [by_n[i]["animal"] for i in range(8)] == [0, 1, 3, 2, 0, 1, 3, -1]  # zebra ant cat bee ...
    card = front_matter(out)
    assert {k: card.get(k) for k in CARD} == {**CARD, "tags": ["animals"]}  # shardkit's own tag not copied
    verify = subprocess.run(
        [str(Path(sys.executable).parent / "shardkit"), "verify", str(out), "--deep", "-q"], capture_output=True
    )
    assert verify.returncode == 0, verify.stdout


def test_a_resizing_function_keeps_each_rows_split_and_label(zoo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    remux(zoo, out, "--map", RESIZE, "-j", "2")
    for split in SPLITS:
        source = split_rows(zoo, split)
        output = shardkit.stream(str(out), split=split)
        rows = {row["key"]: row for row in output}
        assert rows.keys() == source.keys()
        for key, row in rows.items():
            assert row["image"].size == SIZE
            fields = {k: v for k, v in row.items() if k not in ("image", "flipped")}
            assert typed(fields) == typed({k: v for k, v in source[key].items() if k != "image"})
    assert output.features["animal"].names == SOURCE_NAMES


def test_one_split_on_request_and_a_train_only_output_has_no_split_folders(zoo: Path, tmp_path: Path) -> None:
    test_only = remux(zoo, tmp_path / "t" / "out", *IDENTITY, "--split", "test")
    assert test_only["splits"] == ["test"] and test_only["rows_out"] == 6
    assert list(manifest(tmp_path / "t" / "out")["splits"]) == ["test"]
    assert split_rows(tmp_path / "t" / "out", "test") == split_rows(zoo, "test")
    train = tmp_path / "train" / "out"
    remux(zoo, train, *IDENTITY, "--split", "train")
    assert sorted(p.name for p in (train / "data").iterdir() if p.is_dir()) == []  # data/*.zip, as a plain pack
    assert split_rows(train, "train") == split_rows(zoo, "train")
    missing = remux(zoo, tmp_path / "m" / "out", *IDENTITY, "--split", "dev", check=False)
    assert missing.returncode == 2 and "no split 'dev'; its splits: train, validation, test" in missing.stderr


def test_a_stopped_run_resumes_every_split_and_another_split_selection_starts_over(zoo: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain" / "out"
    remux(zoo, plain, *IDENTITY, "-j", "1")
    out = tmp_path / "out"
    args = ("--map", "tests.remux_functions:fail_on_n", "--no-decode", "-j", "1")
    # Row 30 is in the test split, which is read last: every train and validation shard is done.
    stopped = remux(zoo, out, *args, env={**os.environ, "REMUX_TEST_FAIL_ON_N": "30"}, check=False)
    assert stopped.returncode == 1 and "stopped at n=30" in stopped.stderr
    assert "failed on split 'test', rows 0..5: " in stopped.stderr
    parts = out / ".shardkit" / "remux" / "parts"
    records = {split: json.loads((parts / f"{split}.json").read_text()) for split in SPLITS if split != "test"}
    assert all(r["finished"] for r in records.values())  # every train and validation batch is done
    test = parts / "test.json"
    assert not test.exists() or not json.loads(test.read_text())["finished"]
    test_rows = json.loads(test.read_text())["rows_in"] if test.exists() else 0
    done_rows = sum(r["rows_in"] for r in records.values()) + test_rows

    other = remux(zoo, out, *args, "--split", "validation", check=False)
    assert other.returncode == 2 and "unfinished remux with other settings (--split); re-run" in other.stderr

    resumed = remux(zoo, out, *args)
    assert resumed["resumed_rows"] == done_rows and resumed["rows_out"] == 36
    assert tree_bytes(out) == tree_bytes(plain)  # as a run never stopped


def test_a_renamed_label_is_no_class_label_and_the_output_cards_own_keys_stay(
    zoo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from shardkit import RemuxConfig
    from shardkit.remux import remux as remux_api

    out = tmp_path / "out"
    config = RemuxConfig(str(zoo), str(out), fn="tests.remux_functions:rename_animal", jobs=1, decode=False)
    summary = remux_api(config)
    assert summary.class_label is None and set(summary.card_fields) == set(CARD)
    features = {f["name"]: f["dtype"] for f in manifest(out)["features"]}
    assert "animal" not in features and features["kind"] == "int64"  # the integers, as the function returned them
    card = out / "README.md"
    card.write_text(set_front_matter_keys(card.read_text(encoding="utf-8"), {"license": "other"}), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="shardkit.remux"):
        again = remux_api(config)
    assert "license" not in again.card_fields and front_matter(out)["license"] == "other"
    assert any('keeps its license "other"; the source\'s card says "cc-by-nc-4.0"' in m for m in caplog.messages)


# --- a source that is not shardkit's: Parquet written with datasets ------------------------------------

PARQUET_CARD = """---
license: mit
pretty_name: Zoo Parquet
task_categories:
- image-classification
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: test
    path: data/test-*.parquet
---

# Zoo Parquet

Animals, in Parquet.
"""
PARQUET_NAMES = ["zebra", "ant", "cat"]


def write_parquet_zoo(root: Path) -> Path:
    """A dataset as datasets' push_to_hub lays it out: data/<split>-*.parquet and a card."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "animal": datasets.ClassLabel(names=PARQUET_NAMES),
            "color": datasets.ClassLabel(names=["red", "blue"]),
            "n": datasets.Value("int64"),
            "caption": datasets.Value("string"),
        }
    )
    (root / "data").mkdir(parents=True)
    for split, numbers in {"train": range(0, 20), "test": range(20, 26)}.items():
        columns: dict[str, list[Any]] = {"image": [], "animal": [], "color": [], "n": [], "caption": []}
        for i in numbers:
            columns["image"].append({"bytes": tiny_image(100 + i), "path": f"{i}.jpg"})
            columns["animal"].append(-1 if i == 3 else i % 3)  # -1: datasets' "no label"
            columns["color"].append(i % 2)
            columns["n"].append(i)
            columns["caption"].append(f"animal {i}")
        ds = datasets.Dataset.from_dict(columns, features=features)
        ds.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    (root / "README.md").write_text(PARQUET_CARD, encoding="utf-8")
    return root


def test_a_datasets_source_keeps_its_splits_first_class_label_and_card(tmp_path: Path) -> None:
    source = write_parquet_zoo(tmp_path / "zoo-parquet")
    out = tmp_path / "out"
    summary = remux(source, out, *IDENTITY)
    assert summary["splits"] == ["train", "test"] and summary["class_label"] == "animal"
    assert set(manifest(out)["splits"]) == {"train", "test"}
    features = {f["name"]: f["dtype"] for f in manifest(out)["features"]}
    assert class_label_names({"dtype": features["animal"]}) == PARQUET_NAMES
    assert features["color"] == "string"  # the second ClassLabel: its names, as strings
    for split in ("train", "test"):
        expected = datasets.load_dataset(str(source), split=split, cache_dir=str(tmp_path / "cache"))
        expected = expected.cast_column("image", datasets.Image(decode=False))
        output = {r["n"]: r for r in split_rows(out, split).values()}
        assert sorted(output) == list(expected["n"])
        for row in expected:
            got = output[row["n"]]
            assert got["image"]["bytes"] == row["image"]["bytes"]
            assert typed({k: got[k] for k in ("animal", "color", "n", "caption")}) == typed(
                {
                    "animal": row["animal"],  # -1: no label, as published
                    "color": ["red", "blue"][row["color"]],
                    "n": row["n"],
                    "caption": row["caption"],
                }
            )
    card = front_matter(out)
    assert (card["license"], card["pretty_name"], card["task_categories"]) == (
        "mit",
        "Zoo Parquet",
        ["image-classification"],
    )
    assert [c["data_files"] for c in card["configs"]] != []  # shardkit's own configs, not the source's
    assert all(not str(d["path"]).endswith(".parquet") for c in card["configs"] for d in c["data_files"])


def test_hub_sources_with_splits_remux_as_their_local_copies(zoo: Path, tmp_path: Path) -> None:
    """A shardkit repo and a plain Parquet repo with splits on the loopback Hub: the same output,
    byte for byte, as remuxing the same folders on disk (card fields read from the Hub's README)."""
    from tests.test_push import REPO, hub_env, pushed_copy

    parquet = write_parquet_zoo(tmp_path / "zoo-parquet")
    local_zoo, local_parquet = tmp_path / "local-zoo" / "out", tmp_path / "local-parquet" / "out"
    remux(zoo, local_zoo, *IDENTITY)
    remux(parquet, local_parquet, *IDENTITY)
    upload = (
        "import sys; from huggingface_hub import HfApi; api = HfApi();"
        " api.create_repo('tester/zoo-parquet', repo_type='dataset');"
        " api.upload_folder(repo_id='tester/zoo-parquet', repo_type='dataset', folder_path=sys.argv[1])"
    )
    with pushed_copy(zoo, tmp_path) as (hub, _):
        up = subprocess.run(
            [sys.executable, "-c", upload, str(parquet)], env=hub_env(hub.url, tmp_path / "up"), capture_output=True
        )
        assert up.returncode == 0, up.stderr[-2000:]
        env = hub_env(hub.url, tmp_path / "reader-home", token=None)
        from_hub = remux(REPO, tmp_path / "hub-zoo" / "out", *IDENTITY, env=env)
        remux("tester/zoo-parquet", tmp_path / "hub-parquet" / "out", *IDENTITY, env=env)
    assert from_hub["splits"] == SPLITS and from_hub["card_fields"]
    assert tree_bytes(tmp_path / "hub-zoo" / "out") == tree_bytes(local_zoo)
    assert tree_bytes(tmp_path / "hub-parquet" / "out") == tree_bytes(local_parquet)


def test_a_split_name_the_packer_cannot_take_is_made_one(tmp_path: Path) -> None:
    """datasets allows dots in split names (``train.clean.100``); a split of the output is a folder."""
    source = write_parquet_zoo(tmp_path / "zoo-parquet")
    out = tmp_path / "out"
    summary = remux(f"{source}/data/test-*.parquet", out, *IDENTITY, "--split", "held.out")
    assert summary["splits"] == ["held.out"] and list(manifest(out)["splits"]) == ["held_out"]
    assert sorted(r["n"] for r in split_rows(out, "held_out").values()) == list(range(20, 26))
