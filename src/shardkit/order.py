"""Which rows one rank of a training job reads in one epoch, and in which order.

A pure function of the split's shards and row counts (the manifest), the shuffle seed, the epoch
key, the rank and the world size: no state, no I/O. That is what makes a resumed run exact: the
position datasets saves (a unit and a row within it) means the same row in any process.

* The shards, in manifest order or (with a seed) permuted for the epoch, make one sequence of
  rows; rank ``r`` of ``w`` takes the ``r``-th of ``w`` contiguous ranges of floor or ceil rows.
  Its range is a list of :class:`Piece` s: whole shards, and at most two cut ones at its edges,
  so a rank reads only its share of the bytes.
* The pieces are grouped into :class:`Unit` s, the units of work datasets gives DataLoader
  workers: one piece per unit without a seed; ``shuffle_shards`` pieces with one. A shuffled
  unit's rows are a seeded random merge of its pieces (each piece keeps its own order, so it is
  still read front to back), permuted within windows of ``shuffle_window`` rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """Rows ``start`` to ``stop`` (exclusive) of one shard, in the shard's order."""

    shard: str  # the shard's file, "data/3f.zip"
    start: int
    stop: int
    rows: int  # the shard's row count (a piece with start 0 and stop == rows is the whole shard)

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.rows


@dataclass(frozen=True)
class Unit:
    """What one ``datasets`` shard of the stream reads: its pieces, and how their rows are ordered.

    ``seed`` None: the pieces' rows one piece after the other. Else: :func:`unit_order`."""

    pieces: tuple[Piece, ...]
    seed: int | None = None
    window: int = 1


def rank_range(total: int, rank: int, world_size: int) -> tuple[int, int]:
    """The rows ``[lo, hi)`` of ``total`` that rank ``rank`` of ``world_size`` reads: contiguous,
    floor or ceil of ``total / world_size`` rows (the first ``total % world_size`` ranks one more)."""
    base, extra = divmod(total, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def _rng(*parts: object) -> random.Random:
    # A string seed is hashed with SHA-512 by random.Random: the same on every machine and Python
    # (unlike hash()), and unrelated for (seed, epoch) pairs that differ anywhere.
    return random.Random("shardkit-order:" + ":".join(str(p) for p in parts))


def plan_units(
    shards: Sequence[tuple[str, int]],
    *,
    seed: int | None,
    epoch_key: int,
    rank: int,
    world_size: int,
    shuffle_shards: int,
    shuffle_window: int,
) -> list[Unit]:
    """The units rank ``rank`` reads in the epoch whose key is ``epoch_key``; ``shards`` are the
    split's (file, rows) in manifest order."""
    order = list(shards)
    if seed is not None:
        _rng(seed, epoch_key, "shards").shuffle(order)
    lo, hi = rank_range(sum(rows for _, rows in order), rank, world_size)
    pieces: list[Piece] = []
    first = 0  # the first row of the current shard in the epoch's sequence
    for shard, rows in order:
        start, stop = max(lo - first, 0), min(hi - first, rows)
        if start < stop:
            pieces.append(Piece(shard, start, stop, rows))
        first += rows
    if seed is None:
        return [Unit((p,)) for p in pieces]
    return [
        Unit(
            tuple(pieces[i : i + shuffle_shards]),
            _rng(seed, epoch_key, rank, world_size, i).getrandbits(63),
            shuffle_window,
        )
        for i in range(0, len(pieces), shuffle_shards)
    ]


def unit_order(unit: Unit) -> Iterator[list[tuple[int, int]]]:
    """A unit's rows, window by window, each row as (piece index, row index within the piece).

    Without a seed: the pieces one after the other, in one window per piece. With one: a random
    merge of the pieces (at each step a piece is drawn with odds proportional to the rows it has
    left, so the merge is uniform over interleavings and each piece is read in its own order),
    cut into windows of ``unit.window`` rows, each window permuted."""
    if unit.seed is None:
        for index, piece in enumerate(unit.pieces):
            yield [(index, row) for row in range(piece.size)]
        return
    rng = random.Random(unit.seed)
    left = [p.size for p in unit.pieces]
    taken = [0] * len(left)
    remaining = sum(left)
    window: list[tuple[int, int]] = []
    while remaining:
        pick = rng.randrange(remaining)
        index = 0
        while pick >= left[index]:
            pick -= left[index]
            index += 1
        window.append((index, taken[index]))
        taken[index] += 1
        left[index] -= 1
        remaining -= 1
        if len(window) == unit.window or not remaining:
            yield window
            window = []


def shuffled_window(window: list[tuple[int, int]], unit: Unit, number: int) -> list[int]:
    """The order in which window ``number`` of ``unit`` gives its rows: positions in ``window``
    (the order the rows are read in), permuted by the unit's seed and the window's number."""
    positions = list(range(len(window)))
    if unit.seed is not None:
        _rng(unit.seed, "window", number).shuffle(positions)
    return positions
