"""Stage 3: decide which rows go into which shard. Pure functions, no I/O.

Rows arrive sorted by key. A shard holds the rows whose keys share their first
``prefix_length`` hex digits (``data/3f.zip``); the prefix length follows from the total size
so that shards land near ``target_shard_bytes``. A prefix group that would pass the hard cap
(``max_shard_bytes``) or the ZIP member limit is split into numbered parts
(``data/3f-00.zip``, ``data/3f-01.zip``...) of about equal size, cut between keys.

For ZIP and tar shards sizes are exact: a row costs its file, its headers and its metadata
line, and a shard adds its fixed part (metadata.jsonl's headers and the end record, or tar's
end blocks). So "under the cap" is a fact the planner knows before any byte is written, not a
hope checked afterwards. Parquet encodes as it writes, so there a row's cost is an upper bound
(see :mod:`.formats`) and the writer checks the cap on the finished file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .formats import ZIP, ShardFormat

#: Bytes every ZIP shard has whatever its rows: the metadata.jsonl headers and the end record.
SHARD_FIXED_BYTES = ZIP.fixed_bytes
MAX_PREFIX_LENGTH = 6

#: The cap on a shard file when none is given (``--max-shard-size``; PackConfig, RemuxConfig):
#: 1 GB. The one place it is written; an unset target is half the cap (:func:`default_target`).
DEFAULT_MAX_SHARD_BYTES = 1_000_000_000

# The Hub's advice for a repo (https://huggingface.co/docs/hub/repositories-recommendations):
# under 10,000 entries per folder and 100,000 files in all. data/ holds one file per shard.
HUB_MAX_FOLDER_ENTRIES = 10_000
HUB_MAX_REPO_FILES = 100_000


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
        return self.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def max_file_bytes(max_shard_bytes: int, fmt: ShardFormat = ZIP) -> int:
    """An upper bound for one file: anything bigger cannot fit in a shard even alone."""
    return max_shard_bytes - fmt.fixed_bytes


def choose_prefix_length(total_bytes: int, target_shard_bytes: int) -> int:
    """The prefix length whose 16**L groups are nearest (in ratio) to the target size.

    At least 1 (so even a small dataset has up to 16 shards to parallelise over).
    """
    if total_bytes <= 0:
        return 1
    ideal = math.log(max(total_bytes / target_shard_bytes, 1.0), 16)
    return max(1, min(MAX_PREFIX_LENGTH, round(ideal)))


def default_target(max_shard_bytes: int) -> int:
    """The target shard size when none is given: half the cap (500 MB under the 1 GB default),
    so shards land well inside the cap and a smaller cap alone is enough."""
    return max(max_shard_bytes // 2, 1)


def check_limits(max_shard_bytes: int, target_shard_bytes: int, fmt: ShardFormat = ZIP) -> None:
    if not fmt.fixed_bytes < max_shard_bytes <= fmt.max_bytes:
        raise ValueError(
            f"max shard size must be between {fmt.fixed_bytes + 1} and {fmt.max_bytes} bytes"
            f" for {fmt.name} shards, got {max_shard_bytes}"
        )
    if not 0 < target_shard_bytes <= max_shard_bytes:
        raise ValueError(
            f"target shard size must be between 1 and the max shard size ({max_shard_bytes}), got {target_shard_bytes}"
        )


def plan_shards(
    entries: Iterable[PlanEntry],
    *,
    prefix_length: int,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    target_shard_bytes: int | None = None,
    max_rows: int | None = None,
    fmt: ShardFormat = ZIP,
    split: str = "train",
    folder: str = "data",
) -> list[ShardPlan]:
    """Group key-sorted entries into shards; every entry lands in exactly one shard.

    The shards are named ``<folder>/<prefix>[-<part>]<suffix>`` and belong to ``split``.
    ``target_shard_bytes`` None: half the cap (:func:`default_target`).

    ``entries`` is read twice (a list, or a re-readable source such as staged rows on disk):
    once to total each prefix group, once to cut it. Memory is O(groups), not O(rows).
    Raises ValueError if entries are not sorted by unique key, or one cannot fit in a shard.
    """
    if target_shard_bytes is None:
        target_shard_bytes = default_target(max_shard_bytes)
    check_limits(max_shard_bytes, target_shard_bytes, fmt)
    max_rows = fmt.max_rows if max_rows is None else max_rows
    if not 1 <= prefix_length <= MAX_PREFIX_LENGTH:
        raise ValueError(f"prefix length must be 1 to {MAX_PREFIX_LENGTH}, got {prefix_length}")
    if max_rows < 1:
        raise ValueError(f"max rows per shard must be at least 1, got {max_rows}")
    if iter(entries) is entries:
        raise TypeError("plan_shards reads its entries twice: pass a list or a re-readable source, not an iterator")
    totals = _group_totals(entries, prefix_length, max_shard_bytes, fmt.fixed_bytes)
    cutter = _Cutter(totals, max_shard_bytes, target_shard_bytes, max_rows, fmt, split, folder)
    for entry in entries:
        cutter.add(entry, entry.key[:prefix_length])
    return cutter.finish()


def _group_totals(
    entries: Iterable[PlanEntry], prefix_length: int, max_shard_bytes: int, fixed_bytes: int
) -> dict[str, tuple[int, int]]:
    """First pass: check order and sizes; return (content bytes, rows) per prefix group."""
    totals: dict[str, tuple[int, int]] = {}
    last_key: str | None = None
    for entry in entries:
        if last_key is not None and entry.key <= last_key:
            raise ValueError(f"entries must be sorted by unique key: {entry.key!r} came after {last_key!r}")
        last_key = entry.key
        if len(entry.key) < prefix_length:
            raise ValueError(f"key {entry.key!r} is shorter than the prefix length {prefix_length}")
        if fixed_bytes + entry.cost > max_shard_bytes:
            raise ValueError(
                f"row with key {entry.key} needs {fixed_bytes + entry.cost} bytes in a shard,"
                f" more than the max shard size {max_shard_bytes}"
            )
        prefix = entry.key[:prefix_length]
        content, rows = totals.get(prefix, (0, 0))
        totals[prefix] = (content + entry.cost, rows + 1)
    return totals


class _Cutter:
    """Second pass: cut each prefix group into one shard, or parts of about equal size.

    Parts are cut where the running total passes each k-th of the group's content, and
    earlier whenever the next row would pass the cap or the member limit.
    """

    def __init__(
        self,
        totals: dict[str, tuple[int, int]],
        max_bytes: int,
        target_bytes: int,
        max_rows: int,
        fmt: ShardFormat,
        split: str,
        folder: str,
    ) -> None:
        self.totals = totals
        self.split_name = split
        self.folder = folder
        self.max_bytes = max_bytes
        self.fixed_bytes = fmt.fixed_bytes
        self.suffix = fmt.suffix
        self.per_part_content = max(target_bytes - fmt.fixed_bytes, 1)
        self.max_rows = max_rows
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
        self.split = self.fixed_bytes + content > self.max_bytes or rows > self.max_rows
        self.parts_wanted = max(
            math.ceil(content / self.per_part_content), math.ceil(rows / self.max_rows), 2 if self.split else 1
        )
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
        if len(parts) == 1 and not self.split:
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
