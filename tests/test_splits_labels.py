"""Splits, class labels and source paths end to end (issue 21).

One small corpus with a ``split`` column (train, validation, test, uneven), a ``label`` column of
class names whose sorted order is not the order they first appear in (and one null label), and
typed columns (int, a 64-bit int, float with whole numbers, bool, list, nested struct,
non-ASCII text). It is packed once per module with ``--class-label label --keep-source-path`` as
zip (into the template, so the datasets 3.6 loading script is a reader too), tar and parquet,
and pushed to the loopback Hub server. Then every reader, in a subprocess per venv
(tests/splits_reader.py), reads every split, locally and from the server:

* datasets 5.x: ``shardkit.stream(source, split=...)``, ``load_dataset`` map-style and streaming;
* datasets 3.6: the loading script (``<name>_loader.py`` locally, ``revision="script"`` from the
  server), map-style and streaming, and ``shardkit.stream``;

and each split must hold exactly its input rows (matched by ``source_path``, which must be the
input's ``file_name``): the file's bytes, every value with its Python type, and each label
mapped back to its input string through ``features["label"].names`` (``int2str``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.json as paj
import pytest
import yaml

from tests.compat_reader import file_bytes, typed
from tests.hub_server import WRITE_TOKEN, run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import REPO_ROOT, scaffold, tiny_image, tree_bytes, write_jsonl
from tests.support.readback import DS36_PYTHON, run_reader, split_problems

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

SCRIPTS = Path(sys.executable).parent
READER = Path(__file__).with_name("splits_reader.py")
FORMATS = ("zip", "tar", "parquet")
SPLITS = ("train", "validation", "test")
#: Class names in the order the rows first name them; numbered in sorted order (ant=0 ... zebra=4).
FIRST_SEEN = ("zebra", "cat", "dog", "ant", "mouse")
NAMES = sorted(FIRST_SEEN)
NULL_LABEL_ROW = 13
NAME = "pets-splits"  # the template's dataset name (its loader is pets_splits_loader.py)


def split_of(i: int) -> str:
    """Uneven splits: 42 train, 12 validation, 6 test rows of 60."""
    return {6: "validation", 7: "validation", 8: "test"}.get(i % 10, "train")


def corpus_rows(n: int) -> list[dict[str, Any]]:
    """The metadata rows (as written to the JSONL file) of an ``n``-image corpus.

    Keys are given, so a row's shard is its key's first hex digit, ``i % 8``: every shard of a
    split then has a row with a label and a row with tags (datasets' folder builder infers each
    split's types from one metadata file and refuses splits whose files infer differently; see
    :func:`test_splits_whose_shards_infer_other_types_are_named_at_pack_and_in_the_card`).
    """
    rows = []
    for i in range(n):
        ext = ".png" if i % 7 == 0 else ".jpg"
        rows.append(
            {
                "file_name": f"cam{i % 4}/shot_{i:03d}{ext}",
                "key": f"{i % 8:x}{hashlib.sha256(str(i).encode()).hexdigest()[:15]}",
                "split": split_of(i),
                "label": None if i == NULL_LABEL_ROW else FIRST_SEEN[i % len(FIRST_SEEN)],
                "n": i * 3,
                "big": 2**60 + i,  # over 2**53: a float64 would round it
                "w": i / 4,  # 0.0, 1.0...: whole numbers written as floats
                "flag": i % 2 == 0,
                "tags": [] if split_of(i) == "train" and i % 3 == 0 else [f"t{j}" for j in range(1 + i % 3)],
                "info": {"a": i, "b": f"s{i}", "c": [i / 2, 1.5]},
                "caption": f"Bild Nr. {i} – ünïcode",
            }
        )
    return rows


def write_corpus(root: Path, n: int = 60) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Images of different sizes and colours (every 7th a PNG) and their metadata."""
    images = root / "images"
    rows = corpus_rows(n)
    for i, row in enumerate(rows):
        path = images / row["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt = "PNG" if row["file_name"].endswith(".png") else "JPEG"
        path.write_bytes(tiny_image(i, fmt, (8 + (i % 9) * 3, 6 + (i % 5) * 4)))
    return images, write_jsonl(root / "meta.jsonl", rows), rows


def expected_splits(images: Path, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What every reader must return per split: source_path -> sha256, typed fields, label name."""
    out: dict[str, dict[str, Any]] = {s: {} for s in SPLITS}
    for row in rows:
        data = (images / row["file_name"]).read_bytes()
        fields = {k: v for k, v in row.items() if k not in ("file_name", "split")}
        fields["label"] = -1 if row["label"] is None else NAMES.index(row["label"])
        fields["source_path"] = row["file_name"]
        out[row["split"]][row["file_name"]] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "fields": typed(fields),
            "labels": {"label": row["label"]},
        }
    return out


def pack_cli(images: Path, meta: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`pack-shards IMAGES META -o OUT OPTIONS`, in this process (tests/support/cli.py): each test
    here packs, and so do the files that import this."""
    return run_cli("pack-shards", images, meta, "-o", out, *options)


def push_cli(out: Path, repo: str, env: dict[str, str]) -> None:
    """``shardkit push OUT --repo REPO -q``, which must succeed."""
    pushed = subprocess.run(
        [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", repo, "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert pushed.returncode == 0, pushed.stderr


def hub_env(endpoint: str, home: Path, *, token: str | None = WRITE_TOKEN) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",  # the test server speaks classic LFS
        NO_PROXY="127.0.0.1",
    )
    if token:
        env["HF_TOKEN"] = token
    return env


def read_cells(python: str, cells: list[dict[str, Any]], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run tests/splits_reader.py with ``python`` (a venv's) over ``cells``."""
    return run_reader(python, READER, cells, env, timeout=600)  # type: ignore[no-any-return]


@dataclass
class Packed:
    root: Path
    images: Path
    meta: Path
    rows: list[dict[str, Any]]
    expected: dict[str, dict[str, Any]]
    hub_url: str
    folders: dict[str, Path] = field(default_factory=dict)
    shards: dict[tuple[str, str], int] = field(default_factory=dict)  # (format, split) -> shard files
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)  # venv -> reader output, read once

    def repo(self, fmt: str) -> str:
        return f"tester/{NAME}-{fmt}"

    def reader_env(self) -> dict[str, str]:
        return hub_env(self.hub_url, self.root / "reader-home", token=None)


@pytest.fixture(scope="module")
def packed_splits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packed]:
    root = tmp_path_factory.mktemp("splits")
    images, meta, rows = write_corpus(root / "in")
    with run_hub_server(root / "hub") as hub:
        sets = Packed(root, images, meta, rows, expected_splits(images, rows), hub.url)
        for fmt in FORMATS:
            if fmt == "zip":  # with the template: its loading script is a reader too
                out = scaffold(root / "repos", dataset_name=NAME, namespace="tester")
            else:
                out = root / "repos" / f"{NAME}-{fmt}"
            options = ["--format", fmt, "--prefix-length", "1", "--class-label", "label", "--keep-source-path", "-q"]
            result = pack_cli(images, meta, out, *options)
            assert result.returncode == 0, result.stderr
            sets.folders[fmt] = out
            for split in SPLITS:
                sets.shards[fmt, split] = len(list((out / "data" / split).glob(f"*.{fmt}")))
            push_cli(out, sets.repo(fmt), hub_env(hub.url, root / "home"))
        yield sets


def _cells(packed_splits: Packed, venv: str) -> list[dict[str, Any]]:
    """Every reader of this venv over every format it reads, from the folder and the Hub server."""
    cells = []
    for fmt in FORMATS:
        folder = packed_splits.folders[fmt]
        readers = ["shardkit", "builtin"] if venv == "5.x" else ["shardkit", "script"] if fmt == "zip" else []
        for reader in readers:
            for where in ("local", "hub"):
                path = str(folder) if where == "local" else packed_splits.repo(fmt)
                revision = None
                if reader == "script":  # the script from the folder, or the Hub's script branch
                    path = str(folder / "pets_splits_loader.py") if where == "local" else path
                    revision = "script" if where == "hub" else None
                for streaming in (True,) if reader == "shardkit" else (False, True):
                    mode = "streaming" if streaming else "map"
                    cells.append(
                        {
                            "id": f"{fmt}/{reader}/{where}/{mode}",
                            "reader": reader,
                            "path": path,
                            "revision": revision,
                            "streaming": streaming,
                            "splits": list(SPLITS),
                        }
                    )
    return cells


def _read(packed_splits: Packed, venv: str) -> dict[str, Any]:
    """The venv's reads of every cell (run once per module: both tests of a venv look at them)."""
    if venv not in packed_splits.reads:
        python = {"3.6": DS36_PYTHON, "5.x": sys.executable}[venv]
        cells = _cells(packed_splits, venv)
        for where, path in (("local", str(packed_splits.folders["zip"])), ("hub", packed_splits.repo("zip"))):
            unknown = {"id": f"unknown/{where}", "reader": "shardkit", "path": path, "streaming": True}
            cells.append({**unknown, "splits": ["valid"]})  # a split the dataset does not have
        packed_splits.reads[venv] = {"cells": cells, "result": read_cells(python, cells, packed_splits.reader_env())}
    return packed_splits.reads[venv]


@pytest.mark.slow
def test_the_corpus_is_what_it_claims(packed_splits: Packed) -> None:
    """The traps are in the input: sorted class order differs from first-seen order, splits are
    uneven, one label is null, images differ in size and type."""
    labels = [r["label"] for r in packed_splits.rows if r["label"] is not None]
    first_seen = list(dict.fromkeys(labels))
    assert first_seen != sorted(first_seen) and sorted(first_seen) == NAMES
    assert [len(packed_splits.expected[s]) for s in SPLITS] == [42, 12, 6]
    assert sum(r["label"] is None for r in packed_splits.rows) == 1
    assert {Path(r["file_name"]).suffix for r in packed_splits.rows} == {".jpg", ".png"}
    assert (
        len({hashlib.sha256((packed_splits.images / r["file_name"]).read_bytes()).digest() for r in packed_splits.rows})
        == 60
    )
    for fmt in FORMATS:
        assert all(packed_splits.shards[fmt, s] >= 2 for s in SPLITS), fmt
    # What datasets' folder builder needs of a dataset with splits (see corpus_rows).
    metadata = sorted((packed_splits.folders["zip"] / "metadata").rglob("*.jsonl"))
    schemas = {paj.read_json(path).schema.to_string() for path in metadata}
    assert len(metadata) > 10 and len(schemas) == 1, schemas


@pytest.mark.slow
@pytest.mark.parametrize("venv", ["5.x", "3.6"])
def test_every_reader_gives_each_split_exactly_its_rows_labels_and_source_paths(
    packed_splits: Packed, venv: str
) -> None:
    read = _read(packed_splits, venv)
    result = read["result"]
    assert result["version"].startswith({"5.x": "5.", "3.6": "3.6."}[venv])
    problems = []
    for cell in read["cells"]:
        if cell["id"].startswith("unknown/"):
            continue
        fmt, reader = cell["id"].split("/")[:2]
        for split in SPLITS:
            where = f"{venv} {cell['id']} split {split}"
            got = result["cells"][cell["id"]][split]
            if "error" in got:
                problems.append(f"{where}: {got['error']}\n{got['traceback']}")
                continue
            found = split_problems(where, got, packed_splits.expected[split], {"label": NAMES})
            problems += found
            if any(": rows differ:" in p for p in found):
                continue
            one_per_file = not (reader == "builtin" and fmt == "zip")  # imagefolder reports one (docs/reference.md)
            if cell["streaming"] and one_per_file and got["n_shards"] != packed_splits.shards[fmt, split]:
                problems.append(f"{where}: n_shards {got['n_shards']}, expected {packed_splits.shards[fmt, split]}")
    if problems:
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(problems), pytrace=False)


@pytest.mark.parametrize("venv", ["5.x", "3.6"])
def test_an_unknown_split_is_one_error_naming_the_splits_there_are(packed_splits: Packed, venv: str) -> None:
    result = _read(packed_splits, venv)["result"]
    for where in ("local", "hub"):
        got = result["cells"][f"unknown/{where}"]["valid"]
        assert got.get("error") == (
            "UsageError: the dataset has no split 'valid'; its splits: train, validation, test"
        ), (where, got)


def test_push_hints_a_stream_call_that_reads_a_split(packed_splits: Packed) -> None:
    """A stream reads one split: push's hint names one, and the call it prints reads that split."""
    out, repo = packed_splits.folders["tar"], packed_splits.repo("tar")
    pushed = subprocess.run(
        [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", repo],
        capture_output=True,
        text=True,
        env=hub_env(packed_splits.hub_url, packed_splits.root / "home"),
        timeout=300,
        check=False,
    )
    assert pushed.returncode == 0, pushed.stderr
    hint = f"  or, one datasets shard per shard file: shardkit.stream(\"{repo}\", split='train')"
    assert hint in pushed.stdout.splitlines(), pushed.stdout
    call = hint.split(": ", 1)[1]
    script = f"import shardkit; print(sorted(row['source_path'] for row in {call}.decode(False)))"
    read = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=packed_splits.reader_env(),
        timeout=300,
        check=False,
    )
    assert read.returncode == 0, read.stderr
    expected = sorted(r["file_name"] for r in packed_splits.rows if r["split"] == "train")
    assert read.stdout.strip() == repr(expected)


def test_the_card_and_manifest_describe_each_split_and_the_class_names(packed_splits: Packed) -> None:
    for fmt in FORMATS:
        folder = packed_splits.folders[fmt]
        manifest = json.loads((folder / "shards.json").read_text(encoding="utf-8"))
        assert list(manifest["splits"]) == list(SPLITS)
        assert {s: manifest["splits"][s]["rows"] for s in SPLITS} == {s: len(packed_splits.expected[s]) for s in SPLITS}
        for shard in manifest["shards"]:
            assert shard["file"].startswith(f"data/{shard['split']}/")
            assert shard["metadata"].startswith(f"metadata/{shard['split']}/")
        card = yaml.safe_load((folder / "README.md").read_text(encoding="utf-8").split("---")[1])
        assert [(f["split"], f["path"]) for f in card["configs"][0]["data_files"]] == [
            (s, f"data/{s}/*.{fmt}") for s in SPLITS
        ]
        info = card["dataset_info"]
        assert [(s["name"], s["num_examples"]) for s in info["splits"]] == [
            (s, len(packed_splits.expected[s])) for s in SPLITS
        ]
        assert all(s["num_bytes"] > 0 for s in info["splits"])
        assert info["download_size"] == manifest["totals"]["bytes"]
        text = json.dumps(card)
        assert json.dumps({"names": {str(i): n for i, n in enumerate(NAMES)}}) in text, fmt


def test_split_rows_are_in_their_own_shards_and_metadata_files(packed_splits: Packed) -> None:
    """data/<split>/ and metadata/<split>/ hold exactly the split's rows: no row leaks across."""
    for fmt in FORMATS:
        folder = packed_splits.folders[fmt]
        for split in SPLITS:
            lines = [
                json.loads(line)
                for path in sorted((folder / "metadata" / split).glob("*.jsonl"))
                for line in path.read_text(encoding="utf-8").splitlines()
            ]
            assert sorted(r["source_path"] for r in lines) == sorted(packed_splits.expected[split]), (fmt, split)
            assert all("split" not in r for r in lines)


# --- the CLI: a dry run shows the schema; bad splits and labels are refused --------------------------


def test_dry_run_prints_the_class_names_and_each_splits_rows(packed_splits: Packed, tmp_path: Path) -> None:
    out = tmp_path / "never"
    result = pack_cli(
        packed_splits.images, packed_splits.meta, out, "--class-label", "label", "--keep-source-path", "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "  label                    ClassLabel: 0=ant, 1=cat, 2=dog, 3=mouse, 4=zebra\n" in text
    assert "  source_path              string\n" in text
    for split in SPLITS:
        assert f"  split {split}: {len(packed_splits.expected[split])} rows, " in text
    assert "dry run: nothing written" in text
    assert not out.exists()

    as_json = pack_cli(packed_splits.images, packed_splits.meta, out, "--class-label", "label", "--dry-run", "--json")
    assert as_json.returncode == 0, as_json.stderr
    summary = json.loads(as_json.stdout)
    assert [(s["name"], s["rows"]) for s in summary["splits"]] == [(s, len(packed_splits.expected[s])) for s in SPLITS]
    label = next(f for f in summary["features"] if f["name"] == "label")
    assert label == {"name": "label", "dtype": {"class_label": {"names": {str(i): n for i, n in enumerate(NAMES)}}}}
    assert not out.exists()


def _bad_rows(case: str, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, str, list[str]]:
    """(rows, the bad line, the message's words, extra options) for each refused case."""
    rows = [dict(r) for r in rows]
    if case == "row without split":
        del rows[16]["split"]
        return rows, 17, "the row has no split, while other rows have one (train, validation, test)", []
    if case == "null split":
        rows[4]["split"] = None
        return rows, 5, "the row has no split, while other rows have one", []
    if case == "split ../x":
        rows[22]["split"] = "../x"
        return rows, 23, "column 'split' holds \"../x\": a split name is 1 to 64 ASCII letters", []
    if case == "split all":
        rows[30]["split"] = "all"
        return rows, 31, "column 'split' holds \"all\"", []
    if case == "split ALL":  # datasets refuses "all" in any case, even when asked for another split
        rows[30]["split"] = "ALL"
        return rows, 31, "column 'split' holds \"ALL\": a split name is 1 to 64 ASCII letters", []
    if case == "split a number":
        rows[8]["split"] = 3
        return rows, 9, "column 'split' holds 3, not a split name", []
    if case == "class label on a numeric column":
        return rows, 1, "--class-label n: the column holds 0, not a class name", ["--class-label", "n"]
    if case == "class label on a float column":
        return rows, 1, "--class-label w: the column holds 0.0, not a class name", ["--class-label", "w"]
    if case == "a number among class names":
        rows[40]["label"] = 7
        return rows, 41, "--class-label label: the column holds 7, not a class name", ["--class-label", "label"]
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "row without split",
        "null split",
        "split ../x",
        "split all",
        "split ALL",
        "split a number",
        "class label on a numeric column",
        "class label on a float column",
        "a number among class names",
    ],
)
def test_a_bad_split_or_label_is_one_line_naming_the_file_and_line(
    packed_splits: Packed, case: str, tmp_path: Path
) -> None:
    rows, line, says, options = _bad_rows(case, packed_splits.rows)
    meta = write_jsonl(tmp_path / "bad.jsonl", rows)
    out = tmp_path / NAME  # a packed dataset: a refused run leaves it as it was
    shutil.copytree(packed_splits.folders["zip"], out, ignore=shutil.ignore_patterns("lock"))
    before = tree_bytes(out)
    work_before = _work_files(out)
    result = pack_cli(packed_splits.images, meta, out, "--keep-source-path", *options)
    assert result.returncode == 1, (result.stdout, result.stderr)
    named = [text for text in result.stderr.splitlines() if text.startswith(f"{meta}:")]
    assert len(named) == 1, result.stderr
    assert named[0].startswith(f"{meta}:{line}: ") and says in named[0], result.stderr
    assert "error: 1 problem(s) in the input; no shard was written" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_bytes(out) == before
    assert _work_files(out) == work_before


def test_rows_all_refused_are_named_not_taken_for_a_class_label_column_missing(
    packed_splits: Packed, tmp_path: Path
) -> None:
    """Every row refused (a bad split): the rows' problems are the message, not "no row has a
    column 'label'" (they all have it; none passed its checks)."""
    rows = [dict(r, split="no good!") for r in packed_splits.rows]
    meta = write_jsonl(tmp_path / "bad.jsonl", rows)
    result = pack_cli(packed_splits.images, meta, tmp_path / "out", "--class-label", "label")
    assert result.returncode == 1, result.stderr
    assert f"{meta}:1: column 'split' holds \"no good!\": a split name is" in result.stderr
    assert "has a column" not in result.stderr
    skipped = pack_cli(packed_splits.images, meta, tmp_path / "out", "--class-label", "label", "--on-error", "skip")
    assert skipped.returncode == 2
    assert skipped.stderr.splitlines()[-1] == (
        f"error: --class-label label: no row of {meta} that passes its checks ({len(rows)} refused) has a column"
        " 'label'"
    )
    assert not (tmp_path / "out").exists()


def _work_files(out: Path) -> dict[str, bytes]:
    """OUT_DIR/.shardkit's files but the lock (which every run takes), by path."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in (out / ".shardkit").rglob("*")
        if p.is_file() and p.name != "lock"
    }


def test_splits_whose_shards_hold_other_json_types_load_exactly_with_the_builtin_loader(tmp_path: Path) -> None:
    """A list empty throughout the test split (tags nobody gave) and a label column null
    throughout one of its shards, in small shards (--prefix-length 1). datasets' folder builder
    (3.6 to 5.x) infers each split's types from ONE metadata file and refuses splits whose types
    differ: from metadata.jsonl files it refused these splits every time (layout 3). Each ZIP's
    metadata.parquet carries the card's types, so load_dataset reads every split exactly, no
    warning is printed, and shardkit.stream reads the same rows."""
    import datasets

    import shardkit

    images, _, rows = write_corpus(tmp_path / "in", 20)
    for i, row in enumerate(rows):
        row["split"] = "test" if i % 2 else "train"
        row["key"] = f"{i % 4:x}{row['key'][1:]}"
        if row["split"] == "test":
            row["tags"] = []
            row["label"] = None if i % 4 == 1 else row["label"]  # shard 1 of test: every label null (-1)
        else:
            row["tags"] = row["tags"] or ["t0"]
            row["label"] = row["label"] or "cat"
    meta = write_jsonl(tmp_path / "meta.jsonl", rows)
    out = tmp_path / "out"
    result = pack_cli(images, meta, out, "--prefix-length", "1", "--class-label", "label", "--keep-source-path")
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr and "**Note:**" not in (out / "README.md").read_text(encoding="utf-8")
    expected = expected_splits(images, rows)
    for split in ("train", "test"):
        for reader in ("load_dataset", "shardkit.stream"):
            if reader == "load_dataset":
                ds = datasets.load_dataset(str(out), split=split, cache_dir=str(tmp_path / "cache" / split))
            else:
                ds = shardkit.stream(str(out), split=split)
            got = {}
            for row in ds.cast_column("image", datasets.Image(decode=False)):
                got[row["source_path"]] = {
                    "sha256": hashlib.sha256(file_bytes(row["image"])).hexdigest(),
                    "fields": typed({k: v for k, v in row.items() if k != "image"}),
                }
            assert got == {k: {"sha256": v["sha256"], "fields": v["fields"]} for k, v in expected[split].items()}, (
                reader,
                split,
            )


def test_an_unlabelled_test_split_is_published_as_minus_one_and_datasets_reads_every_split(tmp_path: Path) -> None:
    """The usual shape of a benchmark: labels in train, none in test. A row without a label is
    published as -1 (datasets' number for no label), never null, so every shard of every split
    holds the label column as integers and datasets' builtin loader (which compares one
    metadata file's inferred types per split) reads both splits."""
    import datasets

    images, _, rows = write_corpus(tmp_path / "in", 20)
    for i, row in enumerate(rows):
        row["split"] = "test" if i % 2 else "train"
        row["label"] = None if row["split"] == "test" else (row["label"] or "cat")
        row["tags"] = ["t0"]  # (a list empty throughout a split would be refused on its own: see above)
    meta = write_jsonl(tmp_path / "meta.jsonl", rows)
    out = tmp_path / "out"
    result = pack_cli(images, meta, out, "--prefix-length", "1", "--class-label", "label", "--keep-source-path")
    assert result.returncode == 0, result.stderr
    assert "refuse" not in result.stderr
    names = sorted({r["label"] for r in rows if r["label"] is not None})
    for split in ("train", "test"):
        ds = datasets.load_dataset(str(out), split=split, cache_dir=str(tmp_path / "cache"))
        assert ds.features["label"].names == names
        got = {r["source_path"]: r["label"] for r in ds}
        mine = [r for r in rows if r["split"] == split]
        want = {r["file_name"]: -1 if r["label"] is None else names.index(r["label"]) for r in mine}
        assert got == want
        assert all(type(v) is int for v in got.values())


def test_split_names_that_differ_only_in_case_are_refused(packed_splits: Packed, tmp_path: Path) -> None:
    """data/Train/ and data/train/ are one folder on macOS, Windows and in a clone of the repo."""
    rows = [dict(r) for r in packed_splits.rows]
    first_train = next(i for i, r in enumerate(rows) if r["split"] == "train")
    later_train = next(i for i, r in enumerate(rows) if r["split"] == "train" and i > first_train)
    rows[later_train]["split"] = "Train"
    meta = write_jsonl(tmp_path / "case.jsonl", rows)
    out = tmp_path / "out"
    result = pack_cli(packed_splits.images, meta, out, "--class-label", "label")
    assert result.returncode == 2, result.stderr
    says = f"line {later_train + 1} has split 'Train' and line {first_train + 1} 'train': split names that differ"
    assert says in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_rows_left_out_add_no_class_name_and_a_leak_between_splits_is_named(
    packed_splits: Packed, tmp_path: Path
) -> None:
    """A skipped duplicate's label (scraped copies often carry another one) is no class; a copy of
    a train image in test is reported as a leak between the splits."""
    rows = [dict(r) for r in packed_splits.rows]
    source = next(r for r in rows if r["split"] == "train")
    copy = {**source, "key": source["key"], "label": "aaa_dup", "split": "test"}
    meta = write_jsonl(tmp_path / "dup.jsonl", [*rows, copy])
    refused = pack_cli(packed_splits.images, meta, tmp_path / "refused", "--class-label", "label")
    assert refused.returncode == 1
    assert f"(split 'test'; line {rows.index(source) + 1} is in 'train': a leak between splits)" in refused.stderr
    out = tmp_path / "out"
    result = pack_cli(packed_splits.images, meta, out, "--class-label", "label", "--on-duplicate", "skip", "--json")
    assert result.returncode == 0, result.stderr
    label = next(f for f in json.loads(result.stdout)["features"] if f["name"] == "label")
    assert list(label["dtype"]["class_label"]["names"].values()) == NAMES


def test_the_preview_captions_images_with_class_names_not_numbers(tmp_path: Path) -> None:
    """The contact sheet in the card (example_datasets/shapes-mini: label is its caption column):
    a ClassLabel caption is the class's name, not its number."""
    from shardkit.formats import ZIP
    from shardkit.location import Location
    from shardkit.preview import preview_samples

    example = REPO_ROOT / "example_datasets" / "shapes-mini"
    out = tmp_path / "shapes"
    result = pack_cli(example / "images", example / "metadata.jsonl", out, "--class-label", "label", "-q")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
    names = ["circle", "square", "triangle"]
    shards = [s["file"] for s in manifest["shards"]]
    captions = [c for _, c, _ in preview_samples(Location(str(out), "folder"), shards, 12, ZIP, {"label": names})]
    assert len(captions) == 12 and set(captions) <= set(names)
    assert (out / "preview.jpg").stat().st_size > 0
