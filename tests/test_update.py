"""``pack-shards --update``: a changed input rewrites only the shards whose rows changed (issue 21).

Pack, push to the loopback Hub server, add 3 rows and remove 2, ``--update``, push again: only
the shards holding the touched keys get new bytes and travel (with the manifest, metadata, card
and preview), the removed rows' bytes are in no shard any more, and a fresh consumer
(``shardkit.stream`` and datasets 5.x from the server) reads exactly the new rows. The same with
splits and a class label that gains names: published label numbers stay. Refusals (changed
input without ``--update``, ``--update --force``, other options), a re-run that keeps every
shard, and a column that only added rows have (Parquet rewrites every shard, ZIP does not).

Keys are given and packed with ``--prefix-length 1``, so a row's shard is its key's first hex
digit and the touched shards are known in advance.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.json as paj
import pyarrow.parquet as pq
import pytest

from tests.compat_reader import typed
from tests.hub_server import HubServer, run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import tiny_image, tree_bytes, write_jsonl
from tests.test_splits_labels import FIRST_SEEN, NAMES, hub_env, pack_cli, read_cells, write_corpus

SCRIPTS = Path(sys.executable).parent
SHARDS = 16
#: Besides the shards and their metadata files, what an update may change: the manifest, the
#: card, the typed metadata table and the preview (whose sample images may be new rows).
SMALL_FILES = {"shards.json", "README.md", "metadata.parquet", "preview.jpg"}


# --- a corpus whose rows land in known shards --------------------------------------------------------


class Corpus:
    """Images and metadata rows; ``key(i)`` puts row ``i`` in shard ``i % 16``."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        self.images = root / "images"
        self.images.mkdir(parents=True)
        self.rows = [self.row(i) for i in range(n)]

    @staticmethod
    def key(i: int, shard: int | None = None) -> str:
        return f"{(i if shard is None else shard) % SHARDS:x}{hashlib.sha256(str(i).encode()).hexdigest()[:15]}"

    def row(self, i: int, shard: int | None = None, **extra: Any) -> dict[str, Any]:
        name = f"img/{i:04d}.jpg"
        path = self.images / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tiny_image(7000 + i, "JPEG", (10 + i % 7, 8 + i % 5)))
        return {
            "file_name": name,
            "key": self.key(i, shard),
            "caption": f"row {i}",
            "n": i,
            "w": i / 8,
            "tags": [f"t{j}" for j in range(i % 3)],
            **extra,
        }

    def write(self, name: str = "meta.jsonl") -> Path:
        return write_jsonl(self.root / name, self.rows)

    def image(self, row: dict[str, Any]) -> bytes:
        return (self.images / row["file_name"]).read_bytes()

    def expected(self, columns: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """key -> the file's sha256 and typed fields, as every reader must return them
        (``columns``: columns some rows lack, with the value readers give those rows)."""
        out = {}
        for row in self.rows:
            fields = {**(columns or {}), **{k: v for k, v in row.items() if k != "file_name"}}
            out[row["key"]] = {"sha256": hashlib.sha256(self.image(row)).hexdigest(), "fields": typed(fields)}
        return out


def pack(corpus: Corpus, meta: Path, out: Path, *options: str) -> dict[str, Any]:
    """The --json summary of a pack of ``corpus`` (in this process: :func:`pack_cli`), which must succeed."""
    result = pack_cli(corpus.images, meta, out, "--prefix-length", "1", "--json", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def files_under(out: Path, sub: str) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / sub).rglob("*")) if p.is_file()}


def shard_of(key: str, split: str | None = None, fmt: str = "zip") -> str:
    return f"data/{split + '/' if split else ''}{key[0]}.{fmt}"


def published_labels(out: Path) -> dict[str, int | None]:
    """Each published row's label number, by source path, from the metadata files."""
    rows = (json.loads(line) for p in (out / "metadata").rglob("*.jsonl") for line in p.read_text().splitlines())
    return {row["source_path"]: row["label"] for row in rows}


def metadata_of(shard: str) -> str:
    return "metadata/" + shard.removeprefix("data/").rsplit(".", 1)[0] + ".jsonl"


# --- the Hub server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with run_hub_server(tmp_path_factory.mktemp("update-hub")) as server:
        yield server


def push(hub: HubServer, out: Path, repo: str, home: Path) -> dict[str, Any]:
    """``shardkit push --json``, in a process of its own: huggingface_hub reads HF_ENDPOINT and HF_HOME at import."""
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", repo, "--json"],
        capture_output=True,
        text=True,
        env=hub_env(hub.url, home),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def published(out: Path) -> dict[str, bytes]:
    """What a push of ``out`` publishes: every file but the work folder's (shardkit made them all)."""
    return tree_bytes(out)


def remote(hub: HubServer, repo: str) -> dict[str, bytes]:
    return {p: hub.read_file(repo, p) for p in hub.files(repo)}


def same_files(hub: HubServer, repo: str, out: Path) -> bool:
    """Whether the repo's main holds what ``out`` publishes (the card aside: push may say the repo's
    name in it)."""
    there, here = remote(hub, repo), published(out)
    return there.keys() == here.keys() and all(there[p] == here[p] for p in here if p != "README.md")


def uploaded_objects(hub: HubServer) -> set[str]:
    """The sha256 of every LFS object uploaded since the log was cleared."""
    return {path.rsplit("/", 1)[1] for method, path, _ in hub.log.entries if method == "PUT" and "/lfs-upload/" in path}


def consumers(hub: HubServer, repo: str, splits: list[str], home: Path) -> dict[str, Any]:
    """A fresh consumer's reads of ``repo`` from the server, each split: shardkit.stream, and
    datasets 5.x load_dataset map-style and streaming."""
    cells = [
        {"id": "shardkit", "reader": "shardkit", "path": repo, "streaming": True, "splits": splits},
        {"id": "datasets/map", "reader": "builtin", "path": repo, "streaming": False, "splits": splits},
        {"id": "datasets/streaming", "reader": "builtin", "path": repo, "streaming": True, "splits": splits},
    ]
    return read_cells(sys.executable, cells, hub_env(hub.url, home, token=None))["cells"]  # type: ignore[no-any-return]


def assert_reads(cells: dict[str, Any], expected: dict[str, dict[str, Any]], names: list[str] | None = None) -> None:
    """Every cell read each split's expected rows (by key, or source path), no more, no other."""
    for cell, splits in cells.items():
        for split, got in splits.items():
            where = f"{cell} {split}"
            assert "error" not in got, f"{where}: {got.get('error')}\n{got.get('traceback')}"
            assert got["repeats"] == 0, where
            assert set(got["rows"]) == set(expected[split]), where
            for key, row in expected[split].items():
                assert {k: got["rows"][key][k] for k in row} == row, (where, key)
            if names is not None:
                assert got["names"] == {"label": names}, where


# --- add 3 rows, remove 2, --update, push ----------------------------------------------------------


@pytest.mark.slow
def test_update_rewrites_and_pushes_only_the_shards_whose_rows_changed(hub: HubServer, tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 80)  # 5 rows a shard
    out = tmp_path / "update-zip"
    first = pack(corpus, corpus.write(), out)
    assert (first["shards"], first["written_shards"]) == (SHARDS, SHARDS)
    repo, home = "tester/update-zip", tmp_path / "home"
    push(hub, out, repo, home)
    shards_before = files_under(out, "data")
    metadata_before = files_under(out, "metadata")
    remote_before = hub.files(repo)
    assert len(shards_before) == SHARDS

    removed = [corpus.rows[3], corpus.rows[21]]  # shards 3 and 5
    corpus.rows = [r for r in corpus.rows if r not in removed]
    added = [corpus.row(200 + i, shard) for i, shard in enumerate((7, 9, 11))]
    corpus.rows += added
    touched = {shard_of(r["key"]) for r in removed + added}
    assert touched == {"data/3.zip", "data/5.zip", "data/7.zip", "data/9.zip", "data/b.zip"}

    meta = corpus.write()
    summary = pack(corpus, meta, out, "--update")
    assert (summary["rows"], summary["shards"]) == (81, SHARDS)
    assert (summary["written_shards"], summary["kept_shards"], summary["resumed_shards"]) == (5, 11, 0)

    # (a) Every shard but the touched ones is byte for byte what it was; the touched ones changed.
    shards_after = files_under(out, "data")
    assert set(shards_after) == set(shards_before)
    changed = {name for name, data in shards_after.items() if shards_before[name] != data}
    assert changed == touched
    metadata_after = files_under(out, "metadata")
    assert {n for n, data in metadata_after.items() if metadata_before[n] != data} == {metadata_of(s) for s in touched}

    # (c) The removed rows' files are in no shard, on disk or on the Hub, nor their keys in any
    # metadata; the added rows' files are (the search finds stored members).
    for row in removed:
        data = corpus.image(row)
        assert any(data in shard for shard in shards_before.values())
        assert not any(data in shard for shard in shards_after.values()), row["file_name"]
        assert not any(row["key"].encode() in text for text in metadata_after.values())
    assert set(pq.read_table(out / "metadata.parquet").column("key").to_pylist()) == {r["key"] for r in corpus.rows}
    for row in added:
        assert sum(corpus.image(row) in shard for shard in shards_after.values()) == 1

    # (b) The push uploads the touched shards, their metadata and the small files, nothing else.
    hub.log.clear()
    pushed = push(hub, out, repo, home)
    remote_after = hub.files(repo)
    differ = {p for p in set(remote_before) | set(remote_after) if remote_before.get(p) != remote_after.get(p)}
    travelling = touched | {metadata_of(s) for s in touched}
    assert travelling <= differ and differ - travelling <= SMALL_FILES, differ
    assert pushed["uploaded_files"] == len(differ) and pushed["deleted_files"] == 0
    assert pushed["skipped_files"] == len(published(out)) - len(differ)
    unchanged = {remote_after[p]["sha256"] for p in remote_after if p not in differ}
    assert uploaded_objects(hub) <= {remote_after[p]["sha256"] for p in differ}
    assert not uploaded_objects(hub) & unchanged
    assert uploaded_objects(hub) >= {remote_after[s]["sha256"] for s in touched}  # the new shards went up
    assert same_files(hub, repo, out)
    hub_now = remote(hub, repo)
    for row in removed:
        assert not any(corpus.image(row) in data for data in hub_now.values())

    # (d) A fresh consumer reads exactly the new rows from the server.
    assert_reads(consumers(hub, repo, ["train"], tmp_path / "reader"), {"train": corpus.expected()})

    # (g) The same --update again (as after a kill once it finished): every shard kept, nothing
    # rewritten, and a push sends nothing.
    before = tree_bytes(out)
    again = pack(corpus, meta, out, "--update")
    assert (again["written_shards"], again["kept_shards"] + again["resumed_shards"]) == (0, SHARDS)
    assert tree_bytes(out) == before
    nothing = push(hub, out, repo, home)
    assert (nothing["uploaded_files"], nothing["deleted_files"], nothing["commits"]) == (0, 0, 0)


@pytest.mark.slow
def test_an_update_with_splits_and_new_class_names_keeps_the_published_label_numbers(
    hub: HubServer, tmp_path: Path
) -> None:
    """Splits and --class-label: new names are numbered after the published ones (even one that
    sorts first), a shard whose last row went is deleted from the repo, other shards stay."""
    images, meta, rows = write_corpus(tmp_path / "in", 60)
    out = tmp_path / "update-splits"
    options = ["--prefix-length", "1", "--class-label", "label", "--keep-source-path", "--json"]
    first = pack_cli(images, meta, out, *options)
    assert first.returncode == 0, first.stderr
    repo, home = "tester/update-splits", tmp_path / "home"
    push(hub, out, repo, home)
    shards_before = files_under(out, "data")
    labels_before = published_labels(out)
    manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
    assert "data/test/4.zip" in shards_before and manifest["splits"]["test"]["rows"] == 6

    removed = [rows[28], rows[11]]  # the one row of data/test/4.zip; one of data/train/3.zip
    template = rows[1]  # tags given: a shard of empty lists alone trips datasets (see test_splits_labels)
    added = []
    for i, (split, label, shard) in enumerate((("validation", "aardvark", 5), ("test", "bee", 1), ("train", "cat", 6))):
        name = f"new/added_{i}.jpg"
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        (images / name).write_bytes(tiny_image(500 + i, "JPEG", (12, 9)))
        key = f"{shard:x}{hashlib.sha256(name.encode()).hexdigest()[:15]}"
        added.append({**template, "file_name": name, "key": key, "split": split, "label": label, "n": 900 + i})
    rows = [r for r in rows if r not in removed] + added
    write_jsonl(meta, rows)
    result = pack_cli(images, meta, out, *options, "--update")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    touched = {shard_of(r["key"], r["split"]) for r in removed + added}
    assert touched == {
        "data/test/4.zip",
        "data/train/3.zip",
        "data/validation/5.zip",
        "data/test/1.zip",
        "data/train/6.zip",
    }
    new_names = [*NAMES, "aardvark", "bee"]  # published numbers kept; new names after them, sorted
    label = next(f for f in summary["features"] if f["name"] == "label")
    assert label["dtype"]["class_label"]["names"] == {str(i): n for i, n in enumerate(new_names)}

    shards_after = files_under(out, "data")
    assert set(shards_before) - set(shards_after) == {"data/test/4.zip"}  # its one row went
    assert set(shards_after) - set(shards_before) == {"data/test/1.zip"}  # the first test row under 1
    changed = {name for name, data in shards_after.items() if shards_before.get(name) != data}
    assert changed == touched - {"data/test/4.zip"}
    assert summary["written_shards"] == len(changed) and summary["kept_shards"] == len(shards_after) - len(changed)
    # Every row published before has the label number it had, in rewritten shards too.
    labels_after = published_labels(out)
    assert {k: labels_after[k] for k in labels_before if k in labels_after} == {
        k: v for k, v in labels_before.items() if k not in {r["file_name"] for r in removed}
    }
    assert {labels_after[r["file_name"]] for r in added} == {5, 6, NAMES.index("cat")}

    # Every metadata file infers one schema, as datasets' folder builder needs across splits.
    assert len({paj.read_json(p).schema.to_string() for p in (out / "metadata").rglob("*.jsonl")}) == 1

    # A plain re-run is the same run: the published numbers stay. --force (here on a copy)
    # numbers the classes afresh, sorted, and says which published numbers change.
    again = pack_cli(images, meta, out, *options)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["written_shards"] == 0
    assert published_labels(out) == labels_after and files_under(out, "data") == shards_after
    copy = tmp_path / "forced"
    shutil.copytree(out, copy)
    forced = pack_cli(images, meta, copy, *options, "--force")
    assert forced.returncode == 0, forced.stderr
    label = next(f for f in json.loads(forced.stdout)["features"] if f["name"] == "label")
    assert list(label["dtype"]["class_label"]["names"].values()) == sorted(new_names)
    assert "--force numbers the classes of label afresh: 'aardvark' 5 -> 0, 'ant' 0 -> 1" in forced.stderr

    pushed = push(hub, out, repo, home)
    assert pushed["deleted_files"] == 2  # data/test/4.zip and its metadata file
    assert not {"data/test/4.zip", "metadata/test/4.jsonl"} & set(hub.files(repo))
    assert same_files(hub, repo, out)

    expected: dict[str, dict[str, Any]] = {s: {} for s in ("train", "validation", "test")}
    for row in rows:
        data = (images / row["file_name"]).read_bytes()
        fields = {k: v for k, v in row.items() if k not in ("file_name", "split")}
        fields["label"] = -1 if row["label"] is None else new_names.index(row["label"])
        fields["source_path"] = row["file_name"]
        expected[row["split"]][row["file_name"]] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "fields": typed(fields),
            "labels": {"label": row["label"]},
        }
    assert all(new_names.index(n) == NAMES.index(n) for n in FIRST_SEEN)
    got = consumers(hub, repo, list(expected), tmp_path / "reader")
    assert_reads(got, expected, new_names)


# --- refusals ----------------------------------------------------------------------------------------


@pytest.fixture
def packed_small(tmp_path: Path) -> tuple[Corpus, Path, Path]:
    """A 32-row corpus packed, then its metadata changed (a row added): corpus, metadata, OUT_DIR."""
    corpus = Corpus(tmp_path / "in", 32)
    out = tmp_path / "out"
    pack(corpus, corpus.write(), out)
    corpus.rows.append(corpus.row(100))
    return corpus, corpus.write(), out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "says"),
    [
        ([], ["other input (rows, files or fields changed)", "--update", "--force"]),
        (["--update", "--force"], ["--update keeps the shards whose rows did not change, --force rewrites them all"]),
        (["--update", "--max-shard-size", "2MB"], ["other options (--max-shard-size", "--update keeps", "--force"]),
        (["--update", "--format", "tar"], ["other options (--format zip -> tar)", "--force"]),
    ],
)
def test_changed_input_is_refused_without_update_and_update_only_keeps_same_options(
    packed_small: tuple[Corpus, Path, Path], options: list[str], says: list[str]
) -> None:
    corpus, meta, out = packed_small
    before = tree_bytes(out)
    result = pack_cli(corpus.images, meta, out, "--prefix-length", "1", *options)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for text in says:
        assert text in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert tree_bytes(out) == before


# --- a column that only added rows have ------------------------------------------------------------


@pytest.mark.slow
def test_a_new_column_rewrites_every_shard_and_a_new_class_name_only_the_touched(tmp_path: Path) -> None:
    """Parquet files carry the schema, and so does each ZIP's metadata.parquet (since layout 4:
    one schema for every shard, or datasets refuses the splits), so a new column changes every
    shard of both; readers give the new column as null for the old rows. A new class name changes
    no schema (the card gives the ClassLabel): ZIP rewrites only the shards whose rows changed."""
    corpus = Corpus(tmp_path / "in", 48)
    meta = corpus.write()
    outs = {fmt: tmp_path / f"new-column-{fmt}" for fmt in ("zip", "parquet")}
    before = {}
    for fmt, out in outs.items():
        pack(corpus, meta, out, "--format", fmt)
        before[fmt] = files_under(out, "data")
        assert len(before[fmt]) == SHARDS
    corpus.rows += [
        corpus.row(300, 2, extra={"x": 1.5, "y": ["a"]}),
        corpus.row(301, 12, extra={"x": 2.0, "y": []}),
    ]
    meta = corpus.write()
    touched = {"2", "c"}
    for fmt, out in outs.items():
        summary = pack(corpus, meta, out, "--format", fmt, "--update")
        after = files_under(out, "data")
        changed = {name.removeprefix("data/")[0] for name, data in after.items() if before[fmt][name] != data}
        assert changed == {f"{i:x}" for i in range(SHARDS)} > touched
        assert (summary["written_shards"], summary["kept_shards"]) == (SHARDS, 0)
        extra = next(f for f in summary["features"] if f["name"] == "extra")
        assert extra == {
            "name": "extra",
            "struct": [{"name": "x", "dtype": "float64"}, {"name": "y", "list": "string"}],
        }

    expected = {"train": corpus.expected({"extra": None})}
    cells = [
        {"id": f"{fmt}/{reader}/{mode}", "reader": reader, "path": str(out), "streaming": mode == "streaming"}
        for fmt, out in outs.items()
        for reader, modes in (("shardkit", ["streaming"]), ("builtin", ["map", "streaming"]))
        for mode in modes
    ]
    got = read_cells(sys.executable, [{**cell, "splits": ["train"]} for cell in cells])["cells"]
    assert_reads(got, expected)

    zip_out = outs["zip"]
    labelled = Corpus(tmp_path / "in-labels", 48)
    for row in labelled.rows:
        row["caption"] = "odd" if row["n"] % 2 else "even"
    pack(labelled, labelled.write(), zip_out, "--class-label", "caption", "--force")
    before_labels = files_under(zip_out, "data")
    labelled.rows.append(labelled.row(302, 2, caption="another class"))
    summary = pack(labelled, labelled.write(), zip_out, "--class-label", "caption", "--update")
    assert (summary["written_shards"], summary["kept_shards"]) == (1, SHARDS - 1)
    after = files_under(zip_out, "data")
    assert {name for name in after if before_labels.get(name) != after[name]} == {"data/2.zip"}


# --- an update killed part-way ---------------------------------------------------------------------

#: pack-shards SIGKILLed at one fixed point (tests/support/killed_pack.py).
KILLED_PACK = Path(__file__).parent / "support" / "killed_pack.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        "a shard whose rows all went removed",
        "the new state recorded",
        "one shard written",
        "the manifest about to be written",
    ],
)
def test_an_update_killed_at_any_step_resumes_to_the_output_of_one_that_was_not(tmp_path: Path, point: str) -> None:
    corpus = Corpus(tmp_path / "in", 80)
    base = tmp_path / "base" / "ds"  # one folder name everywhere: the card names it
    base.parent.mkdir()
    pack(corpus, corpus.write(), base)
    # Every row of shard e goes (its file goes too), shards 2 and 4 gain one each.
    corpus.rows = [r for r in corpus.rows if r["key"][0] != "e"]
    corpus.rows += [corpus.row(400, 2), corpus.row(401, 4)]
    meta = corpus.write()
    folders = {}
    for name in ("reference", "killed"):
        folders[name] = tmp_path / name / "ds"
        shutil.copytree(base, folders[name], ignore=shutil.ignore_patterns("lock"))
    reference = pack(corpus, meta, folders["reference"], "--update")
    assert (reference["written_shards"], reference["kept_shards"], reference["shards"]) == (2, 13, 15)

    out = folders["killed"]
    args = [str(corpus.images), str(meta), "-o", str(out), "--prefix-length", "1", "--update", "--jobs", "1", "-q"]
    killed = subprocess.run(
        [sys.executable, str(KILLED_PACK), point, "0", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert killed.returncode == -9, killed.stderr  # it got to the point
    resumed = pack(corpus, meta, out, "--update")
    assert resumed["written_shards"] <= 2, resumed
    assert tree_bytes(out) == tree_bytes(folders["reference"])
    again = pack(corpus, meta, out, "--update")
    assert again["written_shards"] == 0
    assert tree_bytes(out) == tree_bytes(folders["reference"])


@pytest.mark.slow
def test_a_class_left_without_rows_keeps_its_number_with_a_warning_and_force_numbers_afresh(tmp_path: Path) -> None:
    """A typo'd class fixed in the metadata: --update keeps the published numbers (the typo's
    class stays, without rows, and the warning names it and the way out); --force numbers the
    classes of the rows there are, sorted, and names the numbers that change."""
    images, meta, rows = write_corpus(tmp_path / "in", 24)
    for i, row in enumerate(rows):
        row["label"] = "cirlce" if i == 3 else ("circle" if i % 2 else "square")
    write_jsonl(meta, rows)
    out = tmp_path / "out"
    options = ["--prefix-length", "1", "--class-label", "label", "--keep-source-path", "--json"]
    assert pack_cli(images, meta, out, *options).returncode == 0
    rows[3]["label"] = "circle"
    write_jsonl(meta, rows)

    def names_of(result: subprocess.CompletedProcess[str]) -> list[str]:
        assert result.returncode == 0, result.stderr
        label = next(f for f in json.loads(result.stdout)["features"] if f["name"] == "label")
        return list(label["dtype"]["class_label"]["names"].values())

    updated = pack_cli(images, meta, out, *options, "--update")
    assert names_of(updated) == ["circle", "cirlce", "square"]
    assert "--class-label label: no row is of class 'cirlce' now; kept with the number published" in updated.stderr
    assert "To number the classes afresh: --force" in updated.stderr
    forced = pack_cli(images, meta, out, *options, "--force")
    assert names_of(forced) == ["circle", "square"]
    assert "--force numbers the classes of label afresh: 'square' 2 -> 1" in forced.stderr
    assert set(published_labels(out).values()) == {0, 1}


@pytest.mark.slow
def test_a_copy_without_its_work_folder_re_runs_keeping_every_shard(tmp_path: Path) -> None:
    """A clone of a packed repo (no .shardkit/): the same input keeps every shard (each checked
    against the manifest's sha256 and its rows' hash), and --update after a change keeps the
    shards whose rows did not change."""
    corpus = Corpus(tmp_path / "in", 32)
    meta = corpus.write()
    out = tmp_path / "out"
    pack(corpus, meta, out, "--class-label", "caption")
    clone = tmp_path / "clone"
    shutil.copytree(out, clone, ignore=shutil.ignore_patterns(".shardkit"))
    before = files_under(clone, "data")
    again = pack(corpus, meta, clone, "--class-label", "caption")
    assert again["written_shards"] == 0 and files_under(clone, "data") == before
    corpus.rows.append(corpus.row(100))
    updated = pack(corpus, corpus.write(), clone, "--class-label", "caption", "--update")
    assert updated["written_shards"] == 1 and updated["kept_shards"] == len(before) - 1


@pytest.mark.slow
def test_a_dry_run_says_what_an_update_would_keep_or_that_the_run_would_be_refused(tmp_path: Path) -> None:
    """--dry-run reconciles with OUT_DIR as the run would, and changes nothing in it: the same
    refusal (exit 2) for changed input without --update, and with --update the shards it would
    write and keep, which the real update then does."""
    corpus = Corpus(tmp_path / "in", 32)
    out = tmp_path / "out"
    pack(corpus, corpus.write(), out)
    corpus.rows.append(corpus.row(100))
    meta = corpus.write()
    before = tree_bytes(out)
    refused = pack_cli(corpus.images, meta, out, "--prefix-length", "1", "--dry-run")
    assert refused.returncode == 2 and "Re-run with --update" in refused.stderr
    dry = pack(corpus, meta, out, "--dry-run", "--update")
    assert tree_bytes(out) == before
    assert dry["dry_run"] and (dry["written_shards"], dry["kept_shards"]) == (1, len(files_under(out, "data")) - 1)
    real = pack(corpus, meta, out, "--update")
    assert (real["written_shards"], real["kept_shards"]) == (dry["written_shards"], dry["kept_shards"])


@pytest.mark.slow
def test_an_update_of_shards_cut_by_size_keeps_their_names_and_rewrites_only_the_one_that_grew(
    tmp_path: Path,
) -> None:
    """The default layout: shards named by where their keys start. New rows all in one shard's
    range, until it holds about three targets: --update cuts that one alone into three (the first
    keeps its name), every other shard keeps its bytes, and verify holds every key to the range
    its shard's name says."""
    corpus = Corpus(tmp_path / "in", 64)
    meta = corpus.write()
    out = tmp_path / "out"
    dry = json.loads(pack_cli(corpus.images, meta, out, "--dry-run", "--json").stdout)
    target = str(dry["bytes"] // 4)
    first = json.loads(pack_cli(corpus.images, meta, out, "--target-shard-size", target, "--json").stdout)
    names = sorted(Path(p).stem for p in files_under(out, "data"))
    assert first["prefix_length"] == 0 and len(names) == first["shards"] >= 3 and names[0] == "0"
    before = files_under(out, "data")
    grown = names[1]
    i = 1000
    while sum(1 for r in corpus.rows if [n for n in names if n <= r["key"]][-1] == grown) < 3 * 64 // len(names):
        key = hashlib.sha256(f"new{i}".encode()).hexdigest()[:16]
        if [n for n in names if n <= key][-1] == grown:
            corpus.rows.append({**corpus.row(i), "key": key})
        i += 1
    updated = pack_cli(corpus.images, corpus.write(), out, "--target-shard-size", target, "--update", "--json")
    assert updated.returncode == 0, updated.stderr
    after = files_under(out, "data")
    assert {k: v for k, v in after.items() if k in before and k != f"data/{grown}.zip"} == {
        k: v for k, v in before.items() if k != f"data/{grown}.zip"
    }
    new_names = sorted(Path(p).stem for p in after)
    assert set(names) <= set(new_names) and len(new_names) == len(names) + 2
    assert json.loads(updated.stdout)["kept_shards"] == len(names) - 1
    checked = run_cli("shardkit", "verify", out, "--deep", "-q")
    assert checked.returncode == 0 and f"{len(corpus.rows)} rows" in checked.stdout, checked.stdout
    published = {json.loads(line)["key"]: p.stem for p in (out / "metadata").glob("*.jsonl") for line in p.open()}
    assert published == {r["key"]: [n for n in new_names if n <= r["key"]][-1] for r in corpus.rows}
