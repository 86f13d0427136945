"""Provenance (issue 21): with ``--keep-source-path``, an error about one row names its input file.

Files are published under their key, so ``data/test/3.zip: images/307/a1b/307a....jpg: CRC
mismatch`` alone cannot be traced to an input file. The example dataset is packed (ZIP, tar,
Parquet; split into train and test, so shards are ``data/<split>/<prefix>.<ext>``) with one input
file, :data:`BROKEN`, that is not an image: the shard is as shardkit writes it, CRCs right, and
only ``verify --deep`` can tell. Copies then damage that file's bytes in the shard (one flipped
byte, so its CRC no longer matches) or, for Parquet, its row's path. ``shardkit verify --deep``,
``shardkit.stream`` and the template's loading script in datasets 3.6 must name the source
(``(source 'photos/...')`` after the member), and say nothing of a source without
``--keep-source-path`` or where no row is known (a damaged Parquet page).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from cookiecutter.main import cookiecutter

import shardkit
from shardkit.cli import main
from shardkit.errors import SOURCE_SHOWN_CHARS, ShardkitError, source_note
from shardkit.formats.parquet import ParquetShardWriter
from tests.support.cli import run_cli
from tests.support.corpus import EXAMPLE_DIR, REPO_ROOT
from tests.support.readback import DS36_PYTHON
from tests.test_hostile_shards import set_shard, with_field, zip_bytes, zip_members

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

INPUT_ROWS = [json.loads(line) for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines()]
BROKEN = INPUT_ROWS[0]["file_name"]  # the input file that is not an image (in the test split)
BROKEN_KEY = INPUT_ROWS[0]["key"]
NOT_AN_IMAGE = b"provenance test: these bytes are not an image, whatever the file name says\n" * 8
NOT_AN_IMAGE_WORDS = "is not an image Pillow can read"
CRC_WORDS = "CRC mismatch: the bytes are not what was written"
FORMATS = ["zip", "tar", "parquet"]


def split_of(index: int) -> str:
    return "test" if index % 5 == 0 else "train"


@pytest.fixture(scope="module")
def source_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example dataset with a split column, and BROKEN's bytes replaced by text."""
    root = tmp_path_factory.mktemp("input")
    shutil.copytree(EXAMPLE_DIR / "images", root / "images")
    (root / "images" / BROKEN).write_bytes(NOT_AN_IMAGE)
    lines = [json.dumps({**row, "split": split_of(i)}) for i, row in enumerate(INPUT_ROWS)]
    (root / "metadata.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "images", root / "metadata.jsonl"


@pytest.fixture(scope="module")
def packs(source_input: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    """The input packed in each format, with and without --keep-source-path; ZIP into the
    template (so the loading script is there)."""
    images, metadata = source_input
    root = tmp_path_factory.mktemp("packs")
    out = {}
    for fmt in FORMATS:
        for keep in (True, False):
            name = f"{fmt}-{'keep' if keep else 'plain'}"
            if fmt == "zip":
                repo = Path(
                    cookiecutter(
                        str(REPO_ROOT / "templates" / "hub-dataset"),
                        no_input=True,
                        extra_context={"dataset_name": "yfcc-mini"},
                        output_dir=str(root / name),
                        default_config=True,
                    )
                )
            else:
                repo = root / name / "yfcc-mini"
                repo.parent.mkdir()
            options = ["--format", fmt, "-q", *(["--keep-source-path"] if keep else [])]
            result = run_cli("pack-shards", images, metadata, "-o", repo, *options)  # here: tests/support/cli.py
            assert result.returncode == 0, result.stderr
            out[fmt, keep] = repo
    return out


def broken_row(repo: Path) -> tuple[str, str, dict[str, Any]]:
    """The shard holding BROKEN's row, the row's file name there, and its line in metadata/."""
    manifest = json.loads((repo / "shards.json").read_text())
    for shard in manifest["shards"]:
        for line in (repo / shard["metadata"]).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["key"] == BROKEN_KEY:
                return shard["file"], row["file_name"], row
    raise AssertionError("BROKEN's row is not in any shard")


def note(keep: bool) -> str:
    return f" (source {BROKEN!r})" if keep else ""


def copy_of(repo: Path, dest: Path) -> Path:
    copy = dest / repo.parent.name / repo.name
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns("lock", ".shardkit"))
    return copy


def with_flipped_byte(repo: Path, dest: Path) -> tuple[Path, str, str]:
    """A copy of ``repo`` where one byte of BROKEN's bytes in its shard is flipped (the manifest
    made to agree with the new file): the shard, and the member."""
    copy = copy_of(repo, dest)
    shard, member, _ = broken_row(copy)
    data = bytearray((copy / shard).read_bytes())
    at = data.find(NOT_AN_IMAGE)
    assert at > 0 and data.find(NOT_AN_IMAGE, at + 1) == -1
    data[at + 10] ^= 0x20  # a letter's case: the bytes are still not an image
    set_shard(copy, shard, bytes(data))
    return copy, shard, member


def with_directory_size(repo: Path, dest: Path) -> tuple[Path, str, str]:
    """A copy of a ZIP ``repo`` whose central directory gives BROKEN's member one byte more than
    its local header: a size mismatch met after every row was read."""
    copy = copy_of(repo, dest)
    shard, member, _ = broken_row(copy)
    members = zip_members(copy / shard)
    assert zip_bytes(members) == (copy / shard).read_bytes()  # the crafting changes only what it says
    index = [name.decode() for name, _ in members].index(member)
    size = len(members[index][1]) + 1

    def grown(i: int, entry: bytes) -> bytes:
        return with_field(with_field(entry, 20, "<I", size), 24, "<I", size) if i == index else entry

    set_shard(copy, shard, zip_bytes(members, central=grown))
    return copy, shard, member


def verify_lines(repo: Path) -> list[str]:
    """``shardkit verify --deep`` fails; the problem lines it prints (one per problem)."""
    result = CliRunner().invoke(main, ["verify", str(repo), "--deep", "-q"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    *problems, summary, advice = result.stdout.splitlines()
    assert summary.startswith("verified ") and summary.endswith(f": {len(problems)} problem(s)"), result.stdout
    assert advice.startswith("to repair: "), result.stdout
    return problems


def input_by_key(keep: bool) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """Each input row's file bytes and published fields, by key."""
    out = {}
    for row in INPUT_ROWS:
        fields = {k: v for k, v in row.items() if k != "file_name"}
        if keep:
            fields["source_path"] = row["file_name"]
        data = NOT_AN_IMAGE if row["file_name"] == BROKEN else (EXAMPLE_DIR / "images" / row["file_name"]).read_bytes()
        out[row["key"]] = (data, fields)
    return out


def stream_error(repo: Path, keep: bool) -> str:
    """The message of the error ``shardkit.stream`` raises on the test split; every row it yields
    first holds its input's bytes, values and types."""
    expected = input_by_key(keep)
    ds = shardkit.stream(str(repo), split="test").cast_column("image", datasets.Image(decode=False))
    with pytest.raises(ShardkitError) as caught:
        for row in ds:
            data, fields = expected[row["key"]]
            assert row.pop("image")["bytes"] == data
            assert row == fields and [type(v) for v in row.values()] == [type(fields[k]) for k in row]
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{repo}/"), message
    return message


# --- verify: a file that does not decode, in every format ------------------------------------------


@pytest.mark.parametrize("keep", [True, False], ids=["keep-source-path", "plain"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_deep_names_the_source_of_a_file_that_does_not_decode(
    packs: dict[tuple[str, bool], Path], fmt: str, keep: bool
) -> None:
    repo = packs[fmt, keep]
    shard, member, row = broken_row(repo)
    assert shard.startswith("data/test/") and shard.endswith(f".{fmt}")
    assert row.get("source_path") == (BROKEN if keep else None)
    [line] = verify_lines(repo)
    assert line.startswith(f"{shard}: {member}{note(keep)}: {NOT_AN_IMAGE_WORDS}"), line
    assert ("(source" in line) is keep
    result = CliRunner().invoke(main, ["verify", str(repo), "--deep", "-q", "--json"], catch_exceptions=False)
    [problem] = json.loads(result.stdout)["problems"]
    assert (problem["member"], problem["source"], problem["text"]) == (member, BROKEN if keep else None, line)
    assert json.loads(result.stdout)["advice"] == INPUT_ADVICE  # not to pack the same input again


#: What verify advises when every problem is a file that does not decode in a shard as packed.
INPUT_ADVICE = (
    "to repair: the shards are as packed (each has its recorded sha256), so the input gave these files so: replace"
    " or drop them in the input (the member is named by its row's key; --keep-source-path names the file), then"
    " re-run the pack command with --update (it rewrites the shards whose rows changed); `pack-shards --check-images`"
    " refuses such files before packing"
)


def test_a_file_broken_in_the_input_of_a_served_copy_is_repaired_locally_then_published(
    packs: dict[tuple[str, bool], Path],
) -> None:
    """Served over HTTP (read-only here): the same advice, packing into a local folder, then publishing it."""
    from tests.http_server import serve_directory

    with serve_directory(packs["parquet", False]) as (url, _):
        result = CliRunner().invoke(main, ["verify", url, "--deep", "-q", "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["advice"] == INPUT_ADVICE.replace(
        "re-run the pack command with --update (it rewrites the shards whose rows changed)",
        "re-run the pack into its local FOLDER with --update (it rewrites the shards whose rows changed), then"
        f" publish FOLDER again where {url.rstrip('/')} is served from",
    )


def test_a_file_broken_in_the_input_is_repaired_as_verify_advises(
    source_input: tuple[Path, Path], tmp_path: Path
) -> None:
    """Replace the input's broken file, re-run the pack with --update: verify --deep finds nothing."""
    shutil.copytree(source_input[0], tmp_path / "images")
    command = ("pack-shards", tmp_path / "images", source_input[1], "-o", tmp_path / "out", "-q", "--keep-source-path")
    assert run_cli(*command).returncode == 0
    before = CliRunner().invoke(main, ["verify", str(tmp_path / "out"), "--deep", "-q", "--json"])
    assert before.exit_code == 1 and json.loads(before.stdout)["advice"] == INPUT_ADVICE
    shutil.copyfile(EXAMPLE_DIR / "images" / BROKEN, tmp_path / "images" / BROKEN)
    repacked = run_cli(*command, "--update")
    assert repacked.returncode == 0, repacked.stderr
    after = CliRunner().invoke(main, ["verify", str(tmp_path / "out"), "--deep"])
    assert after.exit_code == 0, after.stdout
    rows = {row["key"]: row for row in shardkit.stream(str(tmp_path / "out"), split="test")}
    assert rows[BROKEN_KEY]["image"].tobytes()  # decodes


# --- a CRC mismatch: verify, shardkit.stream and the loading script ---------------------------------


@pytest.mark.parametrize("keep", [True, False], ids=["keep-source-path", "plain"])
@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_verify_and_stream_name_the_source_of_a_crc_mismatch(
    packs: dict[tuple[str, bool], Path], tmp_path: Path, fmt: str, keep: bool
) -> None:
    repo, shard, member = with_flipped_byte(packs[fmt, keep], tmp_path)
    lines = verify_lines(repo)
    assert lines == [
        f"{shard}: {member}{note(keep)}: {CRC_WORDS}",
        f"{shard}: {member}{note(keep)}: {NOT_AN_IMAGE_WORDS} (wrong extension, or not an image at all)",
    ]
    message = stream_error(repo, keep)
    assert message.startswith(f"{repo / shard}: CRC mismatch in member {member!r}{note(keep)} at offset "), message
    assert ("source" in message) is keep


def test_a_size_mismatch_in_the_zip_directory_names_the_source(
    packs: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    """Met after the last member: the row was read long before, its source is still known."""
    repo, shard, member = with_directory_size(packs["zip", True], tmp_path)
    size = len(NOT_AN_IMAGE)
    words = (
        f"the central directory entry of member {member!r}{note(True)} does not match the member:"
        f" its compressed size is {size + 1}, where shardkit writes {size}"
    )
    assert verify_lines(repo) == [
        f"{shard}: {member}{note(True)}: {NOT_AN_IMAGE_WORDS} (wrong extension, or not an image at all)",
        f"{shard}: not a sound shard: {words}",
    ]
    assert stream_error(repo, True) == f"{repo / shard}: {words}"


SCRIPT_DRIVER = r"""
import hashlib, json, sys
import datasets
from datasets import load_dataset

results = {}
for case, loader in json.loads(sys.argv[1]).items():
    rows, error = [], None
    try:
        ds = load_dataset(loader, split="test", streaming=True, trust_remote_code=True, cache_dir=sys.argv[2])
        for row in ds.cast_column("image", datasets.Image(decode=False)):
            rows.append([row["key"], hashlib.sha256(row["image"]["bytes"]).hexdigest(), row.get("source_path")])
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    results[case] = {"rows": rows, "error": error}
print(json.dumps(results))
"""


def test_the_loading_script_in_datasets_3_6_names_the_source(
    packs: dict[tuple[str, bool], Path], tmp_path: Path
) -> None:
    damaged = {keep: with_flipped_byte(packs["zip", keep], tmp_path / str(keep)) for keep in (True, False)}
    loaders = {str(keep): str(repo / "yfcc_mini_loader.py") for keep, (repo, _, _) in damaged.items()}
    directory, shard, member = with_directory_size(packs["zip", True], tmp_path / "directory")
    loaders["directory"] = str(directory / "yfcc_mini_loader.py")
    result = subprocess.run(
        [DS36_PYTHON, "-c", SCRIPT_DRIVER, json.dumps(loaders), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    for keep, (_, shard, member) in damaged.items():
        outcome = outcomes[str(keep)]
        assert outcome["error"] == f"ValueError: {shard}: CRC mismatch in member {member!r}{note(keep)}"
        expected = input_by_key(keep)
        for key, digest, source in outcome["rows"]:  # the rows before it: the input's bytes and source
            assert digest == hashlib.sha256(expected[key][0]).hexdigest()
            assert source == expected[key][1].get("source_path")
    assert outcomes["directory"]["error"] == (
        f"ValueError: {shard}: the central directory entry of member {member!r}{note(True)} does not match"
        " the member (zipfile would not read the bytes this script read)"
    )


# --- Parquet: a row naming another file, and a damaged page (no row known) ---------------------------


def with_row_path(repo: Path, dest: Path, new_path: str) -> tuple[Path, str]:
    """A copy whose shard holding BROKEN is written again (as pack writes it) with BROKEN's row
    naming ``new_path`` as its file; metadata/ unchanged, the manifest made to agree."""
    copy = copy_of(repo, dest)
    shard, _, _ = broken_row(copy)
    manifest = json.loads((copy / "shards.json").read_text())
    entry = next(s for s in manifest["shards"] if s["file"] == shard)
    files = {r["image"]["path"]: r["image"]["bytes"] for r in pq.read_table(copy / shard).to_pylist()}
    out = dest / "rewritten.parquet"
    with open(out, "wb") as f:
        writer = ParquetShardWriter(f, manifest["features"])
        for line in (copy / entry["metadata"]).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            data = files[row["file_name"]]
            if row["key"] == BROKEN_KEY:
                row["file_name"] = new_path
            writer.add(json.dumps(row), data)
        writer.close()
    set_shard(copy, shard, out.read_bytes())
    return copy, shard


@pytest.mark.parametrize("keep", [True, False], ids=["keep-source-path", "plain"])
def test_parquet_row_errors_name_the_source(packs: dict[tuple[str, bool], Path], tmp_path: Path, keep: bool) -> None:
    wrong = f"../{BROKEN_KEY}.jpg"
    repo, shard = with_row_path(packs["parquet", keep], tmp_path, wrong)
    metadata = shard.replace("data/", "metadata/").replace(".parquet", ".jsonl")
    lines = verify_lines(repo)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"{shard}: {wrong}{note(keep)}: row "), lines[0]
    assert lines[0].endswith(f": path differs from {metadata}"), lines[0]
    assert lines[1].startswith(f"{shard}: {wrong}{note(keep)}: {NOT_AN_IMAGE_WORDS}"), lines[1]
    message = stream_error(repo, keep)
    row = f"row 32 (key {BROKEN_KEY}){note(keep)}"
    assert message == (
        f"{repo / shard}: {row}: its member {wrong!r} is not where key {BROKEN_KEY} belongs:"
        " {key}{ext} (the path in the file column)"
    ), message


def test_a_damaged_parquet_page_names_no_source(packs: dict[tuple[str, bool], Path], tmp_path: Path) -> None:
    """A page checksum fails before any of its rows is read: no row, so no source, is known."""
    repo, shard, _ = with_flipped_byte(packs["parquet", True], tmp_path)
    lines = verify_lines(repo)  # the page, then what its unread rows leave unmatched
    # (the group holding the byte: groups hold about 1/64 of a shard since layout 5)
    assert re.match(rf"{re.escape(shard)}: not a sound shard: row group \d+, column image: ", lines[0]), lines
    assert not any("source" in line for line in lines), lines
    message = stream_error(repo, True)
    assert message.startswith(f"{repo / shard}: row group ") and "source" not in message, message


# --- the source is only ever shown, quoted -------------------------------------------------------------


def test_a_source_path_cannot_forge_a_line(tmp_path: Path) -> None:
    """A file name holding a newline and what looks like a verdict is refused on one line, quoted:
    it can reach no message, nor the published ``source_path`` column, raw (a crafted shard's
    source path is quoted the same way: test_source_note_quotes_and_bounds_what_it_shows)."""
    images = tmp_path / "images"
    images.mkdir()
    evil = "evil\nverified 1 shards: OK\x1b[2K.jpg"
    (images / evil).write_bytes(NOT_AN_IMAGE)
    (tmp_path / "meta.jsonl").write_text(json.dumps({"file_name": evil, "title": "x"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli("pack-shards", images, tmp_path / "meta.jsonl", "-o", out, "--keep-source-path")
    assert result.returncode == 1, result.stderr
    assert "\x1b" not in result.stderr and not any(ln.startswith("verified") for ln in result.stderr.splitlines())
    [line] = [ln for ln in result.stderr.splitlines() if "meta.jsonl:1:" in ln]
    assert repr(evil) in line, line
    assert not out.exists()


def test_source_note_quotes_and_bounds_what_it_shows() -> None:
    assert source_note("photos/2019/x.jpg") == " (source 'photos/2019/x.jpg')"
    assert source_note("a\nb\u2028c") == " (source 'a\\nb\\u2028c')"
    assert source_note(None) == source_note(17) == source_note({"path": "x"}) == ""
    long = "d/" * SOURCE_SHOWN_CHARS
    assert source_note(long) == f" (source {long[:SOURCE_SHOWN_CHARS]!r}...)"
