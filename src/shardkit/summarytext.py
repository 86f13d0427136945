"""A pack's summary in words: what was written, kept, removed and skipped, and the rate over
what was written (never over shards a run only checked). `pack`, `pack-shards` and `remux`
print these lines; ``--json`` carries the same numbers as fields (PackSummary.to_json)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .card import human_size
from .hubplan import repo_plan

if TYPE_CHECKING:  # the CLI imports this module for verify's summary too; the packer only when it packs
    from .packconfig import PackSummary, ShardChange

#: A dry run lists this many of a split's changed shards, then how many more there are.
SHOWN_CHANGES = 20


def shards(count: int) -> str:
    return f"{count} shard" if count == 1 else f"{count} shards"


def rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def phases(seconds: dict[str, float]) -> str:
    """ " (check 1.2 s, write 4.5 s)": the phases that took a tenth of a second or more."""
    shown = [f"{phase} {s:.1f} s" for phase, s in seconds.items() if s >= 0.1]
    return f" ({', '.join(shown)})" if shown else ""


def mb_per_s(bytes_per_s: float) -> str:
    """A rate in one unit whatever its size (a summary compares runs): ``12.3 MB/s``, ``0.04 MB/s``."""
    mb = bytes_per_s / 1e6
    return f"{mb:.0f} MB/s" if mb >= 100 else f"{mb:.1f} MB/s" if mb >= 0.1 else f"{mb:.2g} MB/s"


def pack_line(summary: PackSummary) -> str:
    """One line: what the run wrote, kept and removed, or that there was nothing to do."""
    s = summary
    if not s.written_shards and not s.removed_shards:
        are = "is" if s.shards == 1 else "are"
        return (
            f"nothing to do: {shards(s.shards)} ({rows(s.rows)}, {human_size(s.bytes)}) {are} up to date"
            f" (checked in {s.seconds:.1f} s)" + _skipped(s)
        )
    if s.written_shards == s.shards:  # a first run, or all of it again
        head = f"packed {rows(s.rows)} into {shards(s.shards)} ({human_size(s.bytes)}) in {s.seconds:.1f} s"
    elif s.written_shards:
        head = (
            f"wrote {s.written_shards} of {shards(s.shards)} ({human_size(s.written_bytes)},"
            f" {rows(s.written_rows)}) in {s.seconds:.1f} s"
        )
    else:
        head = f"removed {shards(s.removed_shards)}, wrote none, in {s.seconds:.1f} s"
    rate = s.write_bytes_per_s
    line = head + (f", {mb_per_s(rate)} over the write phase" if rate is not None else "") + phases(s.phase_seconds)
    if s.written_shards and s.removed_shards:
        line += f"; removed {shards(s.removed_shards)}"
    line += _kept(s)
    if s.written_shards != s.shards:
        line += f"; {rows(s.rows)} in total ({human_size(s.bytes)})"
    return line + _skipped(s)


def dry_run_lines(summary: PackSummary) -> Iterator[str]:
    """Each split, the shards the run would write, rewrite or remove in it (and why), and the totals."""
    s = summary
    yield f"plan: {rows(s.rows)} -> {shards(s.shards)}"
    by_split: dict[str, list[ShardChange]] = {}
    for change in s.changes:
        by_split.setdefault(change.split, []).append(change)
    for split in s.splits:
        yield (
            f"  split {split['name']}: {rows(split['rows'])}, {shards(split['shards'])}"
            f" ({human_size(split['bytes'])}), "
            + (f"prefix length {split['prefix_length']}" if split["prefix_length"] else "cut by size")
        )
        yield from _change_lines(by_split.pop(split["name"], []))
    for name, changes in by_split.items():  # splits the new rows do not have
        yield f"  split {name}: no rows now"
        yield from _change_lines(changes)
    if s.plan:
        yield from repo_plan(s.plan).lines()
    if not s.written_shards and not s.removed_shards:
        are = "is" if s.shards == 1 else "are"
        yield f"would write nothing: {shards(s.shards)} ({rows(s.rows)}, {human_size(s.bytes)}) {are} up to date"
        return
    would = []
    if s.written_shards:
        of = f" of {shards(s.shards)}" if s.written_shards != s.shards else (" shard" if s.shards == 1 else " shards")
        would.append(f"write {s.written_shards}{of} ({human_size(s.written_bytes)}, {rows(s.written_rows)})")
    if s.removed_shards:
        would.append(f"remove {shards(s.removed_shards)}")
    if s.kept_shards:
        would.append(f"keep {s.kept_shards} unchanged")
    if s.resumed_shards:
        would.append(f"keep {s.resumed_shards} already written by an earlier run")
    yield "would " + ", ".join(would)


def _change_lines(changes: list[ShardChange]) -> Iterator[str]:
    for c in changes[:SHOWN_CHANGES]:
        yield f"    {c.action:<7} {c.file:<28} {rows(c.rows):>11} {human_size(c.bytes):>10}  {c.why}"
    if len(changes) > SHOWN_CHANGES:
        yield f"    ... and {len(changes) - SHOWN_CHANGES} more"


def _kept(s: PackSummary) -> str:
    return (f"; kept {s.kept_shards} unchanged" if s.kept_shards else "") + (
        f"; {s.resumed_shards} already written by an earlier run" if s.resumed_shards else ""
    )


def _skipped(s: PackSummary) -> str:
    """The rows left out: bad rows (--on-error skip) and duplicates (--on-duplicate skip)."""
    left_out = []
    if s.rejected_rows:
        left_out.append(f"{s.rejected_rows} bad")
    if s.skipped_duplicates:
        left_out.append(f"{s.skipped_duplicates} duplicate")
    return (
        f"; skipped {' and '.join(left_out)} {'rows' if s.rejected_rows + s.skipped_duplicates != 1 else 'row'}"
        if left_out
        else ""
    )
