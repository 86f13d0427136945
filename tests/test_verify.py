"""``shardkit verify``: a sound OUT_DIR passes; each kind of damage is reported with file and member."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main
from shardkit.formats.parquet import encode_metadata_table
from shardkit.formats.zip import ZipWriter, iter_members
from tests.support.corpus import adding_up
from tests.test_hostile_shards import zip_bytes

Members = list[tuple[str, bytes]]


def verify(out_dir: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", str(out_dir), "-q", *args], catch_exceptions=False)
    return result.exit_code, result.stdout


def members_of(shard: Path) -> Members:
    with open(shard, "rb") as f:
        return [(m.name, m.data) for m in iter_members(f)]


def rewrite(shard: Path, change: Callable[[Members], Members]) -> None:
    """Rewrite a shard as a well-formed ZIP holding ``change(members)``."""
    members = change(members_of(shard))
    with open(shard, "wb") as f:
        writer = ZipWriter(f)
        for name, data in members:
            writer.add(name, data)
        writer.close()


def first_image(shard: Path) -> str:
    return members_of(shard)[1][0]


def test_a_sound_dataset_passes_and_deep_decodes_every_image(repo_dir: Path) -> None:
    code, out = verify(repo_dir)
    assert code == 0 and out.startswith("verified 16 shards, 300 rows,") and out.rstrip().endswith(": OK")
    code, out = verify(repo_dir, "--deep", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["problems"] == []
    assert report["decoded"] == report["rows"] == 300 and report["shards"] == 16


def _flip_byte_in_first_image(repo: Path) -> str:
    shard = repo / "data" / "3.zip"
    data = bytearray(shard.read_bytes())
    name = first_image(shard)
    in_metadata = data.index(name.encode())  # first met as a file_name in metadata.jsonl
    at = data.index(name.encode(), in_metadata + 1) + len(name) + 200  # then in its local header
    data[at] ^= 0xFF
    shard.write_bytes(bytes(data))
    return f"data/3.zip: {name}: CRC mismatch"


def _truncate(repo: Path) -> str:
    shard = repo / "data" / "3.zip"
    shard.write_bytes(shard.read_bytes()[:5000])
    return "data/3.zip: not a sound shard: truncated"


def _delete(repo: Path) -> str:
    (repo / "data" / "3.zip").unlink()
    return "data/3.zip: missing"


def _edit_outer_metadata(repo: Path) -> str:
    path = repo / "metadata" / "3.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"key"', b'"kee"', 1))
    return "metadata/3.jsonl: differs from the metadata.parquet inside data/3.zip: line 1"


def _stray(repo: Path) -> str:
    shutil.copy(repo / "data" / "3.zip", repo / "data" / "3-copy.zip")
    return "data/3-copy.zip: not named in shards.json"


def _row_without_member(repo: Path) -> str:
    shard = repo / "data" / "3.zip"
    name = first_image(shard)
    rewrite(shard, lambda ms: [m for m in ms if m[0] != name])
    return f"data/3.zip: {name}: row in metadata.parquet has no member"


def _member_without_row(repo: Path) -> str:
    shard = repo / "data" / "3.zip"
    name = first_image(shard)

    def drop_row(ms: Members) -> Members:  # a typed metadata.parquet of every row but that one
        outer = (repo / "metadata" / "3.jsonl").read_bytes().splitlines(keepends=True)
        features = json.loads((repo / "shards.json").read_text())["features"]
        table = encode_metadata_table(b"".join(line for line in outer if name.encode() not in line), features)
        return [("metadata.parquet", table), *ms[1:]]

    rewrite(shard, drop_row)
    return f"data/3.zip: {name}: member has no row in metadata.parquet"


def _metadata_not_first(repo: Path) -> str:
    rewrite(repo / "data" / "3.zip", lambda ms: [*ms[1:], ms[0]])
    return "data/3.zip: first member is"


def _unsafe_member_name(repo: Path) -> str:
    shard = repo / "data" / "3.zip"
    members = [(name.encode(), data) for name, data in members_of(shard)]
    shard.write_bytes(zip_bytes([*members, (b"../escape.jpg", b"x")]))  # laid out as shardkit lays out members
    return "data/3.zip: not a sound shard: unsafe member name '../escape.jpg'"


def _wrong_row_count(repo: Path) -> str:
    manifest = json.loads((repo / "shards.json").read_text())
    rows = manifest["shards"][3]["rows"]
    manifest["shards"][3]["rows"] = rows + 1
    (repo / "shards.json").write_text(json.dumps(adding_up(manifest)))  # only the shard can tell
    return f"data/3.zip: {rows} members, the manifest says {rows + 1} rows"


DAMAGE = {
    "flipped byte": _flip_byte_in_first_image,
    "truncated": _truncate,
    "missing shard": _delete,
    "metadata/ edited": _edit_outer_metadata,
    "stray shard": _stray,
    "row without member": _row_without_member,
    "member without row": _member_without_row,
    "metadata not first": _metadata_not_first,
    "unsafe member name": _unsafe_member_name,
    "wrong row count": _wrong_row_count,
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damage_is_reported_with_file_and_member(case: str, repo_dir: Path) -> None:
    expected = DAMAGE[case](repo_dir)
    code, out = verify(repo_dir)
    assert code == 1, out
    assert expected in out
    assert "problem(s)" in out.splitlines()[-2] and out.splitlines()[-1].startswith("to repair: ")
    code, out = verify(repo_dir, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and any(expected in p["text"] for p in report["problems"])


def test_deep_reports_a_member_that_does_not_decode(repo_dir: Path) -> None:
    shard = repo_dir / "data" / "3.zip"
    name = first_image(shard)
    rewrite(shard, lambda ms: [(n, b"not an image at all" if n == name else d) for n, d in ms])
    code, out = verify(repo_dir)  # sound ZIP, CRCs match its new bytes: only the hashes differ
    assert code == 1 and "data/3.zip: sha256 differs from the manifest's" in out
    code, out = verify(repo_dir, "--deep")
    assert code == 1 and f"data/3.zip: {name}: is not an image Pillow can read" in out


def test_verify_without_a_manifest_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(tmp_path)])
    assert result.exit_code == 2 and "has no shards.json: nothing to verify" in result.stderr


def test_metadata_table_missing_stale_or_damaged_is_a_problem(repo_dir: Path, tmp_path: Path) -> None:
    """metadata.parquet must hold every shard's rows as the manifest records them, value for value."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = repo_dir / "metadata.parquet"
    good = table.read_bytes()
    source = pq.ParquetFile(table)
    assert source.num_row_groups == 1 and source.schema_arrow.names[:3] == ["__shard__", "file_name", "key"]
    schema = source.schema_arrow
    original = source.read().to_pylist()

    def rewrite(change_first_title: bool, drop_last_row: bool) -> None:
        rows = [dict(row) for row in original]
        if change_first_title:
            rows[0]["title"] = "not what was packed"
        if drop_last_row:
            rows.pop()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), table)

    rewrite(change_first_title=True, drop_last_row=False)  # same keys, one value changed
    code, out = verify(repo_dir)
    assert code == 1 and "metadata.parquet: sha256 differs from the manifest's" in out

    rewrite(change_first_title=False, drop_last_row=True)  # an older or edited table
    code, out = verify(repo_dir)
    assert code == 1 and "metadata.parquet: " in out and "rows of data/" in out

    table.write_bytes(good[: len(good) // 2])
    code, out = verify(repo_dir)
    assert code == 1 and "metadata.parquet: cannot be read as Parquet" in out

    table.unlink()
    code, out = verify(repo_dir)
    assert code == 1 and "metadata.parquet: missing" in out

    table.write_bytes(good)
    assert verify(repo_dir)[0] == 0
