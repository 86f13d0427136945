"""The packer's output: layout, exact sizes, determinism, atomicity, resume."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import shardkit.packplan
from shardkit.errors import UsageError
from shardkit.formats.parquet import encode_metadata_table, read_metadata_table
from shardkit.formats.zip import iter_members, member_name
from shardkit.inputfile import SourceChanged
from shardkit.metadata import SourceRecord
from shardkit.pack import pack
from shardkit.plan import ShardPlan
from shardkit.staging import StagedRow
from shardkit.writer import ShardJob, write_shard
from tests.support.corpus import Corpus, shard_files, tree_bytes
from tests.support.packing import config_for

_KEY_ONLY = [{"name": "key", "dtype": "string"}]


def test_layout_zip_members_metadata_and_manifest(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    whole = pack(config_for(corpus, tmp_path / "whole" / "out", jobs=1))
    assert [p.name for p in whole.plan] == ["data/0.zip"]  # a split smaller than the target: one shard
    # Several shards of about a quarter each, named by where their keys start.
    summary = pack(config_for(corpus, out, jobs=1, target_shard_bytes=whole.bytes // 4))
    manifest = json.loads((out / "shards.json").read_text())
    assert summary.rows == 40 and manifest["totals"]["rows"] == 40
    assert (
        manifest["prefix_length"] == 0 and manifest["layout"] == 4 and manifest["metadata_member"] == "metadata.parquet"
    )
    # Near the target (a ZIP's fixed part, its typed table's schema, weighs on shards this small).
    target = whole.bytes // 4
    assert 4 <= len(manifest["shards"]) <= 5
    assert all(0.7 * target <= s["bytes"] <= 1.3 * target for s in manifest["shards"])
    assert list(summary.phase_seconds) == ["check", "plan", "write", "finish"]
    assert sum(summary.phase_seconds.values()) <= summary.seconds
    names = sorted(Path(s["file"]).stem for s in manifest["shards"])
    assert names[0] == "0"
    by_key: dict[str, dict[str, object]] = {}
    inputs = {hashlib.sha256((corpus.images / r["file_name"]).read_bytes()).hexdigest()[:32]: r for r in corpus.rows}
    for shard in manifest["shards"]:
        path = out / shard["file"]
        blob = path.read_bytes()
        assert len(blob) == shard["bytes"] and hashlib.sha256(blob).hexdigest() == shard["sha256"]
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
            names_inside = zf.namelist()
        members = list(iter_members(io.BytesIO(blob)))
        assert [m.name for m in members] == names_inside
        assert names_inside[0] == "metadata.parquet"
        lines = (out / shard["metadata"]).read_bytes()
        rows = [json.loads(line) for line in lines.decode().splitlines()]
        # metadata.parquet holds the same rows, typed by the card's features; the same lines encode to its bytes
        assert read_metadata_table(members[0].data, manifest["features"]) == rows
        assert encode_metadata_table(lines, manifest["features"]) == members[0].data
        assert [r["file_name"] for r in rows] == names_inside[1:]  # same order as the members
        keys = [r["key"] for r in rows]
        assert keys == sorted(keys) and (keys[0], keys[-1]) == (shard["first_key"], shard["last_key"])
        stem = Path(shard["file"]).stem
        for row, member in zip(rows, members[1:], strict=True):
            assert [n for n in names if n <= row["key"]][-1] == stem  # the last shard whose name is at or before it
            assert row["file_name"] == member_name(row["key"], ".jpg")
            source = inputs[row["key"]]
            assert member.data == (corpus.images / source["file_name"]).read_bytes()
            assert {k: v for k, v in row.items() if k not in ("file_name", "key")} == {
                k: v for k, v in source.items() if k != "file_name"
            }
            by_key[row["key"]] = row
    assert set(by_key) == set(inputs)  # every row exactly once
    card = (out / "README.md").read_text()
    assert "path: data/*.zip" in card and "dtype: image" in card
    assert "*.zip filter=lfs" in (out / ".gitattributes").read_text()


def test_byte_identical_whatever_the_jobs_threads_and_buffers(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(200)
    outputs = []
    for i, kw in enumerate(
        [
            {"jobs": 1},
            {"jobs": 2, "read_threads": 3},
            {"jobs": 2, "read_threads": 1, "prefetch_bytes": 600},  # every file past half the budget: streamed copy
            {"jobs": 1, "read_threads": 16, "prefetch_bytes": 4096, "plan from the file": True},  # ring often full
        ]
    ):
        with monkeypatch.context() as patch:
            if kw.pop("plan from the file", False):  # as for a large input
                patch.setattr(shardkit.packplan, "PLAN_IN_MEMORY_ROWS", 0)
            out = tmp_path / f"run{i}" / "out"  # same name: the card's title comes from it
            pack(config_for(corpus, out, target_shard_bytes=20_000, max_shard_bytes=40_000, **kw))
            outputs.append(tree_bytes(out))
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]
    assert len([k for k in outputs[0] if k.startswith("data/")]) >= 8


def test_small_cap_splits_groups_and_no_shard_passes_it(make_corpus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(200)
    out = tmp_path / "out"
    config = config_for(corpus, out, max_shard_bytes=12_000, target_shard_bytes=8_000, jobs=2, prefix_length=1)
    summary = pack(config)
    files = shard_files(out)
    assert any("-" in f.stem for f in files)  # numbered parts
    assert all(f.stat().st_size <= 12_000 for f in files)
    assert sum(len(zipfile.ZipFile(f).namelist()) - 1 for f in files) == 200 == summary.rows


def test_content_keys_and_given_keys(make_corpus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    keyed = make_corpus(10, with_keys=True)
    out = tmp_path / "out"
    pack(config_for(keyed, out, jobs=1))
    manifest = json.loads((out / "shards.json").read_text())
    published = {json.loads(line)["key"] for s in manifest["shards"] for line in (out / s["metadata"]).open()}
    assert published == {r["key"] for r in keyed.rows}


def test_caption_for_the_preview() -> None:
    from shardkit.preview import caption_of

    assert caption_of({"title": "Morning+light", "caption": None}) == "Morning light"
    assert caption_of({"label": 3}) == "3"
    assert caption_of({"key": "0123456789abcdef"}) == "0123456789ab"
    assert caption_of({"caption": "x" * 40}) == "x" * 40  # the sheet fits it to its cell by measure


def test_gzipped_metadata(corpus: Corpus, tmp_path: Path) -> None:
    gz = corpus.root / "meta.jsonl.gz"
    gz.write_bytes(gzip.compress(corpus.meta.read_bytes()))
    plain, zipped = tmp_path / "a" / "out", tmp_path / "b" / "out"
    pack(config_for(corpus, plain, jobs=1))
    pack(replace(config_for(corpus, zipped, jobs=1), metadata_path=str(gz)))
    assert tree_bytes(plain) == tree_bytes(zipped)


def test_rerun_resumes_and_keeps_bytes(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = pack(config_for(corpus, out, jobs=2))
    before = tree_bytes(out)
    # A shard lost and a temporary leftover from a run that died: the rerun mends both.
    shard_files(out)[0].unlink()
    (out / ".shardkit" / "tmp").mkdir(parents=True, exist_ok=True)
    (out / ".shardkit" / "tmp" / "3.zip.partial").write_bytes(b"half")
    second = pack(config_for(corpus, out, jobs=2))
    assert second.written_shards == 1 and second.resumed_shards == first.shards - 1
    assert tree_bytes(out) == before
    assert not (out / ".shardkit" / "tmp" / "3.zip.partial").exists()


def test_changed_shard_on_disk_is_rewritten(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pack(config_for(corpus, out, jobs=1, prefix_length=1))
    before = tree_bytes(out)
    victim = shard_files(out)[2]
    damaged = bytearray(victim.read_bytes())
    damaged[-40] ^= 1
    victim.write_bytes(bytes(damaged))
    again = pack(config_for(corpus, out, jobs=1, prefix_length=1))
    assert again.written_shards == 1
    assert tree_bytes(out) == before


def test_other_input_is_refused_without_force(make_corpus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = make_corpus(30), make_corpus(12, fmt="PNG")
    out = tmp_path / "out"
    pack(config_for(a, out, jobs=1))
    refused = r"from other input \(rows, files or fields changed\)\. Re-run with --update .*, or --force"
    with pytest.raises(UsageError, match=refused):
        pack(config_for(b, out, jobs=1))
    with pytest.raises(UsageError, match=r"other options \(--target-shard-size 500000000 -> 1000\)"):
        pack(config_for(a, out, jobs=1, target_shard_bytes=1000))
    pack(config_for(b, out, jobs=1, force=True))
    fresh = tmp_path / "fresh" / "out"
    pack(config_for(b, fresh, jobs=1))
    assert tree_bytes(out) == tree_bytes(fresh)  # stale shards of the first input are gone


def test_files_shardkit_did_not_write_are_never_deleted_even_with_force(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pack(config_for(corpus, out, jobs=1))
    mine = {
        out / "data" / "mine.zip": b"PK mine",
        out / "data" / "my_results.csv": b"a,b\n",
        out / "metadata" / "notes.jsonl": b"{}\n",
    }
    for path, data in mine.items():
        path.write_bytes(data)
    for force in (False, True):
        with pytest.raises(
            UsageError, match=r"shardkit did not write \(data/mine\.zip, data/my_results\.csv, metadata/notes\.jsonl\)"
        ):
            pack(config_for(corpus, out, jobs=1, force=force, target_shard_bytes=1000 if force else 500_000_000))
        assert all(path.read_bytes() == data for path, data in mine.items())
    for path in mine:
        path.unlink()
    pack(config_for(corpus, out, jobs=1))  # moved away: the same run goes on


def test_unknown_shards_in_a_folder_shardkit_did_not_make_are_refused_before_anything_is_written(
    corpus: Corpus, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "data" / "old.zip").write_bytes(b"PK")
    with pytest.raises(UsageError, match=r"not empty and not a shardkit dataset repo \(it holds data\)"):
        pack(config_for(corpus, out, jobs=1))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["data", "data/old.zip"]


def test_file_changed_after_checking_leaves_no_shard(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    staging = tmp_path / "sorted.tsv"
    source = "sub0/img_0000.jpg"
    size = (corpus.images / source).stat().st_size
    key = "abcdef0123456789"
    line = json.dumps({"file_name": member_name(key, ".jpg"), "key": key})
    staging.write_text(StagedRow.of(SourceRecord(1, key, source, size + 5, ".jpg", {}), line).to_line())
    plan = ShardPlan("data/a.zip", "a", None, 0, 1, 0, key, key)
    table = encode_metadata_table(line.encode() + b"\n", [{"name": "image", "dtype": "image"}, *_KEY_ONLY])
    job = ShardJob(plan, str(staging), str(corpus.images), str(out), str(out / ".shardkit" / "tmp"), table=table)
    with pytest.raises(SourceChanged, match=r"img_0000.jpg \(metadata line 1\): file changed since it was checked"):
        write_shard(job)
    assert not (out / "data").exists() or shard_files(out) == []
    assert list((out / ".shardkit" / "tmp").iterdir()) == []


def test_dry_run_writes_nothing(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = pack(config_for(corpus, out, dry_run=True))
    assert summary.dry_run and summary.shards == len(summary.plan) and summary.rows == 40
    assert list(summary.phase_seconds) == ["check", "plan"]
    assert not (out / "data").exists() and not (out / "shards.json").exists()


def test_second_packer_on_the_same_out_dir_is_refused(corpus: Corpus, tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "out"
    (out / ".shardkit").mkdir(parents=True)
    with open(out / ".shardkit" / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another shardkit run is working on"):
            pack(config_for(corpus, out, jobs=1))


def test_hash_cache_skips_unchanged_files_and_rehashes_changed_ones(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pack records every shard's sha256 with its (size, mtime, inode): a resume or a push does not
    read unchanged shards again, and any change to a file makes it read again."""
    import shardkit.outdir
    from shardkit.manifest import read_manifest
    from shardkit.outdir import HashCache, shard_problem

    out = tmp_path / "out"
    pack(config_for(corpus, out, jobs=1))
    manifest = read_manifest(str(out))
    assert manifest is not None
    reads: list[str] = []
    real = shardkit.outdir.sha256_file
    monkeypatch.setattr(shardkit.outdir, "sha256_file", lambda p: reads.append(p) or real(p))
    hashes = HashCache(str(out))
    assert all(shard_problem(str(out), s, hashes) is None for s in manifest.shards)
    assert reads == []  # every shard and metadata file was recorded by pack: nothing read
    shard = out / manifest.shards[0].file
    data = bytearray(shard.read_bytes())
    data[50] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert "does not match the sha256" in (shard_problem(str(out), manifest.shards[0], hashes) or "")
    assert reads == [str(shard)]


def test_output_of_an_older_layout_is_refused_with_the_reason_then_rewritten_with_force(
    corpus: Corpus, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    pack(config_for(corpus, out, jobs=1))
    state = out / ".shardkit" / "state.json"
    old = json.loads(state.read_text())
    del old["layout"]  # what a shardkit from before layout 2 recorded
    state.write_text(json.dumps(old))
    with pytest.raises(UsageError, match=r"an older shardkit \(layout 1 -> 4: float columns' whole numbers.*; splits"):
        pack(config_for(corpus, out, jobs=1))
    pack(config_for(corpus, out, jobs=1, force=True))
    assert json.loads(state.read_text())["layout"] == 4
