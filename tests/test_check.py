"""The check phase in byte ranges (one task per range) gives exactly the verdicts of one pass."""

from __future__ import annotations

import itertools
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.check import MIN_SPLIT_BYTES, plan_ranges
from shardkit.errors import InputErrors
from shardkit.pack import PackConfig, pack
from shardkit.schema import SchemaTracker
from tests.support.corpus import Corpus, tree_bytes, write_jsonl

# --- the schema argument, directly: per-range trackers merged in order = one tracker -------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-1, 1), st.sampled_from(["a", "b"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["p", "q"]), inner)),
    max_leaves=4,
)
rows_strategy = st.lists(st.dictionaries(st.sampled_from(["x", "y", "z"]), values, max_size=3), max_size=12)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(rows_strategy, st.lists(st.integers(0, 12), max_size=3))
def test_ranges_that_agree_accept_exactly_the_rows_one_pass_accepts(
    rows: list[dict[str, Any]], cuts: list[int]
) -> None:
    one_pass = SchemaTracker()
    accepted = {i for i, row in enumerate(rows) if one_pass.check(row, i + 1) is None}

    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    merged = SchemaTracker()
    agree = True
    range_accepted: set[int] = set()
    for lo, hi in itertools.pairwise(bounds):
        tracker = SchemaTracker()
        range_accepted |= {i for i in range(lo, hi) if tracker.check(rows[i], i + 1) is None}
        agree = agree and merged.absorb(tracker)
    # When every range agrees with the ranges before it, the verdicts and the types are one pass's.
    # (When they do not, a row a range accepted may have swayed its later verdicts: the pack
    # then checks the file again in one pass.)
    if agree:
        assert range_accepted == accepted
        assert merged.features_yaml("image", "image") == one_pass.features_yaml("image", "image")


# --- ranges of a real file --------------------------------------------------------------------------


def test_ranges_cover_the_file_in_whole_lines_with_their_line_numbers(tmp_path: Path) -> None:
    lines = [json.dumps({"file_name": f"{i}.jpg", "pad": "x" * (i % 37)}) for i in range(3000)]
    lines[10] = ""  # blank lines count as lines
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = path.read_bytes()
    ranges = plan_ranges(str(path), 4096)
    assert len(ranges) > 10 and ranges[0][:1] == (0,) and ranges[-1][1] is None
    for (start, end, first_line), following in zip(ranges, [*ranges[1:], None], strict=True):
        assert start == 0 or data[start - 1 : start] == b"\n"
        assert first_line == data[:start].count(b"\n") + 1
        if following is not None:
            assert end == following[0]
    assert plan_ranges(str(path), len(data)) == [(0, None, 1)]  # under two ranges: one pass


def _messy_input(corpus: Corpus, n: int) -> Path:
    """Every kind of problem, spread so that ranges of a few KB each see some of them."""
    lines: list[Any] = []
    for i, row in enumerate(corpus.rows):
        row = dict(row)
        row["score"] = None if i < n // 3 else (i if i % 2 else i / 2)  # null, then ints and floats
        row["meta"] = {"a": i} if i % 3 else {"b": str(i)}  # struct fields first seen in several ranges
        lines.append(row)
    lines.insert(0, "\ufeff" + json.dumps(lines.pop(0)))  # a byte order mark
    lines[40] = "{not json"
    lines[90] = ""
    lines[130] = {**corpus.rows[7]}  # the same file (and key) again, far from the first
    lines[170] = {"file_name": "missing.jpg", "key": "ab" * 8}
    lines[210] = {**corpus.rows[11], "file_name": "./" + corpus.rows[11]["file_name"], "key": "cd" * 8}
    lines[250] = ["a list"]
    return write_jsonl(corpus.root / "messy.jsonl", lines)


def _pack(corpus: Corpus, meta: Path, out: Path, **kw: Any) -> Any:
    config = PackConfig(str(corpus.images), str(meta), str(out), on_error="skip", **kw)
    return pack(config)


def test_checking_in_ranges_on_two_processes_gives_one_pass_output_and_rejects(
    make_corpus: Any, tmp_path: Path, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="shardkit.packstage")
    corpus: Corpus = make_corpus(300, with_keys=True)
    meta = _messy_input(corpus, 300)
    one = _pack(corpus, meta, tmp_path / "one" / "out", jobs=1)
    ranged = _pack(corpus, meta, tmp_path / "ranged" / "out", jobs=2, check_range_bytes=2048)
    assert one.rejected_rows == ranged.rejected_rows == 5
    assert (one.rows, one.shards) == (ranged.rows, ranged.shards)
    assert tree_bytes(tmp_path / "one" / "out") == tree_bytes(tmp_path / "ranged" / "out")
    rejects = [Path(s.rejects_file).read_text() for s in (one, ranged)]  # type: ignore[arg-type]
    assert rejects[0] == rejects[1]
    # Every kind of problem (rows, files named twice, duplicate keys), in input order.
    assert [json.loads(r)["line"] for r in rejects[0].splitlines()] == [41, 131, 171, 211, 251]
    assert "again in one pass" not in caplog.text  # the ranges' verdicts stood


def test_type_conflicts_are_reported_as_one_pass_reports_them(make_corpus: Any, tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="shardkit.packstage")
    corpus: Corpus = make_corpus(200)
    rows = [dict(r) for r in corpus.rows]
    rows[180]["label"] = "five"  # integers everywhere else
    meta = write_jsonl(corpus.root / "conflict.jsonl", rows)
    errors = []
    for jobs, range_bytes in ((1, None), (2, 1024)):
        try:
            pack(
                PackConfig(
                    str(corpus.images),
                    str(meta),
                    str(tmp_path / f"out{jobs}"),
                    jobs=jobs,
                    check_range_bytes=range_bytes,
                )
            )
        except InputErrors as exc:
            errors.append(str(exc))
    assert len(errors) == 2 and errors[0] == errors[1]
    assert "conflict.jsonl:181: column 'label' is a string here but an integer on line 1;" in errors[0]
    assert not (tmp_path / "out2" / "data").exists()
    assert "checking it again in one pass" in caplog.text


def test_a_file_is_split_by_its_size_alone(tmp_path: Path) -> None:
    """Whatever --jobs is and whether workers run: one pass under 2 MiB, or under 8 MiB with
    keys; 1 MiB ranges without keys; and given range bytes cut a file into whole-line ranges."""

    def meta(name: str, rows: int, key: bool, pad: int = 1000) -> str:
        lines = [
            {"file_name": f"{i}.jpg", **({"key": f"{i:032x}"} if key else {}), "x": "y" * pad} for i in range(rows)
        ]
        return str(write_jsonl(tmp_path / name, lines))

    small = meta("small.jsonl", 1000, True)  # about 1 MB: one pass
    keyed = meta("keyed.jsonl", 3000, True)  # about 3 MB: one pass by the file alone
    unkeyed = meta("unkeyed.jsonl", 3000, False)  # 1 MiB ranges by the file alone: three
    large = meta("large.jsonl", 9000, True)  # over MIN_SPLIT_BYTES: split by the file alone
    assert os.path.getsize(large) > MIN_SPLIT_BYTES
    assert len(plan_ranges(small)) == 1
    assert len(plan_ranges(keyed)) == 1
    parities = set()
    for pad in (1000, 1001):  # an even and an odd number of bytes
        keyed = meta("keyed.jsonl", 3001, True, pad)
        size = os.path.getsize(keyed)
        parities.add(size % 2)
        for parts in (2, 3, 4):
            assert len(plan_ranges(keyed, size // parts)) == parts, (size, parts)
    assert parities == {0, 1}
    thirds = plan_ranges(keyed, os.path.getsize(keyed) // 3)
    assert len(thirds) == 3 and thirds[0][:2] == (0, thirds[1][0]) and thirds[2][1] is None
    assert len(plan_ranges(unkeyed)) == 3
    assert len(plan_ranges(unkeyed, os.path.getsize(unkeyed) // 2)) == 2
    assert len(plan_ranges(large)) > 1
