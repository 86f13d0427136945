"""Column types: the float retyper that publishes a float64 column's whole numbers as floats."""

from __future__ import annotations

import json

from shardkit.schema import SchemaTracker, float_retyper


def _features(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    tracker = SchemaTracker()
    for line, row in enumerate(rows, 1):
        assert tracker.check(row, line) is None
    return tracker.features_yaml("image", "image")


def test_whole_numbers_of_a_float_column_are_published_as_floats_at_every_depth() -> None:
    rows = [
        {"score": 2, "count": 3, "box": {"x": 1, "label": "a"}, "points": [1, 2], "parts": [{"w": 1}]},
        {"score": 2.5, "count": 4, "box": {"x": 0.5, "label": "b"}, "points": [0.5], "parts": [{"w": 0.25}]},
    ]
    retype = float_retyper(_features(rows))
    assert retype is not None
    line = (
        '{"file_name":"a.jpg","key":"0011","score":2,"count":3,"box":{"x":1,"label":"a"},'
        '"points":[1,2],"parts":[{"w":1}]}'
    )
    got = retype(line)
    assert got == (
        '{"file_name":"a.jpg","key":"0011","score":2.0,"count":3,"box":{"x":1.0,"label":"a"},'
        '"points":[1.0,2.0],"parts":[{"w":1.0}]}'
    )
    assert type(json.loads(got)["count"]) is int  # an int64 column stays integers


def test_lines_that_need_nothing_come_back_unchanged() -> None:
    retype = float_retyper(_features([{"score": 2.5, "note": "x"}]))
    assert retype is not None
    for line in ('{"key":"00aa","score":2.5,"note":"\\"score\\":2,"}', '{"key":"00aa","score":null,"note":null}'):
        assert retype(line) == line
    assert retype('{"key":"00aa","note":"x","score":-7}') == '{"key":"00aa","note":"x","score":-7.0}'
    assert float_retyper(_features([{"n": 1, "s": "x", "b": True}])) is None  # no float column: nothing to do
