"""The reading plan (shardkit.order): a pure function, checked without disk over many shapes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.order import Piece, Unit, plan_units, rank_range, shuffled_window, unit_order

shard_lists = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=20).map(
    lambda rows: [(f"data/{i:02x}.zip", n) for i, n in enumerate(rows)]
)


def rows_of(units: list[Unit]) -> list[tuple[str, int]]:
    """Every (shard, row) the units read, in the order they give them."""
    out = []
    for unit in units:
        for number, window in enumerate(unit_order(unit)):
            read = [(unit.pieces[i].shard, unit.pieces[i].start + r) for i, r in window]
            out.extend(read[p] for p in shuffled_window(window, unit, number))
    return out


@settings(max_examples=200, deadline=None)
@given(
    shards=shard_lists,
    world_size=st.integers(min_value=1, max_value=9),
    seed=st.one_of(st.none(), st.integers(min_value=0, max_value=2**40)),
    epoch_key=st.integers(min_value=0, max_value=2**62),
    shuffle_shards=st.integers(min_value=1, max_value=5),
    shuffle_window=st.integers(min_value=1, max_value=50),
)
def test_ranks_read_floor_or_ceil_rows_disjoint_and_together_every_row_once(
    shards: list[tuple[str, int]],
    world_size: int,
    seed: int | None,
    epoch_key: int,
    shuffle_shards: int,
    shuffle_window: int,
) -> None:
    total = sum(n for _, n in shards)
    every: list[tuple[str, int]] = []
    for rank in range(world_size):
        units = plan_units(
            shards,
            seed=seed,
            epoch_key=epoch_key,
            rank=rank,
            world_size=world_size,
            shuffle_shards=shuffle_shards,
            shuffle_window=shuffle_window,
        )
        rows = rows_of(units)
        assert len(rows) in (total // world_size, -(-total // world_size))
        pieces = [p for u in units for p in u.pieces]
        assert sum(not p.whole for p in pieces) <= 2  # at most two cut shards, at the rank's edges
        if seed is None:
            assert rows == sorted(rows, key=lambda r: ([s for s, _ in shards].index(r[0]), r[1]))
        every.extend(rows)
    assert sorted(every) == sorted((s, r) for s, n in shards for r in range(n))


def test_a_merge_keeps_each_pieces_order_and_windows_are_permutations() -> None:
    unit = Unit((Piece("a", 0, 30, 30), Piece("b", 5, 25, 40), Piece("c", 0, 7, 7)), seed=11, window=8)
    merged = [entry for window in unit_order(unit) for entry in window]
    for index in range(3):
        assert [r for i, r in merged if i == index] == list(range(unit.pieces[index].size))
    windows = list(unit_order(unit))
    assert [len(w) for w in windows] == [8] * 7 + [1]
    assert all(sorted(shuffled_window(w, unit, n)) == list(range(len(w))) for n, w in enumerate(windows))
    assert any(shuffled_window(w, unit, n) != list(range(len(w))) for n, w in enumerate(windows))


def test_the_plan_depends_on_seed_and_epoch_key_only_as_documented() -> None:
    shards = [(f"s{i}", 25) for i in range(12)]

    def order(seed: int | None, epoch_key: int) -> list[tuple[str, int]]:
        units = plan_units(
            shards, seed=seed, epoch_key=epoch_key, rank=0, world_size=1, shuffle_shards=4, shuffle_window=16
        )
        return rows_of(units)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(2, 0) and order(1, 0) != order(1, 1)
    assert order(None, 0) == order(None, 5) == [(s, r) for s, n in shards for r in range(n)]


def test_rank_range_gives_the_first_ranks_the_extra_rows() -> None:
    assert [rank_range(10, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [rank_range(2, r, 3) for r in range(3)] == [(0, 1), (1, 2), (2, 2)]
