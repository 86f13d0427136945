"""The rules every row a reader yields is held to (shardkit.rowcheck), value by value: what each
feature's values may be, keys, member names, and the manifest's key ranges. The readers' use of
them, on crafted shards of each format, is in tests/test_hostile_shards.py."""

from __future__ import annotations

from typing import Any

import pytest

from shardkit.formats import ShardFormatError
from shardkit.manifest import Manifest, ManifestShard, Options
from shardkit.rowcheck import DatasetRows

KEY = "3" + "0" * 31
FEATURES: list[dict[str, Any]] = [
    {"name": "image", "dtype": "image"},
    {"name": "key", "dtype": "string"},
    {"name": "caption", "dtype": "string"},
    {"name": "n", "dtype": "int64"},
    {"name": "score", "dtype": "float64"},
    {"name": "ok", "dtype": "bool"},
    {"name": "label", "dtype": {"class_label": {"names": {"0": "cat", "1": "dog"}}}},
    {"name": "tags", "list": "string"},
    {"name": "box", "struct": [{"name": "w", "dtype": "int64"}, {"name": "h", "dtype": "int64"}]},
    {"name": "parts", "list": [{"name": "name", "dtype": "string"}]},
]


def _shard(file: str, first: str, last: str) -> ManifestShard:
    return ManifestShard(
        file, file.replace("data/", "metadata/").replace(".tar", ".jsonl"), 2, 100, "", "", first, last
    )


def _manifest(layout: int | None = 4, shards: list[ManifestShard] | None = None) -> Manifest:
    return Manifest(
        options=Options(1, 10**9, 5 * 10**8, "tar"),
        input_fingerprint="",
        modality="image",
        features=FEATURES,
        shards=shards or [_shard("data/3.tar", KEY, "3" + "f" * 31), _shard("data/4.tar", "4" + "0" * 31, "4" * 32)],
        layout=layout,
    )


def _row(**fields: Any) -> dict[str, Any]:
    row = {"key": KEY, "image": {"bytes": b"x", "path": f"{KEY}.jpg"}, "label": 1} | fields
    return {k: v for k, v in row.items() if v is not ...}


def _problem(row: dict[str, Any], layout: int | None = 4) -> str | None:
    return DatasetRows(_manifest(layout)).shard("data/3.tar", "data/3.tar", file_column="image").problem(row)


@pytest.mark.parametrize(
    "row",
    [
        _row(),
        _row(caption=None, n=None, score=None, ok=None, tags=None, box=None, parts=None),  # null fits all but a label
        _row(caption="x", n=-(2**63), score=-0.0, ok=False, label=-1, tags=[], box={"w": 1}, parts=[{"name": "a"}]),
        _row(n=2**63 - 1, score=1e308, tags=["a", None], box={"w": None, "h": 2}),
    ],
)
def test_rows_shardkit_writes_agree(row: dict[str, Any]) -> None:
    assert _problem(row) is None


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (_row(key=...), "no key"),
        (_row(key=KEY.upper().replace("3", "3A", 1)[:32]), "is not 8 to 128 lowercase hex digits"),
        (_row(caption=5), "column 'caption': an integer where the features declare string"),
        (_row(n=True), "column 'n': a boolean where the features declare int64"),
        (_row(n=1.0), "column 'n': a number where the features declare int64"),
        (_row(n=2**63), "column 'n': 9223372036854775808, outside the 64-bit integers"),
        (_row(n=-(2**63) - 1), "outside the 64-bit integers"),
        (_row(score=2), "column 'score': an integer where the features declare float64"),
        (_row(score=float("nan")), "column 'score': nan, which shardkit never packs"),
        (_row(score=float("-inf")), "column 'score': -inf, which shardkit never packs"),
        (_row(ok=1), "column 'ok': an integer where the features declare bool"),
        (_row(label=2), "column 'label': class label 2, not -1 (no label) or one of the 2 names' indexes"),
        (_row(label=-2), "class label -2"),
        (_row(label=None), "column 'label': null where the features declare a class label"),
        (_row(label="dog"), "column 'label': a string where the features declare a class label"),
        (_row(tags="a"), "column 'tags': a string where the features declare a list"),
        (_row(tags=["a", 1]), "column 'tags': item 1: an integer where the features declare string"),
        (_row(box={"w": 1, "d": 2}), "column 'box': field 'd', which the features do not declare"),
        (_row(box={"w": "1"}), "column 'box': field 'w': a string where the features declare int64"),
        (_row(box=[1]), "column 'box': a list where the features declare an object"),
        (_row(parts=[{"name": "a", "x": 1}]), "column 'parts': item 0: field 'x', which the features do not declare"),
        (_row(extra=1), "column 'extra', which the features do not declare"),
        (_row(file_name="x.jpg"), "column 'file_name', which the features do not declare"),
        (_row(image={"bytes": b"x", "path": f"{KEY}.JPG"}), "is not where key"),
        (_row(image={"bytes": b"x", "path": f"{KEY}"}), "is not where key"),
        (_row(image={"bytes": b"x", "path": None}), "its file has no name"),
    ],
)
def test_rows_that_do_not_agree_are_named(row: dict[str, Any], problem: str) -> None:
    found = _problem(row)
    assert found is not None and problem in found, found


def test_whole_numbers_in_a_float_column_agree_in_manifests_before_layout_4() -> None:
    """Layout 1 published a float column's whole numbers as 2; manifests before layout 4 do not
    say their layout."""
    assert _problem(_row(score=2), layout=None) is None
    assert "a boolean" in str(_problem(_row(score=True), layout=None))


def test_keys_must_rise_within_the_shards_recorded_range() -> None:
    check = DatasetRows(_manifest()).shard("data/3.tar", "data/3.tar", file_column="image")
    second = "3" + "0" * 30 + "1"
    assert check.problem(_row()) is None
    assert "is not above the previous row's" in str(check.problem(_row()))
    assert check.problem(_row(key=second, image={"bytes": b"", "path": f"{second}.png"})) is None
    outside = "4" + "0" * 31
    assert "is not in this shard's prefix '3'" in str(check.problem(_row(key=outside)))
    short = "3" + "0" * 7  # in the prefix, below the recorded first key
    assert "is not within the shard's keys in shards.json" in str(check.problem(_row(key=short)))


def test_a_shard_the_manifest_does_not_name_is_refused() -> None:
    with pytest.raises(ShardFormatError, match=r"^data/9.tar: not a shard shards.json names$"):
        DatasetRows(_manifest()).shard("data/9.tar", "data/9.tar")
