"""Staging: external sort in bounded runs, multi-round merge, duplicates found across runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from shardkit.metadata import SourceRecord, metadata_line
from shardkit.staging import (
    RunWriter,
    StagedEntries,
    format_staged,
    iter_staged,
    json_string,
    merge_runs,
    parse_staged,
)


def record(key: str, line: int) -> SourceRecord:
    return SourceRecord(
        line=line,
        key=key,
        source=f"dir/ä {line}.jpg",
        size=100 + line,
        ext=".jpg",
        fields={"caption": f"tab\there, newline\nthere {line}"},
    )


def test_many_small_runs_merge_in_rounds_sorted_and_deduplicated(tmp_path: Path) -> None:
    rng = random.Random(7)
    keys = [f"{rng.getrandbits(64):016x}" for _ in range(2000)]
    lines = list(range(1, len(keys) + 1))
    records = [record(k, n) for k, n in zip(keys, lines, strict=True)]
    dup_of = records[10]
    records.append(record(dup_of.key, len(records) + 1))  # a duplicate, far from the original
    rng.shuffle(records)
    writer = RunWriter(str(tmp_path), run_bytes=4000)  # ~20 rows a run: ~100 runs
    for r in records:
        writer.add(format_staged(r, metadata_line(r)))
    runs = writer.finish()
    assert len(runs) > 64
    result = merge_runs(runs, str(tmp_path / "sorted.tsv"), fan_in=4)  # forces several rounds
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sorted.tsv"]  # runs consumed
    staged = list(iter_staged(result.path))
    assert [s.key for s in staged] == sorted(set(keys))
    assert result.rows == len(staged) == 2000
    assert result.total_cost == sum(e.cost for e in StagedEntries(result.path))
    assert result.duplicate_count == 1
    (dup,) = result.duplicates
    assert dup.line == len(keys) + 1 and f"first used on line {dup_of.line}" in dup.message
    first = next(s for s in staged if s.key == dup_of.key)
    assert first.line == dup_of.line and first.source == dup_of.source
    # Offsets let a writer seek straight to a shard's first row.
    middle = staged[1234]
    assert next(iter_staged(result.path, middle.offset, 1)) == middle


def test_fingerprint_ignores_row_order_but_not_content(tmp_path: Path) -> None:
    rows = [record(f"{i:016x}", i + 1) for i in range(50)]

    def fingerprint(records: list[SourceRecord], name: str) -> str:
        d = tmp_path / name
        d.mkdir()
        writer = RunWriter(str(d), run_bytes=1000)
        for r in records:
            writer.add(format_staged(r, metadata_line(r)))
        return merge_runs(writer.finish(), str(d / "sorted.tsv")).fingerprint

    base = fingerprint(rows, "a")
    assert fingerprint(list(reversed(rows)), "b") == base  # the same rows in another order
    renumbered = [SourceRecord(51 - r.line, r.key, r.source, r.size, r.ext, r.fields) for r in reversed(rows)]
    assert fingerprint(renumbered, "c") == base
    changed = [*rows[:-1], SourceRecord(50, rows[-1].key, rows[-1].source, 1, ".jpg", rows[-1].fields)]
    assert fingerprint(changed, "d") != base


@given(st.text())
def test_json_string_is_json_dumps_for_every_text(text: str) -> None:
    # Staged lines feed the input fingerprint: the fast path must not change one byte.
    assert json_string(text) == json.dumps(text, ensure_ascii=False)


@given(st.text(min_size=1))
def test_a_staged_file_name_reads_back_as_written(name: str) -> None:
    # The reader takes the name between the quotes as is when it has no backslash.
    staged = format_staged(SourceRecord(7, "ab" * 8, name, 10, ".jpg", {}), '{"k":1}')
    assert parse_staged(staged).source == name
