"""The dataset repo template: generation, name checks, and one dataset loading the same in every datasets."""

from __future__ import annotations

import json
import os
import py_compile
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from cookiecutter.main import cookiecutter
from datasets import load_dataset
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard

from shardkit.card import GITATTRIBUTES_LINES, card_repo, split_front_matter
from shardkit.cli import TEMPLATE_DIR
from shardkit.formats.zip import iter_members
from tests.http_server import serve_directory
from tests.support.cli import run_cli
from tests.support.corpus import tree_bytes
from tests.support.readback import DIGEST_SCRIPT, DS36_PYTHON, expected_rows, read_with
from tests.test_hostile_shards import zip_bytes

SCRIPTS = Path(sys.executable).parent


def generate(tmp_path: Path, **answers: str) -> Path:
    return Path(
        cookiecutter(TEMPLATE_DIR, no_input=True, extra_context=answers, output_dir=str(tmp_path), default_config=True)
    )


def shardkit_new(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`shardkit new` with ``args``, in this process (tests/support/cli.py): a run per answer, many
    answers. Given ``-o`` (absolute), it makes nothing in the current folder; cookiecutter changes
    folder while it generates and changes back, in this process as in one of its own."""
    return run_cli("shardkit", "new", *args)


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


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BAD_NAMES))
def test_bad_names_are_refused_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    config = tmp_path / "cookiecutter.yaml"  # keeps a user's ~/.cookiecutterrc out of the test
    config.write_text("default_context: {}\n")
    monkeypatch.setenv("COOKIECUTTER_CONFIG", str(config))  # (read by cookiecutter when called, not on import)
    out = tmp_path / "out"
    result = shardkit_new("--no-input", "-o", out, f"dataset_name={name}", "namespace=me")
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
    result = shardkit_new("--no-input", "-o", tmp_path, "namespace=a b")
    assert result.returncode == 2 and "namespace 'a b' contains ' '" in result.stderr


ANSWER_PROBLEMS = {
    "licence=mit": "unknown answer 'licence' (did you mean 'license'?)",
    "license=cc-by-4": "license 'cc-by-4' is not a Hub license id (did you mean cc-by-4.0",
    "license=GPL-3.0": "license 'GPL-3.0' is not a Hub license id (did you mean gpl-3.0?)",
    "modality=video": "modality 'video' is not one of: image, audio",
    "task_category=audio-classification": "task_category 'audio-classification' does not fit modality 'image'",
    "language=English": "language 'English': 'English' is not a language code; give ISO 639 codes such as en, fr",
    "language=fr,el;ja": "language 'fr,el;ja': 'el;ja' is not a language code",
    "language=fr, EN, x": "language 'fr, EN, x': 'EN', 'x' is not a language code",
    "language=": "language is empty; give a language code such as en (several: en, fr)",
    "language= , ": "language is empty",
}


@pytest.mark.slow
@pytest.mark.parametrize("answer", sorted(ANSWER_PROBLEMS))
def test_wrong_answers_are_one_clear_line_each_and_nothing_is_created(tmp_path: Path, answer: str) -> None:
    out = tmp_path / "out"
    result = shardkit_new("--no-input", "-o", out, "namespace=me", answer)
    assert result.returncode == 2
    assert f"error: {ANSWER_PROBLEMS[answer]}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def front_matter(card: Path) -> Any:
    """The card's YAML front matter, read as the Hub reads it (yaml.safe_load)."""
    head, sep, _ = card.read_text(encoding="utf-8").removeprefix("---\n").partition("\n---\n")
    assert sep
    return yaml.safe_load(head)


@pytest.mark.parametrize(
    ("answer", "codes"),
    [
        ("fr,el,ja", ["fr", "el", "ja"]),
        (" fr , el,ja, ", ["fr", "el", "ja"]),
        ("en", ["en"]),
        ("pt-BR, zh-Hant, fra", ["pt-BR", "zh-Hant", "fra"]),
    ],
)
def test_several_languages_are_a_yaml_list_of_codes(tmp_path: Path, answer: str, codes: list[str]) -> None:
    result = shardkit_new("--no-input", "-o", tmp_path, "namespace=me", f"language={answer}")
    assert result.returncode == 0, result.stderr
    assert front_matter(tmp_path / "my-image-dataset" / "README.md")["language"] == codes


def test_the_templates_own_hook_checks_each_language_code(tmp_path: Path) -> None:
    from cookiecutter.exceptions import FailedHookException

    with pytest.raises(FailedHookException):
        generate(tmp_path, language="fr,français")
    assert list(tmp_path.iterdir()) == []
    assert front_matter(generate(tmp_path, language="fr, el") / "README.md")["language"] == ["fr", "el"]


def test_no_input_needs_a_namespace_and_any_hub_license_is_taken(tmp_path: Path) -> None:
    base = ["--no-input", "-o", str(tmp_path)]
    placeholder = shardkit_new(*base, "dataset_name=x1")
    assert placeholder.returncode == 2 and "namespace: give the Hub user or organization" in placeholder.stderr
    gpl = shardkit_new(*base, "dataset_name=x2", "namespace=me", "license=gpl")
    assert gpl.returncode == 0, gpl.stderr
    assert card_of(tmp_path / "x2")["license"] == "gpl"


def test_audio_gets_an_audio_task_and_description(tmp_path: Path) -> None:
    repo = generate(tmp_path, dataset_name="clips", modality="audio")
    card = card_of(repo)
    assert card["task_categories"] == ["audio-classification"]
    assert "Audio clips with their metadata" in (repo / "README.md").read_text()


def test_shardkit_new_takes_answers_and_refuses_to_overwrite(tmp_path: Path) -> None:
    cmd = ["--no-input", "-o", str(tmp_path), "namespace=me", "dataset_name=yfcc-mini"]
    cmd.append("license=mit")
    first = shardkit_new(*cmd)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(tmp_path / "yfcc-mini")
    assert card_of(tmp_path / "yfcc-mini")["license"] == "mit"
    again = shardkit_new(*cmd)
    assert again.returncode == 1 and "already exists; pass --overwrite" in again.stderr
    bad = shardkit_new(*cmd[:-1], "license")
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
        assert sheet.format == "JPEG" and sheet.size == (4 * 160, 3 * (160 + 40))  # a cell and two caption lines
    assert "](preview.jpg)" in (packed_template / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "not-streaming"])
def test_datasets_5_without_script_reads_every_row_and_byte(
    packed_template: Path, streaming: bool, tmp_path: Path
) -> None:
    got = read_with(sys.executable, packed_template, streaming, tmp_path)
    assert got["version"].startswith("5.")
    assert got["rows"] == expected_rows()


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("crc", "data/3.zip: CRC mismatch in member 'images/"),
        ("unsafe name", "data/3.zip: refusing unsafe member name '../../escape.jpg'"),
        (
            "manifest escape",
            "shards.json: shards[0].file is '../outside.zip', not data/[<split>/][<folder>/]<hex prefix>.zip",
        ),
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
    from shardkit.cli import drop_template_bytecode

    only_ours = tmp_path / "a"
    (only_ours / "__pycache__").mkdir(parents=True)
    (only_ours / "__pycache__" / "pets_loader.cpython-311.pyc").write_bytes(b"x")
    drop_template_bytecode(str(only_ours))
    assert not (only_ours / "__pycache__").exists()
    theirs = tmp_path / "b"
    (theirs / "__pycache__").mkdir(parents=True)
    (theirs / "__pycache__" / "pets_loader.cpython-311.pyc").write_bytes(b"x")
    (theirs / "__pycache__" / "tools.cpython-311.pyc").write_bytes(b"y")
    drop_template_bytecode(str(theirs))
    assert [p.name for p in (theirs / "__pycache__").iterdir()] == ["tools.cpython-311.pyc"]


# --- `shardkit new` asked, as a new author meets it: each question once, each answer checked at once ---

#: The template's questions in the order asked, and the line that asks each (cookiecutter.json).
QUESTIONS = {
    key: text for key, text in json.loads((Path(TEMPLATE_DIR) / "cookiecutter.json").read_text())["__prompts__"].items()
}
NAME_PROMPT = QUESTIONS["dataset_name"]
TASKS = json.loads((Path(TEMPLATE_DIR) / "cookiecutter.json").read_text())["__tasks"]


@pytest.fixture
def cookiecutter_config(tmp_path: Path) -> dict[str, str]:
    """A cookiecutter config of the test's own: no ~/.cookiecutterrc defaults, and its clones and
    replay files in tmp_path rather than the home folder."""
    config = tmp_path / "cookiecutter.yaml"
    config.write_text(
        f"default_context: {{}}\ncookiecutters_dir: {tmp_path / 'clones'}\nreplay_dir: {tmp_path / 'replay'}\n"
    )
    return {"COOKIECUTTER_CONFIG": str(config)}


def typed(**replies: str | list[str]) -> str:
    """What a user types: for each question in order, the replies given (Enter: the default)."""
    replies.setdefault("namespace", "me")
    lines: list[str] = []
    for key in QUESTIONS:
        reply = replies.get(key, "")
        lines += reply if isinstance(reply, list) else [reply]
    return "".join(f"{line}\n" for line in lines)


def ask_new(out: Path, config: dict[str, str], text: str, *args: str) -> Result:
    from shardkit.cli import main

    return CliRunner().invoke(main, ["new", "-o", str(out), *args], input=text, env=config)


def listed_choices(output: str, key: str) -> list[list[str]]:
    """The numbered choices shown for ``key``, each time it was asked."""
    shown = []
    for block in output.split(f"({key}):\n")[1:]:
        shown.append(re.findall(r"^  \d+ - (\S+)$", block.split("choose")[0], re.MULTILINE))
    return shown


def rerun_line(output: str) -> str:
    lines = output.splitlines()
    return lines[lines.index("to make this repo again without the questions:") + 1].strip()


def test_each_question_is_asked_once_and_a_bad_name_again_with_the_reason(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    out = tmp_path / "out"
    result = ask_new(out, cookiecutter_config, typed(dataset_name=["my cats", "my_cool-cats"]))
    assert result.exit_code == 0, result.output
    assert result.output.count(NAME_PROMPT) == 2  # once, then once again after the bad answer
    reason = "error: dataset_name 'my cats' contains ' '; use only letters, digits, '-', '_' and '.'\n"
    assert result.output.count(reason) == 1
    assert result.output.index(reason) < result.output.rindex(NAME_PROMPT)  # said before it is asked again
    assert "Traceback" not in result.output and "ERROR" not in result.output
    for key, text in QUESTIONS.items():
        if key != "dataset_name":
            assert result.output.count(text) == 1, key  # cookiecutter asks nothing of its own
    repo = out / "my_cool-cats"
    assert result.stdout.splitlines() == [str(repo)]  # stdout stays the path, for scripts
    card = card_of(repo)
    assert card["pretty_name"] == "My Cool Cats"  # the default rendered from the name, as cookiecutter does
    assert card_repo(str(repo)) == "me/my_cool-cats"
    assert (repo / "my_cool_cats_loader.py").is_file()


def test_the_task_choices_are_the_modalitys_own(tmp_path: Path, cookiecutter_config: dict[str, str]) -> None:
    image = ask_new(tmp_path / "i", cookiecutter_config, typed(dataset_name="pics", task_category="2"))
    assert image.exit_code == 0, image.output
    assert listed_choices(image.output, "task_category") == [[*TASKS["image"], "other"]]
    assert "audio" not in image.output.split("(task_category):")[1].split("choose")[0]
    assert card_of(tmp_path / "i" / "pics")["task_categories"] == ["text-to-image"]  # chosen by its number

    audio = ask_new(
        tmp_path / "a",
        cookiecutter_config,
        typed(dataset_name="clips", modality="2", task_category=["image-classification", "3"]),
    )
    assert audio.exit_code == 0, audio.output
    assert listed_choices(audio.output, "modality") == [["image", "audio"]]  # asked before the task
    assert audio.output.index("(modality)") < audio.output.index("(task_category)")
    shown = listed_choices(audio.output, "task_category")
    assert shown == [[*TASKS["audio"], "other"]] * 2  # asked again after the image task
    assert not any("image" in task for task in shown[0])
    assert "error: task_category 'image-classification' does not fit modality 'audio'" in audio.output
    card = card_of(tmp_path / "a" / "clips")
    assert card["task_categories"] == ["text-to-audio"] and card["tags"] == ["shardkit", "audio"]
    assert "Audio clips with their metadata" in (tmp_path / "a" / "clips" / "README.md").read_text()


def test_a_bad_license_namespace_or_homepage_is_asked_again(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    result = ask_new(
        tmp_path,
        cookiecutter_config,
        typed(
            dataset_name="cats",
            namespace=["", "your-username", "me"],
            license=["GPL-3.0", "?", "cc by 4.0", "gpl-3.0"],
            homepage=["example.org", "https://example.org/x y", "https://example.org/x"],
        ),
    )
    assert result.exit_code == 0, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: namespace is empty",
        "error: namespace: give the Hub user or organization that will own the dataset;"
        " the placeholder 'your-username' would be published in the card",
        "error: license 'GPL-3.0' is not a Hub license id (did you mean gpl-3.0?); the ids are listed at"
        " https://huggingface.co/docs/hub/repositories-licenses (none fits: other)",
        "error: license 'cc by 4.0' is not a Hub license id (did you mean cc-by-4.0 or cc-by-sa-4.0 or cc-by-nd-4.0?);"
        " the ids are listed at"
        " https://huggingface.co/docs/hub/repositories-licenses (none fits: other)",
        "error: homepage 'example.org' is not an http(s) URL (https://...); leave it out if there is none",
        "error: homepage 'https://example.org/x y' is not an http(s) URL (https://...); leave it out if there is none",
    ]
    assert "  apache-2.0, mit," in result.output and "llama3.1" in result.output  # "?" lists the Hub's ids
    assert result.output.count(QUESTIONS["license"]) == 4
    card = card_of(tmp_path / "cats")
    assert card["license"] == "gpl-3.0" and card_repo(str(tmp_path / "cats")) == "me/cats"
    assert "**Homepage:** <https://example.org/x>" in (tmp_path / "cats" / "README.md").read_text()


#: Free text a shell, YAML, Jinja or BibTeX could each read as something else.
HOSTILE_TEXT = {
    "pretty_name": 'Cats: "a study" # 1 $HOME `id` it\'s',
    "description": "Uses {{ cookiecutter.dataset_name }} and {% raw %}x{% endraw %} and {# not a comment #} verbatim.",
    "citation": "@article{x, title={{BERT}: Pre-training}, note={\\o/ ü 😀 {% endraw %}}}",
}


def test_the_command_printed_makes_the_same_repo_byte_for_byte(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    out = tmp_path / "out dir"
    asked = ask_new(out, cookiecutter_config, typed(dataset_name="cats", modality="audio", **HOSTILE_TEXT))
    assert asked.exit_code == 0, asked.output
    first = tree_bytes(out / "cats")
    card = card_of(out / "cats")
    assert card["pretty_name"] == HOSTILE_TEXT["pretty_name"]
    readme = first["README.md"].decode()
    assert HOSTILE_TEXT["description"] in readme and HOSTILE_TEXT["citation"] in readme  # not read as Jinja
    command = rerun_line(asked.output)
    assert command.startswith("shardkit new --no-input -o ")
    assert "modality=audio" in command and "license=cc-by-4.0" in command  # every answer, defaults too
    shutil.rmtree(out)
    again = subprocess.run(
        ["bash", "-c", command],  # as a user pastes it: the shell's quoting, the installed command
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **cookiecutter_config, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}"},
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(out / "cats")
    assert tree_bytes(out / "cats") == first


def test_an_existing_folder_is_refused_at_the_name_and_the_name_asked_again(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "mine.txt").write_text("the user's")
    result = ask_new(tmp_path, cookiecutter_config, typed(dataset_name=["cats", "dogs"], license="mit"))
    assert result.exit_code == 0, result.output
    reason = (
        f'error: "{tmp_path / "cats"}" directory already exists; pass --overwrite to write into it,'
        " or choose another name"
    )
    assert result.output.count(reason + "\n") == 1
    assert result.output.count(NAME_PROMPT) == 2  # asked again at once, not after the other questions
    assert result.output.index(reason) < result.output.index(QUESTIONS["namespace"])
    for key, text in QUESTIONS.items():
        if key != "dataset_name":
            assert result.output.count(text) == 1, key
    assert [p.name for p in (tmp_path / "cats").iterdir()] == ["mine.txt"]  # nothing written
    assert card_of(tmp_path / "dogs")["license"] == "mit"

    into_it = ask_new(tmp_path, cookiecutter_config, typed(dataset_name="cats", license="mit"), "--overwrite")
    assert into_it.exit_code == 0, into_it.output
    assert into_it.output.count(NAME_PROMPT) == 1 and "error" not in into_it.output
    assert card_of(tmp_path / "cats")["license"] == "mit"  # an unpacked folder may be written into
    assert (tmp_path / "cats" / "mine.txt").read_text() == "the user's"


def test_an_existing_folder_given_as_an_answer_is_refused_before_any_question(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    (tmp_path / "cats").mkdir()
    for args in (["dataset_name=cats"], ["--no-input", "namespace=me", "dataset_name=cats"]):
        result = ask_new(tmp_path, cookiecutter_config, typed(), *args)
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines() == [
            f'error: "{tmp_path / "cats"}" directory already exists; pass --overwrite to write into it,'
            " or choose another name"
        ]
        assert not any(text in result.output for text in QUESTIONS.values())  # nothing asked
    (tmp_path / "my-image-dataset").mkdir()  # the default name, under --no-input
    default = ask_new(tmp_path, cookiecutter_config, "", "--no-input", "namespace=me")
    assert default.exit_code == 1 and 'my-image-dataset" directory already exists' in default.stderr
    assert [p.name for p in (tmp_path / "cats").iterdir()] == []


@pytest.mark.parametrize("mark", ["shards.json", ".shardkit"])
def test_a_packed_folder_is_never_written_not_even_with_overwrite(
    tmp_path: Path, cookiecutter_config: dict[str, str], mark: str
) -> None:
    packed = tmp_path / "photos"
    packed.mkdir()
    (packed / "README.md").write_text("---\nconfigs: []\n---\nThe author's own words.\n")
    if mark == ".shardkit":
        (packed / mark).mkdir()
        (packed / mark / "state").write_text("{}")
    else:
        (packed / mark).write_text("{}")
    before = tree_bytes(packed)
    reason = (
        f'error: "{packed}" holds a dataset packed by shardkit ({mark}); shardkit new would replace its card:'
        " choose another name (pack-shards keeps an existing card up to date by itself)"
    )
    for args in (
        ["--no-input", "namespace=me", "dataset_name=photos"],
        ["--no-input", "--overwrite", "namespace=me", "dataset_name=photos"],
        ["--overwrite", "dataset_name=photos"],
    ):
        refused = ask_new(tmp_path, cookiecutter_config, typed(), *args)
        assert refused.exit_code == 1, refused.output
        assert refused.stderr.splitlines() == [reason]  # one line, and no advice to --overwrite
        assert NAME_PROMPT not in refused.output
    for args in ([], ["--overwrite"]):
        asked = ask_new(tmp_path, cookiecutter_config, typed(dataset_name=["photos", "photos2"]), *args)
        assert asked.exit_code == 0, asked.output
        assert asked.output.count(reason + "\n") == 1 and asked.output.count(NAME_PROMPT) == 2
        assert "pass --overwrite" not in asked.output
        assert card_repo(str(tmp_path / "photos2")) == "me/photos2"
        shutil.rmtree(tmp_path / "photos2")
    assert tree_bytes(packed) == before


@pytest.mark.parametrize("answered", [0, 2, 9])
def test_input_ending_mid_questions_leaves_nothing_and_says_how_to_go_on(
    tmp_path: Path, cookiecutter_config: dict[str, str], answered: int
) -> None:
    out = tmp_path / "out"
    text = "".join(typed(dataset_name="cats").splitlines(keepends=True)[:answered])
    result = ask_new(out, cookiecutter_config, text)
    assert result.exit_code == 130
    last = result.stderr.splitlines()[-1]
    assert not out.exists()
    if not answered:
        assert last == "stopped: nothing was created"
        return
    assert last.startswith("stopped: nothing was created; to go on from the answers given: shardkit new -o ")
    assert last.endswith({2: " dataset_name=cats namespace=me", 9: " language=en homepage="}[answered])
    # The command given asks only what is left.
    rest = "".join(typed(dataset_name="cats").splitlines(keepends=True)[answered:])
    go_on = shlex.split(last.split(": ", 2)[2])
    resumed = ask_new(out, cookiecutter_config, rest, *go_on[4:])
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.count(NAME_PROMPT) == 0 and resumed.output.count(QUESTIONS["citation"]) == 1
    assert card_repo(str(out / "cats")) == "me/cats"


def test_ctrl_c_mid_questions_is_one_line_exit_130_and_nothing_written(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    proc = subprocess.Popen(
        [str(SCRIPTS / "shardkit"), "new", "-o", str(tmp_path / "out")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, **cookiecutter_config},
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(b"cats\nme\n")
        proc.stdin.flush()
        seen = b""
        deadline = time.monotonic() + 60  # only so that a broken `new` fails instead of hanging
        while QUESTIONS["pretty_name"].encode() not in seen:  # waiting at the third question
            ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, seen
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, seen
            seen += chunk
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    assert rest.decode().strip().splitlines() == [
        "stopped: nothing was created; to go on from the answers given:"
        f" shardkit new -o {shlex.quote(str(tmp_path / 'out'))} dataset_name=cats namespace=me"
    ]
    assert not (tmp_path / "out").exists()


def test_the_hook_and_shardkit_check_with_the_same_rules(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """One definition of each rule: a plain cookiecutter run's hook says what `shardkit new` says."""
    from cookiecutter.exceptions import FailedHookException

    from shardkit.scaffold import check_answer, load_questions, load_rules

    questions = load_questions(TEMPLATE_DIR)
    rules = load_rules(TEMPLATE_DIR)
    assert questions is not None and rules is not None
    bad = {
        "dataset_name": "a..b",
        "namespace": "me/you",
        "license": "CC-BY-4.0",
        "task_category": "automatic-speech-recognition",
        "homepage": "ftp://x",
        "citation": "x\n<!-- /shardkit:stats -->",
    }
    for key, value in bad.items():
        capfd.readouterr()
        with pytest.raises(FailedHookException):
            generate(tmp_path, **{key: value})
        said = check_answer(questions, rules, key, value, {})
        assert said and f"ERROR: {said[0]}\n" in capfd.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert not (Path(TEMPLATE_DIR) / "hooks" / "__pycache__").exists()  # neither left bytecode in the template


def test_no_input_answers_are_taken_verbatim(tmp_path: Path, cookiecutter_config: dict[str, str]) -> None:
    args = [f"{key}={value}" for key, value in HOSTILE_TEXT.items()]
    result = ask_new(tmp_path, cookiecutter_config, "", "--no-input", "namespace=me", *args)
    assert result.exit_code == 0, result.output
    assert card_of(tmp_path / "my-image-dataset")["pretty_name"] == HOSTILE_TEXT["pretty_name"]
    readme = (tmp_path / "my-image-dataset" / "README.md").read_text()
    assert HOSTILE_TEXT["description"] in readme and HOSTILE_TEXT["citation"] in readme


def git_template(tmp_path: Path, files: dict[str, str]) -> str:
    """A template in a git repository of its own, as a URL cookiecutter clones."""
    repo = tmp_path / "template.git"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "template"], check=True)
    return f"file://{repo}"


def test_a_remote_template_asks_its_own_questions(tmp_path: Path, cookiecutter_config: dict[str, str]) -> None:
    files = {"cookiecutter.json": '{"name": "x"}', "{{cookiecutter.name}}/a.txt": "{{cookiecutter.name}}"}
    url = git_template(tmp_path, files)
    result = ask_new(tmp_path / "out", cookiecutter_config, "hello\n", "--template", url)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "hello" / "a.txt").read_text() == "hello"
    assert "to make this repo again" not in result.output  # its questions were cookiecutter's


def test_the_shipped_template_cloned_from_git_still_checks_its_answers(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    """The hook finds its rules in the clone (``_repo_dir``), not in an installed shardkit."""
    files = {
        str(path.relative_to(TEMPLATE_DIR)): path.read_text()
        for path in Path(TEMPLATE_DIR).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    url = git_template(tmp_path, {f"templates/hub-dataset/{rel}": text for rel, text in files.items()})
    out = tmp_path / "out"
    cmd = [str(SCRIPTS / "shardkit"), "new", "-o", str(out), "--template", url, "--directory", "templates/hub-dataset"]
    cmd += ["--no-input", "namespace=me"]
    env = {**os.environ, **cookiecutter_config}
    bad = subprocess.run([*cmd, "dataset_name=a..b"], capture_output=True, text=True, check=False, env=env)
    assert bad.returncode == 1
    assert "ERROR: dataset_name 'a..b' may not contain '--' or '..'\n" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not out.exists() or list(out.iterdir()) == []
    good = subprocess.run([*cmd, "dataset_name=cats"], capture_output=True, text=True, check=False, env=env)
    assert good.returncode == 0, good.stderr
    assert card_repo(str(out / "cats")) == "me/cats"


def test_a_local_template_of_ones_own_is_asked_with_cookiecutters_semantics(
    tmp_path: Path, cookiecutter_config: dict[str, str]
) -> None:
    """Key order, a list is a choice (first the default), a default rendered from the answers
    before it, ``_``/``__`` keys never asked; no rules file: only the choices are checked."""
    template = tmp_path / "mine"
    (template / "{{cookiecutter.slug}}").mkdir(parents=True)
    (template / "cookiecutter.json").write_text(
        json.dumps(
            {
                "title": "Hello World",
                "slug": "{{ cookiecutter.title.lower().replace(' ', '-') }}",
                "kind": ["small", "large"],
                "_private": "{{ not rendered }}",
                "__shout": "{{ cookiecutter.title.upper() }}",
                "__prompts__": {"kind": {"__prompt__": "How big", "small": "Small one"}},
            }
        )
    )
    (template / "{{cookiecutter.slug}}" / "out.txt").write_text(
        "{{ cookiecutter.kind }} {{ cookiecutter.__shout }} {{ cookiecutter._private }}\n"
    )
    result = ask_new(tmp_path / "out", cookiecutter_config, "My Thing\n\nhuge\n2\n", "--template", str(template))
    assert result.exit_code == 0, result.output
    assert "Hello World" in result.output and "[my-thing]" in result.output  # rendered from the title typed
    assert "error: kind 'huge' is not one of: small, large" in result.output
    assert listed_choices(result.output, "kind") == [["small", "large"]] * 2 and "How big (kind):" in result.output
    assert "_private" not in result.output and "shout" not in result.output
    assert (tmp_path / "out" / "my-thing" / "out.txt").read_text() == "large MY THING {{ not rendered }}\n"
    command = rerun_line(result.output)
    assert f"--template {shlex.quote(str(template))}" in command
    assert command.endswith("'title=My Thing' slug=my-thing kind=large")
