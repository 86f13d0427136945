"""The planner: a pure function, tested on random size distributions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.plan import (
    SHARD_FIXED_BYTES,
    PlanEntry,
    choose_prefix_length,
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


@pytest.mark.parametrize(
    ("total", "target", "expected"),
    [
        (0, 500_000_000, 1),
        (10_000_000, 500_000_000, 1),  # tiny: still 16 shards to parallelise over
        (2_000_000_000, 500_000_000, 1),
        (100_000_000_000, 500_000_000, 2),  # 256 groups of ~390 MB
        (2_000_000_000_000, 500_000_000, 3),  # YFCC-scale: 4096 groups of ~490 MB
        (40_000_000_000_000, 500_000_000, 4),
        (10**18, 500_000_000, 6),  # clamped
    ],
)
def test_prefix_length_follows_total_size(total: int, target: int, expected: int) -> None:
    assert choose_prefix_length(total, target) == expected


@given(st.integers(1, 10**15), st.integers(10**6, 10**9))
def test_prefix_length_puts_mean_group_size_within_4x_of_target(total: int, target: int) -> None:
    length = choose_prefix_length(total, target)
    mean = total / 16**length
    if 1 < length < 6:
        assert target / 4 <= mean <= target * 4
    elif length == 1:
        assert mean <= target * 4


def test_a_one_shot_iterator_is_refused_not_half_planned() -> None:
    entries = [PlanEntry("0abc0000", 10)]
    with pytest.raises(TypeError, match="reads its entries twice"):
        plan_shards(iter(entries), prefix_length=1)
