"""Staging: external sort in bounded runs, multi-round merge, duplicates found across runs."""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import InputProblem
from shardkit.metadata import SourceRecord, metadata_line
from shardkit.staging import (
    FileRef,
    RunWriter,
    StagedEntries,
    StagedRow,
    UnstageableRow,
    iter_keys_and_extensions,
    iter_published_lines,
    iter_staged,
    json_string,
    merge_runs,
    normal_path,
    regroup,
    repeated_files,
    rows_sha256,
)


def _unexpected(problem: InputProblem) -> None:
    raise AssertionError(f"no problem expected: {problem}")


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
        writer.add(StagedRow.of(r, metadata_line(r)).to_line())
    runs = writer.finish()
    assert len(runs) > 64
    duplicates: list[InputProblem] = []
    result = merge_runs(runs, str(tmp_path / "sorted.tsv"), report=duplicates.append, fan_in=4)  # several rounds
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sorted.tsv"]  # runs consumed
    staged = list(iter_staged(result.path))
    assert [s.key for s in staged] == sorted(set(keys))
    assert result.rows == len(staged) == 2000
    assert result.total_cost == sum(e.cost for e in StagedEntries(result.path))
    (dup,) = duplicates
    assert dup.line == len(keys) + 1 and f"first used on line {dup_of.line}" in dup.message
    first = next(s for s in staged if s.key == dup_of.key)
    assert first.line == dup_of.line and first.source == dup_of.source
    # Offsets let a writer seek straight to a shard's first row.
    middle = staged[1234]
    assert next(iter_staged(result.path, middle.offset, 1)) == middle
    # A shard's member names need only each row's key and extension: the same as the full rows'.
    pairs = list(iter_keys_and_extensions(result.path, middle.offset, 500))
    assert pairs == [(s.key, s.ext) for s in staged[1234:1734]] and all(type(x) is str for p in pairs for x in p)


def test_fingerprint_ignores_row_order_but_not_content(tmp_path: Path) -> None:
    rows = [record(f"{i:016x}", i + 1) for i in range(50)]

    def fingerprint(records: list[SourceRecord], name: str) -> str:
        d = tmp_path / name
        d.mkdir()
        writer = RunWriter(str(d), run_bytes=1000)
        for r in records:
            writer.add(StagedRow.of(r, metadata_line(r)).to_line())
        return merge_runs(writer.finish(), str(d / "sorted.tsv"), report=_unexpected).fingerprint

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
    staged = StagedRow.of(SourceRecord(7, "ab" * 8, name, 10, ".jpg", {}), '{"k":1}').to_line()
    assert StagedRow.from_line(staged).source == name


names = st.text(min_size=1)


@given(
    name=names,
    stamp=st.from_regex(r"\A[0-9]{1,6}:[0-9]{1,19}:[0-9]{1,19}\Z") | st.just(""),
    content_keyed=st.booleans(),
    split=st.from_regex(r"\A[A-Za-z0-9_]{0,8}\Z"),
    fields=st.dictionaries(st.text(), st.text() | st.integers(), max_size=3),
    crc=st.integers(-1, 2**32 - 1),
)
def test_a_staged_row_reads_back_from_its_line(
    name: str, stamp: str, content_keyed: bool, split: str, fields: dict[str, object], crc: int
) -> None:
    published = json.dumps(fields, ensure_ascii=False)
    crc = crc if content_keyed else -1  # (a row with a key of its own has no CRC staged)
    row = StagedRow("0123abcd" * 2, 42, 1234, ".JPG", name, published, 0, stamp, content_keyed, split, crc=crc)
    line = row.to_line()
    assert line.endswith(f"\t{published}\n") and line.count("\n") == 1
    assert StagedRow.from_line(line) == row
    assert StagedRow.from_line(line, 99) == StagedRow(
        row.key, 42, 1234, ".JPG", name, published, 99, stamp, content_keyed, split, crc=crc
    )
    # The partial reads pick the same fields out of the line, as text or as bytes.
    assert StagedRow.fields(line)[0] == row.key and StagedRow.fields(line)[-1] == published + "\n"
    assert StagedRow.raw_fields(line.encode())[-1] == (published + "\n").encode()


def test_a_staged_row_is_its_record_with_the_published_line() -> None:
    record = SourceRecord(3, "ff" * 8, "a/b.png", 77, ".png", {"x": 1}, "77:1:2", content_keyed=True, split="test")
    row = StagedRow.of(record, '{"x":1}')
    assert row == StagedRow("ff" * 8, 3, 77, ".png", "a/b.png", '{"x":1}', 0, "77:1:2", True, "test")
    # Its line sorts by key, then by input line.
    assert row.to_line().startswith("ffffffffffffffff\t000000000003\t77\t.png\t77:1:2:h\ttest\t")
    # The check writes the same line straight from the record; so for the file-id line.
    assert StagedRow.line_of(record, '{"x":1}') == row.to_line()
    # A content key's line carries the CRC-32 of the bytes the check hashed (8 hex digits).
    hashed = replace(record, crc=0x1A2B)
    assert StagedRow.line_of(hashed, "{}").split("\t")[4] == "77:1:2:00001a2b:h"
    assert StagedRow.from_line(StagedRow.line_of(hashed, "{}")).crc == 0x1A2B
    assert FileRef.line_of(record, '{"x":1}') == FileRef.of(record, '{"x":1}').to_line()


@given(name=names, published=st.text().map(lambda t: json.dumps(t, ensure_ascii=False)))
def test_a_file_ref_reads_back_from_its_line(name: str, published: str) -> None:
    ref = FileRef(5, "00" * 8, name, published)
    line = ref.to_line()
    assert FileRef.from_line(line) == ref
    assert FileRef.fields(line)[2] == ref.key


def test_repeated_files_names_the_row_that_keeps_the_file(tmp_path: Path) -> None:
    def ref(line: int, key: str, source: str) -> FileRef:
        return FileRef(line, key, source, json.dumps({"n": line}))

    writer = RunWriter(str(tmp_path), run_bytes=60)  # a run or two per row
    refs = [
        ref(1, "a" * 16, "x/one.jpg"),
        ref(2, "b" * 16, "x//one.jpg"),  # the same file, another key: a repeat
        ref(3, "a" * 16, "x/one.jpg"),  # the same key: a duplicate key, not a repeat
        ref(4, "c" * 16, 'we"ird\\.jpg'),
        ref(5, "d" * 16, 'we"ird\\.jpg'),
    ]
    for r in reversed(refs):
        writer.add(r.to_line())
    problems: list[InputProblem] = []
    assert repeated_files(writer.finish(), report=problems.append) == {2, 5}
    first, second = sorted(problems, key=lambda p: p.line)
    assert first.line == 2 and first.raw == '{"n": 2}'
    assert "'x//one.jpg' is the same file as line 1 names ('x/one.jpg', key aaaaaaaaaaaaaaaa)" in first.message
    assert second.line == 5 and "line 4 names ('we\"ird\\\\.jpg'" in second.message


def test_duplicates_name_the_first_row_and_a_leak_between_splits(tmp_path: Path) -> None:
    key = "12" * 8
    rows = [
        SourceRecord(1, key, "a.jpg", 10, ".jpg", {}, content_keyed=True, split="train"),
        SourceRecord(2, key, "b.jpg", 10, ".jpg", {}, content_keyed=True, split="test"),
        SourceRecord(3, key, "./a.jpg", 10, ".jpg", {}, content_keyed=True, split="train"),
    ]
    writer = RunWriter(str(tmp_path))
    for r in rows:
        writer.add(StagedRow.of(r, metadata_line(r)).to_line())
    duplicates: list[InputProblem] = []
    result = merge_runs(writer.finish(), str(tmp_path / "sorted.tsv"), report=duplicates.append)
    assert result.rows == 1
    leak, again = duplicates
    assert leak.line == 2 and leak.message.startswith("file_name 'b.jpg' has the same bytes as 'a.jpg' on line 1")
    assert "(split 'test'; line 1 is in 'train': a leak between splits)" in leak.message
    assert again.line == 3 and again.message.startswith("file_name './a.jpg' is named again (first on line 1):")
    assert again.raw == metadata_line(rows[2])


def test_rows_sha256_is_of_what_is_published(tmp_path: Path) -> None:
    def sha(record: SourceRecord) -> str:
        path = tmp_path / "sorted.tsv"
        path.write_text(StagedRow.of(record, metadata_line(record)).to_line(), encoding="utf-8")
        return rows_sha256(str(path), 0, 1)

    base = record("ab" * 8, 1)
    assert sha(SourceRecord(9, base.key, base.source, base.size, base.ext, base.fields, stamp="1:2:3")) == sha(base)
    assert sha(SourceRecord(1, base.key, base.source, base.size, base.ext, base.fields, split="test")) != sha(base)
    assert sha(SourceRecord(1, base.key, "other.jpg", base.size, base.ext, base.fields)) != sha(base)


def test_fingerprint_and_rows_sha256_bytes_stay_as_they_were(tmp_path: Path) -> None:
    # Both are kept across runs (state.json, each shard's input_sha256 in shards.json): a change
    # in how a staged line is written must not change them, or every resume and update restarts.
    rows = [
        SourceRecord(2, "0a" * 8, 'x "y".jpg', 5, ".jpg", {"c": "é"}, "5:1:1", split="test"),
        SourceRecord(1, "0b" * 8, "z.png", 7, ".png", {}, "7:1:1", content_keyed=True),
    ]
    writer = RunWriter(str(tmp_path))
    for r in rows:
        writer.add(StagedRow.of(r, metadata_line(r)).to_line())
    result = merge_runs(writer.finish(), str(tmp_path / "sorted.tsv"), report=_unexpected)
    a, b = (f"{r.size}\t{r.ext}\t{json.dumps(r.source)}\t{metadata_line(r)}\n" for r in rows)
    expected = hashlib.sha256(f"split=test\t{a}{rows[0].key}{b}{rows[1].key}".encode())
    assert result.fingerprint == expected.hexdigest()
    published = f"{rows[0].key}\t5\t.jpg\ttest\t{json.dumps(rows[0].source)}\t{metadata_line(rows[0])}\n"
    assert rows_sha256(result.path, 0, 1, b"salt") == hashlib.sha256(b"salt" + published.encode()).hexdigest()


# --- no value a row can hold cuts a staged line --------------------------------------------------

#: Characters that end a line for some reader, or a field of a staged line, and characters that
#: only look like ASCII digits and letters.
LINE_BREAKERS = [
    "\n",
    "\r",
    "\t",
    "\x00",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\u0663",
    "\uff41",
]


@pytest.mark.parametrize("char", LINE_BREAKERS, ids=[repr(c) for c in LINE_BREAKERS])
def test_a_key_extension_or_split_that_could_cut_the_line_is_refused_not_written(char: str) -> None:
    good = SourceRecord(4, "0123abcd", "a.jpg", 5, ".jpg", {}, "5:1:1", split="train")
    assert StagedRow.line_of(good, "{}").count("\n") == 1
    for bad in (
        SourceRecord(4, f"0123abcd{char}", "a.jpg", 5, ".jpg", {}),
        SourceRecord(4, f"{char}0123abcd", "a.jpg", 5, ".jpg", {}),
        SourceRecord(4, "0123abcd", "a.jpg", 5, f".jp{char}g", {}),
        SourceRecord(4, "0123abcd", "a.jpg", 5, ".jpg", {}, split=f"train{char}"),
    ):
        with pytest.raises(UnstageableRow, match="holds a control character or a character that is not ASCII") as info:
            StagedRow.line_of(bad, "{}")
        assert "\n" not in str(info.value)  # (the message shows the fields with repr: one line)
        with pytest.raises(UnstageableRow):
            StagedRow.of(bad, "{}").to_line()
    with pytest.raises(UnstageableRow):
        FileRef.line_of(SourceRecord(4, f"0123abcd{char}", "a.jpg", 5, ".jpg", {}), "{}")


#: Text heavy in what trips line formats: separators, escapes, quotes, beyond the BMP.
hostile_text = st.text(alphabet=st.sampled_from([*LINE_BREAKERS, "\\", '"', "'", " ", "a", "\u00e4", "\U0001f600"]))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(hostile_text.filter(bool), st.dictionaries(hostile_text, hostile_text | st.integers(), max_size=3)),
        min_size=1,
        max_size=12,
    ),
    split=st.sampled_from(["", "train", "test"]),
)
def test_every_reader_of_staged_files_gets_each_row_back_whatever_its_text(
    rows: list[tuple[str, dict[str, object]]], split: str
) -> None:
    """Sources and published lines full of line and field separators, through runs, the merge,
    the regroup by split and every reader: each row comes back whole, one line each."""
    records = [
        SourceRecord(i + 1, f"{i:016x}", name, 10 + i, ".jpg", fields, "1:2:3", split=split)
        for i, (name, fields) in enumerate(rows)
    ]
    published = [metadata_line(r) for r in records]
    with tempfile.TemporaryDirectory() as folder:
        writer = RunWriter(folder, run_bytes=200)  # a few rows a run: the merge reads several
        Path(folder, "refs").mkdir()
        refs = RunWriter(f"{folder}/refs", run_bytes=200)
        for record, line in zip(records, published, strict=True):
            writer.add(StagedRow.line_of(record, line))
            refs.add(FileRef.line_of(record, line))
        # A row naming a file an earlier row names (the same normalized name) is a repeat, by line.
        first_named: dict[str, int] = {}
        repeats = {r.line for r in records if first_named.setdefault(normal_path(r.source), r.line) != r.line}
        reported: list[InputProblem] = []
        assert repeated_files(refs.finish(), report=reported.append) == repeats
        assert sorted(p.line for p in reported) == sorted(repeats)  # each repeat reported once
        merged = merge_runs(writer.finish(), f"{folder}/sorted.tsv", report=_unexpected)
        assert merged.rows == len(records)
        regrouped = regroup(merged.path, merged, report=_unexpected)
        assert [(s.name, s.rows) for s in regrouped.splits] == [(split or "train", len(records))]
        staged = list(iter_staged(merged.path))
        assert [(s.key, s.source, s.metadata_line, s.split) for s in staged] == [
            (r.key, r.source, line, r.split) for r, line in zip(records, published, strict=True)
        ]
        assert list(iter_published_lines(merged.path, 0, len(records))) == [f"{p}\n".encode() for p in published]
        assert [e.key for e in StagedEntries(merged.path)] == [r.key for r in records]
