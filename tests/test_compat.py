"""The consumer contract (issue 18): every reader returns exactly what was packed, with its types.

One corpus built to break loaders (see tests/support/compat_corpus.py), images and audio, packed as
zip, tar and parquet and pushed to the Hub-API test server, then read by every reader:

* datasets 3.6 (``.venv-ds36``): the builtin loaders and the loading script (zip);
* datasets 4.0 (``.venv-ds40``) and 5.x (this venv): the builtin loaders;
* ``shardkit.stream`` in datasets 3.6 and 5.x;

each map-style and streaming (``shardkit.stream`` streams only), from the folder and from the
Hub server (``shardkit.stream`` also from a plain http URL of the repo's files), twice with a
fresh cache. Every cell must give every row once, each file's bytes, and each field's value
and Python type as packed. The readers run in subprocesses, one per venv
(tests/compat_reader.py), all cells of a venv in one process.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter

from tests.compat_reader import file_bytes, typed
from tests.hub_server import WRITE_TOKEN, run_hub_server
from tests.support import compat_corpus
from tests.support.cli import run_cli
from tests.support.corpus import REPO_ROOT, write_jsonl
from tests.support.readback import DS36_PYTHON, DS40_PYTHON, run_reader

pytestmark = pytest.mark.slow  # every test here takes over about 3 s

SCRIPTS = Path(sys.executable).parent
READER = Path(__file__).with_name("compat_reader.py")
FORMATS = ("zip", "tar", "parquet")
MODALITIES = ("image", "audio")
REPEAT = 2


class Packed:
    """The corpus packed every way, pushed to a Hub-API server that runs for the module."""

    def __init__(self, root: Path, hub_url: str) -> None:
        self.root = root
        self.hub_url = hub_url
        self.expected: dict[str, dict[str, Any]] = {}  # modality -> key -> row
        self.folders: dict[tuple[str, str], Path] = {}  # (modality, format) -> OUT_DIR
        self.shards: dict[tuple[str, str], int] = {}

    def repo(self, modality: str, fmt: str) -> str:
        return f"tester/compat-{modality}-{fmt}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(
            HF_ENDPOINT=self.hub_url,
            HF_HOME=str(self.root / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_XET="1",
            HF_TOKEN=WRITE_TOKEN,
            NO_PROXY="127.0.0.1",
            HF_DATASETS_TRUST_REMOTE_CODE="1",
        )
        return env


def _pack(files: Path, meta: Path, out: Path, fmt: str) -> None:
    """pack-shards, in this process (tests/support/cli.py); the push that follows has a process of
    its own, for its HF_* environment (huggingface_hub reads it on import)."""
    result = run_cli("pack-shards", files, meta, "-o", out, "--format", fmt, "--prefix-length", "1", "-q")
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def packed_compat_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packed]:
    root = tmp_path_factory.mktemp("compat")
    with run_hub_server(root / "hub") as hub:
        sets = Packed(root, hub.url)
        for modality in MODALITIES:
            files, meta = compat_corpus.build(root / f"in-{modality}", modality)
            sets.expected[modality] = compat_corpus.expected_rows(files, meta)
            for fmt in FORMATS:
                name = f"compat-{modality}-{fmt}"
                if fmt == "zip":  # with the template: its loading script is a reader too
                    out = Path(
                        cookiecutter(
                            str(REPO_ROOT / "templates" / "hub-dataset"),
                            no_input=True,
                            extra_context={"dataset_name": name, "namespace": "tester", "modality": modality},
                            output_dir=str(root / "repos"),
                            default_config=True,
                        )
                    )
                else:
                    out = root / "repos" / name
                    out.parent.mkdir(exist_ok=True)
                _pack(files, meta, out, fmt)
                sets.folders[modality, fmt] = out
                sets.shards[modality, fmt] = len(list((out / "data").glob(f"*.{fmt}")))
                pushed = subprocess.run(
                    [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", sets.repo(modality, fmt), "-q"],
                    capture_output=True,
                    text=True,
                    env=sets.env(),
                    timeout=300,
                    check=False,
                )
                assert pushed.returncode == 0, pushed.stderr
        yield sets


def _cells(packed_compat_corpus: Packed, venv: str) -> list[dict[str, Any]]:
    cells = []
    for modality in MODALITIES:
        for fmt in FORMATS:
            folder = packed_compat_corpus.folders[modality, fmt]
            places = {"local": str(folder), "hub": packed_compat_corpus.repo(modality, fmt)}
            repo = packed_compat_corpus.repo(modality, fmt)
            url = f"{packed_compat_corpus.hub_url}/datasets/{repo}/resolve/main"  # a plain web folder
            readers = ["builtin"]
            if venv in ("3.6", "5.x"):
                readers.append("shardkit")
            if venv == "3.6" and fmt == "zip":
                readers.append("script")
            for reader in readers:
                for where, path in places.items() if reader != "shardkit" else {**places, "url": url}.items():
                    revision = None
                    if reader == "script":  # the script, from the folder or the Hub's script branch
                        path = str(next(folder.glob("*_loader.py"))) if where == "local" else path
                        revision = "script" if where == "hub" else None
                    for streaming in (False, True) if reader != "shardkit" else (True,):
                        mode = "streaming" if streaming else "map"
                        cells.append(
                            {
                                "id": f"{modality}/{fmt}/{reader}/{where}/{mode}",
                                "reader": reader,
                                "path": path,
                                "revision": revision,
                                "streaming": streaming,
                                "modality": modality,
                                "repeat": REPEAT,
                            }
                        )
    return cells


def _run_cells(python: str, cells: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    return run_reader(python, READER, cells, env, timeout=1200)  # type: ignore[no-any-return]


#: Cells that cannot work, by the datasets code that decides it (docs/reference.md lists them).
#: In datasets 5.x ``Audio.encode_example`` (datasets/features/audio.py) imports torch and
#: torchcodec before anything else, so a builder that yields audio files (audiofolder over ZIP,
#: webdataset over tar) fails without them; Parquet rows are Arrow already and are not encoded,
#: and 3.6 and 4.0 encode without torchcodec. torchcodec needs torch and FFmpeg, too heavy for
#: CI; shardkit.stream gives the files' bytes and paths there instead.
CANNOT = {
    ("5.x", "audio", "zip", "builtin"): "torchcodec",
    ("5.x", "audio", "tar", "builtin"): "torchcodec",
}


def _problems(
    packed_compat_corpus: Packed, venv: str, cells: list[dict[str, Any]], results: dict[str, Any]
) -> list[str]:
    problems = []
    for cell in cells:
        modality, fmt, reader = cell["id"].split("/")[:3]
        expected = packed_compat_corpus.expected[modality]
        cannot = CANNOT.get((venv, modality, fmt, reader))
        for n, run in enumerate(results[cell["id"]]["runs"], 1):
            where = f"{cell['id']} (run {n})"
            if cannot is not None:  # it must fail, and for that reason (a pass means docs/reference.md must change)
                if cannot not in run.get("error", "") + run.get("traceback", ""):
                    problems.append(f"{where}: expected to fail for want of {cannot}, got {run.get('error', 'rows')}")
                continue
            if "error" in run:
                problems.append(f"{where}: {run['error']}\n{run['traceback']}")
                continue
            if run["duplicates"]:
                problems.append(f"{where}: {run['duplicates']} rows more than once")
            if set(run["rows"]) != set(expected):
                problems.append(f"{where}: keys differ: {len(run['rows'])} rows, expected {len(expected)}")
                continue
            for key, row in expected.items():
                if run["rows"][key] != row:
                    problems.append(f"{where}: row {key}: got {run['rows'][key]}, expected {row}")
                    break
            one_per_file = not (reader == "builtin" and fmt == "zip")  # see docs/reference.md: imagefolder makes one
            if cell["streaming"] and one_per_file and run["n_shards"] != packed_compat_corpus.shards[modality, fmt]:
                problems.append(
                    f"{where}: n_shards {run['n_shards']}, expected {packed_compat_corpus.shards[modality, fmt]}"
                )
    return problems


@pytest.mark.parametrize("venv", ["3.6", "4.0", "5.x"])
def test_every_reader_returns_every_row_byte_value_and_type(packed_compat_corpus: Packed, venv: str) -> None:
    python = {"3.6": DS36_PYTHON, "4.0": DS40_PYTHON, "5.x": sys.executable}[venv]
    assert Path(python).exists(), f"{python} missing: scripts/test.sh builds it"
    cells = _cells(packed_compat_corpus, venv)
    results = _run_cells(python, cells, packed_compat_corpus.env())
    assert {r["version"] for r in results.values()} == {
        {"3.6": "3.6.0", "4.0": "4.0.0", "5.x": _datasets_version()}[venv]
    }
    problems = _problems(packed_compat_corpus, venv, cells, results)
    if problems:
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(problems), pytrace=False)


def _datasets_version() -> str:
    import datasets

    return datasets.__version__


def test_shards_split_over_two_workers_lose_and_repeat_nothing(packed_compat_corpus: Packed) -> None:
    """What a DataLoader with two workers or two nodes does: split_dataset_by_node, by shard."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    import shardkit

    folder = packed_compat_corpus.folders["image", "zip"]
    ds = shardkit.stream(str(folder)).cast_column("image", datasets.Image(decode=False))
    assert ds.n_shards == packed_compat_corpus.shards["image", "zip"] >= 2
    keys = [[row["key"] for row in split_dataset_by_node(ds, rank=r, world_size=2)] for r in (0, 1)]
    assert keys[0] and keys[1]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(packed_compat_corpus.expected["image"])


def test_the_corpus_is_what_it_claims(packed_compat_corpus: Packed) -> None:
    """The traps are really in the packed data: whole-number floats alone in one shard, a column
    null throughout another, mixed image types, three kinds of audio."""
    meta = packed_compat_corpus.folders["image", "zip"] / "metadata"
    shard0 = [json.loads(line) for line in (meta / "0.jsonl").read_text().splitlines()]
    assert all(float(r["score"]).is_integer() for r in shard0)
    assert all(r["note"] is None for r in (json.loads(x) for x in (meta / "1.jsonl").read_text().splitlines()))
    image_types = {p.suffix for p in (packed_compat_corpus.root / "in-image" / "files").rglob("*.*")}
    audio_types = {p.parent.name for p in (packed_compat_corpus.root / "in-audio" / "files").rglob("*.*")}
    assert image_types == {".jpg", ".png", ".webp"} and audio_types == {"wav16", "wavf32", "flac"}


def test_whole_number_floats_are_published_as_floats_in_every_json_file(packed_compat_corpus: Packed) -> None:
    """Shard 0 was given ``"score": 2``: every JSON file shardkit publishes says 2.0, so a tool
    that infers types from one file (polars, duckdb, a folder builder without the card) sees floats."""
    import io
    import zipfile

    import pyarrow.parquet as pq

    for fmt in FORMATS:
        text = (packed_compat_corpus.folders["image", fmt] / "metadata" / "0.jsonl").read_text(encoding="utf-8")
        scores = [json.loads(line)["score"] for line in text.splitlines()]
        assert scores and all(type(s) is float and s.is_integer() for s in scores), (fmt, scores)
    # Inside the ZIP, metadata.parquet types the column float64 in every shard.
    with zipfile.ZipFile(packed_compat_corpus.folders["image", "zip"] / "data" / "0.zip") as z:
        inside = pq.read_table(io.BytesIO(z.read("metadata.parquet")))
    assert str(inside.schema.field("score").type) == "double"
    assert inside.column("score").to_pylist() == scores


def test_pack_warns_when_datasets_would_pick_another_builder_and_the_card_shows_the_line_that_works(
    tmp_path: Path,
) -> None:
    """Four shards of one image each (--prefix-length 1), JPEG and PNG: each shard's
    metadata.parquet outnumbers both image extensions, so load_dataset(folder) would open the
    dataset as Parquet; no card setting overrides that. pack says so per split, in --dry-run,
    in --json's warnings and with -q; the card says why and shows the load_dataset line that
    works (the builder named), which reads every row exactly; shardkit.stream reads it too."""
    import datasets

    import shardkit

    files, meta = compat_corpus.build(tmp_path / "in", "image")
    rows = [json.loads(line) for line in meta.read_text(encoding="utf-8").splitlines()]
    jpeg = [r for r in rows if r["file_name"].endswith(".jpg")][:2]
    png = [r for r in rows if r["file_name"].endswith(".png")][:2]
    few = [{**r, "key": f"{i}{r['key'][1:]}"} for i, r in enumerate([jpeg[0], png[0], jpeg[1], png[1]])]
    write_jsonl(tmp_path / "few.jsonl", few)
    out = tmp_path / "ds"
    command = ["pack-shards", str(files), str(tmp_path / "few.jsonl"), "-o", str(out)]  # run here: tests/support/cli.py
    layout = ("--prefix-length", "1")
    warning = "split 'train': datasets' load_dataset(repo) would open it with its 'parquet' builder, not 'imagefolder'"
    dry = run_cli(*command, *layout, "--dry-run", "--json", "-q")
    assert dry.returncode == 0, dry.stderr
    assert [w[: len(warning)] for w in json.loads(dry.stdout)["warnings"]] == [warning]
    assert warning in dry.stderr  # -q silences progress, not warnings
    result = run_cli(*command, *layout, "-q")
    assert result.returncode == 0, result.stderr
    assert warning in result.stderr and "Pack without --prefix-length" in result.stderr
    card = (out / "README.md").read_text(encoding="utf-8")
    assert warning in card
    assert datasets.load_dataset_builder(str(out)).name == "parquet"  # what datasets really does
    (snippet,) = [code for code in card.split("```python\n")[1:] if 'load_dataset("imagefolder"' in code]
    namespace: dict[str, Any] = {}
    cwd = os.getcwd()
    try:
        os.chdir(out)  # the card's examples run in the folder before it is pushed
        exec(snippet.split("```")[0], namespace)
        ds = namespace["ds"].cast_column("image", datasets.Image(decode=False))
        got = {row["key"]: row for row in ds}
    finally:
        os.chdir(cwd)
    expected = compat_corpus.expected_rows(files, tmp_path / "few.jsonl")
    assert set(got) == set(expected)
    for key, row in got.items():
        image = file_bytes(row.pop("image"))  # the builder gives a path into the ZIP: read it
        assert hashlib.sha256(image).hexdigest() == expected[key]["sha256"]
        assert typed(row) == expected[key]["fields"]
    assert {row["key"] for row in shardkit.stream(str(out))} == set(got)
    # Cut by size (the default), the same rows are one shard, which datasets opens as images.
    again = run_cli(*command, "--force", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["warnings"] == [], again.stderr
    assert datasets.load_dataset_builder(str(out)).name == "imagefolder"


def test_no_warning_when_datasets_picks_the_folder_builder(packed_compat_corpus: Packed) -> None:
    import datasets

    for modality in MODALITIES:
        out = packed_compat_corpus.folders[modality, "zip"]
        assert "builder" not in (out / "README.md").read_text(encoding="utf-8").split("<!-- /shardkit:stats -->")[0]
        assert datasets.load_dataset_builder(str(out)).name == f"{modality}folder"


def test_metadata_table_reads_in_one_call_with_duckdb_polars_and_pyarrow_typed(packed_compat_corpus: Packed) -> None:
    """metadata.parquet: every row, typed as the card says, whatever each shard's JSON held
    (a column null throughout a shard, whole-number floats), one call in each tool. The tools
    run in a subprocess: polars replaces the process's SIGINT handler with its own, and later
    Ctrl-C tests in this process would wait forever."""
    tables = [str(packed_compat_corpus.folders[m, f] / "metadata.parquet") for m in MODALITIES for f in FORMATS]
    result = subprocess.run(
        [sys.executable, "-c", TABLE_READER, *tables], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    read = json.loads(result.stdout)
    for modality in MODALITIES:
        for fmt in FORMATS:
            out = packed_compat_corpus.folders[modality, fmt]
            shards = {p.relative_to(out).as_posix() for p in (out / "data").glob(f"*.{fmt}")}
            for tool, rows in read[str(out / "metadata.parquet")].items():
                assert {r["__shard__"] for r in rows} == shards, (tool, fmt)
                got = {r["key"]: r["fields"] for r in rows}
                assert len(got) == len(rows)
                assert got == {k: v["fields"] for k, v in packed_compat_corpus.expected[modality].items()}, (
                    tool,
                    modality,
                    fmt,
                )


TABLE_READER = r"""
import json, sys
import duckdb, polars, pyarrow.parquet as pq
from tests.compat_reader import file_bytes, typed

def rows(dicts):
    out = []
    for r in dicts:
        fields = {k: v for k, v in r.items() if k not in ("__shard__", "file_name")}
        out.append({"__shard__": r["__shard__"], "key": r["key"], "fields": typed(fields)})
    return out

out = {}
for table in sys.argv[1:]:
    connection = duckdb.connect()
    # A query that runs past 2 s (a busy machine) otherwise draws a progress bar on stdout.
    connection.execute("SET enable_progress_bar = false")
    cursor = connection.execute(f"SELECT * FROM '{table}'")
    names = [column[0] for column in cursor.description]
    out[table] = {
        "pyarrow": rows(pq.read_table(table).to_pylist()),
        "polars": rows(polars.read_parquet(table).to_dicts()),
        "duckdb": rows(dict(zip(names, row, strict=True)) for row in cursor.fetchall()),
    }
print(json.dumps(out))
"""
