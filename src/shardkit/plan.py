"""Stage 3: decide which rows go into which shard. Pure functions, no I/O.

Rows arrive sorted by key, one split at a time. Two rules, both simple to state:

* **By size** (the default, ``prefix_length`` 0): a split is cut into ``round(size / target)``
  shards of about equal bytes (at least one, and more where the cap or the row limit needs), cut
  between keys. Each shard is named by where its keys start: the first ``data/0.zip``, each
  other by the shortest prefix of its first key that sorts above the previous shard's last key
  (``data/7fe.zip``). **A key is in the last shard whose name sorts at or before it.** A split
  smaller than the target is one shard. ``pack --update`` keeps the names (the boundaries) of
  the run before, so that unchanged rows stay in their shards, and cuts only a shard that grows
  past ``round(size / target)`` into more.
* **By prefix** (``prefix_length`` L >= 1, ``--prefix-length``): a shard holds the keys whose
  first L hex digits are its name (``data/3f.zip``); a prefix group that would pass the cap or
  the member limit is cut into numbered parts (``data/3f-00.zip``, ``data/3f-01.zip``...) of
  about equal size. Small splits then make small shards (16**L groups at most).

For ZIP and tar shards sizes are exact: a row costs its file, its headers and its metadata
(ZIP: its line stands for its share of ``metadata.parquet``, which the packer encodes before
writing and plans with exactly), and a shard adds its fixed part. So "under the cap" is a fact
the planner knows before any byte is written, not a hope checked afterwards. Parquet encodes as
it writes, so there a row's cost is an upper bound (see :mod:`.formats`) and the writer checks
the cap on the finished file.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .formats import ZIP, ShardFormat

#: Bytes every ZIP shard has whatever its rows: the metadata member's headers and the end record.
SHARD_FIXED_BYTES = ZIP.fixed_bytes
MAX_PREFIX_LENGTH = 6
#: ``prefix_length`` of a split cut by size (the default): shards named by where their keys start.
BY_SIZE = 0
#: The name of a split's first shard cut by size: every key sorts at or after it.
FIRST_BOUNDARY = "0"

#: The cap on a shard file when none is given (``--max-shard-size``; PackConfig, RemuxConfig):
#: 1 GB. The one place it is written; an unset target is half the cap (:func:`default_target`).
DEFAULT_MAX_SHARD_BYTES = 1_000_000_000


@dataclass(frozen=True)
class PlanEntry:
    """What the planner needs of a row: its key, the bytes it adds to a shard, where it is staged."""

    key: str
    cost: int
    offset: int = 0


@dataclass(frozen=True)
class ShardPlan:
    name: str  # e.g. "data/3f.zip" or "data/3f-01.zip"
    prefix: str
    part: int | None
    offset: int  # where the shard's first row is staged
    rows: int
    bytes: int  # exact size of the finished shard file
    first_key: str
    last_key: str
    split: str = "train"
    input_sha256: str = ""  # of its rows (see staging.rows_sha256), set by the packer

    @property
    def stem(self) -> str:
        return shard_stem(self.name)


def shard_stem(file: str) -> str:
    """A shard's name without its folder and suffix: ``data/train/7fe.zip`` -> ``7fe``."""
    return file.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def max_file_bytes(max_shard_bytes: int, fmt: ShardFormat = ZIP) -> int:
    """An upper bound for one file: anything bigger cannot fit in a shard even alone."""
    return max_shard_bytes - fmt.fixed_bytes


def default_target(max_shard_bytes: int) -> int:
    """The target shard size when none is given: half the cap (500 MB under the 1 GB default),
    so shards land well inside the cap and a smaller cap alone is enough."""
    return max(max_shard_bytes // 2, 1)


def check_limits(
    max_shard_bytes: int, target_shard_bytes: int, fmt: ShardFormat = ZIP, fixed_bytes: int | None = None
) -> None:
    fixed = fmt.fixed_bytes if fixed_bytes is None else fixed_bytes
    if not fixed < max_shard_bytes <= fmt.max_bytes:
        raise ValueError(
            f"max shard size must be between {fixed + 1} and {fmt.max_bytes} bytes"
            f" for {fmt.name} shards, got {max_shard_bytes}"
        )
    if not 0 < target_shard_bytes <= max_shard_bytes:
        raise ValueError(
            f"target shard size must be between 1 and the max shard size ({max_shard_bytes}), got {target_shard_bytes}"
        )


def plan_shards(
    entries: Iterable[PlanEntry],
    *,
    prefix_length: int = BY_SIZE,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    target_shard_bytes: int | None = None,
    max_rows: int | None = None,
    fmt: ShardFormat = ZIP,
    split: str = "train",
    folder: str = "data",
    boundaries: Sequence[str] = (FIRST_BOUNDARY,),
    fixed_bytes: int | None = None,
) -> list[ShardPlan]:
    """Group key-sorted entries into shards; every entry lands in exactly one shard.

    The shards are named ``<folder>/<name><suffix>`` and belong to ``split``. ``prefix_length``
    :data:`BY_SIZE` cuts by size, starting from ``boundaries`` (sorted shard names of a run
    before; a fresh split has the one :data:`FIRST_BOUNDARY`); 1 to 6 cuts by key prefix.
    ``target_shard_bytes`` None: half the cap (:func:`default_target`). ``fixed_bytes``: what a
    shard costs with no rows (default: the format's).

    ``entries`` is read twice (a list, or a re-readable source such as staged rows on disk):
    once to total each group, once to cut it. Memory is O(groups), not O(rows).
    Raises ValueError if entries are not sorted by unique key, or one cannot fit in a shard.
    """
    if target_shard_bytes is None:
        target_shard_bytes = default_target(max_shard_bytes)
    fixed = fmt.fixed_bytes if fixed_bytes is None else fixed_bytes
    check_limits(max_shard_bytes, target_shard_bytes, fmt, fixed)
    max_rows = fmt.max_rows if max_rows is None else max_rows
    if not (prefix_length == BY_SIZE or 1 <= prefix_length <= MAX_PREFIX_LENGTH):
        raise ValueError(f"prefix length must be 1 to {MAX_PREFIX_LENGTH}, got {prefix_length}")
    if max_rows < 1:
        raise ValueError(f"max rows per shard must be at least 1, got {max_rows}")
    if iter(entries) is entries:
        raise TypeError("plan_shards reads its entries twice: pass a list or a re-readable source, not an iterator")
    if prefix_length == BY_SIZE:
        if not boundaries or boundaries[0] != FIRST_BOUNDARY or list(boundaries) != sorted(set(boundaries)):
            raise ValueError(f"shard boundaries must be sorted, unique and start at {FIRST_BOUNDARY!r}: {boundaries!r}")
        starts = list(boundaries)

        def group_of(key: str) -> str:
            return starts[bisect.bisect_right(starts, key) - 1]

    else:

        def group_of(key: str) -> str:
            return key[:prefix_length]

    totals = _group_totals(entries, group_of, prefix_length, max_shard_bytes, fixed)
    by_size = prefix_length == BY_SIZE
    cutter = _Cutter(totals, max_shard_bytes, target_shard_bytes, max_rows, fmt.suffix, fixed, split, folder, by_size)
    for entry in entries:
        cutter.add(entry, group_of(entry.key))
    return cutter.finish()


def boundary_after(last_key: str, first_key: str) -> str:
    """The name of a shard cut by size that starts at ``first_key`` after a shard that ends at
    ``last_key``: the shortest prefix of ``first_key`` that sorts above ``last_key``."""
    for length in range(1, len(first_key) + 1):
        if first_key[:length] > last_key:
            return first_key[:length]
    raise ValueError(f"keys must be sorted: {first_key!r} came after {last_key!r}")


def _group_totals(
    entries: Iterable[PlanEntry], group_of: Callable[[str], str], prefix_length: int, max_shard_bytes: int, fixed: int
) -> dict[str, tuple[int, int]]:
    """First pass: check order and sizes; return (content bytes, rows) per group."""
    totals: dict[str, tuple[int, int]] = {}
    last_key: str | None = None
    for entry in entries:
        if last_key is not None and entry.key <= last_key:
            raise ValueError(f"entries must be sorted by unique key: {entry.key!r} came after {last_key!r}")
        last_key = entry.key
        if len(entry.key) < prefix_length:
            raise ValueError(f"key {entry.key!r} is shorter than the prefix length {prefix_length}")
        if fixed + entry.cost > max_shard_bytes:
            raise ValueError(
                f"row with key {entry.key} needs {fixed + entry.cost} bytes in a shard,"
                f" more than the max shard size {max_shard_bytes}"
            )
        group = group_of(entry.key)
        content, rows = totals.get(group, (0, 0))
        totals[group] = (content + entry.cost, rows + 1)
    return totals


class _Cutter:
    """Second pass: cut each group into one shard, or parts of about equal size.

    Parts are cut where the running total passes each k-th of the group's content, and
    earlier whenever the next row would pass the cap or the member limit. By size, a group is
    cut into ``round(content / target)`` parts; by prefix, only when it passes the cap.
    """

    def __init__(
        self,
        totals: dict[str, tuple[int, int]],
        max_bytes: int,
        target_bytes: int,
        max_rows: int,
        suffix: str,
        fixed_bytes: int,
        split: str,
        folder: str,
        by_size: bool,
    ) -> None:
        self.totals = totals
        self.split_name = split
        self.folder = folder
        self.max_bytes = max_bytes
        self.fixed_bytes = fixed_bytes
        self.suffix = suffix
        self.per_part_content = max(target_bytes - fixed_bytes, 1)
        self.max_rows = max_rows
        self.by_size = by_size
        self.shards: list[ShardPlan] = []
        self.group_shards: list[ShardPlan] = []
        self.prefix: str | None = None
        self.split = False
        self._reset_part()

    def _reset_part(self) -> None:
        self.first: PlanEntry | None = None
        self.last: PlanEntry | None = None
        self.rows = 0
        self.bytes = self.fixed_bytes

    def _start_group(self, prefix: str) -> None:
        self._close_group()  # the previous group, if any
        self.prefix = prefix
        content, rows = self.totals[prefix]
        self.content = content
        over = self.fixed_bytes + content > self.max_bytes or rows > self.max_rows
        least = max(math.ceil(rows / self.max_rows), math.ceil(content / max(self.max_bytes - self.fixed_bytes, 1)))
        if self.by_size:
            self.parts_wanted = max(round(content / self.per_part_content), least, 1)
        else:
            self.parts_wanted = max(math.ceil(content / self.per_part_content), least, 2 if over else 1)
        self.split = self.parts_wanted > 1 if self.by_size else over
        self.running = 0

    def add(self, entry: PlanEntry, prefix: str) -> None:
        if prefix != self.prefix:
            self._start_group(prefix)
        if self.first is not None and self.split:
            boundary = self.content * (len(self.group_shards) + 1) / self.parts_wanted
            full = self.bytes + entry.cost > self.max_bytes or self.rows >= self.max_rows
            if full or self.running >= boundary:
                self._close_part()
        if self.first is None:
            self.first = entry
        self.last = entry
        self.rows += 1
        self.bytes += entry.cost
        self.running += entry.cost

    def _close_part(self) -> None:
        if self.first is None or self.last is None or self.prefix is None:
            return
        self.group_shards.append(
            ShardPlan(
                name="",
                prefix=self.prefix,
                part=None,
                offset=self.first.offset,
                rows=self.rows,
                bytes=self.bytes,
                first_key=self.first.key,
                last_key=self.last.key,
                split=self.split_name,
            )
        )
        self._reset_part()

    def _close_group(self) -> None:
        self._close_part()
        parts = self.group_shards
        if self.by_size and parts:  # the group's own name, then where each further part starts
            names = [self.prefix or FIRST_BOUNDARY]
            names += [boundary_after(a.last_key, b.first_key) for a, b in itertools.pairwise(parts)]
            self.shards.extend(
                replace(p, name=f"{self.folder}/{name}{self.suffix}", prefix=name)
                for p, name in zip(parts, names, strict=True)
            )
        elif len(parts) == 1 and not self.split:
            self.shards.append(replace(parts[0], name=f"{self.folder}/{self.prefix}{self.suffix}"))
        elif parts:
            width = max(2, len(str(len(parts) - 1)))
            self.shards.extend(
                replace(p, name=f"{self.folder}/{self.prefix}-{i:0{width}d}{self.suffix}", part=i)
                for i, p in enumerate(parts)
            )
        self.group_shards = []

    def finish(self) -> list[ShardPlan]:
        self._close_group()
        return self.shards


@dataclass(frozen=True)
class KeyRange:
    """Which keys a shard holds, by its name: those that start with its prefix (by prefix), or
    those from its name up to the next shard's (by size)."""

    low: str
    high: str | None  # by size: the next shard's name (None: the split's last shard)
    by_prefix: bool

    def holds(self, key: str) -> bool:
        if self.by_prefix:
            return key.startswith(self.low)
        return key >= self.low and (self.high is None or key < self.high)

    def words(self) -> str:
        if self.by_prefix:
            return f"this shard's prefix {self.low!r}"
        upto = f" and below {self.high!r} (the next shard's name)" if self.high else ""
        return f"this shard's range: at or above its name {self.low!r}{upto}"


def key_ranges(shards: Sequence[tuple[str, str]], prefix_lengths: dict[str, int]) -> dict[str, KeyRange]:
    """Each shard's :class:`KeyRange`, from (file, split) pairs in the manifest's order and each
    split's prefix length (:data:`BY_SIZE`: named by where their keys start)."""
    by_split: dict[str, list[str]] = {}
    for file, split in shards:
        by_split.setdefault(split, []).append(file)
    ranges: dict[str, KeyRange] = {}
    for split, files in by_split.items():
        if prefix_lengths.get(split, BY_SIZE) == BY_SIZE:
            ordered = sorted(files, key=shard_stem)  # each range ends where the next name starts
            highs: list[str | None] = [shard_stem(f) for f in ordered[1:]]
            for file, high in zip(ordered, [*highs, None], strict=True):
                ranges[file] = KeyRange(shard_stem(file), high, by_prefix=False)
        else:
            ranges.update({f: KeyRange(shard_stem(f).split("-")[0], None, by_prefix=True) for f in files})
    return ranges
