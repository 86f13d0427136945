"""The dataset card shardkit publishes (issue 21): true on every pack and push, and complete.

Every load example the card shows is run, as a reader would copy it, with the real datasets
5.x and 3.6 (its loading script), from the folder before a push and from the loopback Hub
server after one, and must give exactly the packed rows of the split it names, labels mapped
back to the input's class names.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import DatasetCard

from shardkit.card import (
    SECTIONS,
    card_facts,
    card_repo,
    features_section,
    set_front_matter_keys,
    set_section,
    split_front_matter,
    write_card,
)
from shardkit.manifest import Manifest, Options, read_manifest
from tests.hub_server import run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import tiny_image, write_jsonl
from tests.support.readback import DS36_PYTHON
from tests.test_push import hub_env, push

LABELS = ("dog", "cat", "bird")  # not sorted: the ClassLabel numbers them in name order
SPLITS = ["train"] * 8 + ["validation"] * 3 + ["test"] * 3
PLACEHOLDERS = ("<namespace>", "your-username", "NAMESPACE", "<name>", "path/to")

#: Runs one example from a card (on stdin), then reports the rows of the ``ds`` it made.
RUN_EXAMPLE = r"""
import json, sys
namespace = {}
exec(sys.stdin.read(), namespace)
ds = namespace["ds"]
names = ds.features["label"].names
print(json.dumps({"names": names, "rows": sorted([row["key"], names[row["label"]]] for row in ds)}))
"""


def make_input(root: Path) -> tuple[Path, Path, dict[str, list[list[str]]]]:
    """14 images, each with a split and a class name; returns the rows each split must hold."""
    images = root / "images"
    images.mkdir(parents=True)
    rows, expected = [], {}
    for i, split in enumerate(SPLITS):
        data = tiny_image(i)
        (images / f"p{i}.jpg").write_bytes(data)
        label = LABELS[i % 3]
        rows.append({"file_name": f"p{i}.jpg", "split": split, "label": label, "caption": f"pet {i}"})
        expected.setdefault(split, []).append([hashlib.sha256(data).hexdigest()[:32], label])
    return images, write_jsonl(root / "meta.jsonl", rows), {k: sorted(v) for k, v in expected.items()}


def run(program: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``program`` (pack-shards, or shardkit and its command), which must succeed, in this process
    (tests/support/cli.py): the packs and `shardkit new` here are many, each a process otherwise."""
    result = run_cli(program, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def pack(images: Path, meta: Path, out: Path, *options: str) -> None:
    run("pack-shards", images, meta, "-o", out, "--class-label", "label", "-q", *options)


def body_of(text: str) -> str:
    return split_front_matter(text)[1]


def section(text: str, name: str) -> str:
    match = re.search(rf"<!-- shardkit:{name}[^>]*-->\n(.*?)<!-- /shardkit:{name} -->", text, re.S)
    assert match, f"no {name} section"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def visible(text: str) -> str:
    """What a Hub visitor sees of a card's text: the body without its HTML comments. Each comment
    must open at the start of a line outside code (an HTML block, which markdown does not show)."""
    body = body_of(text)
    outside_code = re.sub(r"```.*?```", "", body, flags=re.S)
    for match in re.finditer(r"<!--", outside_code):
        assert match.start() == 0 or outside_code[match.start() - 1] == "\n"
    return re.sub(r"<!--.*?-->", "", body, flags=re.S)


def table(text: str, first_header: str) -> list[list[str]]:
    """The rows of the markdown table whose first header cell is ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def run_example(code: str, python: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    result = subprocess.run(
        [python, "-c", RUN_EXAMPLE], input=code, capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )
    assert result.returncode == 0, f"{code}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check_examples(card: str, where: str, expected: dict[str, list[list[str]]], env: dict[str, str], cwd: Path) -> int:
    """Run every load example of ``card`` in ``cwd`` (they must read ``where``: a repo, or the
    folder they run in); each gives its split's rows."""
    usage = section(card, "usage")
    ran = 0
    for code in python_blocks(usage):
        if "duckdb" in code:
            continue  # checked where it can run (a local table; duckdb's hf:// goes to the real Hub)
        source = re.search(r"(?:shardkit\.stream|load_dataset)\(([^,]+),", code)
        assert source, code
        local = {'"."', "os.getcwd()", *re.findall(r'"\./[\w.-]+_loader\.py"', code)}
        assert source.group(1) in (local if where == "." else {json.dumps(where)}), code
        split = re.search(r'split="([^"]+)"', code)
        assert split, code
        python = DS36_PYTHON if 'revision="script"' in code or "_loader.py" in code else sys.executable
        got = run_example(code, python, env, cwd)
        assert got == {"names": sorted(LABELS), "rows": expected[split.group(1)]}, code
        ran += 1
    return ran


# --- a plain pack: a card that is true before it is pushed ------------------------------------------


@pytest.mark.slow
def test_a_plain_packs_card_names_no_placeholder_and_its_examples_read_the_folder(tmp_path: Path) -> None:
    images, meta, expected = make_input(tmp_path / "in")
    out = tmp_path / "plain"
    pack(images, meta, out)
    text = (out / "README.md").read_text(encoding="utf-8")
    for placeholder in PLACEHOLDERS:
        assert placeholder not in text
    assert [m for m in re.findall(r"<!-- shardkit:([a-z]+)", text)] == list(SECTIONS)
    # Before a push the examples read the folder they run in (whatever its name: a copy packs the same).
    usage = section(text, "usage")
    assert "Not on the Hub yet: run these examples inside this folder" in usage and "`shardkit push`" in usage
    assert 'shardkit.stream(".", split="train")  # or "validation", "test"' in usage
    env = hub_env("http://127.0.0.1:9", tmp_path / "home", token=None)  # no Hub: nothing may need one
    assert check_examples(text, ".", expected, env, out) == 2  # shardkit.stream, load_dataset
    (duckdb_example,) = [code for code in python_blocks(usage) if "duckdb" in code]
    shown = subprocess.run(
        [sys.executable, "-c", duckdb_example],
        cwd=out,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert card_repo(str(out)) is None
    assert "declares no license" in section(text, "license")


@pytest.mark.slow
def test_the_templates_placeholder_namespace_is_never_shown_and_the_script_reads_the_folder(tmp_path: Path) -> None:
    """Plain cookiecutter, without shardkit new's check, leaves the namespace `your-username`."""
    from cookiecutter.main import cookiecutter

    from shardkit.cli import TEMPLATE_DIR

    images, meta, expected = make_input(tmp_path / "in")
    out = Path(
        cookiecutter(
            TEMPLATE_DIR,
            no_input=True,
            extra_context={"dataset_name": "pets"},
            output_dir=str(tmp_path),
            default_config=True,
        )
    )
    pack(images, meta, out)
    text = (out / "README.md").read_text(encoding="utf-8")
    assert "your-username" not in visible(text) and card_repo(str(out)) is None
    env = hub_env("http://127.0.0.1:9", tmp_path / "home", token=None)
    # shardkit.stream, load_dataset, and the loading script with datasets 3.6, all from the folder.
    assert check_examples(text, ".", expected, env, out) == 3
    assert 'load_dataset("./pets_loader.py", split="train", trust_remote_code=True)' in text


@pytest.mark.slow
def test_what_is_in_it_features_with_label_names_and_splits_with_their_rows(tmp_path: Path) -> None:
    images, meta, expected = make_input(tmp_path / "in")
    out = tmp_path / "pets"
    pack(images, meta, out, "--keep-source-path")
    text = (out / "README.md").read_text(encoding="utf-8")
    manifest = json.loads((out / "shards.json").read_text())
    stats = section(text, "stats")
    assert stats.startswith(f"14 rows in {manifest['totals']['shards']} ZIP shards (")
    splits = {row[0]: row[1:] for row in table(stats, "split")}
    assert list(splits) == ["`train`", "`validation`", "`test`"]
    for name, (rows, shards, _size) in splits.items():
        split = manifest["splits"][name.strip("`")]
        assert (
            (int(rows), int(shards))
            == (len(expected[name.strip("`")]), split["shards"])
            == (
                split["rows"],
                split["shards"],
            )
        )
    features = table(section(text, "features"), "column")
    assert [row[:2] for row in features] == [
        ["`image`", "image"],
        ["`key`", "string"],
        ["`label`", "ClassLabel (3 classes)"],
        ["`caption`", "string"],
        ["`source_path`", "string"],
    ]
    assert features[2][2] == "`0` bird, `1` cat, `2` dog"
    layout = section(text, "layout")
    assert "`data/<split>/<start>.zip`" in layout and "`data/validation/`" in layout
    assert "the last shard whose name sorts at or before its `key`" in layout
    assert "![A sample of the images with their captions](preview.jpg)" in stats
    # The sections are rewritten on every pack; a second pack of the same input changes nothing.
    pack(images, meta, out, "--keep-source-path")
    assert (out / "README.md").read_text(encoding="utf-8") == text


@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
def test_the_card_built_from_the_manifest_is_the_card_pack_writes(tmp_path: Path, fmt: str) -> None:
    """The card is a function of one facts object, built from the manifest: the facts of a packed
    folder's shards.json (with what only the pack knew: the files' extensions, the preview) write
    the card the pack wrote, byte for byte (splits, class labels, and each format's words)."""
    images, meta, _ = make_input(tmp_path / "in")
    out = tmp_path / "out"
    pack(images, meta, out, "--format", fmt)
    written = (out / "README.md").read_bytes()
    manifest = read_manifest(str(out))
    assert manifest is not None and {s.name for s in manifest.splits()} == {"train", "validation", "test"}
    (out / "README.md").unlink()
    preview = "preview.jpg" if (out / "preview.jpg").exists() else None
    facts = card_facts(manifest, str(out), extensions=[".jpg"], preview=preview)
    assert write_card(str(out), facts) == str(out / "README.md")
    assert (out / "README.md").read_bytes() == written
    assert "ClassLabel (3 classes)" in written.decode() and "| `validation` |" in written.decode()


def features_of(features: list[dict[str, Any]], folder: Path) -> str:
    """The features section of the card of a ZIP dataset with these features (no shard yet)."""
    manifest = Manifest(Options(0, 1 << 30, 1 << 29), "", "image", features, [])
    return features_section(card_facts(manifest, str(folder)))


def test_a_class_label_with_many_names_shows_the_first_20_and_a_count(tmp_path: Path) -> None:
    names = {str(i): f"class_{i:02d}" for i in range(45)}
    features = [{"name": "image", "dtype": "image"}, {"name": "y", "dtype": {"class_label": {"names": names}}}]
    row = table(features_of(features, tmp_path), "column")[1]
    assert row[1] == "ClassLabel (45 classes)"
    assert row[2].startswith("`0` class_00, `1` class_01,") and "`19` class_19," in row[2]
    assert "class_20" not in row[2] and row[2].endswith("... (25 more; all 45 in `dataset_info` above)")


def test_names_that_would_break_a_table_or_inject_html_are_shown_as_written(tmp_path: Path) -> None:
    names = {"0": "a|b", "1": "<script>"}
    features = [{"name": "image", "dtype": "image"}, {"name": "odd|name", "dtype": {"class_label": {"names": names}}}]
    text = features_of(features, tmp_path)
    row = table(text, "column")[1]
    assert row == ["`odd\\|name`", "ClassLabel (2 classes)", "`0` a\\|b, `1` &lt;script&gt;"]
    assert "<script>" not in text


# --- scaffolded, packed, pushed under another name ---------------------------------------------------


@pytest.mark.slow
def test_the_pushed_card_names_the_repo_it_is_pushed_to_and_hides_the_maintainer_notes(tmp_path: Path) -> None:
    images, meta, expected = make_input(tmp_path / "in")
    new = run(
        "shardkit",
        "new",
        "--no-input",
        "dataset_name=pets",
        "namespace=me",
        "license=cc-by-4.0",
        "homepage=https://example.org/pets",
        "-o",
        tmp_path,
    )
    out = tmp_path / "pets"
    assert "--class-label label" in new.stderr and "shardkit push" in new.stderr  # next steps, on stderr
    pack(images, meta, out, "--keep-source-path")
    before = (out / "README.md").read_text(encoding="utf-8")
    assert 'shardkit.stream("me/pets", split="train")' in before  # the repo `shardkit new` was told
    with run_hub_server(tmp_path / "hub", user="me") as hub:
        push(out, hub_env(hub.url, tmp_path / "home"), repo="me/renamed")
        published = hub.read_file("me/renamed", "README.md").decode("utf-8")
        script_branch = hub.read_file("me/renamed", "README.md", "script").decode("utf-8")
        assert published == (out / "README.md").read_text(encoding="utf-8") == script_branch
        assert "me/pets" not in visible(published)
        reader = hub_env(hub.url, tmp_path / "reader-home", token=None)
        # shardkit.stream, load_dataset (5.x), the loading script (3.6): each names me/renamed.
        assert check_examples(published, "me/renamed", expected, reader, tmp_path) == 3
        assert 'load_dataset("me/renamed", revision="script"' in published
        assert "'hf://datasets/me/renamed/metadata.parquet'" in published
    shown = visible(published)
    for placeholder in PLACEHOLDERS:  # the maintainer's notes (hidden) show /path/to/files
        assert placeholder not in shown
    assert "**Homepage:** <https://example.org/pets>" in shown
    assert "Maintainer notes" not in shown and "pack-shards /path/to/files" not in shown
    assert (
        "pack-shards /path/to/files /path/to/metadata.jsonl -o . --class-label label" in published
    )  # for the maintainer
    assert "`cc-by-4.0`" in section(published, "license")
    card = DatasetCard(published)  # as huggingface_hub (and the Hub) parse it
    assert card.data.license == "cc-by-4.0" and card.data.pretty_name == "Pets"
    # The next pack keeps the name the card was published under.
    pack(images, meta, out, "--keep-source-path")
    assert (out / "README.md").read_text(encoding="utf-8") == published
    assert card_repo(str(out)) == "me/renamed"


# --- text that is not shardkit's ---------------------------------------------------------------------


def test_sections_go_where_the_user_left_room_and_the_users_text_stays_byte_for_byte() -> None:
    user = "\n# Mine\n\nIntro.\n\n<!-- shardkit:stats -->\nold\n<!-- /shardkit:stats -->\n\n## My notes\n\nKept.\n"
    body = set_section(user, "stats", "new stats\n")
    body = set_section(body, "usage", "usage\n", {"repo": "me/x"})
    body = set_section(body, "license", "license\n")
    assert body == (
        "\n# Mine\n\nIntro.\n\n<!-- shardkit:stats -->\nnew stats\n<!-- /shardkit:stats -->\n\n"
        "<!-- shardkit:usage repo=me/x -->\nusage\n<!-- /shardkit:usage -->\n\n"
        "<!-- shardkit:license -->\nlicense\n<!-- /shardkit:license -->\n\n## My notes\n\nKept.\n"
    )
    unclosed = "# Mine\n<!-- shardkit:usage -->\nmy text, no end marker\n"
    assert set_section(unclosed, "usage", "usage\n") == unclosed  # where the user's text ends is unknown


def test_setting_the_license_key_keeps_the_license_section_saying_the_same() -> None:
    text = "---\n# mine\npretty_name: X\n---\n# X\n\n<!-- shardkit:license -->\nold\n<!-- /shardkit:license -->\n"
    new = set_front_matter_keys(text, {"license": "other", "license_name": "My terms"})
    assert new.startswith("---\n# mine\npretty_name: X\nlicense: other\nlicense_name: My terms\n---\n# X\n\n")
    assert section(new, "license") == "## License\n\nThe data is published under My terms.\n"
    assert yaml.safe_load(new.split("---\n")[1])["license"] == "other"


@pytest.mark.slow
def test_a_card_an_older_shardkit_wrote_loses_its_placeholders_at_the_next_pack(tmp_path: Path) -> None:
    images, meta, _ = make_input(tmp_path / "in")
    out = tmp_path / "old"
    pack(images, meta, out)
    text = (out / "README.md").read_text(encoding="utf-8")
    front_end = text.index("\n---\n") + 5
    stats = text[text.index("<!-- shardkit:stats -->") : text.index("<!-- /shardkit:stats -->") + 24]
    old_load = (
        "\n\n## Load it\n\nFastest, one shard per shard file for DataLoader workers, datasets 3.6 and 5.x (needs"
        " shardkit, which is not on PyPI: `pip install ./shardkit` from a clone of its repository):\n\n"
        '```python\nimport shardkit\n\nds = shardkit.stream("<namespace>/old")\n```\n\n'
        "With datasets alone (the builtin loader; types as declared above):\n\n"
        "```python\nfrom datasets import load_dataset\n\n"
        'ds = load_dataset("<namespace>/old", split="train", streaming=True)\n```\n'
    )
    (out / "README.md").write_text(text[:front_end] + "\n# old\n\n" + stats + old_load, encoding="utf-8")
    pack(images, meta, out)
    again = (out / "README.md").read_text(encoding="utf-8")
    assert "<namespace>" not in again and again == text


@pytest.mark.parametrize(
    ("homepage", "ok"), [("https://example.org/a?b=1", True), ("example.org", False), ("https://a b", False)]
)
def test_the_homepage_must_be_a_link(tmp_path: Path, homepage: str, ok: bool) -> None:
    result = run_cli("shardkit", "new", "--no-input", "namespace=me", f"homepage={homepage}", "-o", tmp_path)
    if ok:
        assert result.returncode == 0, result.stderr
        assert f"**Homepage:** <{homepage}>" in (tmp_path / "my-image-dataset" / "README.md").read_text()
    else:
        assert result.returncode == 2
        assert f"error: homepage {homepage!r} is not an http(s) URL" in result.stderr


def test_next_steps_suggest_a_class_label_only_for_classification(tmp_path: Path) -> None:
    base = ["new", "--no-input", "namespace=me", "-o", str(tmp_path)]
    audio = run("shardkit", *base, "dataset_name=clips", "modality=audio", "task_category=audio-classification")
    assert audio.stdout.strip() == str(tmp_path / "clips")
    assert (
        "--class-label label" in audio.stderr and "shardkit push" in audio.stderr and "--repo me/clips" in audio.stderr
    )
    captions = run("shardkit", *base, "dataset_name=captions", "task_category=text-to-image")
    assert "--class-label" not in captions.stderr and "--repo me/captions" in captions.stderr
    assert "--class-label" not in (tmp_path / "captions" / "README.md").read_text()


def test_push_keeps_what_the_pack_found_about_the_builtin_loader(tmp_path: Path) -> None:
    """The usage marker records what push cannot see (the builder datasets would pick): a card
    that says the builtin loader fails says so still once it names the repo."""
    from shardkit.card import name_repo

    images, meta, _ = make_input(tmp_path / "in")
    out = tmp_path / "out"
    pack(images, meta, out)
    card = out / "README.md"
    card.write_text(card.read_text().replace("<!-- shardkit:usage -->", "<!-- shardkit:usage builtin=no -->"))
    manifest = read_manifest(str(out))
    assert manifest is not None
    assert name_repo(str(out), "me/x", "v1", manifest) == str(card)
    usage = section(card.read_text(), "usage")
    assert "<!-- shardkit:usage repo=me/x revision=v1 builtin=no -->" in card.read_text()
    # The line that works names the builder and each split's shards (the repo's would pick another).
    assert "would choose another builder than `imagefolder`" in usage
    files = '{"train": "hf://datasets/me/x@v1/data/train/*.zip", "validation": "hf://datasets/me/x@v1/data/validation/*.zip"'
    assert f'load_dataset("imagefolder", data_files={files}' in usage
    assert 'load_dataset("me/x"' not in usage
    assert 'shardkit.stream("me/x", split="train", revision="v1")' in usage
    assert "'hf://datasets/me/x@v1/metadata.parquet'" in usage
    assert name_repo(str(out), "me/x", "v1", manifest) is None  # named already: nothing to write


# --- user text that looks like shardkit's markers ------------------------------------------------------

#: Every marker of every section, alone and inside a line (as a name or value the user gave).
MARKERS = [m for name in SECTIONS for m in (f"<!-- shardkit:{name} -->", f"<!-- /shardkit:{name} -->")]


@pytest.mark.slow
def test_names_and_values_that_read_as_markers_neither_end_nor_forge_a_section(tmp_path: Path) -> None:
    """A column, class or split-free value named like a marker: each pack gives the same card, with
    one section of each kind, and the user's text around them stays byte for byte."""
    images = tmp_path / "in" / "images"
    images.mkdir(parents=True)
    rows = []
    for i in range(6):
        (images / f"p{i}.jpg").write_bytes(tiny_image(i))
        row: dict[str, Any] = {"file_name": f"p{i}.jpg", "label": MARKERS[i % len(MARKERS)]}
        row.update({marker: f"value {i}\n{marker}\n" for marker in MARKERS})
        # (a column name holding a line end, and so a marker as a line of its own, is refused at
        # pack: rowrules.column_name_problem; the values above hold one)
        rows.append(row)
    meta = write_jsonl(tmp_path / "in" / "meta.jsonl", rows)
    out = tmp_path / "out"
    out.mkdir()
    user_card = "---\nlicense: mit\n---\n\n# Mine\n\nMy intro.\n"
    (out / "README.md").write_text(user_card, encoding="utf-8")
    cards = []
    for _ in range(3):
        pack(images, meta, out, "--adopt")
        cards.append((out / "README.md").read_text(encoding="utf-8"))
    assert cards[0] == cards[1] == cards[2]  # nothing left over to append to the user's card
    text = cards[0]
    assert body_of(text).startswith("\n# Mine\n\nMy intro.\n")
    lines = text.splitlines()
    for marker in MARKERS:
        assert lines.count(marker) == 1, marker
    features_text = re.search(r"(?ms)^<!-- shardkit:features -->\n(.*?)^<!-- /shardkit:features -->$", text)
    assert features_text is not None and features_text.group(1).startswith("## Features\n")
    features = table(features_text.group(1), "column")
    # image, key, label, every marker column
    assert [row[0] for row in features] == ["`image`", "`key`", "`label`", *(f"`{m}`" for m in MARKERS)]
    card = DatasetCard(text)
    names = [f["name"] for f in card.data.dataset_info["features"]]
    assert set(MARKERS) <= set(names)
    label = next(f for f in card.data.dataset_info["features"] if f["name"] == "label")
    assert sorted(label["dtype"]["class_label"]["names"].values()) == sorted(MARKERS[:6])


def test_a_section_line_that_reads_as_a_marker_is_shown_as_text() -> None:
    body = set_section("# Mine\n\nKept.\n", "stats", "a\n<!-- /shardkit:stats -->\n<!-- shardkit:usage -->\nb\n")
    again = set_section(body, "stats", "new\n")
    assert again == "# Mine\n\nKept.\n\n<!-- shardkit:stats -->\nnew\n<!-- /shardkit:stats -->\n"
    assert "&lt;!-- /shardkit:stats -->\n&lt;!-- shardkit:usage -->" in body


def test_a_marker_inside_a_line_is_the_users_text(tmp_path: Path) -> None:
    user = "# Mine\n\nI wrote `<!-- shardkit:stats -->` and <!-- /shardkit:stats --> here.\n"
    body = set_section(user, "stats", "s\n")
    assert body == user + "\n<!-- shardkit:stats -->\ns\n<!-- /shardkit:stats -->\n"


def test_a_revision_or_repo_with_any_characters_round_trips_through_the_usage_marker(tmp_path: Path) -> None:
    for odd in ("me/a b-->c", "me/x%41>y", "me/é\tz"):
        body = set_section("# T\n", "usage", "u\n", {"repo": odd, "revision": odd})
        (tmp_path / "README.md").write_text(body, encoding="utf-8")
        assert card_repo(str(tmp_path)) == odd
        assert body.splitlines()[2].startswith("<!-- shardkit:usage repo=me/")


@pytest.mark.parametrize("key", ["pretty_name", "description", "citation", "language"])
def test_free_text_answers_with_a_marker_line_are_refused(tmp_path: Path, key: str) -> None:
    value = "Fine text\n<!-- /shardkit:stats -->\nmore"
    result = run_cli("shardkit", "new", "--no-input", "namespace=me", f"{key}={value}", "-o", tmp_path)
    assert result.returncode == 2
    assert f"error: {key} {value!r} has a line that reads as one of the card's shardkit markers" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_language_that_would_end_the_front_matter_is_refused(tmp_path: Path) -> None:
    result = run_cli("shardkit", "new", "--no-input", "namespace=me", "language=en\n---\nx: 1", "-o", tmp_path)
    assert result.returncode == 2
    assert "error: language 'en\\n---\\nx: 1': 'en\\n---\\nx:1' is not a language code" in result.stderr
    assert list(tmp_path.iterdir()) == []
