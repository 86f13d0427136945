"""A split of more shards than a Hub folder may hold (issue 36), end to end.

One tiny corpus with splits of very different sizes: ``train`` of 1,200 rows and ``test`` of 30,
about two rows a shard (``--target-shard-size``), PNG and JPEG mixed, a column null in most rows
(so null throughout most shards). It is packed once per module into the template (so the datasets
3.6 loading script is a reader too) and pushed to the loopback Hub-API server, which refuses a
commit of more than 100 files, as the Hub does. pack-shards runs in a subprocess with the number
of shards from which a split nests (``hubplan.NEST_FROM_SHARDS``, the Hub's 10,000) lowered to
:data:`NEST_FROM`: everything else is the real pack, and a split of 10,000-odd shards took this
test about eight minutes (pack, push, verify and four readers, 9 ms a shard each), for the same
code paths. ``train`` is then nested (``data/train/3f/3f2a.zip``), ``test`` flat. Every reader
must give each split exactly its rows: the files' bytes, and every value with its Python type.
The Hub's limits themselves, at their real numbers, are tests/test_hub_limits.py's and
tests/test_push.py's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.compat_reader import typed
from tests.hub_server import MAX_COMMIT_FILES, MAX_FOLDER_ENTRIES, HubServer, run_hub_server
from tests.support.corpus import scaffold, tiny_image, write_jsonl
from tests.support.readback import DS36_PYTHON, split_problems
from tests.test_splits_labels import hub_env, read_cells
from tests.test_update import KILLED_PACK

pytestmark = pytest.mark.slow  # the module packs, pushes and reads 600-odd shards

SCRIPTS = Path(sys.executable).parent
NAME = "nested-tiny"  # the template's dataset name (its loader is nested_tiny_loader.py)
REPO = f"tester/{NAME}"
SPLIT_ROWS = {"train": 1_200, "test": 30}
#: A split nests from this many shards in this test (the Hub's 10,000 everywhere else).
NEST_FROM = 500
#: About two rows a shard: some 600 train shards, nested; test's 15 are not. (A shard of one row
#: holds as many image members as metadata.parquet members; datasets picks its builder by the
#: members' most common extension, the first seen on a tie, and would read these ZIPs with its
#: parquet builder.)
TARGET = "2400"


def corpus_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(sum(SPLIT_ROWS.values())):
        split = "train" if i < SPLIT_ROWS["train"] else "test"
        rows.append(
            {
                "file_name": f"{i % 7}/{i}.{'png' if i % 5 == 0 else 'jpg'}",
                "key": hashlib.sha256(str(i).encode()).hexdigest()[:32],  # spread, as hashes are
                "split": split,
                "caption": f"row {i} ünïcode",
                "score": i / 8 if i % 97 == 0 else None,  # null in most rows: throughout most shards
                "n": i,
            }
        )
    return rows


@dataclass
class Packed:
    root: Path
    out: Path
    hub: HubServer
    expected: dict[str, dict[str, Any]]
    pushed: subprocess.CompletedProcess[str]
    reads: dict[str, Any] = field(default_factory=dict)

    def reader_env(self) -> dict[str, str]:
        return hub_env(self.hub.url, self.root / "reader-home", token=None)


def _write_corpus(root: Path) -> tuple[Path, Path, dict[str, dict[str, Any]]]:
    images = root / "images"
    rows = corpus_rows()
    expected: dict[str, dict[str, Any]] = {s: {} for s in SPLIT_ROWS}
    for i, row in enumerate(rows):
        path = images / row["file_name"]
        path.parent.mkdir(parents=True, exist_ok=True)
        data = tiny_image(i, "PNG" if row["file_name"].endswith(".png") else "JPEG", (2, 2))
        path.write_bytes(data)
        fields = {k: v for k, v in row.items() if k not in ("file_name", "split")}
        expected[row["split"]][row["key"]] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "fields": typed(fields),
            "labels": {},
        }
    return images, write_jsonl(root / "meta.jsonl", rows), expected


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packed]:
    root = tmp_path_factory.mktemp("nested")
    images, meta, expected = _write_corpus(root / "in")
    out = scaffold(root / "repos", dataset_name=NAME, namespace="tester")
    packed = subprocess.run(
        [
            *(sys.executable, str(KILLED_PACK), "none", str(NEST_FROM), str(images), str(meta), "-o", str(out)),
            *("--max-shard-size", "20KB", "--target-shard-size", TARGET, "-q"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert packed.returncode == 0, packed.stderr
    with run_hub_server(root / "hub") as hub:
        pushed = subprocess.run(
            [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", REPO],
            capture_output=True,
            text=True,
            env=hub_env(hub.url, root / "home"),
            timeout=600,
            check=False,
        )
        yield Packed(root, out, hub, expected, pushed)


def _check_layout(packed: Packed) -> None:
    """train's 600-odd shards are each in data/train/<first two hex digits of its name>/ (one
    folder per two digits met, at most 256), the rows of each folder's shards in one file,
    metadata/train/<folder>.jsonl, shard after shard; test's shards stay in data/test/, each with
    its metadata file beside; the card's configs read both; verify finds everything as packed."""
    out = packed.out
    manifest = json.loads((out / "shards.json").read_text())
    files = [s["file"] for s in manifest["shards"]]
    train = [f for f in files if f.startswith("data/train/")]
    assert len(train) >= NEST_FROM and all(f.count("/") == 3 for f in train)
    for file in train:
        folder, name = file.split("/")[2:]
        assert name.split(".")[0].ljust(2, "0")[:2] == folder, file
    per_folder = Counter(f.split("/")[2] for f in train)
    assert 200 < len(per_folder) <= 256 and max(per_folder.values()) < 20
    assert sorted(p.name for p in (out / "data" / "test").iterdir()) == sorted(
        f.rsplit("/", 1)[1] for f in files if f.startswith("data/test/")
    )
    # test's rows beside each shard; train's in one file per folder, each shard's part in order.
    for shard in manifest["shards"]:
        stem = shard["file"][len("data/") : -len(".zip")]
        if shard["split"] == "test":
            assert shard["metadata"] == f"metadata/{stem}.jsonl" and "metadata_range" not in shard
        else:
            assert shard["metadata"] == f"metadata/{stem.rsplit('/', 1)[0]}.jsonl", shard
    parts: dict[str, list[bytes]] = {}
    for shard in manifest["shards"]:
        if "metadata_range" in shard:
            start, end = shard["metadata_range"]
            data = (out / shard["metadata"]).read_bytes()
            assert start == sum(map(len, parts.get(shard["metadata"], [])))
            parts.setdefault(shard["metadata"], []).append(data[start:end])
            assert hashlib.sha256(data[start:end]).hexdigest() == shard["metadata_sha256"]
            assert len(data[start:end].splitlines()) == shard["rows"]
    assert len(parts) == len(per_folder) and all(b"".join(p) == (out / m).read_bytes() for m, p in parts.items())
    on_disk = {str(p.relative_to(out)) for p in (out / "data").rglob("*.zip")}
    on_disk |= {str(p.relative_to(out)) for p in (out / "metadata").rglob("*.jsonl")}
    assert on_disk == set(files) | {s["metadata"] for s in manifest["shards"]}
    test_shards = len(files) - len(train)
    # a metadata file per train folder, not per train shard
    assert len(on_disk) == len(files) + len(per_folder) + test_shards
    card = yaml.safe_load((out / "README.md").read_text().split("---")[1])
    assert card["configs"][0]["data_files"] == [
        {"split": "train", "path": "data/train/*/*.zip"},
        {"split": "test", "path": "data/test/*.zip"},
    ]
    verified = subprocess.run(
        [str(SCRIPTS / "shardkit"), "verify", str(out), "-q"], capture_output=True, text=True, timeout=300, check=False
    )
    assert verified.returncode == 0, verified.stderr
    assert f"verified {len(files)} shards" in verified.stdout


def _check_push(packed: Packed) -> None:
    """The Hub-API server refuses a commit of more than 100 files (and a folder of more than 9,999
    entries): the push of every shard and metadata file passes, in several commits, and the repo
    holds each file of the folder at its path, with its bytes."""
    assert (MAX_COMMIT_FILES, MAX_FOLDER_ENTRIES) == (100, 10_000)
    assert packed.pushed.returncode == 0, packed.pushed.stderr
    remote = packed.hub.files(REPO)
    local = {str(p.relative_to(packed.out)) for ext in ("zip", "jsonl") for p in packed.out.glob(f"*/**/*.{ext}")}
    assert local <= set(remote) and sum(p.startswith("data/train/") for p in remote) >= NEST_FROM
    for path in sorted(local)[:: len(local) // 50]:
        assert remote[path]["sha256"] == hashlib.sha256((packed.out / path).read_bytes()).hexdigest(), path


def _cells(packed: Packed, reads: str) -> list[dict[str, Any]]:
    splits = list(SPLIT_ROWS)
    local = str(packed.out)
    if reads == "3.6 script":
        script = str(packed.out / "nested_tiny_loader.py")
        cell = {"id": "script/local/streaming", "reader": "script", "path": script, "streaming": True}
        return [cell | {"splits": splits}]
    if reads == "5.x map":
        return [{"id": "builtin/local/map", "reader": "builtin", "path": local, "streaming": False, "splits": splits}]
    # The builtin loader reads twice, streaming and map-style, each with a fresh cache: datasets
    # infers types from a shard it picks at random.
    return [
        {"id": "shardkit/hub", "reader": "shardkit", "path": REPO, "streaming": True, "splits": splits},
        {"id": "builtin/local/streaming", "reader": "builtin", "path": local, "streaming": True, "splits": splits},
    ]


def _read_problems(packed: Packed, reads: str) -> list[str]:
    python = DS36_PYTHON if reads.startswith("3.6") else sys.executable
    cells = _cells(packed, reads)
    result = read_cells(python, cells, packed.reader_env())
    problems = []
    for cell in cells:
        for split in SPLIT_ROWS:
            where = f"{reads} {cell['id']} split {split}"
            got = result["cells"][cell["id"]][split]
            if "error" in got:
                problems.append(f"{where}: {got['error']}\n{got['traceback']}")
                continue
            problems += split_problems(where, got, packed.expected[split], {})
    return problems


# One test, so that its fixture (pack and push) is built once, in one worker.
@pytest.mark.timeout(600)
def test_a_split_of_more_shards_than_a_folder_takes_is_nested_pushed_and_read_back_exactly_by_every_reader(
    packed: Packed,
) -> None:
    _check_layout(packed)
    _check_push(packed)
    problems = [p for reads in ("5.x streaming", "5.x map", "3.6 script") for p in _read_problems(packed, reads)]
    if problems:
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(problems), pytrace=False)
