"""The default output loads with datasets' builtin loader, exactly, every time (issue 30).

``pack-shards IMAGES META -o OUT`` with nothing but ``--class-label label`` (ZIP shards, each
split cut by size) on exports shaped like real ones (tests/support/export_corpus.py:
splits of very different sizes, columns null, empty or absent throughout one split, mixed file
types), pushed with ``shardkit push`` to the loopback Hub-API server, then read back with a plain
``datasets.load_dataset(folder or repo, split=...)`` (no script, no trust_remote_code) by every
datasets we support: 5.x (this venv), 3.6 and 4.0 (SHARDKIT_DS36_PYTHON, SHARDKIT_DS40_PYTHON).

Each venv reads each corpus map-style and streaming, from the folder and from the server, every
split, in 3 runs (2 in 3.6 and 4.0). datasets picks the metadata file it infers a split's types
from out of a set (5.x) whose order follows string hashes, so each run is its own process (its own hash seed,
its own HF_HOME) and each cell there has a fresh cache_dir; within a run every cell of the venv
is read by one process (tests/any_modality_reader.py, which is tests/splits_reader.py for audio
too). Every split must give exactly its rows: each file's bytes, every value with its Python
type, the label mapped back to its class name, the class names in order.

What cannot work is pinned, not skipped: datasets 5.x encodes every example of an Audio column
with torchcodec (``Audio.encode_example`` imports torch and torchcodec first, decode=False or
not), which CI does not install, so its audio cells must fail for that reason and no other. The
folder builder compares the splits' metadata types in ``_split_generators``, before any example
is encoded, so reaching that error still shows that 5.x accepted the splits.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shardkit.plan import DEFAULT_MAX_SHARD_BYTES, default_target
from tests.hub_server import run_hub_server
from tests.support import export_corpus
from tests.support.readback import DS36_PYTHON, run_reader, split_problems
from tests.test_compat import DS40_PYTHON
from tests.test_splits_labels import hub_env, pack_cli, push_cli

pytestmark = pytest.mark.slow  # every test here takes over about 3 s

READER = Path(__file__).with_name("any_modality_reader.py")
MODALITIES = ("image", "audio")
SPLITS = {"image": tuple(export_corpus.IMAGE_SPLITS), "audio": tuple(export_corpus.AUDIO_SPLITS)}
VENVS = {"5.x": sys.executable, "3.6": DS36_PYTHON, "4.0": DS40_PYTHON}
#: Runs per venv, each in a process of its own: 5.x picks the metadata file it infers types from
#: by string hash, so it gets one more; 3.6 and 4.0 hold the first metadata file of every split
#: (a set's order: a hash's too) to the same types, and are read twice.
RUNS = {"5.x": 3, "3.6": 2, "4.0": 2}
#: (venv, modality) -> what its failure must name: cells that cannot work, and why (see above).
CANNOT = {("5.x", "audio"): "torchcodec"}


@dataclass
class Published:
    root: Path
    hub_url: str
    folders: dict[str, Path] = field(default_factory=dict)  # modality -> OUT_DIR
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # modality -> input rows
    expected: dict[str, dict[str, Any]] = field(default_factory=dict)  # modality -> split -> key -> row
    pack_stderr: dict[str, str] = field(default_factory=dict)
    pack_warnings: dict[str, list[str]] = field(default_factory=dict)  # the --json summary's
    reads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # venv -> each run's reader output

    def repo(self, modality: str) -> str:
        return f"tester/export-{modality}"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    root = tmp_path_factory.mktemp("default-zip")
    with run_hub_server(root / "hub") as hub:
        pub = Published(root, hub.url)
        for modality in MODALITIES:
            files, meta, rows = export_corpus.build(root / f"in-{modality}", modality)
            pub.rows[modality] = rows
            pub.expected[modality] = export_corpus.expected_rows(files, meta, modality)
            out = root / "repos" / f"export-{modality}"
            out.parent.mkdir(exist_ok=True)
            packed = pack_cli(files, meta, out, "--class-label", export_corpus.LABEL_COLUMN, "--json")
            assert packed.returncode == 0, packed.stderr
            pub.pack_stderr[modality] = packed.stderr
            pub.pack_warnings[modality] = json.loads(packed.stdout)["warnings"]
            pub.folders[modality] = out
            push_cli(out, pub.repo(modality), hub_env(hub.url, root / "home"))
        yield pub


def _cells(pub: Published) -> list[dict[str, Any]]:
    """One run's cells: each corpus map-style and streaming, from the folder and from the server."""
    cells = []
    for modality in MODALITIES:
        for where, path in (("local", str(pub.folders[modality])), ("hub", pub.repo(modality))):
            for streaming in (False, True):
                cells.append(
                    {
                        "id": f"{modality}/{where}/{'streaming' if streaming else 'map'}",
                        "reader": "builtin",
                        "path": path,
                        "revision": None,
                        "streaming": streaming,
                        "splits": list(SPLITS[modality]),
                    }
                )
    return cells


def _read(pub: Published, venv: str) -> list[dict[str, Any]]:
    """Each run's reader output (a process per run: its own hash seed, HF_HOME and caches)."""
    if venv not in pub.reads:
        runs = []
        for run in range(1, RUNS[venv] + 1):
            env = hub_env(pub.hub_url, pub.root / f"reader-home-{venv}-{run}", token=None)
            env.pop("PYTHONHASHSEED", None)  # a seed of its own, as every user's process has
            runs.append(run_reader(VENVS[venv], READER, _cells(pub), env, timeout=280))
        pub.reads[venv] = runs
    return pub.reads[venv]


def _problems(pub: Published, venv: str, runs: list[dict[str, Any]]) -> list[str]:
    problems = []
    traced = set()  # each error's traceback once
    for n, result in enumerate(runs, 1):
        for cell in _cells(pub):
            modality, where, mode = cell["id"].split("/")
            names = {export_corpus.LABEL_COLUMN: export_corpus.class_names(pub.rows[modality])}
            for split in SPLITS[modality]:
                at = f"venv {venv} ({result['version']}), {modality} from {where}, {mode}, split {split}, run {n}"
                got = result["cells"][cell["id"]][split]
                cannot = CANNOT.get((venv, modality))
                if cannot is not None:  # it must fail, and for that reason (a pass means the docstring must change)
                    if cannot not in got.get("error", "") + got.get("traceback", ""):
                        problems.append(f"{at}: expected to fail for want of {cannot}, got {got.get('error', 'rows')}")
                    continue
                if "error" in got:
                    trace = "" if got["error"] in traced else f"\n{got['traceback']}"
                    traced.add(got["error"])
                    problems.append(f"{at}: {got['error']}{trace}")
                    continue
                problems += split_problems(at, got, pub.expected[modality][split], names)
    return problems


@pytest.mark.parametrize("venv", list(VENVS))
def test_load_dataset_gives_every_split_exactly_in_every_venv_mode_source_and_run(
    published: Published, venv: str
) -> None:
    runs = _read(published, venv)
    assert {r["version"] for r in runs} == {{"5.x": _datasets_version(), "3.6": "3.6.0", "4.0": "4.0.0"}[venv]}
    problems = _problems(published, venv, runs)
    if problems:
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(problems), pytrace=False)


def _datasets_version() -> str:
    import datasets

    return datasets.__version__


def test_a_split_smaller_than_the_target_size_is_one_shard(published: Published) -> None:
    """No crumbs: every split here is far below the default target size, so each is one ZIP,
    data/<split>/<name>.zip, and the manifest names just that shard for it."""
    target = default_target(DEFAULT_MAX_SHARD_BYTES)
    for modality, out in published.folders.items():
        manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
        assert list(manifest["splits"]) == list(SPLITS[modality]), modality
        assert sorted(p.name for p in (out / "data").iterdir()) == sorted(SPLITS[modality]), modality
        files = {
            s: sorted(f.relative_to(out).as_posix() for f in (out / "data" / s).iterdir()) for s in SPLITS[modality]
        }
        sizes = {s: sum((out / f).stat().st_size for f in names) for s, names in files.items()}
        assert all(size < target for size in sizes.values()), (modality, sizes, target)
        shards = {s: len(names) for s, names in files.items()}
        assert shards == dict.fromkeys(SPLITS[modality], 1), f"{modality}: shard files per split {shards}"
        for split, names in files.items():
            assert names[0].endswith(".zip"), (modality, split, names)
            named = [s["file"] for s in manifest["shards"] if s["split"] == split]
            assert named == names, (modality, split, named)
            assert manifest["splits"][split]["rows"] == len(published.expected[modality][split]), (modality, split)


def test_the_pack_does_not_warn_that_datasets_would_refuse_the_output(published: Published) -> None:
    """What the pack says of the default output must match what datasets does with it (above):
    no warning in --json's list, none on stderr."""
    for modality, stderr in published.pack_stderr.items():
        assert published.pack_warnings[modality] == [], modality
        assert "WARNING" not in stderr, (modality, stderr)


def test_the_corpora_hold_the_shapes_that_broke_loaders(published: Published) -> None:
    """The traps are in the input, each throughout a whole split (see tests/support/export_corpus.py)."""
    image = published.rows["image"]
    by_split = {s: [r for r in image if r["split"] == s] for s in SPLITS["image"]}
    assert {s: len(rows) for s, rows in by_split.items()} == export_corpus.IMAGE_SPLITS
    assert all(r["description"] is None for r in by_split["test"])
    assert any(r["description"] for r in by_split["train"]) and any(r["description"] for r in by_split["validation"])
    assert all(r["accuracy"] is None for s in ("validation", "test") for r in by_split[s])
    assert any(type(r["accuracy"]) is int for r in by_split["train"])  # a float column given whole numbers
    assert any(type(r["accuracy"]) is float for r in by_split["train"])
    assert all(r["tags"] == [] for r in by_split["test"]) and any(r["tags"] for r in by_split["validation"])
    assert all("camera" not in r for r in by_split["validation"])
    assert all("camera" in r for s in ("train", "test") for r in by_split[s])
    assert any(ord(c) > 127 for r in image for c in r["title"])
    for split, rows in by_split.items():
        assert {Path(r["file_name"]).suffix for r in rows} == {".jpg", ".png", ".webp"}, split
    assert all(len(r["key"]) >= 16 and set(r["key"]) <= set("0123456789abcdef") for r in image)

    audio = published.rows["audio"]
    by_split = {s: [r for r in audio if r["split"] == s] for s in SPLITS["audio"]}
    assert {s: len(rows) for s, rows in by_split.items()} == export_corpus.AUDIO_SPLITS
    assert all(r["description"] is None and r["snr"] is None and r["tags"] == [] for r in by_split["test"])
    assert all("device" not in r for r in by_split["test"]) and all("device" in r for r in by_split["train"])
    for split, rows in by_split.items():
        assert {Path(r["file_name"]).suffix for r in rows} == {".wav", ".flac"}, split
