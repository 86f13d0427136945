"""Safe with the user's files (issue 19): shardkit changes, deletes or publishes nothing it did
not write without being told, and a run that writes nothing leaves no trace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.card import split_front_matter
from tests.hub_server import run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import EXAMPLE_DIR, adding_up, tree_bytes, write_jsonl
from tests.support.packing import pack_example_here
from tests.test_push import REPO, hub_env, push, remote_files

SCRIPTS = Path(sys.executable).parent


USER_CARD = """---
license: mit
# the user's comment, kept
pretty_name: "My: dataset"
tags:
- mine
---

# My dataset

Text the user wrote, with *markdown*.
"""
USER_GITATTRIBUTES = "*.bin filter=lfs diff=lfs merge=lfs -text\n"


def _user_repo(root: Path) -> dict[str, bytes]:
    """A folder that is somebody's repo (a clone, say): a card, LFS rules, notes and code."""
    files = {
        "README.md": USER_CARD.encode(),
        ".gitattributes": USER_GITATTRIBUTES.encode(),
        "notes.txt": b"my notes\n",
        "src/main.py": b"print('mine')\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_a_folder_shardkit_did_not_make_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _user_repo(repo)
    before = tree_bytes(repo)
    result = pack_example_here(repo)
    assert result.returncode == 2
    assert "is not empty and not a shardkit dataset repo (it holds notes.txt, src)" in result.stderr
    assert "--adopt" in result.stderr
    assert tree_bytes(repo) == before and not (repo / ".shardkit").exists()


def test_a_card_that_only_mentions_shardkits_marker_is_not_a_shardkit_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _user_repo(repo)
    (repo / "README.md").write_text("# Notes\n\nshardkit's cards hold `<!-- shardkit:stats -->` markers.\n")
    before = tree_bytes(repo)
    result = pack_example_here(repo)
    assert result.returncode == 2 and "is not empty and not a shardkit dataset repo" in result.stderr
    assert tree_bytes(repo) == before and not (repo / ".shardkit").exists()


@pytest.mark.slow
def test_adopt_keeps_the_users_text_and_files_and_push_publishes_only_shardkits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    mine = _user_repo(repo)
    result = pack_example_here(repo, "--adopt", "-q")
    assert result.returncode == 0, result.stderr
    assert (repo / "notes.txt").read_bytes() == mine["notes.txt"]
    assert (repo / "src" / "main.py").read_bytes() == mine["src/main.py"]
    assert (repo / ".gitattributes").read_text().startswith(USER_GITATTRIBUTES)  # rules added after theirs
    card = (repo / "README.md").read_text(encoding="utf-8")
    front, body = card.split("\n---\n", 1)
    for line in ("license: mit", "# the user's comment, kept", 'pretty_name: "My: dataset"', "tags:", "- mine"):
        assert line in front.splitlines()  # their keys, byte for byte
    assert body.startswith("\n# My dataset\n\nText the user wrote, with *markdown*.\n")  # their text first
    assert "<!-- shardkit:stats -->\n300 rows in 16 ZIP shards" in body  # shardkit's section after it
    data, _ = split_front_matter(card)
    assert data["configs"][0]["data_files"][0]["path"] == "data/*.zip" and data["configs"][0]["features"]
    assert data["license"] == "mit" and data["pretty_name"] == "My: dataset"

    again = pack_example_here(repo, "-q")  # now a shardkit repo: no --adopt needed, and nothing moves
    assert again.returncode == 0, again.stderr
    assert (repo / "README.md").read_text(encoding="utf-8") == card

    with run_hub_server(tmp_path / "hub") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        result = push_with_stderr(repo, env)
        summary = json.loads(result.stdout)
        assert summary["not_published"] == ["notes.txt", "src/main.py"]
        assert "not published: notes.txt, src/main.py" in result.stderr
        published = remote_files(hub)
        assert "notes.txt" not in published and "src/main.py" not in published
        assert {"README.md", ".gitattributes", "shards.json", "metadata.parquet", "preview.jpg"} <= set(published)
        push(repo, env, "--include", "src/*.py")  # named: published
        assert remote_files(hub)["src/main.py"] == mine["src/main.py"]
        assert "notes.txt" not in remote_files(hub)


@pytest.mark.parametrize("existing", [False, True])
def test_a_refused_run_and_a_dry_run_leave_no_trace(tmp_path: Path, existing: bool) -> None:
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"file_name": "nope.jpg"}, "{not json"])
    for args in (
        [str(EXAMPLE_DIR / "images"), str(bad)],
        [str(EXAMPLE_DIR / "images"), str(EXAMPLE_DIR / "metadata.jsonl"), "--dry-run"],
    ):
        result = run_cli("pack-shards", *args, "-o", out, "-q")
        assert result.returncode == (0 if "--dry-run" in args else 1), result.stderr
        assert out.exists() == existing
        if existing:
            assert list(out.iterdir()) == []


def test_verify_names_files_in_data_and_metadata_that_the_manifest_does_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert pack_example_here(out, "-q").returncode == 0
    (out / "data" / "my_results.csv").write_text("a,b\n")
    result = run_cli("shardkit", "verify", out, "-q")
    assert result.returncode == 1 and "data/my_results.csv: not named in shards.json" in result.stdout


def test_a_wrong_images_dir_is_named_as_the_likely_cause(tmp_path: Path) -> None:
    wrong = tmp_path / "elsewhere"
    wrong.mkdir()
    result = run_cli("pack-shards", wrong, EXAMPLE_DIR / "metadata.jsonl", "-o", tmp_path / "o")
    assert result.returncode == 1
    assert f"None of the files the metadata names is under IMAGES_DIR '{wrong}'" in result.stderr
    assert "--on-error skip" not in result.stderr  # skipping every row is not the fix
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_field_named_shard_packs_and_out_of_range_integers_are_input_problems(tmp_path: Path) -> None:
    """A user's `shard` field is theirs (the table's column is `__shard__`, reserved); integers
    that no int64 or float64 column can hold are refused with their line, before anything is written."""
    images = EXAMPLE_DIR / "images"
    rows = [json.loads(line) for line in (EXAMPLE_DIR / "metadata.jsonl").read_text().splitlines()[:3]]
    ok = write_jsonl(tmp_path / "ok.jsonl", [{**r, "shard": i} for i, r in enumerate(rows)])
    result = pack_example_rows(images, ok, tmp_path / "ok")
    assert result.returncode == 0, result.stderr
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "ok" / "metadata.parquet")
    assert sorted(table.column("shard").to_pylist()) == [0, 1, 2]  # the user's column, typed
    bad_rows = [
        {**rows[0], "big": 2**64},
        {**rows[1], "score": 1.5},
        {**rows[2], "score": 10**400},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in bad_rows) + "\n")
    result = pack_example_rows(images, bad, tmp_path / "bad")
    assert result.returncode == 1
    assert "bad.jsonl:1: column 'big' holds 18446744073709551616, outside the 64-bit integers" in result.stderr
    assert "bad.jsonl:3: column 'score' holds 1000" in result.stderr  # 10**400: no float64 holds it either
    assert not (tmp_path / "bad").exists()
    reserved = write_jsonl(tmp_path / "reserved.jsonl", [{**rows[0], "__shard__": "x"}])
    result = pack_example_rows(images, reserved, tmp_path / "reserved")
    assert result.returncode == 1
    assert "column '__shard__' is reserved for the metadata table's shard column" in result.stderr


def pack_example_rows(images: Path, meta: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`pack-shards IMAGES META -o OUT -q`, in this process (tests/support/cli.py), as pack_example."""
    return run_cli("pack-shards", images, meta, "-o", out, "-q")


CARDS_SHARDKIT_CANNOT_KEEP = {
    "latin-1": (b"# Caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 5)"),
    "bad yaml": (b"---\nlicense: [mit\n---\n# x\n", "its YAML front matter does not parse"),
    "other first config": (
        b"---\nconfigs:\n- config_name: captions\n  data_files: captions/*.csv\n---\n# x\n",
        "its first config ('captions') reads ['captions/*.csv'], not shardkit's",
    ),
}


@pytest.mark.parametrize("case", sorted(CARDS_SHARDKIT_CANNOT_KEEP))
def test_a_card_shardkit_cannot_keep_true_is_refused_before_anything_is_written(tmp_path: Path, case: str) -> None:
    card, message = CARDS_SHARDKIT_CANNOT_KEEP[case]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_bytes(card)
    result = pack_example_here(repo, "--adopt")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert tree_bytes(repo) == {"README.md": card} and not (repo / ".shardkit").exists()


def test_adopt_keeps_crlf_line_ends(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    card = USER_CARD.replace("\n", "\r\n").encode()
    (repo / "README.md").write_bytes(card)
    (repo / ".gitattributes").write_bytes(USER_GITATTRIBUTES.replace("\n", "\r\n").encode())
    assert pack_example_here(repo, "--adopt", "-q").returncode == 0
    text = (repo / "README.md").read_bytes()
    assert b"\r\n" in text and text.count(b"\r\n") == text.count(b"\n")  # every line ends as the user's did
    assert b"\r\n# My dataset\r\n\r\nText the user wrote, with *markdown*.\r\n" in text
    attributes = (repo / ".gitattributes").read_bytes()
    assert attributes.startswith(USER_GITATTRIBUTES.replace("\n", "\r\n").encode())
    assert attributes.count(b"\r\n") == attributes.count(b"\n")


@pytest.mark.slow
def test_refusals_leave_no_staging_and_no_parent_folders(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b" / "out"
    assert pack_example_here(nested, "--dry-run", "-q").returncode == 2  # no chain of parents (tests/test_paths.py)
    assert not (tmp_path / "a").exists()
    assert pack_example_here(tmp_path / "fresh", "--dry-run", "-q").returncode == 0
    assert not (tmp_path / "fresh").exists()
    packed = tmp_path / "packed"
    assert pack_example_here(packed, "-q").returncode == 0
    before = tree_bytes(packed)
    work = sorted(p.name for p in (packed / ".shardkit").iterdir())
    refused = pack_example_here(packed, "--target-shard-size", "1MB")
    assert refused.returncode == 2 and "--target-shard-size 500000000 -> 1000000" in refused.stderr
    assert tree_bytes(packed) == before
    assert sorted(p.name for p in (packed / ".shardkit").iterdir()) == work  # no staging left


def test_dry_run_with_skip_writes_no_rejects_file_of_its_own_and_a_missing_rejects_folder_is_a_usage_error(
    tmp_path: Path,
) -> None:
    lines = (EXAMPLE_DIR / "metadata.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:5], "{not json", *lines[5:10]]) + "\n")
    base = [str(EXAMPLE_DIR / "images"), str(bad), "--on-error", "skip", "-q"]
    dry = run_cli("pack-shards", *base, "-o", tmp_path / "o", "--dry-run")
    assert dry.returncode == 0 and "skipped 1 bad rows (a dry run: --rejects FILE lists them)" in dry.stderr
    assert not (tmp_path / "o").exists()
    missing = tmp_path / "nope" / "rej.jsonl"
    result = run_cli("pack-shards", *base, "-o", tmp_path / "o", "--rejects", missing)
    assert (
        result.returncode == 2
        and f"--rejects '{missing}': its folder '{missing.parent}' does not exist" in result.stderr
    )
    assert not (tmp_path / "o").exists() and not (tmp_path / "nope").exists()


def test_undo_takes_away_only_empty_folders_it_made_never_anothers_files(tmp_path: Path) -> None:
    """A dry run of runs/x while another run packs runs/y: undoing x must leave runs/y whole."""
    from shardkit.outdir import WORK_DIR, CreatedHere

    created = CreatedHere(str(tmp_path / "runs" / "x"))
    (tmp_path / "runs" / "y").mkdir(parents=True)
    (tmp_path / "runs" / "y" / "shards.json").write_text("{}")  # the other run's output
    work = tmp_path / "runs" / "x" / WORK_DIR
    work.mkdir(parents=True)
    (work / "lock").touch()
    created.locked()
    (work / "staging").mkdir()
    created.undo()
    assert not (tmp_path / "runs" / "x").exists()
    assert (tmp_path / "runs" / "y" / "shards.json").read_text() == "{}"


def test_a_work_dir_for_a_url_keeps_the_users_files(tmp_path: Path) -> None:
    """--work-dir is the user's choice of folder: only shardkit's own files there move or go."""
    from shardkit.pack import PackConfig, pack

    work = tmp_path / "wd"
    work.mkdir()
    (work / "important.csv").write_text("a,b\n")
    for dry_run in (True, False):
        config = PackConfig(
            images_dir=str(EXAMPLE_DIR / "images"),
            metadata_path=str(EXAMPLE_DIR / "metadata.jsonl"),
            out_dir="memory://user-files-test/ds",
            work_dir=str(work),
            jobs=1,
            dry_run=dry_run,
        )
        pack(config)
        assert (work / "important.csv").read_text() == "a,b\n"
    import fsspec

    published = fsspec.filesystem("memory").ls("/user-files-test/ds", detail=False)
    assert not any(name.endswith("important.csv") for name in published)


@pytest.mark.slow
def test_adopt_with_a_bom_quoted_keys_or_shardkits_file_names_in_the_way(tmp_path: Path) -> None:
    bom = tmp_path / "bom"
    bom.mkdir()
    card = '\ufeff---\nlicense: mit\n"configs": []\n---\n# Mine\n'.encode()
    (bom / "README.md").write_bytes(card)
    assert pack_example_here(bom, "--adopt", "-q").returncode == 0
    text = (bom / "README.md").read_bytes()
    assert text.startswith(b"\xef\xbb\xbf---\nlicense: mit\nconfigs:\n") and text.count(b"configs:") == 1
    data, _ = split_front_matter(text.decode("utf-8").removeprefix("\ufeff"))
    assert data["license"] == "mit" and data["configs"][0]["data_files"][0]["path"] == "data/*.zip"
    ends = tmp_path / "ends"
    ends.mkdir()
    (ends / "README.md").write_text("---\nlicense: mit\n...\n---\n# x\n")
    result = pack_example_here(ends, "--adopt")
    assert result.returncode == 2 and "its YAML front matter does not parse" in result.stderr
    assert not (ends / "data").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "preview.jpg").write_bytes(b"my picture")
    result = pack_example_here(mine, "--adopt")
    assert result.returncode == 2 and "holds preview.jpg, which shardkit writes itself" in result.stderr
    assert (mine / "preview.jpg").read_bytes() == b"my picture" and sorted(p.name for p in mine.iterdir()) == [
        "preview.jpg"
    ]


def test_push_never_deletes_hub_files_that_no_shardkit_manifest_there_names(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert pack_example_here(out, "-q").returncode == 0
    with run_hub_server(tmp_path / "hub") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        upload = (
            "from huggingface_hub import HfApi; api = HfApi();"
            f"api.create_repo({REPO!r}, repo_type='dataset');"
            f"api.upload_file(path_or_fileobj=b'theirs', path_in_repo='data/train-00000.parquet', repo_id={REPO!r},"
            " repo_type='dataset')"
        )
        done = subprocess.run([sys.executable, "-c", upload], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        result = push_with_stderr(out, env)
        assert "left on the Hub: data/train-00000.parquet" in result.stderr
        assert json.loads(result.stdout)["deleted_files"] == 0
        assert remote_files(hub)["data/train-00000.parquet"] == b"theirs"


def push_with_stderr(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`shardkit push FOLDER --repo REPO --json`, which must succeed; stderr kept for its warnings."""
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "push", str(folder), "--repo", REPO, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("escape", "shards.json: shards[0].file is '../outside.zip', not data/[<split>/][<folder>/]<hex prefix>.zip"),
        ("absolute", "shards.json: shards[0].file is '/etc/passwd', not data/[<split>/][<folder>/]<hex prefix>.zip"),
        ("twice", "is named twice"),
        ("metadata", "has metadata '../x.jsonl'"),
    ],
)
def test_readers_follow_no_manifest_entry_outside_the_dataset(tmp_path: Path, change: str, message: str) -> None:
    import shardkit
    from shardkit.errors import ManifestError

    out = tmp_path / "ds"
    assert pack_example_here(out, "-q").returncode == 0
    manifest = json.loads((out / "shards.json").read_text())
    first = manifest["shards"][0]
    if change == "escape":
        first["file"] = "../outside.zip"
    elif change == "absolute":
        first["file"] = "/etc/passwd"
    elif change == "twice":
        manifest["shards"].append(dict(first))
    else:
        first["metadata"] = "../x.jsonl"
    (out / "shards.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=re.escape(message)):
        shardkit.stream(str(out))
    verify = run_cli("shardkit", "verify", out)
    assert verify.returncode == 1 and message in verify.stderr and "Traceback" not in verify.stderr


HOSTILE_LINES = {
    '{"file_name": "X", "c": 1, "c": 2}': "key 'c' appears twice in one object; keep one",
    '{"file_name": "X", "c": "\\ud800"}': "column 'c' holds a lone surrogate",
    '{"file_name": "X", "\\udc00": 1}': "a column name (\\udc00) holds a lone surrogate",
    '{"file_name": "X", "c": ' + "[" * 400 + "]" * 400 + "}": "JSON nested 401 deep; at most 64 levels",
    '{"file_name": "X", "c": ' + "[" * 100_000 + "]" * 100_000 + "}": "JSON nested 100001 deep",
}


@pytest.mark.parametrize("line", sorted(HOSTILE_LINES), ids=lambda line: line[:40])
def test_hostile_json_lines_are_refused_naming_the_line(tmp_path: Path, line: str) -> None:
    first = (EXAMPLE_DIR / "metadata.jsonl").read_text().splitlines()[0]
    name = json.loads(first)["file_name"]
    meta = tmp_path / "meta.jsonl"
    meta.write_text(first + "\n" + line.replace('"X"', json.dumps(name)) + "\n")
    result = pack_example_rows(EXAMPLE_DIR / "images", meta, tmp_path / "o")
    assert result.returncode == 1
    assert f"meta.jsonl:2: {HOSTILE_LINES[line]}" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "o").exists()


def test_surrogate_pairs_and_ordinary_nesting_are_fine(tmp_path: Path) -> None:
    first = json.loads((EXAMPLE_DIR / "metadata.jsonl").read_text().splitlines()[0])
    meta = tmp_path / "meta.jsonl"
    row = {**first, "emoji": "x", "nested": [[1, 2], [3]]}
    meta.write_text(json.dumps(row).replace('"x"', '"\\ud83d\\ude00"') + "\n")  # an escaped pair: one emoji
    assert pack_example_rows(EXAMPLE_DIR / "images", meta, tmp_path / "o").returncode == 0
    assert (
        "\U0001f600" in (tmp_path / "o" / "metadata" / next((tmp_path / "o" / "metadata").iterdir()).name).read_text()
    )


def test_stream_refuses_a_parquet_row_whose_file_path_leaves_the_dataset(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    import shardkit
    from shardkit.errors import ShardkitError

    out = tmp_path / "ds"
    assert pack_example_here(out, "--format", "parquet", "-q").returncode == 0
    shard = sorted((out / "data").glob("*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["image"]["path"] = "../../../etc/passwd"
    # Checksummed pages, no dictionary on the file's bytes and a manifest that records the new size, as
    # a hostile dataset would have them: the path is what is left to refuse.
    pq.write_table(
        type(table).from_pylist(rows, schema=table.schema), shard, write_page_checksum=True, use_dictionary=False
    )
    manifest = json.loads((out / "shards.json").read_text())
    next(s for s in manifest["shards"] if s["file"] == f"data/{shard.name}")["bytes"] = shard.stat().st_size
    (out / "shards.json").write_text(json.dumps(adding_up(manifest)))
    with pytest.raises(ShardkitError, match=r"its member '\.\./\.\./\.\./etc/passwd' is not where key"):
        list(shardkit.stream(str(out)))


@pytest.mark.slow
def test_push_never_publishes_partial_files_and_refuses_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A run killed at its finish by an older shardkit left README.md.partial beside the card:
    never published, even with --include '*'. A file named in bytes that are not UTF-8 cannot be
    a Hub path: named with --include, it is refused in one line before anything goes up."""
    out = tmp_path / "ds"
    assert pack_example_here(out, "-q").returncode == 0
    (out / "README.md.partial").write_bytes(b"half a card")
    (out / "notes.txt").write_text("theirs")
    odd = os.path.join(os.fsencode(out), b"caf\xe9.txt")
    with open(odd, "wb") as f:
        f.write(b"latin-1 name")
    with run_hub_server(tmp_path / "hub") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        refused = subprocess.run(
            [str(SCRIPTS / "shardkit"), "push", str(out), "--repo", REPO, "--include", "*"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert "'caf\\\\xe9.txt' is not UTF-8, which a Hub file name must be" in refused.stderr.splitlines()[-1]
        assert hub.state.load("dataset", REPO) is None or not hub.files(REPO, "main")  # nothing went up
        os.unlink(odd)
        push(out, env, "--include", "*")
        published = remote_files(hub)
        assert published["notes.txt"] == b"theirs"
        assert "README.md.partial" not in published
