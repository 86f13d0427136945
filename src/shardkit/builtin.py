"""What datasets' builtin loaders will do with a packed layout, before anything is written.

``load_dataset(repo)`` reads ZIP shards with the builder it infers from their members: per split,
every dotted suffix of the member names of the split's first 10 ZIPs (their members sorted by
name; the first 200 of each in datasets 3.6 and 4.0, all of them in 5.x) is counted, and the
most common wins, a tie going to the one seen first (``infer_module_for_data_files_list_in_archives``,
datasets 3.6 to 5.x). The metadata member counts once per ZIP, after the files (``images/...``
sorts before ``metadata.parquet``), and no card setting can override the choice; every split must
come out the same. So a split of many shards with about one file per shard of each extension
(the files' extensions mixed) is opened with the ``parquet`` builder, and fails. shardkit's
planner keeps that rare (a split smaller than the target is one shard); ``--prefix-length`` can
bring it back. tar and Parquet shards are read by the builder their own extension names.

(The other refusal of earlier layouts, splits whose metadata.jsonl files datasets inferred other
types from, cannot happen since ZIP shards hold a typed metadata.parquet: every shard of every
split has the card's schema.)
"""

from __future__ import annotations

from collections import Counter

from .decode import AUDIO_EXTENSIONS
from .formats import ShardFormat
from .plan import BY_SIZE, ShardPlan
from .staging import iter_staged

#: How many ZIPs, and members of each, datasets lists to choose the builder for a split's ZIPs:
#: 10 archives in 3.6 to 5.x; the first 200 members of each (sorted) in 3.6 and 4.0, all in 5.x.
INFERENCE_ARCHIVES = 10
INFERENCE_MEMBER_LIMITS = (200, None)
_MODULES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}


def builder_for_members(shard_members: list[list[str]]) -> str:
    """The builder ``load_dataset(repo)`` picks for one split's ZIP shards (``shard_members``: each
    shard's member names, shards in name order), as datasets 3.6 to 5.x decide it: the first
    that is not a folder builder if any of those versions picks one, else "imagefolder" or
    "audiofolder"."""
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


def builtin_loader_warnings(
    fmt: ShardFormat, plan: list[ShardPlan], staging_path: str, modality: str, prefix_lengths: dict[str, int]
) -> list[str]:
    """Why ``load_dataset(repo)`` would open a split of these shards with the wrong builder, one
    sentence per split (none: it opens every split right). ``prefix_lengths``: each split's (0:
    cut by size), for the advice."""
    if not fmt.builder_from_members or fmt.metadata_member is None:
        return []
    wanted = f"{modality}folder"
    by_split: dict[str, list[ShardPlan]] = {}
    for shard in plan:
        by_split.setdefault(shard.split, []).append(shard)
    warnings = []
    for split, shards in by_split.items():
        first = sorted(shards, key=lambda p: p.name)[:INFERENCE_ARCHIVES]
        members = [
            [fmt.metadata_member, *(fmt.member_name(r.key, r.ext) for r in iter_staged(staging_path, p.offset, p.rows))]
            for p in first
        ]
        picked = builder_for_members(members)
        if picked != wanted:
            fix = (
                "Pack without --prefix-length (with --force over this output: splits are then cut by size, into"
                " fewer, larger shards),"
                if prefix_lengths.get(split, BY_SIZE) != BY_SIZE
                else "Pack with a larger --target-shard-size,"
            )
            warnings.append(
                f"split {split!r}: datasets' load_dataset(repo) would open it with its {picked!r} builder, not"
                f" {wanted!r}, and fail: it picks the most common file extension among the members of a split's"
                f" first {INFERENCE_ARCHIVES} ZIP shards, and here each shard's {fmt.metadata_member} outnumbers"
                f" every media extension ({len(shards)} shards of few files, of several extensions). {fix} or"
                " with --format tar or parquet (datasets picks their builder by the shard files' extension);"
                " shardkit.stream(repo) reads it as it is."
            )
    return warnings
