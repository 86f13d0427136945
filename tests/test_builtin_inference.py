"""The builder datasets would infer for a split's ZIP shards, counted without holding the names.

``builder_for_members`` takes each shard's member names one at a time (a shard of tiny files has
millions); what it picks must be what the rule gives over the names held and sorted: per limit
(the first 200 sorted members of each of the first 10 shards, and all of them), the most common
dotted suffix, a tie going to the one seen first. tests/test_compat.py checks the rule against
datasets itself.
"""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter
from collections.abc import Iterator

from shardkit.builtin import INFERENCE_ARCHIVES, INFERENCE_MEMBER_LIMITS, builder_for_members
from shardkit.decode import AUDIO_EXTENSIONS

_MODULES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


def _rule(shard_members: list[list[str]]) -> str:
    """The rule over the names held and sorted, as shardkit counted before (the reference)."""
    picks = []
    for limit in INFERENCE_MEMBER_LIMITS:
        counts: Counter[str] = Counter()
        for members in shard_members[:INFERENCE_ARCHIVES]:
            for name in sorted(members)[:limit]:
                counts.update("." + part.lower() for part in name.rsplit("/", 1)[-1].split(".")[1:])
        if counts:
            ext = counts.most_common(1)[0][0]
            picks.append(_MODULES.get(ext, "audiofolder" if ext in AUDIO_EXTENSIONS else "imagefolder"))
    return next((p for p in picks if not p.endswith("folder")), picks[0] if picks else "imagefolder")


def test_the_streamed_count_picks_what_the_sorted_names_pick() -> None:
    """Random splits: few or many members a shard (more than 200, so the two limits differ),
    names unsorted, mixed-case and multi-dotted suffixes, none or a trailing dot, ties between
    suffixes, more shards than datasets looks at; names are given as generators."""
    rng = random.Random(37)
    suffixes = ["jpg", "JPG", "png", "tar.gz", "json", "wav", "csv", "parquet", "", None]  # "": a trailing dot
    picked: set[str] = set()
    for case in range(400):
        shards = []
        for _ in range(rng.randint(1, 13)):
            n = rng.choice([0, 1, 2, 3, rng.randint(4, 40), rng.randint(150, 450)])
            exts = rng.sample(suffixes, rng.randint(1, 3))
            tails = ["" if ext is None else "." + ext for ext in rng.choices(exts, k=n)]
            names = [f"images/{rng.randrange(10**6):06d}{tail}" for tail in tails]
            names = list(dict.fromkeys(names))  # member names are unique in a shard
            names.append("metadata.parquet")
            rng.shuffle(names)
            shards.append(names)
        got = builder_for_members(iter(shard) for shard in shards)
        assert got == _rule(shards), (case, shards)
        picked.add(got)
    assert {"imagefolder", "parquet", "json"} <= picked  # the cases reach more than one answer


def test_a_tie_goes_to_the_suffix_the_sorted_names_reach_first() -> None:
    # One shard, two of each, given out of order: the suffix of the smallest name wins the tie.
    assert builder_for_members([["images/b.json", "images/d.csv", "images/c.json", "images/a.csv"]]) == "csv"
    assert builder_for_members([["images/b.csv", "images/d.json", "images/c.csv", "images/a.json"]]) == "json"
    # .jpg ties .json (two each), seen first in b.JPG: of its two tails (.JPG, .x.jpg), the first place counts.
    members = ["images/e.json", "images/d.x.jpg", "images/c.json", "images/b.JPG"]
    assert builder_for_members([members]) == _rule([members]) == "imagefolder"
    members = ["x/2.json", "x/1.csv", "x/0.parquet"]  # one each: the smallest name's suffix
    assert builder_for_members([members]) == _rule([members]) == "parquet"


def test_a_shard_of_many_members_is_counted_without_holding_its_names() -> None:
    """300,000 members (about 25 MB of names held): the count holds a few hundred of them."""

    def names() -> Iterator[str]:
        yield "metadata.parquet"
        for i in range(300_000):
            yield f"images/{(i * 7919) % 300_000:08d}.{'jpg' if i % 3 else 'png'}"

    tracemalloc.start()
    try:
        picked = builder_for_members([names()])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert picked == "imagefolder"
    assert peak < 1 << 20, peak
