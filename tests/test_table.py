"""``metadata.parquet``'s row groups hold several shards' rows, and a shard's rows may span two:
the check follows the rows, not the row groups, and still catches a table that is not the
manifest's shards in order (tables written a row group a shard, before, still pass)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shardkit import table as table_module
from shardkit.table import table_problems, write_metadata_table

FEATURES = [{"name": "image", "dtype": "image"}, {"name": "key", "dtype": "string"}, {"name": "n", "dtype": "int64"}]
ROWS = {"data/0.zip": 3, "data/1.zip": 7, "data/2.zip": 1, "data/3.zip": 5}


def lines(shard: str, rows: int) -> bytes:
    stem = shard[len("data/") : -len(".zip")]
    return b"".join(
        json.dumps({"file_name": f"images/{stem}{i}.jpg", "key": f"{stem}{i:03d}", "n": i}).encode() + b"\n"
        for i in range(rows)
    )


def manifest_rows(counts: dict[str, int]) -> list[tuple[str, int, str, str]]:
    return [(shard, n, f"{shard[5:-4]}000", f"{shard[5:-4]}{n - 1:03d}") for shard, n in counts.items()]


def written(tmp_path: Path, counts: dict[str, int], name: str = "metadata.parquet") -> Path:
    path = tmp_path / name
    write_metadata_table(str(path), ((shard, lines(shard, n)) for shard, n in counts.items()), FEATURES)
    return path


def problems(path: Path, counts: dict[str, int]) -> list[str]:
    with path.open("rb") as f:
        return table_problems(f, manifest_rows(counts))


def group_rows(path: Path) -> list[int]:
    table = pq.ParquetFile(path)
    return [table.metadata.row_group(i).num_rows for i in range(table.num_row_groups)]


@pytest.mark.parametrize("parse_bytes", [1, 1 << 20], ids=["a line a parse", "every shard in one parse"])
def test_row_groups_hold_several_shards_and_a_shard_spans_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parse_bytes: int
) -> None:
    monkeypatch.setattr(table_module, "ROWS_PER_GROUP", 4)
    monkeypatch.setattr(table_module, "PARSE_BYTES", parse_bytes)
    path = written(tmp_path, ROWS)
    # A shard a parse: 3 rows held; with data/1.zip's 7, two whole groups and 2 rows held; with
    # data/2.zip's and data/3.zip's, two more. Every group whole, data/1.zip's rows in three.
    assert group_rows(path) == [4, 4, 4, 4]
    rows = pq.read_table(path).to_pylist()
    assert [(r["__shard__"], r["key"], r["n"]) for r in rows] == [
        (shard, f"{shard[5:-4]}{i:03d}", i) for shard, n in ROWS.items() for i in range(n)
    ]
    assert problems(path, ROWS) == []


def test_a_shard_larger_than_a_parse_is_parsed_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's lines are cut into blocks of whole lines of about PARSE_BYTES: the parse of a
    shard of a million rows is bounded, not all its lines at once."""
    parsed: list[bytes] = []
    parse = table_module.metadata_lines_table

    def recorded(block: bytes, schema: object) -> object:
        parsed.append(block)
        return parse(block, schema)  # type: ignore[arg-type]

    monkeypatch.setattr(table_module, "metadata_lines_table", recorded)
    monkeypatch.setattr(table_module, "PARSE_BYTES", 150)  # two lines or so
    counts = {"data/0.zip": 2, "data/1.zip": 40, "data/2.zip": 1}
    path = written(tmp_path, counts)
    longest = max(len(line) + 1 for shard, n in counts.items() for line in lines(shard, n).splitlines())
    assert len(parsed) > 10 and all(block.endswith(b"\n") for block in parsed)
    assert max(map(len, parsed)) < 150 + longest
    assert b"".join(parsed) == b"".join(lines(shard, n) for shard, n in counts.items())
    rows = pq.read_table(path).to_pylist()
    assert [(r["__shard__"], r["file_name"], r["key"], r["n"]) for r in rows] == [
        (shard, f"images/{shard[5:-4]}{i}.jpg", f"{shard[5:-4]}{i:03d}", i)
        for shard, n in counts.items()
        for i in range(n)
    ]
    assert all(type(r["n"]) is int and type(r["key"]) is str for r in rows)
    assert problems(path, counts) == []


def test_wide_rows_make_row_groups_of_fewer_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "GROUP_BYTES", 200)  # a few rows' worth
    monkeypatch.setattr(table_module, "PARSE_BYTES", 1)
    path = written(tmp_path, ROWS)
    sizes = group_rows(path)
    assert sum(sizes) == 16 and max(sizes) < 16 and len(sizes) > 2, sizes
    assert problems(path, ROWS) == []


def test_a_table_written_a_row_group_a_shard_still_passes(tmp_path: Path) -> None:
    """As shardkit wrote it before the row groups of ROWS_PER_GROUP rows."""
    rows = pq.read_table(written(tmp_path, ROWS))
    old = tmp_path / "old.parquet"
    with pq.ParquetWriter(old, rows.schema) as writer:
        start = 0
        for n in ROWS.values():
            writer.write_table(rows.slice(start, n), row_group_size=n)
            start += n
    assert group_rows(old) == list(ROWS.values())
    assert problems(old, ROWS) == []


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({**ROWS, "data/1.zip": 6}, "7 rows of data/1.zip, the manifest says 6"),
        (
            {"data/0.zip": 3, "data/2.zip": 1, "data/1.zip": 7, "data/3.zip": 5},
            "rows of data/1.zip where the manifest has data/2.zip",
        ),
        ({**ROWS, "data/4.zip": 2}, "it ends before the rows of data/4.zip"),
        (
            {k: v for k, v in ROWS.items() if k != "data/3.zip"},
            "it holds rows of data/3.zip, after the manifest's last shard",
        ),
    ],
)
def test_a_table_that_is_not_the_manifests_shards_in_order_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: dict[str, int], expected: str
) -> None:
    monkeypatch.setattr(table_module, "ROWS_PER_GROUP", 4)
    found = problems(written(tmp_path, ROWS), manifest)
    assert len(found) == 1 and expected in found[0], found


def test_a_shards_key_range_is_checked_across_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "ROWS_PER_GROUP", 4)
    path = written(tmp_path, ROWS)
    manifest = manifest_rows(ROWS)
    manifest[1] = ("data/1.zip", 7, "1000", "1005")  # its last row is in the next row group
    with path.open("rb") as f:
        found = table_problems(f, manifest)
    assert found == ["the rows of data/1.zip run 1000..1006, the manifest says 1000..1005"]
    assert table_problems(io.BytesIO(b"PAR1 not parquet"), manifest)[0].startswith("cannot be read as Parquet")
