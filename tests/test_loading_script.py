"""The template's loading script (datasets 3.6) on layout-4 ZIP shards and on earlier ones, and a
pack bringing the script of an earlier template up to date.

One corpus with splits (tests/test_splits_labels.py's; the test split's keys share 20 hex digits,
so that its shards get names longer than the 16 digits the script took before layout 4) is packed
once per module, cut by size (data/<split>/0.zip, data/test/abab...26.zip), into

* a new scaffold of the template (its script is the template's), and
* a scaffold of the template before layout 4 (its loading script kept in tests/data, as commit
  eec3e39 left it), whose reader code the pack brings up to date;

then the first is copied as layout 2 would have it (``metadata.jsonl`` first in every shard, no
``metadata/`` folder) and damaged one way per copy. One datasets 3.6 process
(tests/splits_reader.py) reads them all: every split's file bytes, values and their types.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import py_compile
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cookiecutter.main import cookiecutter

from shardkit.card import (
    EARLIER_READERS,
    FEATURES_BEGIN,
    FEATURES_END,
    TEMPLATE_LOADER,
    normalised_reader,
    reader_code,
    template_reader,
    update_loaders,
)
from shardkit.formats.zip import ZipWriter, iter_members
from shardkit.manifest import shard_place
from tests.http_server import serve_directory
from tests.support.corpus import REPO_ROOT, adding_up, write_jsonl
from tests.support.readback import DS36_PYTHON
from tests.test_splits_labels import SPLITS, expected_splits, pack_cli, read_cells, write_corpus

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

NAME = "pets-l4"
SCRIPT = "pets_l4_loader.py"
TEMPLATE = REPO_ROOT / "templates" / "hub-dataset"
LOADER_IN_TEMPLATE = Path("{{cookiecutter.dataset_name}}") / "{{cookiecutter.__loader_module}}.py"
#: The template's loading script before layout 4 (commit eec3e39, the last to change it before).
PREVIOUS_LOADER = Path(__file__).parent / "data" / "loader_template_eec3e39.py.jinja"
#: A pretty name the old template put in its reader code (in the class docstring).
PRETTY_NAME = 'Pets: "before" – ünï # 4'
PACK_OPTIONS = ("--class-label", "label", "--keep-source-path", "--target-shard-size", "5KB")
LONG_PREFIX = "ab" * 10


def scaffold(root: Path, loader: Path | None = None) -> Path:
    """A repository made by the template, or by the template with ``loader`` as its loading script."""
    template = TEMPLATE
    root.mkdir(parents=True, exist_ok=True)
    if loader is not None:
        template = root / "template"
        shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(loader, template / LOADER_IN_TEMPLATE)
    answers = {"dataset_name": NAME, "namespace": "tester", "pretty_name": PRETTY_NAME}
    out = cookiecutter(str(template), no_input=True, extra_context=answers, output_dir=str(root), default_config=True)
    return Path(out)


def header(text: str) -> str:
    """A loading script up to its features block: what a pack never changes."""
    return text[: text.index(FEATURES_BEGIN)]


def shard_names(folder: Path, split: str) -> list[str]:
    manifest = json.loads((folder / "shards.json").read_text(encoding="utf-8"))
    return [s["file"] for s in manifest["shards"] if s["split"] == split]


def as_layout_2(folder: Path, to: Path) -> None:
    """``folder`` as a shardkit before layout 4 wrote it: each shard's rows (its metadata file, byte
    for byte) are its first member, ``metadata.jsonl``, and the manifest says so (no layout, the
    metadata member). The metadata/ folder is removed: the script must not need it."""
    shutil.copytree(folder, to, ignore=shutil.ignore_patterns(".shardkit"))
    manifest = json.loads((to / "shards.json").read_text(encoding="utf-8"))
    for shard in manifest["shards"]:
        path = to / shard["file"]
        with open(path, "rb") as f:
            members = [(m.name, m.data) for m in iter_members(f)]
        assert members[0][0] == "metadata.parquet"
        buffer = io.BytesIO()
        writer = ZipWriter(buffer)
        writer.add("metadata.jsonl", (to / shard["metadata"]).read_bytes())
        for name, data in members[1:]:
            writer.add(name, data)
        writer.close()
        path.write_bytes(buffer.getvalue())
        shard["bytes"], shard["sha256"] = len(buffer.getvalue()), hashlib.sha256(buffer.getvalue()).hexdigest()
    adding_up(manifest)
    del manifest["layout"]
    manifest["metadata_member"] = "metadata.jsonl"
    (to / "shards.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    shutil.rmtree(to / "metadata")


#: One damage per copy of the layout-4 pack: the split read, and what the script must say.
DAMAGES = {
    "metadata outside": ("train", "shards.json: shard 'data/train/0.zip' has metadata '../outside.jsonl', not"),
    "metadata of another shard": ("train", "shards.json: shard 'data/train/0.zip' has metadata 'metadata/train/"),
    "metadata URL": ("train", "shards.json: shard 'data/train/0.zip' has metadata 'https://example.org/0.jsonl'"),
    "name of 129 digits": ("test", "].file is 'data/test/" + "a" * 66),
    "name with a newline": ("train", "shards.json: shards[0].file is 'data/train/0.zip\\n', not data/[<split>/]"),
    "manifest of layout 3": (
        "train",
        "data/train/0.zip: the first member is 'metadata.parquet', but shards.json says its shards begin with"
        " metadata.jsonl",
    ),
    "no metadata member": (
        "validation",
        "data/validation/0.zip: the first member is 'images/",
    ),
    "a row missing": ("train", "has no row in metadata/train/0.jsonl"),
    "a row too many": ("train", "data/train/0.zip: 1 row(s) in metadata/train/0.jsonl have no member, e.g. 'extra"),
    "not JSON": ("train", "data/train/0.zip: line 1 of metadata/train/0.jsonl is not a JSON row"),
}


def damage(folder: Path, to: Path, case: str) -> None:
    shutil.copytree(folder, to, ignore=shutil.ignore_patterns(".shardkit"))
    manifest_path = to / "shards.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    first = {split: next(s for s in manifest["shards"] if s["split"] == split) for split in SPLITS}
    lines = to / first["train"]["metadata"]
    if case == "metadata outside":
        (to.parent / "outside.jsonl").write_bytes(lines.read_bytes())
        first["train"]["metadata"] = "../outside.jsonl"
    elif case == "metadata of another shard":
        first["train"]["metadata"] = [s for s in manifest["shards"] if s["split"] == "train"][1]["metadata"]
    elif case == "metadata URL":
        first["train"]["metadata"] = "https://example.org/0.jsonl"
    elif case == "name of 129 digits":
        first["test"]["file"] = "data/test/" + "a" * 129 + ".zip"
        first["test"]["metadata"] = "metadata/test/" + "a" * 129 + ".jsonl"
    elif case == "name with a newline":
        first["train"]["file"] += "\n"
    elif case == "manifest of layout 3":  # (a layout-4 manifest naming metadata.jsonl is refused whole)
        manifest["metadata_member"] = "metadata.jsonl"
        del manifest["layout"]
    elif case == "no metadata member":
        shard = to / first["validation"]["file"]
        with open(shard, "rb") as f:
            members = [(m.name, m.data) for m in iter_members(f)]
        buffer = io.BytesIO()
        writer = ZipWriter(buffer)
        for name, data in members[1:]:
            writer.add(name, data)
        writer.close()
        shard.write_bytes(buffer.getvalue())
    elif case == "a row missing":
        lines.write_text("".join(lines.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    elif case == "a row too many":
        with open(lines, "a", encoding="utf-8") as f:
            f.write(json.dumps({"file_name": "extra.jpg", "key": "00"}) + "\n")
    elif case == "not JSON":
        lines.write_bytes(b"{not json\n" + lines.read_bytes())
    else:
        raise AssertionError(case)
    manifest_path.write_text(json.dumps(manifest, indent=1), encoding="utf-8")


@dataclass
class Packed:
    root: Path
    images: Path
    meta: Path
    rows: list[dict[str, Any]]
    expected: dict[str, dict[str, Any]]
    folders: dict[str, Path] = field(default_factory=dict)
    old_script: str = ""  # the previous template's script as scaffolded, before the pack
    stderr: dict[str, str] = field(default_factory=dict)  # each pack's
    cells: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    http_requests: dict[str, int] = field(default_factory=dict)

    def got(self, cell: str, split: str) -> dict[str, Any]:
        got = self.result["cells"][cell][split]
        assert "error" not in got, f"{cell} {split}: {got.get('error')}\n{got.get('traceback')}"
        return got  # type: ignore[no-any-return]


def corpus(root: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    images, meta, rows = write_corpus(root)
    for row in rows:
        if row["split"] == "test":
            row["key"] = LONG_PREFIX + row["key"][:12]
    write_jsonl(meta, rows)
    return images, meta, rows


def _cell(cell_id: str, script: Path, streaming: bool, splits: list[str], **more: Any) -> dict[str, Any]:
    return {"id": cell_id, "reader": "script", "path": str(script), "streaming": streaming, "splits": splits, **more}


@pytest.fixture(scope="module")
def packed_script_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packed]:
    assert Path(DS36_PYTHON).exists(), f"{DS36_PYTHON} missing: scripts/test.sh builds it"
    root = tmp_path_factory.mktemp("script")
    images, meta, rows = corpus(root / "in")
    sets = Packed(root, images, meta, rows, expected_splits(images, rows))
    for kind, loader in (("new", None), ("upgraded", PREVIOUS_LOADER)):
        out = scaffold(root / kind, loader)
        if kind == "upgraded":
            sets.old_script = (out / SCRIPT).read_text(encoding="utf-8")
        result = pack_cli(images, meta, out, *PACK_OPTIONS)
        assert result.returncode == 0, result.stderr
        sets.folders[kind], sets.stderr[kind] = out, result.stderr
    new = sets.folders["new"]
    sets.folders["layout 2"] = root / "layout2" / NAME
    as_layout_2(new, sets.folders["layout 2"])
    for mode, streaming in (("map", False), ("streaming", True)):
        for kind in ("new", "layout 2"):
            sets.cells.append(_cell(f"{kind}/{mode}", sets.folders[kind] / SCRIPT, streaming, list(SPLITS)))
    sets.cells.append(_cell("upgraded/streaming", sets.folders["upgraded"] / SCRIPT, True, list(SPLITS)))
    for number, (case, (split, _)) in enumerate(DAMAGES.items()):
        folder = root / f"damaged{number}" / NAME
        damage(new, folder, case)
        sets.cells.append(_cell(f"damaged/{case}", folder / SCRIPT, True, [split]))
    with serve_directory(new) as (base, log):
        # The script from the folder, the data over HTTP (data_dir=): `open` streams every file.
        sets.cells.append(_cell("new/http", new / SCRIPT, True, list(SPLITS), data_dir=base))
        sets.result = read_cells(DS36_PYTHON, sets.cells)
        sets.http_requests = {"data": log.count("/data/"), "metadata": log.count("/metadata/")}
    yield sets


def _exactly(packed_script_corpus: Packed, cell: str) -> list[str]:
    """What differs between each split a cell read and its input rows (bytes, values, types)."""
    problems = []
    folder = packed_script_corpus.folders[cell.split("/")[0]]
    for split in SPLITS:
        got, expected = packed_script_corpus.got(cell, split), packed_script_corpus.expected[split]
        if got["rows"] != expected:
            differ = sorted(k for k in set(got["rows"]) | set(expected) if got["rows"].get(k) != expected.get(k))
            problems.append(f"{cell} {split}: {len(differ)} rows differ, e.g. {differ[0]}")
        if got["repeats"] or got["names"] != {
            "label": sorted({r["label"] for r in packed_script_corpus.rows if r["label"]})
        }:
            problems.append(f"{cell} {split}: {got['repeats']} repeats, class names {got['names']}")
        if cell.endswith(("streaming", "http")) and got["n_shards"] != len(shard_names(folder, split)):
            problems.append(f"{cell} {split}: n_shards {got['n_shards']}, {len(shard_names(folder, split))} shards")
    return problems


@pytest.mark.slow
def test_the_pack_has_layout_4_shards_with_the_new_names(packed_script_corpus: Packed) -> None:
    new = packed_script_corpus.folders["new"]
    manifest = json.loads((new / "shards.json").read_text(encoding="utf-8"))
    assert manifest["layout"] == 4 and manifest["metadata_member"] == "metadata.parquet"
    for split in SPLITS:
        names = shard_names(new, split)
        assert len(names) >= 2 and names[0] == f"data/{split}/0.zip", names
    assert any(len(name) > len(f"data/test/{LONG_PREFIX}.zip") for name in shard_names(new, "test"))
    with open(new / shard_names(new, "train")[0], "rb") as f:
        assert next(iter_members(f)).name == "metadata.parquet"


@pytest.mark.parametrize("mode", ["map", "streaming"])
def test_the_script_reads_every_split_of_a_layout_4_pack_exactly(packed_script_corpus: Packed, mode: str) -> None:
    assert packed_script_corpus.result["version"] == "3.6.0"
    assert _exactly(packed_script_corpus, f"new/{mode}") == []


def test_the_script_streams_a_layout_4_pack_over_http_reading_each_metadata_file(packed_script_corpus: Packed) -> None:
    assert _exactly(packed_script_corpus, "new/http") == []
    manifest = json.loads((packed_script_corpus.folders["new"] / "shards.json").read_text(encoding="utf-8"))
    shards = len(manifest["shards"])
    # Each shard's rows come from its metadata/ file: a few requests each, never one per row.
    assert shards <= packed_script_corpus.http_requests["metadata"] <= 4 * shards
    assert shards <= packed_script_corpus.http_requests["data"] <= 4 * shards


@pytest.mark.parametrize("mode", ["map", "streaming"])
def test_the_script_still_reads_layout_2_shards_without_their_metadata_files(
    packed_script_corpus: Packed, mode: str
) -> None:
    folder = packed_script_corpus.folders["layout 2"]
    assert not (folder / "metadata").exists()
    with open(folder / shard_names(folder, "train")[0], "rb") as f:
        assert next(iter_members(f)).name == "metadata.jsonl"
    assert _exactly(packed_script_corpus, f"layout 2/{mode}") == []


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_the_script_refuses_a_damaged_pack_in_one_line(packed_script_corpus: Packed, case: str) -> None:
    split, says = DAMAGES[case]
    got = packed_script_corpus.result["cells"][f"damaged/{case}"][split]
    assert "error" in got, f"{case}: read {len(got['rows'])} rows"
    assert got["error"].startswith("ValueError: ") and "\n" not in got["error"].rstrip("\n")
    assert says in got["error"], got["error"]


def test_a_pack_brings_the_previous_templates_script_up_to_date(packed_script_corpus: Packed) -> None:
    old = packed_script_corpus.old_script
    assert PRETTY_NAME in (reader_code(old) or "")  # the old template put it there
    text = (packed_script_corpus.folders["upgraded"] / SCRIPT).read_text(encoding="utf-8")
    assert reader_code(text) == template_reader()
    assert header(text) == header(old)  # the maintainer's part: docstring, description, license...
    assert '"name": "label"' in text[text.index(FEATURES_BEGIN) : text.index(FEATURES_END)]
    assert "reader code" not in packed_script_corpus.stderr["upgraded"]  # no warning
    assert _exactly(packed_script_corpus, "upgraded/streaming") == []


def test_a_new_scaffold_keeps_the_templates_reader_code(packed_script_corpus: Packed) -> None:
    text = (packed_script_corpus.folders["new"] / SCRIPT).read_text(encoding="utf-8")
    assert reader_code(text) == template_reader()
    assert "reader code" not in packed_script_corpus.stderr["new"]


def test_an_edited_script_is_left_as_it_is_with_one_warning(packed_script_corpus: Packed, tmp_path: Path) -> None:
    out = scaffold(tmp_path, PREVIOUS_LOADER)
    script = out / SCRIPT
    text = script.read_text(encoding="utf-8")
    edited = text.replace("    pass\n", "    pass  # my own config\n", 1)
    assert edited != text
    script.write_text(edited, encoding="utf-8")
    before = script.read_bytes()
    result = pack_cli(packed_script_corpus.images, packed_script_corpus.meta, out, *PACK_OPTIONS)
    assert result.returncode == 0, result.stderr
    assert script.read_bytes() == before
    warned = [line for line in result.stderr.splitlines() if "reader code" in line]
    assert warned == [
        f"WARNING: {script}: its reader code (after '# shardkit:features-end') was edited, so it was left as it is"
        " and datasets 3.6 may not read these shards with it; replace it with the template's (the same part of"
        f" {TEMPLATE_LOADER}), or take the script of a new `shardkit new` scaffold"
    ]


# --- update_loaders on its own: no pack, no datasets -------------------------------------------------


def _loader(tmp_path: Path, code: str) -> Path:
    """An OUT_DIR whose script is the template's (rendered) with ``code`` as its reader code."""
    out = scaffold(tmp_path)
    script = out / SCRIPT
    text = script.read_text(encoding="utf-8")
    script.write_text(text[: len(text) - len(reader_code(text) or "")] + code, encoding="utf-8")
    return out


FEATURES = [{"name": "image", "dtype": "image"}, {"name": "key", "dtype": "string"}]


def test_reader_code_edited_after_an_upgrade_gets_its_features_and_no_warning(tmp_path: Path) -> None:
    """Code marked as the template's version was brought up to date: a maintainer's edits to it are
    kept without a word (it reads what this shardkit writes), as is code of a later template."""
    current = template_reader()
    for number, code in enumerate([current + "# mine\n", current.replace("shardkit:reader 7", "shardkit:reader 8")]):
        out = _loader(tmp_path / str(number), code)
        update = update_loaders(str(out), FEATURES)
        assert (update.written, update.upgraded, update.outdated) == ([str(out / SCRIPT)], [], [])
        text = (out / SCRIPT).read_text(encoding="utf-8")
        assert reader_code(text) == code and '"dtype": "image"' in text


def test_reader_code_of_no_template_marked_older_is_left_as_it_is(tmp_path: Path) -> None:
    out = _loader(tmp_path, "# shardkit:reader 6\nprint('hello')\n")
    before = (out / SCRIPT).read_bytes()
    update = update_loaders(str(out), FEATURES)
    assert (update.written, update.upgraded, update.outdated) == ([], [], [str(out / SCRIPT)])
    assert (out / SCRIPT).read_bytes() == before
    [warning] = update.warnings(lambda path: "gs://bucket/x/" + os.path.basename(path))
    assert warning.startswith(f"gs://bucket/x/{SCRIPT}: its reader code") and "\n" not in warning


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=True).stdout


def test_every_earlier_templates_reader_code_is_known_and_upgraded(tmp_path: Path) -> None:
    """Each version of the template's loading script in the git history: its reader code, as
    cookiecutter renders it, is the current one or one of EARLIER_READERS (so the template's
    previous version must join the list when its reader code changes), and update_loaders turns
    a script of it into one that imports and holds the current reader code."""
    try:
        shallow = _git("rev-parse", "--is-shallow-repository").strip()
        commits = _git("log", "--format=%H", "--", f"templates/hub-dataset/{LOADER_IN_TEMPLATE.as_posix()}").split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here")
    if shallow != "false":
        pytest.skip("a shallow clone: the template's history is not all here")
    current = template_reader()
    seen = set()
    for commit in commits:
        source = _git("show", f"{commit}:templates/hub-dataset/{LOADER_IN_TEMPLATE.as_posix()}")
        loader = tmp_path / f"{commit[:7]}.py.jinja"
        loader.write_text(source, encoding="utf-8")
        out = scaffold(tmp_path / commit[:7], loader)
        code = reader_code((out / SCRIPT).read_text(encoding="utf-8"))
        assert code is not None
        if code == current:
            continue
        digest = hashlib.sha256(normalised_reader(code).encode("utf-8")).hexdigest()
        assert digest in EARLIER_READERS, f"the reader code of {commit[:7]} is not in EARLIER_READERS: add {digest}"
        seen.add(digest)
        update = update_loaders(str(out), FEATURES)
        assert update.upgraded == [str(out / SCRIPT)] and update.outdated == []
        assert reader_code((out / SCRIPT).read_text(encoding="utf-8")) == current
        py_compile.compile(str(out / SCRIPT), doraise=True)
        module = _import(out / SCRIPT)  # the current reader code runs below the old header
        assert module._SHARD_NAME.match("data/train/" + "f" * 128 + ".zip")
    assert seen == set(EARLIER_READERS)


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"loader_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: (path, the shard's split): whether shardkit's planner makes such a path.
SHARD_NAMES = {
    ("data/0.zip", "train"): True,
    ("data/7fe.zip", "train"): True,
    ("data/3f-01.zip", "train"): True,
    ("data/train/" + "a" * 128 + ".zip", "train"): True,
    ("data/my_split/0-123456.zip", "my_split"): True,
    ("data/train/3f/3f2a.zip", "train"): True,  # nested: the name's first hex digits
    ("data/3f/3f2a.zip", "train"): True,  # a dataset without splits, nested
    ("data/3f/3f2a.zip", "3f"): True,  # split 3f, flat
    ("data/train/80/8.zip", "train"): True,  # a one-digit name, padded
    ("data/train/3f/402.zip", "train"): False,  # not its name's folder
    ("data/train/3f/3f/3f2a.zip", "train"): False,
    ("data/" + "a" * 129 + ".zip", "train"): False,
    ("data/0.zip\n", "train"): False,
    ("data/../0.zip", "train"): False,
    ("data/a/b/0.zip", "train"): False,
    ("data/7FE.zip", "train"): False,
    ("data/g.zip", "train"): False,
    ("data/0.tar", "train"): False,
    ("data/0-1234567.zip", "train"): False,
    ("metadata/0.zip", "train"): False,
    ("https://example.org/data/0.zip", "train"): False,
}


def test_the_scripts_shard_names_are_shardkits(tmp_path: Path) -> None:
    """The script takes the paths shardkit's manifest takes (manifest.shard_place), no other."""
    module = _import(scaffold(tmp_path) / SCRIPT)

    def script_takes(name: str, split: str) -> bool:
        match = module._SHARD_NAME.match(name)
        return bool(match) and module._split_folder(match, split) is not None

    assert {key: script_takes(*key) for key in SHARD_NAMES} == SHARD_NAMES
    assert {key: getattr(shard_place(*key), "suffix", None) == "zip" for key in SHARD_NAMES} == SHARD_NAMES
