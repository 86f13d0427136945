"""The planner: a pure function, tested on random size distributions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import (
    BY_SIZE,
    FIRST_BOUNDARY,
    SHARD_FIXED_BYTES,
    PlanEntry,
    boundary_after,
    key_ranges,
    plan_shards,
)


def entries_from(costs: list[int]) -> list[PlanEntry]:
    keys = sorted({hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(len(costs))})
    return [PlanEntry(k, c, offset=i) for i, (k, c) in enumerate(zip(keys, costs, strict=True))]


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[PlanEntry], int, int, int, int]:
    cap = draw(st.integers(2_000, 200_000))
    target = draw(st.integers(SHARD_FIXED_BYTES + 1, cap))
    # Mixtures: many small rows, a few near the cap, and everything between.
    largest = cap - SHARD_FIXED_BYTES
    cost = st.one_of(st.integers(1, 300), st.integers(1, largest), st.integers(max(1, largest - 50), largest))
    costs = draw(st.lists(cost, min_size=1, max_size=400))
    prefix_length = draw(st.integers(1, 2))
    max_rows = draw(st.integers(1, 500))
    return entries_from(costs), cap, target, prefix_length, max_rows


@settings(max_examples=300, deadline=None)
@given(plans())
def test_every_entry_lands_in_exactly_one_shard_under_the_cap(args: tuple[list[PlanEntry], int, int, int, int]) -> None:
    entries, cap, target, prefix_length, max_rows = args
    shards = plan_shards(
        entries, prefix_length=prefix_length, max_shard_bytes=cap, target_shard_bytes=target, max_rows=max_rows
    )
    # No shard over the cap or the member limit; sizes are exactly the sum of their rows.
    position = 0
    for shard in shards:
        assert shard.bytes <= cap
        assert 1 <= shard.rows <= max_rows
        rows = entries[position : position + shard.rows]
        assert shard.offset == rows[0].offset
        assert shard.bytes == SHARD_FIXED_BYTES + sum(e.cost for e in rows)
        assert (shard.first_key, shard.last_key) == (rows[0].key, rows[-1].key)
        assert all(e.key.startswith(shard.prefix) for e in rows)
        assert len(shard.prefix) == prefix_length
        position += shard.rows
    # Every entry exactly once, in key order, shards contiguous.
    assert position == len(entries)
    # Names are unique and say the prefix (and part, when a group is split).
    names = [s.name for s in shards]
    assert len(set(names)) == len(names)
    for shard in shards:
        expected = f"data/{shard.prefix}.zip" if shard.part is None else f"data/{shard.prefix}-{shard.part:02d}.zip"
        assert shard.name == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=50, max_size=400))
def test_split_parts_are_balanced(costs: list[int]) -> None:
    entries = [PlanEntry(f"a{i:07x}", c) for i, c in enumerate(costs)]  # one prefix group
    total = sum(costs)
    target = max(total // 4, 6000)
    cap = max(2 * target, 12000)
    shards = plan_shards(entries, prefix_length=1, max_shard_bytes=cap, target_shard_bytes=target)
    if len(shards) > 1:
        mean = total / len(shards)
        assert max(s.bytes for s in shards) <= mean + 5000 + SHARD_FIXED_BYTES  # within one row of the mean


def test_group_that_fits_is_one_shard_named_by_prefix() -> None:
    entries = [PlanEntry("0abc0000", 10), PlanEntry("0abc0001", 10), PlanEntry("1abc0000", 10)]
    shards = plan_shards(entries, prefix_length=1)
    assert [(s.name, s.rows) for s in shards] == [("data/0.zip", 2), ("data/1.zip", 1)]


def test_group_over_the_cap_is_split_into_numbered_parts() -> None:
    entries = [PlanEntry(f"7{i:07x}", 400) for i in range(10)]
    shards = plan_shards(entries, prefix_length=1, max_shard_bytes=1500, target_shard_bytes=1000)
    assert [s.name for s in shards][:2] == ["data/7-00.zip", "data/7-01.zip"]
    assert all(s.bytes <= 1500 for s in shards)
    assert sum(s.rows for s in shards) == 10


def test_member_limit_splits_a_group() -> None:
    entries = [PlanEntry(f"f{i:07x}", 1) for i in range(25)]
    shards = plan_shards(entries, prefix_length=1, max_rows=10)
    assert [s.rows for s in shards] == [9, 8, 8]  # 3 parts cut near each third of the rows
    assert sum(s.rows for s in shards) == 25


def test_row_that_cannot_fit_alone_is_refused() -> None:
    with pytest.raises(ValueError, match="more than the max shard size"):
        plan_shards([PlanEntry("abcdef00", 5000)], prefix_length=1, max_shard_bytes=4000, target_shard_bytes=3000)


def test_unsorted_or_duplicate_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="sorted by unique key"):
        plan_shards([PlanEntry("bbbbbbbb", 1), PlanEntry("aaaaaaaa", 1)], prefix_length=1)
    with pytest.raises(ValueError, match="sorted by unique key"):
        plan_shards([PlanEntry("aaaaaaaa", 1), PlanEntry("aaaaaaaa", 1)], prefix_length=1)


# --- by size (the default) -----------------------------------------------------------------


def shard_holding(names: list[str], key: str) -> str:
    """The rule docs/reference.md states: a key is in the last shard whose name sorts at or before it."""
    return [n for n in sorted(names) if n <= key][-1]


@st.composite
def sized_plans(draw: st.DrawFn) -> tuple[list[PlanEntry], int, int, int]:
    cap = draw(st.integers(2_000, 200_000))
    target = draw(st.integers(SHARD_FIXED_BYTES + 1, cap))
    largest = cap - SHARD_FIXED_BYTES
    cost = st.one_of(st.integers(1, 300), st.integers(1, largest), st.integers(max(1, largest - 50), largest))
    costs = draw(st.lists(cost, min_size=1, max_size=400))
    return entries_from(costs), cap, target, draw(st.integers(1, 500))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(sized_plans())
def test_by_size_every_entry_is_in_the_shard_its_name_says_under_the_cap(
    args: tuple[list[PlanEntry], int, int, int],
) -> None:
    entries, cap, target, max_rows = args
    shards = plan_shards(entries, max_shard_bytes=cap, target_shard_bytes=target, max_rows=max_rows)
    names = [s.stem for s in shards]
    assert names[0] == FIRST_BOUNDARY and names == sorted(names) and len(set(names)) == len(names)
    position = 0
    for shard in shards:
        rows = entries[position : position + shard.rows]
        assert shard.bytes == SHARD_FIXED_BYTES + sum(e.cost for e in rows) <= cap
        assert 1 <= shard.rows <= max_rows
        assert (shard.first_key, shard.last_key) == (rows[0].key, rows[-1].key)
        assert all(shard_holding(names, e.key) == shard.stem for e in rows)
        assert shard.name == f"data/{shard.stem}.zip"
        position += shard.rows
    assert position == len(entries)
    ranges = key_ranges([(s.name, "train") for s in shards], {"train": BY_SIZE})
    assert all(ranges[s.name].holds(e.key) for s in shards for e in entries if shard_holding(names, e.key) == s.stem)


def test_a_split_smaller_than_the_target_is_one_shard_named_0() -> None:
    entries = entries_from([1000] * 24)  # a 24-row test split
    shards = plan_shards(
        entries, max_shard_bytes=1_000_000, target_shard_bytes=500_000, split="test", folder="data/test"
    )
    assert [(s.name, s.rows) for s in shards] == [("data/test/0.zip", 24)]


def test_a_split_lands_in_shards_near_the_target_not_sixteenths() -> None:
    # 1.2 GB at a 256 MB target: 5 shards of about 240 MB (the prefix rule made 16 of 75 MB).
    entries = entries_from([100_000] * 12_000)
    shards = plan_shards(entries, max_shard_bytes=512_000_000, target_shard_bytes=256_000_000)
    assert len(shards) == 5
    assert all(235_000_000 <= s.bytes <= 245_000_000 for s in shards)


@pytest.mark.parametrize(("parts", "size"), [(1, 1.4), (2, 1.6), (2, 2.4), (3, 2.6)])
def test_a_split_is_cut_into_round_size_over_target_shards(parts: int, size: float) -> None:
    entries = entries_from([1000] * int(size * 100))
    shards = plan_shards(entries, max_shard_bytes=1_000_000, target_shard_bytes=100 * 1000 + SHARD_FIXED_BYTES)
    assert len(shards) == parts


def test_the_cap_cuts_more_shards_than_the_target_asks() -> None:
    entries = entries_from([1000] * 140)  # 1.4 targets: one shard by the target, but it would pass the cap
    shards = plan_shards(entries, max_shard_bytes=100_000 + SHARD_FIXED_BYTES, target_shard_bytes=100_000)
    assert len(shards) == 2 and all(s.bytes <= 100_000 + SHARD_FIXED_BYTES for s in shards)


def test_boundary_names_are_the_shortest_prefix_above_the_shard_before() -> None:
    assert boundary_after("3f9a0000", "3fa10000") == "3fa"
    assert boundary_after("3f", "3f00") == "3f0"
    assert boundary_after("0fff", "1000") == "1"
    with pytest.raises(ValueError, match="sorted"):
        boundary_after("b", "a")


def test_an_update_keeps_the_shards_names_and_cuts_only_a_grown_one() -> None:
    base = entries_from([1000] * 400)
    before = plan_shards(base, max_shard_bytes=400_000, target_shard_bytes=100_000)
    names = [s.stem for s in before]
    assert len(names) == 4
    # New rows, all in the third shard's range, until it holds about three targets.
    third = before[2].stem
    pool = (hashlib.sha256(f"new{i}".encode()).hexdigest()[:32] for i in range(100_000))
    new = [k for k in pool if shard_holding(names, k) == third][:200]
    keys = sorted({e.key for e in base} | set(new))
    entries = [PlanEntry(k, 1000, offset=i) for i, k in enumerate(keys)]
    after = plan_shards(entries, max_shard_bytes=400_000, target_shard_bytes=100_000, boundaries=names)
    unchanged = [(s.stem, s.first_key, s.last_key, s.rows) for s in before if s.stem != third]
    assert [
        (s.stem, s.first_key, s.last_key, s.rows) for s in after if s.stem in names and s.stem != third
    ] == unchanged
    grown = [s for s in after if shard_holding(names, s.first_key) == third]
    assert len(grown) == 3 and grown[0].stem == third  # cut where it grew, the first keeping its name
    after_names = [s.stem for s in after]
    assert all(
        shard_holding(after_names, e.key) == s.stem for s in after for e in entries[s.offset : s.offset + s.rows]
    )


def test_boundaries_must_start_at_0_sorted_and_unique() -> None:
    with pytest.raises(ValueError, match="start at"):
        plan_shards(entries_from([10]), boundaries=["1"])
    with pytest.raises(ValueError, match="sorted, unique"):
        plan_shards(entries_from([10]), boundaries=["0", "8", "4"])


def test_key_ranges_by_prefix_and_by_size() -> None:
    ranges = key_ranges(
        [("data/a/0.zip", "a"), ("data/a/7.zip", "a"), ("data/b/3f-00.zip", "b")], {"a": BY_SIZE, "b": 2}
    )
    assert ranges["data/a/0.zip"].holds("6fffffff") and not ranges["data/a/0.zip"].holds("70000000")
    assert ranges["data/a/7.zip"].holds("ffffffff")
    assert ranges["data/b/3f-00.zip"].holds("3f000000") and not ranges["data/b/3f-00.zip"].holds("40000000")


def test_a_one_shot_iterator_is_refused_not_half_planned() -> None:
    entries = [PlanEntry("0abc0000", 10)]
    with pytest.raises(TypeError, match="reads its entries twice"):
        plan_shards(iter(entries), prefix_length=1)
