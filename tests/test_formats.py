"""``--format tar`` and ``--format parquet``: the same planner, cap, manifest, verify, push and reader.

Each format is packed from the shipped example and read back with what its consumers use:
datasets 5.x and 3.6 builtin builders (webdataset, parquet), the ``webdataset`` library, Python's
``tarfile``, pyarrow, and ``shardkit.stream``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

import shardkit
from shardkit.formats import PARQUET, TAR
from shardkit.formats.tar import TarFormatError, TarWriter, iter_tar_members, member_header
from tests.support.cli import run_cli
from tests.support.corpus import Corpus, tiny_image, tree_bytes
from tests.support.packing import pack_example_here
from tests.support.readback import DS36_PYTHON, expected_rows, read_with
from tests.test_streaming import digest_rows

FILE_COLUMN = {"tar": "jpg", "parquet": "image"}


def shardkit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``shardkit ARGS``, in this process (tests/support/cli.py): verify, many times over."""
    return run_cli("shardkit", *args)


def card(folder: Path) -> dict[str, Any]:
    text = (folder / "README.md").read_text(encoding="utf-8")
    return yaml.safe_load(text.split("---\n")[1])  # type: ignore[no-any-return]


# --- the containers --------------------------------------------------------------------------------


def test_tar_writer_output_is_plain_ustar_and_exactly_as_big_as_planned() -> None:
    buf = io.BytesIO()
    tw = TarWriter(buf)
    members = {"0123abcd.json": b'{"key":"0123abcd"}', "0123abcd.jpg": tiny_image(1), "0123abce.json": b""}
    for name, data in members.items():
        tw.add(name, data)
    size = tw.close()
    # Per member: a PAX header and its record block (the CRC-32), the ustar header, the data padded.
    assert size == len(buf.getvalue()) == 1024 + sum(1536 + -(-len(d) // 512) * 512 for d in members.values())
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tf:
        assert tf.getnames() == list(members)
        assert all(m.mtime == 0 and m.uid == 0 and m.mode == 0o644 for m in tf.getmembers())
        assert tf.extractfile("0123abcd.jpg").read() == members["0123abcd.jpg"]  # type: ignore[union-attr]
        # tarfile hands each member its CRC record, untouched by what it extracts.
        assert [m.pax_headers for m in tf.getmembers()] == [
            {"comment": f"shardkit-crc32:{zlib.crc32(d):08x}"} for d in members.values()
        ]
    assert [(m.name, m.data) for m in iter_tar_members(io.BytesIO(buf.getvalue()))] == list(members.items())


def test_tar_reader_refuses_a_bad_header_and_a_truncated_stream() -> None:
    header = bytearray(member_header("a.jpg", 3))
    header[0:1] = b"b"  # the checksum no longer matches
    with pytest.raises(TarFormatError, match="checksum mismatch at offset 0"):
        list(iter_tar_members(io.BytesIO(bytes(header) + b"abc" + bytes(509 + 1024))))
    with pytest.raises(TarFormatError, match="truncated"):
        list(iter_tar_members(io.BytesIO(member_header("a.jpg", 3) + b"ab")))
    with pytest.raises(TarFormatError, match="plain name"):
        member_header("../x.jpg", 1)


# --- each format read back by its consumers ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_datasets_5_and_3_6_read_every_row_and_byte(
    packed_example_tar_parquet: dict[str, Path], fmt: str, tmp_path: Path
) -> None:
    folder = packed_example_tar_parquet[fmt]
    assert sorted(p.name for p in (folder / "data").iterdir()) == [f"{c}.{fmt}" for c in "0123456789abcdef"]
    assert card(folder)["configs"][0]["data_files"][0]["path"] == f"data/*.{fmt}"
    column = FILE_COLUMN[fmt]
    got = read_with(sys.executable, folder, True, tmp_path / "c5", column=column)
    assert got["version"].startswith("5.") and got["rows"] == expected_rows()
    assert got["n_shards"] == 16
    got = read_with(DS36_PYTHON, folder, True, tmp_path / "c36", column=column)
    assert got["version"] == "3.6.0" and got["rows"] == expected_rows()


@pytest.mark.slow
def test_tar_is_the_webdataset_layout_the_webdataset_library_reads(packed_example_tar_parquet: dict[str, Path]) -> None:
    import webdataset as wds

    folder = packed_example_tar_parquet["tar"]
    with tarfile.open(folder / "data" / "0.tar") as tf:
        names = tf.getnames()
    assert names[0::2] == [n.replace(".jpg", ".json") for n in names[1::2]]  # <key>.json, then <key>.jpg
    urls = [str(p) for p in sorted((folder / "data").glob("*.tar"))]
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode("pil"))
    assert len(samples) == 300
    first = samples[0]
    assert first["jpg"].size[0] > 0 and first["json"]["key"] == first["__key__"]
    features = card(folder)["dataset_info"]["features"]
    assert [f["name"] for f in features] == ["jpg", "json", "__key__", "__url__"]
    assert features[1]["struct"][:2] == [{"name": "file_name", "dtype": "string"}, {"name": "key", "dtype": "string"}]


@pytest.mark.slow
def test_parquet_columns_are_typed_as_the_card_declares(packed_example_tar_parquet: dict[str, Path]) -> None:
    folder = packed_example_tar_parquet["parquet"]
    parquet = pq.ParquetFile(folder / "data" / "0.parquet")
    schema = parquet.schema_arrow
    features = card(folder)["dataset_info"]["features"]
    assert schema.names == [f["name"] for f in features]
    assert str(schema.field("image").type) == "struct<bytes: binary, path: string>"
    assert str(schema.field("latitude").type) == "double" and str(schema.field("key").type) == "string"
    assert all(parquet.metadata.row_group(i).num_rows <= 100 for i in range(parquet.num_row_groups))
    # datasets' features travel in the file too: a shard read on its own still decodes its images.
    assert json.loads(schema.metadata[b"huggingface"])["info"]["features"]["image"] == {"_type": "Image"}
    column = parquet.metadata.row_group(0).column(0)
    assert column.path_in_schema == "image.bytes" and column.compression == "UNCOMPRESSED"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_shardkit_stream_gives_the_same_rows_as_for_zip(packed_example_tar_parquet: dict[str, Path], fmt: str) -> None:
    from tests.http_server import serve_directory

    ds = shardkit.stream(str(packed_example_tar_parquet[fmt]))
    assert ds.n_shards == 16 and list(ds.features)[:2] == ["image", "key"]
    assert digest_rows(ds) == expected_rows()
    with serve_directory(packed_example_tar_parquet[fmt]) as (base, log):
        assert digest_rows(shardkit.stream(base)) == expected_rows()
        shard_requests = [e for e in log.entries if e[1].endswith(f".{fmt}")]
    if fmt == "tar":  # front to back: one plain GET per shard
        assert len(shard_requests) == 16 and all(rng is None for _, _, rng in shard_requests)


# --- the shared machinery: sizes, verify, resume, errors -------------------------------------------


@pytest.mark.slow
def test_planned_sizes_hold_exact_for_tar_and_as_an_upper_bound_for_parquet(make_corpus: Any, tmp_path: Path) -> None:
    corpus: Corpus = make_corpus(300)
    sizes = {}
    for fmt, target in (("tar", "20KB"), ("parquet", "30KB")):
        out = tmp_path / fmt
        common = [str(corpus.images), str(corpus.meta), "-o", str(out), "--format", fmt, "--json", "-q"]
        common += ["--target-shard-size", target, "--max-shard-size", "40KB"]
        plan = json.loads(_pack(*common, "--dry-run").stdout)["plan"]
        _pack(*common)
        manifest = json.loads((out / "shards.json").read_text())
        assert manifest["format"] == f"shardkit.{fmt}/1"
        written = {s["file"]: s["bytes"] for s in manifest["shards"]}
        planned = {p["name"]: p["bytes"] for p in plan}
        assert set(written) == set(planned) and len(written) > 16  # parts: a group passed the target
        for name, size in written.items():
            assert size == (out / name).stat().st_size <= 40_000
            assert size == planned[name] if fmt == "tar" else size <= planned[name]
        sizes[fmt] = sum(written.values())
    assert TAR.exact and not PARQUET.exact and sizes["parquet"] < sizes["tar"]


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_verify_passes_then_names_the_damage(
    packed_example_tar_parquet: dict[str, Path], fmt: str, tmp_path: Path
) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(packed_example_tar_parquet[fmt], folder)
    ok = shardkit_cli("verify", str(folder), "--deep", "-q")
    assert ok.returncode == 0 and "300 files decoded" in ok.stdout and "OK" in ok.stdout

    meta = folder / "metadata" / "3.jsonl"
    lines = meta.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    row["title"] = "changed"
    lines[1] = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    meta.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shard = folder / "data" / f"5.{fmt}"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))

    result = shardkit_cli("verify", str(folder), "--deep", "-q")
    assert result.returncode == 1
    assert "metadata/3.jsonl: sha256 differs from the manifest's" in result.stdout
    expected = (
        "metadata/3.jsonl: differs from the .json members of data/3.tar" if fmt == "tar" else "fields differ from"
    )
    assert expected in result.stdout
    assert f"data/5.{fmt}: sha256 differs from the manifest's" in result.stdout


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_a_lost_shard_is_rewritten_byte_for_byte(
    packed_example_tar_parquet: dict[str, Path], fmt: str, tmp_path: Path
) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(packed_example_tar_parquet[fmt], folder)
    before = tree_bytes(folder)
    (folder / "data" / f"a.{fmt}").unlink()
    result = pack_example_here(folder, "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert "wrote 1 of 16 shards (" in result.stdout and "; 15 already written by an earlier run;" in result.stdout
    assert tree_bytes(folder) == before


@pytest.mark.slow
def test_changing_the_format_needs_force_and_then_replaces_the_shards(packed_template: Path, tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    shutil.copytree(packed_template, folder, ignore=shutil.ignore_patterns("lock"))
    refused = pack_example_here(folder, "--format", "tar")
    assert refused.returncode == 2 and "from other options (--format zip -> tar)." in refused.stderr  # not "input"
    result = pack_example_here(folder, "--format", "tar", "--force")
    assert result.returncode == 0, result.stderr
    shards = [p for p in (folder / "data").iterdir() if p.name != ".gitkeep"]  # the template keeps data/ in git
    assert sorted(p.suffix for p in shards) == [".tar"] * 16
    # The template's card pointed at data/*.zip: the pattern follows the format, the rest stays.
    data = card(folder)
    assert data["configs"][0]["data_files"][0]["path"] == "data/*.tar"
    assert "license" in data
    assert shardkit_cli("verify", str(folder), "-q").returncode == 0


def test_rows_a_tar_shard_cannot_hold_are_input_problems(make_corpus: Any, tmp_path: Path) -> None:
    corpus: Corpus = make_corpus(3)
    (corpus.images / "notes.json").write_text("{}")
    rows = [
        {"file_name": "sub0/img_0000.jpg", "key": "ab" * 48},  # 96 digits + ".json": over 100 bytes
        {"file_name": "notes.json"},
        {"file_name": "sub2/img_0002.jpg"},
    ]
    meta = corpus.write_meta(rows, "bad.jsonl")
    result = _pack(str(corpus.images), str(meta), "-o", str(tmp_path / "out"), "--format", "tar", check=False)
    assert result.returncode == 1
    assert f"{meta}:1: " in result.stderr and "keys can be at most 95 digits" in result.stderr
    assert f"{meta}:2: " in result.stderr and "a .json file cannot go into a tar shard" in result.stderr
    assert not (tmp_path / "out" / "data").exists()


def _pack(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``pack-shards ARGS``, in this process (tests/support/cli.py)."""
    result = run_cli("pack-shards", *args)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_pushed_to_the_hub_both_datasets_versions_read_main(
    packed_example_tar_parquet: dict[str, Path], fmt: str, tmp_path: Path
) -> None:
    from tests.test_push import REPO, hub_env, local_files, pushed_copy, remote_files

    with pushed_copy(packed_example_tar_parquet[fmt], tmp_path) as (hub, summary):
        assert remote_files(hub, repo=REPO) == local_files(tmp_path / packed_example_tar_parquet[fmt].name)
        assert summary["script_branch"] is None and "script" not in hub.refs(REPO)  # builtin builders suffice
        env = hub_env(hub.url, tmp_path / "reader-home", token=None)
        column = FILE_COLUMN[fmt]
        got = read_with(sys.executable, REPO, True, tmp_path / "c5", env=env, column=column)
        assert got["rows"] == expected_rows()
        got = read_with(DS36_PYTHON, REPO, True, tmp_path / "c36", env=env, column=column)
        assert got["version"] == "3.6.0" and got["rows"] == expected_rows()
        assert hub.unknown == []


def test_a_parquet_row_group_is_cut_before_its_files_pass_32_bit_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file column's offsets are 32-bit: a row group is cut before its files would pass them,
    and a file that cannot fit alone is refused in one line naming it (the limit lowered to 100
    bytes here: the real one is 2 GiB)."""
    from shardkit.errors import ShardkitError
    from shardkit.formats import parquet

    monkeypatch.setattr(parquet, "_MAX_GROUP_FILE_BYTES", 100)
    features = [{"name": "image", "dtype": "image"}, {"name": "key", "dtype": "string"}]
    files = {f"{i}.jpg": bytes([i]) * 40 for i in range(3)}
    buffer = io.BytesIO()
    writer = parquet.ParquetShardWriter(buffer, features)  # type: ignore[arg-type]
    for name, data in files.items():
        writer.add(json.dumps({"file_name": name, "key": name[0] * 8}), data)
    with pytest.raises(ShardkitError, match=r"^file 'big\.jpg' is 101 bytes: a Parquet shard holds files under 2 GiB$"):
        writer.add(json.dumps({"file_name": "big.jpg", "key": "b" * 8}), b"x" * 101)
    writer.close()
    shard = pq.ParquetFile(io.BytesIO(buffer.getvalue()))
    assert [shard.metadata.row_group(g).num_rows for g in range(shard.num_row_groups)] == [2, 1]
    rows = shard.read().to_pylist()
    assert rows == [{"image": {"bytes": data, "path": name}, "key": name[0] * 8} for name, data in files.items()]
