"""A nested layout (issue 36) through ``--update``, kills and push, on a few shards.

A split nests from 10,000 shards (``hubplan.NEST_FROM_SHARDS``); tests/test_nested_layout.py packs
that many once. Here pack-shards runs with that threshold lowered to 4 (in this process, or in a
subprocess where it is killed, resumes a killed run or needs an environment of its own), so six
shards named ``a00 a01 a02 b00 b01 c10`` (``--prefix-length 3``) go into folders ``a0/ b0/ c1/``,
each folder's rows in one ``metadata/<folder>.jsonl``. Everything else is the real pack.

- An update that changes a row of ``a01``, removes every row of ``b01`` and adds shard ``c11``
  rewrites two shards and keeps four, each kept one's rows taken from its part of the old folder
  file; the three folder files are what a fresh pack of the new rows writes. Pushed before and
  after to the Hub-API server, the repo reads back exactly (shardkit.stream, datasets 5.x).
- A pack or an update SIGKILLed at each step of the folder files' writing resumes to the bytes
  of a run that was not killed; the same run again keeps every shard. So does an update in an
  S3 bucket (moto's server), killed before its manifest.
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
from unittest import mock

import pytest
import s3fs

import shardkit.hubplan
from tests.hub_server import HubServer, run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import tree_bytes
from tests.support.packing import s3_env
from tests.test_update import KILLED_PACK, Corpus, assert_reads, consumers, push

#: The shards' names (their keys' first 3 hex digits); the first six hold the first rows.
STEMS = ("a00", "a01", "a02", "b00", "b01", "c10", "c11")
FIRST_STEMS = 6

#: A split nests from this many shards here (the Hub's limit: 10,000).
NEST_FROM = "4"


class NestedCorpus(Corpus):
    """test_update's corpus, row ``i`` in shard ``STEMS[i % 6]`` (or ``STEMS[shard]``)."""

    @staticmethod
    def key(i: int, shard: int | None = None) -> str:
        stem = STEMS[i % FIRST_STEMS if shard is None else shard]
        return stem + hashlib.sha256(str(i).encode()).hexdigest()[:13]


def run_pack(
    corpus: Corpus,
    meta: Path,
    out: Path | str,
    *options: str,
    point: str = "none",
    env: dict[str, str] | None = None,
    here: bool = False,
) -> subprocess.CompletedProcess[str]:
    """pack-shards with NEST_FROM, in a process of its own (killed at ``point``, or in ``env``), or
    ``here``: in this process (tests/support/cli.py), the threshold lowered for that run alone."""
    if isinstance(out, Path):
        out.parent.mkdir(parents=True, exist_ok=True)
    args = [str(corpus.images), str(meta), "-o", str(out), "--prefix-length", "3", "--jobs", "1", "--json", *options]
    if here:
        assert point == "none" and env is None
        with mock.patch.object(shardkit.hubplan, "NEST_FROM_SHARDS", int(NEST_FROM)):
            return run_cli("pack-shards", *args)
    return subprocess.run(
        [sys.executable, str(KILLED_PACK), point, NEST_FROM, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def pack(
    corpus: Corpus,
    meta: Path,
    out: Path | str,
    *options: str,
    env: dict[str, str] | None = None,
    own_process: bool = False,
) -> dict[str, Any]:
    """A pack to the end: in this process, unless in ``env`` (read on import: S3's endpoint) or
    ``own_process`` (the run that resumes a killed one)."""
    done = run_pack(corpus, meta, out, *options, env=env, here=env is None and not own_process)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def verify(out: Path) -> None:
    checked = run_cli("shardkit", "verify", out, "--deep", "-q")  # in this process: tests/support/cli.py
    assert checked.returncode == 0, checked.stdout + checked.stderr


def change(corpus: Corpus) -> None:
    """A row of a01 changes, every row of b01 goes, shard c11 comes (folder c1 holds two then)."""
    for row in corpus.rows:
        if row["key"].startswith("a01"):
            row["caption"] = "changed"
            break
    corpus.rows = [r for r in corpus.rows if not r["key"].startswith("b01")]
    corpus.rows += [corpus.row(500 + i, STEMS.index("c11")) for i in range(3)]


def folder_files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "metadata").rglob("*.jsonl"))}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    with run_hub_server(tmp_path_factory.mktemp("nested-update-hub")) as server:
        yield server


@pytest.mark.slow
def test_an_update_of_nested_folders_keeps_the_unchanged_shards_and_reads_back_exactly(
    hub: HubServer, tmp_path: Path
) -> None:
    corpus = NestedCorpus(tmp_path / "in", 36)
    out = tmp_path / "out" / "ds"
    first = pack(corpus, corpus.write(), out)
    assert (first["shards"], first["written_shards"]) == (6, 6)
    assert sorted(p.relative_to(out).as_posix() for p in (out / "data").rglob("*.zip")) == [
        f"data/{stem[:2]}/{stem}.zip" for stem in STEMS[:FIRST_STEMS]
    ]
    assert set(folder_files(out)) == {"metadata/a0.jsonl", "metadata/b0.jsonl", "metadata/c1.jsonl"}
    repo, home = "tester/nested-update", tmp_path / "home"
    push(hub, out, repo, home)
    shards_before = {p.name: p.read_bytes() for p in (out / "data").rglob("*.zip")}

    change(corpus)
    meta = corpus.write()
    summary = pack(corpus, meta, out, "--update")
    assert (summary["shards"], summary["written_shards"], summary["kept_shards"]) == (6, 2, 4)
    shards_after = {p.name: p.read_bytes() for p in (out / "data").rglob("*.zip")}
    assert set(shards_after) == {f"{stem}.zip" for stem in STEMS if stem != "b01"}
    kept = {name for name in shards_after if shards_before.get(name) == shards_after[name]}
    assert kept == {"a00.zip", "a02.zip", "b00.zip", "c10.zip"}
    assert not (out / ".shardkit" / "lines").exists() or not any((out / ".shardkit" / "lines").rglob("*"))
    verify(out)

    # The folder files (kept parts read from the old ones) are those of a fresh pack of the rows.
    fresh = tmp_path / "fresh" / "ds"
    pack(corpus, meta, fresh)
    assert folder_files(out) == folder_files(fresh)
    assert {p: d for p, d in tree_bytes(out).items() if p.startswith("data/")} == {
        p: d for p, d in tree_bytes(fresh).items() if p.startswith("data/")
    }

    pushed = push(hub, out, repo, home)
    assert pushed["deleted_files"] == 1  # data/b0/b01.zip
    assert_reads(consumers(hub, repo, ["train"], tmp_path / "reader"), {"train": corpus.expected()})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("run", "point"),
    [
        ("pack", "one shard written"),
        ("pack", "a folder's metadata file written"),
        ("pack", "the manifest about to be written"),
        ("update", "one shard written"),
        ("update", "a kept shard's rows saved to its lines file"),
        ("update", "a folder's metadata file written"),
        ("update", "the manifest about to be written"),
    ],
)
def test_a_nested_pack_killed_at_any_step_resumes_to_the_output_of_one_that_was_not(
    tmp_path: Path, run: str, point: str
) -> None:
    corpus = NestedCorpus(tmp_path / "in", 36)
    base = tmp_path / "base" / "ds"  # one folder name everywhere: the card names it
    meta = corpus.write()
    if run == "update":
        pack(corpus, meta, base)
        change(corpus)
        meta = corpus.write()
    folders = {}
    for name in ("reference", "killed"):
        folders[name] = tmp_path / name / "ds"
        if run == "update":
            shutil.copytree(base, folders[name], ignore=shutil.ignore_patterns("lock"))
    options = ("--update",) if run == "update" else ()
    reference = pack(corpus, meta, folders["reference"], *options)
    assert reference["written_shards"] == (2 if run == "update" else 6)

    out = folders["killed"]
    killed = run_pack(corpus, meta, out, *options, point=point)
    assert killed.returncode == -9, killed.stderr  # it got to the point
    resumed = pack(corpus, meta, out, *options, own_process=True)
    assert resumed["written_shards"] <= reference["written_shards"], resumed
    assert tree_bytes(out) == tree_bytes(folders["reference"])
    verify(out)
    again = pack(corpus, meta, out, *options)
    assert again["written_shards"] == 0
    assert tree_bytes(out) == tree_bytes(folders["reference"])


@pytest.mark.slow
def test_a_nested_update_in_a_bucket_killed_then_resumed_gives_the_bytes_of_a_local_one(
    s3_endpoint: str, tmp_path: Path
) -> None:
    """At an fsspec URL (moto's S3 server on 127.0.0.1) a nested shard's part is read back from
    the bucket: kept shards' rows come from the old folder files there."""
    env = s3_env(s3_endpoint)
    fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=s3_endpoint, skip_instance_cache=True)
    fs.mkdir("nested")
    url, work = "s3://nested/ds", str(tmp_path / "work")
    corpus = NestedCorpus(tmp_path / "in", 36)
    meta = corpus.write()
    local = tmp_path / "local" / "ds"  # the URL's last part: the card names it
    pack(corpus, meta, local)
    pack(corpus, meta, url, "--work-dir", work, env=env)
    change(corpus)
    meta = corpus.write()
    reference = pack(corpus, meta, local, "--update")
    assert (reference["written_shards"], reference["kept_shards"]) == (2, 4)

    options = ("--update", "--work-dir", work)
    killed = run_pack(corpus, meta, url, *options, point="the manifest about to be written", env=env)
    assert killed.returncode == -9, killed.stderr
    resumed = pack(corpus, meta, url, *options, env=env)
    assert resumed["written_shards"] == 0, resumed  # all written before the kill
    fs.invalidate_cache()
    there = {path.removeprefix("nested/ds/"): fs.cat_file(path) for path in fs.find("nested/ds")}
    assert there == tree_bytes(local)
