"""The dataset repo template: generation, name checks, and one dataset loading the same in every datasets."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter
from datasets import load_dataset
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard

from shardkit.card import GITATTRIBUTES_LINES, card_repo, split_front_matter
from shardkit.cli import TEMPLATE_DIR
from shardkit.formats.zip import iter_members
from tests.http_server import serve_directory
from tests.readback import DIGEST_SCRIPT, DS36_PYTHON, expected_rows, read_with
from tests.test_hostile_shards import zip_bytes

SCRIPTS = Path(sys.executable).parent


def generate(tmp_path: Path, **answers: str) -> Path:
    return Path(
        cookiecutter(TEMPLATE_DIR, no_input=True, extra_context=answers, output_dir=str(tmp_path), default_config=True)
    )


def card_of(repo: Path) -> dict[str, Any]:
    data, _ = split_front_matter((repo / "README.md").read_text(encoding="utf-8"))
    return data


def test_defaults_give_a_loadable_repo_skeleton(tmp_path: Path) -> None:
    repo = generate(tmp_path)
    assert repo.name == "my-image-dataset"
    assert sorted(p.name for p in repo.iterdir()) == [
        ".gitattributes",
        ".gitignore",
        "README.md",
        "data",
        "my_image_dataset_loader.py",
    ]
    card = card_of(repo)
    assert card["license"] == "cc-by-4.0" and card["task_categories"] == ["image-classification"]
    # Before packing the card declares the file column and the key; packing adds every column.
    assert card["dataset_info"]["features"] == [{"name": "image", "dtype": "image"}, {"name": "key", "dtype": "string"}]
    configs = MetadataConfigs.from_dataset_card_data(DatasetCard.load(repo / "README.md").data)
    assert configs["default"]["data_files"] == [{"split": "train", "path": "data/*.zip"}]
    # The template's LFS rules are the ones pack-shards adds to any repo: one list, two places.
    assert (repo / ".gitattributes").read_text().splitlines() == GITATTRIBUTES_LINES
    assert ".shardkit/" in (repo / ".gitignore").read_text()
    py_compile.compile(str(repo / "my_image_dataset_loader.py"), doraise=True)


def test_overrides_and_free_text_that_would_break_yaml(tmp_path: Path) -> None:
    repo = generate(
        tmp_path,
        dataset_name="cats",
        namespace="lab",
        pretty_name='Cats: "a study" # 1',
        description="Cats: on stairs.",
        license="cc0-1.0",
        modality="audio",
        task_category="audio-classification",
    )
    card = card_of(repo)
    assert card["pretty_name"] == 'Cats: "a study" # 1'
    assert card["license"] == "cc0-1.0" and card["tags"] == ["shardkit", "audio"]
    text = (repo / "README.md").read_text()
    assert card_repo(str(repo)) == "lab/cats"  # what the load examples will name once packed
    assert "--class-label label" in text  # an audio-classification dataset: the maintainer is told of labels
    loader = repo / "cats_loader.py"
    py_compile.compile(str(loader), doraise=True)
    assert '_FILE_COLUMN = "audio"' in loader.read_text()


BAD_NAMES = {
    "": "dataset_name is empty",
    "my dataset": "contains ' '; use only letters, digits, '-', '_' and '.'",
    "-dash": "may not start or end with '-' or '.'",
    "dot.": "may not start or end with '-' or '.'",
    "a--b": "may not contain '--' or '..'",
    "a..b": "may not contain '--' or '..'",
    "repo.git": "may not end in '.git'",
    "x" * 97: "is 97 characters long; the Hub allows at most 96",
    "ümlaut": "contains 'ü'",
}


@pytest.mark.parametrize("name", sorted(BAD_NAMES))
def test_bad_names_are_refused_with_the_reason(tmp_path: Path, name: str) -> None:
    config = tmp_path / "cookiecutter.yaml"  # keeps a user's ~/.cookiecutterrc out of the test
    config.write_text("default_context: {}\n")
    out = tmp_path / "out"
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "new", "--no-input", "-o", str(out), f"dataset_name={name}", "namespace=me"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COOKIECUTTER_CONFIG": str(config)},
    )
    assert result.returncode == 2
    assert BAD_NAMES[name] in result.stderr
    assert "nothing was created" in result.stderr
    assert not out.exists() or list(out.iterdir()) == []  # nothing created


@pytest.mark.parametrize("name", ["a..b", "my dataset"])
def test_the_templates_own_hook_refuses_bad_names_for_plain_cookiecutter(tmp_path: Path, name: str) -> None:
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        generate(tmp_path, dataset_name=name)
    assert list(tmp_path.iterdir()) == []


def test_the_templates_own_hook_refuses_a_homepage_that_is_not_a_link(tmp_path: Path) -> None:
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        generate(tmp_path, homepage="example.org")
    assert list(tmp_path.iterdir()) == []
    repo = generate(tmp_path, homepage="https://example.org/x")
    assert "**Homepage:** <https://example.org/x>" in (repo / "README.md").read_text()


@pytest.mark.parametrize("key", ["pretty_name", "description", "citation", "language"])
def test_the_templates_own_hook_refuses_a_line_that_reads_as_a_card_marker(tmp_path: Path, key: str) -> None:
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        generate(tmp_path, **{key: "Text\n<!-- shardkit:stats -->\n"})
    assert list(tmp_path.iterdir()) == []


def test_bad_namespace_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "new", "--no-input", "-o", str(tmp_path), "namespace=a b"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "namespace 'a b' contains ' '" in result.stderr


ANSWER_PROBLEMS = {
    "licence=mit": "unknown answer 'licence' (did you mean 'license'?)",
    "license=cc-by-4": "license 'cc-by-4' is not a Hub license id (did you mean cc-by-4.0",
    "license=GPL-3.0": "license 'GPL-3.0' is not a Hub license id (did you mean gpl-3.0?)",
    "modality=video": "modality 'video' is not one of: image, audio",
    "task_category=audio-classification": "task_category 'audio-classification' does not fit modality 'image'",
}


@pytest.mark.parametrize("answer", sorted(ANSWER_PROBLEMS))
def test_wrong_answers_are_one_clear_line_each_and_nothing_is_created(tmp_path: Path, answer: str) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "new", "--no-input", "-o", str(out), "namespace=me", answer],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"error: {ANSWER_PROBLEMS[answer]}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_no_input_needs_a_namespace_and_any_hub_license_is_taken(tmp_path: Path) -> None:
    base = [str(SCRIPTS / "shardkit"), "new", "--no-input", "-o", str(tmp_path)]
    placeholder = subprocess.run([*base, "dataset_name=x1"], capture_output=True, text=True, check=False)
    assert placeholder.returncode == 2 and "namespace: give the Hub user or organization" in placeholder.stderr
    gpl = subprocess.run([*base, "dataset_name=x2", "namespace=me", "license=gpl"], capture_output=True, text=True)
    assert gpl.returncode == 0, gpl.stderr
    assert card_of(tmp_path / "x2")["license"] == "gpl"


def test_audio_gets_an_audio_task_and_description(tmp_path: Path) -> None:
    repo = generate(tmp_path, dataset_name="clips", modality="audio")
    card = card_of(repo)
    assert card["task_categories"] == ["audio-classification"]
    assert "Audio clips with their metadata" in (repo / "README.md").read_text()


def test_shardkit_new_takes_answers_and_refuses_to_overwrite(tmp_path: Path) -> None:
    cmd = [
        str(SCRIPTS / "shardkit"),
        "new",
        "--no-input",
        "-o",
        str(tmp_path),
        "namespace=me",
        "dataset_name=yfcc-mini",
    ]
    cmd.append("license=mit")
    first = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(tmp_path / "yfcc-mini")
    assert card_of(tmp_path / "yfcc-mini")["license"] == "mit"
    again = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert again.returncode == 1 and "already exists; pass --overwrite" in again.stderr
    bad = subprocess.run([*cmd[:-1], "license"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "answers are KEY=VALUE, got 'license'" in bad.stderr


# --- end to end: scaffold, pack, load with datasets 5.x and with the script in datasets 3.6 ---


def test_card_and_loader_kept_true_after_packing(packed_template: Path) -> None:
    card = card_of(packed_template)
    assert card["size_categories"] == ["n<1K"]
    assert [f["name"] for f in card["dataset_info"]["features"]][:2] == ["image", "key"]
    assert "300 rows in 16 ZIP shards" in (packed_template / "README.md").read_text()
    loader = (packed_template / "yfcc_mini_loader.py").read_text()
    assert '"name": "latitude"' in loader and '"dtype": "float64"' in loader
    assert card["license"] == "cc-by-4.0"  # the template's answers survive packing
    # The contact sheet: 12 sample images (one per shard) with captions, embedded in the card.
    from PIL import Image

    with Image.open(packed_template / "preview.jpg") as sheet:
        assert sheet.format == "JPEG" and sheet.size == (4 * 160, 3 * (160 + 28))
    assert "](preview.jpg)" in (packed_template / "README.md").read_text()


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "not-streaming"])
def test_datasets_5_without_script_reads_every_row_and_byte(
    packed_template: Path, streaming: bool, tmp_path: Path
) -> None:
    got = read_with(sys.executable, packed_template, streaming, tmp_path)
    assert got["version"].startswith("5.")
    assert got["rows"] == expected_rows()


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "not-streaming"])
def test_datasets_3_6_through_the_loading_script_reads_the_same(
    packed_template: Path, streaming: bool, tmp_path: Path
) -> None:
    assert Path(DS36_PYTHON).exists(), f"{DS36_PYTHON} missing: scripts/test.sh builds it"
    got = read_with(DS36_PYTHON, packed_template / "yfcc_mini_loader.py", streaming, tmp_path)
    assert got["version"] == "3.6.0"
    assert got["rows"] == expected_rows()
    if streaming:
        assert got["n_shards"] == 16  # one unit of work per ZIP shard


def test_datasets_5_refuses_nothing_in_the_generated_repo(packed_template: Path) -> None:
    # datasets >= 4 refuses a repo holding <name>.py; the loader's name differs on purpose.
    assert not (packed_template / "yfcc-mini.py").exists()
    ds = load_dataset(str(packed_template), split="train", streaming=True)
    assert next(iter(ds))["image"].size[0] > 0


def test_script_over_http_makes_requests_per_shard_not_per_image(packed_template: Path, tmp_path: Path) -> None:
    manifest = json.loads((packed_template / "shards.json").read_text())
    shards, images = manifest["totals"]["shards"], manifest["totals"]["rows"]
    with serve_directory(packed_template) as (base, log):
        got = read_with(DS36_PYTHON, packed_template / "yfcc_mini_loader.py", True, tmp_path, data_dir=base)
        zip_requests, all_requests = log.count("/data/"), log.count()
    assert got["rows"] == expected_rows()
    assert got["n_shards"] == shards == 16
    # Each shard is read front to back from one open(): a handful of requests per shard
    # (a HEAD for the size, then ranged GETs), never one or more per image.
    assert shards <= zip_requests <= 4 * shards
    assert all_requests <= 4 * shards + 5
    assert all_requests < images / 4


def _damaged_copy(packed_template: Path, tmp_path: Path, damage: str) -> Path:
    repo = tmp_path / "yfcc-mini"
    shutil.copytree(packed_template, repo, ignore=shutil.ignore_patterns("lock"))
    shard = repo / "data" / "3.zip"
    with open(shard, "rb") as f:
        members = [(m.name, m.data) for m in iter_members(f)]
    if damage == "crc":  # one byte of the first image flipped on disk
        data = bytearray(shard.read_bytes())
        name = members[1][0].encode()
        data[data.index(name, data.index(name) + 1) + len(name) + 100] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage.startswith("manifest"):  # shards.json naming a file outside data/, or a shard twice
        manifest = json.loads((repo / "shards.json").read_text())
        (tmp_path / "outside.zip").write_bytes(shard.read_bytes())
        if damage == "manifest escape":
            manifest["shards"][0]["file"] = "../outside.zip"
        else:
            manifest["shards"].append(manifest["shards"][0])
        (repo / "shards.json").write_text(json.dumps(manifest))
    else:  # a member that would land outside the extraction folder, laid out as shardkit lays out members
        raw = [(name.encode(), data) for name, data in members]
        shard.write_bytes(zip_bytes([raw[0], (b"../../escape.jpg", b"x"), *raw[1:]]))
    return repo


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("crc", "data/3.zip: CRC mismatch in member 'images/"),
        ("unsafe name", "data/3.zip: refusing unsafe member name '../../escape.jpg'"),
        ("manifest escape", "shards.json: shards[0].file is '../outside.zip', not data/[<split>/]<hex prefix>.zip"),
        ("manifest twice", "shards.json: shard 'data/0.zip' is named twice"),
    ],
)
def test_loading_script_refuses_damaged_shards_instead_of_yielding_bad_bytes(
    packed_template: Path, tmp_path: Path, damage: str, message: str
) -> None:
    repo = _damaged_copy(packed_template, tmp_path, damage)
    args = [
        DS36_PYTHON,
        "-c",
        DIGEST_SCRIPT,
        str(repo / "yfcc_mini_loader.py"),
        "1",
        "image",
        str(tmp_path / "c"),
        "{}",
    ]
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode != 0
    assert message in result.stderr


def test_the_loaders_bytecode_copied_from_an_installed_template_is_dropped(tmp_path: Path) -> None:
    """pip byte-compiles the installed template's loading script; cookiecutter copies that cache
    into every new repo. shardkit new removes it, and nothing else of a __pycache__."""
    from shardkit.cli import _drop_template_bytecode

    only_ours = tmp_path / "a"
    (only_ours / "__pycache__").mkdir(parents=True)
    (only_ours / "__pycache__" / "pets_loader.cpython-311.pyc").write_bytes(b"x")
    _drop_template_bytecode(str(only_ours))
    assert not (only_ours / "__pycache__").exists()
    theirs = tmp_path / "b"
    (theirs / "__pycache__").mkdir(parents=True)
    (theirs / "__pycache__" / "pets_loader.cpython-311.pyc").write_bytes(b"x")
    (theirs / "__pycache__" / "tools.cpython-311.pyc").write_bytes(b"y")
    _drop_template_bytecode(str(theirs))
    assert [p.name for p in (theirs / "__pycache__").iterdir()] == ["tools.cpython-311.pyc"]
