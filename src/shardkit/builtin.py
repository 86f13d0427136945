"""What datasets' builtin loaders do with a packed layout: the one module that knows them.

Per format (:data:`LOADERS`): the builder ``load_dataset(repo)`` reads the shards with, whether
it reads the card's features from the config, the columns it gives (:func:`card_features`), the
units of work and requests it makes, and, for ZIP, the builder it infers before anything is
written (:func:`builtin_loader_warnings`).

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

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .decode import AUDIO_EXTENSIONS
from .formats import ShardFormat
from .plan import BY_SIZE, ShardPlan

#: How many ZIPs, and members of each, datasets lists to choose the builder for a split's ZIPs:
#: 10 archives in 3.6 to 5.x; the first 200 members of each (sorted) in 3.6 and 4.0, all in 5.x.
INFERENCE_ARCHIVES = 10
INFERENCE_FIRST_MEMBERS = 200
INFERENCE_MEMBER_LIMITS = (INFERENCE_FIRST_MEMBERS, None)  # the two that _shard_suffix_counts counts
_MODULES = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
#: The builder that gives a webdataset's columns: one per file extension, ``json``, ``__key__``, ``__url__``.
WEBDATASET = "webdataset"
#: A folder builder: ``imagefolder`` or ``audiofolder``, after the file column.
FOLDER = "{file_column}folder"


@dataclass(frozen=True)
class BuiltinLoader:
    """How datasets' builtin loader reads one format's shards (3.6 to 5.x)."""

    #: The builder ``load_dataset(repo)`` reads them with (:data:`FOLDER`: after the file column).
    builder: str
    #: The builder reads the card's features in the config (imagefolder/audiofolder, parquet);
    #: webdataset's config has no such field (a warning), it reads ``dataset_info.features``.
    config_features: bool = True
    #: datasets chooses the builder from the names of the shards' members (the most common
    #: extension), as for any archive: a card setting cannot override it.
    builder_from_members: bool = False
    #: What it gives DataLoader workers as units of work, and the requests it makes (the card's
    #: table of readers), and what else the card says of it.
    units: str = "one per shard"
    requests: str = "a few per shard"
    caveat: str = ""
    #: What the card's features section adds when its columns differ from ``shardkit.stream``'s.
    columns_note: str = ""


#: Each shard format's builtin loader, by format name.
LOADERS = {
    "zip": BuiltinLoader(
        builder=FOLDER,
        builder_from_members=True,
        units="one for the whole split",
        requests="several per file",
        caveat=" It reads every ZIP of a split as one unit of work, so `DataLoader(num_workers=N)` keeps one"
        " worker busy, and fetches each file with requests of its own.",
    ),
    "tar": BuiltinLoader(
        builder=WEBDATASET,
        config_features=False,
        columns_note="datasets' builtin webdataset loader gives the file as a column named after its extension"
        " (`jpg`...), the other columns inside `json`, and `__key__`, `__url__`; `shardkit.stream` gives"
        " the columns above.",
    ),
    "parquet": BuiltinLoader(builder="parquet"),
}


def builtin_loader(fmt: ShardFormat) -> BuiltinLoader:
    return LOADERS[fmt.name]


def builder_name(fmt: ShardFormat, file_column: str) -> str:
    """The datasets builder ``load_dataset(repo)`` reads ``fmt``'s shards with."""
    return LOADERS[fmt.name].builder.format(file_column=file_column)


def card_features(fmt: ShardFormat, features: list[dict[str, Any]], extensions: list[str]) -> list[dict[str, Any]]:
    """The features the card declares for ``fmt``'s builtin loader (``features``: a row's columns
    as ``shardkit.stream`` gives them; ``extensions``: the files' extensions).

    ZIP (imagefolder) and Parquet: the file column, ``key``, then every field. tar (datasets'
    webdataset builder): one column per file extension (``jpg``...), ``json`` (the row's metadata
    line as a struct) and the builder's ``__key__`` and ``__url__``.
    """
    if LOADERS[fmt.name].builder != WEBDATASET:
        return features
    file_dtype = features[0]["dtype"]
    line = [{"name": "file_name", "dtype": "string"}, *features[1:]]
    return [
        *({"name": ext.lstrip("."), "dtype": file_dtype} for ext in extensions),
        {"name": "json", "struct": line},
        {"name": "__key__", "dtype": "string"},
        {"name": "__url__", "dtype": "string"},
    ]


def builder_for_members(shard_members: Iterable[Iterable[str]]) -> str:
    """The builder ``load_dataset(repo)`` picks for one split's ZIP shards (``shard_members``: each
    shard's member names in any order, shards in name order), as datasets 3.6 to 5.x decide it:
    the first that is not a folder builder if any of those versions picks one, else
    "imagefolder" or "audiofolder".

    The names are taken one at a time, not held (a shard of tiny files has millions; the first
    200 of each shard aside): per limit, each suffix's count and where datasets first sees it,
    which breaks a tie."""
    counts: dict[int | None, Counter[str]] = {limit: Counter() for limit in INFERENCE_MEMBER_LIMITS}
    for members in itertools.islice(shard_members, INFERENCE_ARCHIVES):
        for limit, shard_counts in _shard_suffix_counts(members).items():
            for ext, n in shard_counts:  # in the order datasets meets them: a new one counts last
                counts[limit][ext] += n
    picks = []
    for limit in INFERENCE_MEMBER_LIMITS:
        if counts[limit]:
            ext = counts[limit].most_common(1)[0][0]  # (a tie: the first one seen)
            picks.append(_MODULES.get(ext, "audiofolder" if ext in AUDIO_EXTENSIONS else "imagefolder"))
    return next((p for p in picks if not p.endswith("folder")), picks[0] if picks else "imagefolder")


def _suffixes(tail: str) -> list[str]:
    """The dotted suffixes datasets counts in a member's name, from the name's ``tail`` (its base
    name from the first dot on): ``.Tar.GZ`` -> ``.tar``, ``.gz``."""
    return ["." + part.lower() for part in tail[1:].split(".")] if tail else []


def _tail(name: str) -> str:
    """A member's base name from its first dot on (``images/a/b.tar.gz`` -> ``.tar.gz``; "": no dot)."""
    base = name.rpartition("/")[2]
    dot = base.find(".")
    return base[dot:] if dot >= 0 else ""


def _shard_suffix_counts(members: Iterable[str]) -> dict[int | None, list[tuple[str, int]]]:
    """Per limit of :data:`INFERENCE_MEMBER_LIMITS`, the suffix counts of a shard's first
    ``limit`` members (all: None) in name order, each suffix where the sorted names first hold
    it. Memory: the first :data:`INFERENCE_FIRST_MEMBERS` names and one entry per distinct tail
    (``.jpg``, ``.tar.gz``): one per file extension for shardkit's member names, whose keys
    hold no dot."""
    firsts: list[str] = []  # the smallest names so far, sorted
    tails: Counter[str] = Counter()
    smallest: dict[str, str] = {}  # each tail's first name in name order
    for name in members:
        if len(firsts) < INFERENCE_FIRST_MEMBERS:
            bisect.insort(firsts, name)
        elif name < firsts[-1]:
            bisect.insort(firsts, name)
            firsts.pop()
        tail = _tail(name)
        tails[tail] += 1
        if tail not in smallest or name < smallest[tail]:
            smallest[tail] = name
    head: Counter[str] = Counter()
    for name in firsts:
        head.update(_suffixes(_tail(name)))
    totals: Counter[str] = Counter()
    first_at: dict[str, tuple[str, int]] = {}  # each suffix's first place in name order
    for tail, n in tails.items():
        for i, ext in enumerate(_suffixes(tail)):
            totals[ext] += n
            if ext not in first_at or (smallest[tail], i) < first_at[ext]:
                first_at[ext] = (smallest[tail], i)
    in_order = sorted(first_at, key=first_at.__getitem__)
    return {INFERENCE_FIRST_MEMBERS: list(head.items()), None: [(ext, totals[ext]) for ext in in_order]}


def builtin_loader_warnings(
    fmt: ShardFormat, plan: list[ShardPlan], staging_path: str, modality: str, prefix_lengths: dict[str, int]
) -> list[str]:
    """Why ``load_dataset(repo)`` would open a split of these shards with the wrong builder, one
    sentence per split (none: it opens every split right). ``prefix_lengths``: each split's (0:
    cut by size), for the advice."""
    if not LOADERS[fmt.name].builder_from_members or fmt.metadata_member is None:
        return []
    from .staging import iter_keys_and_extensions  # the packer's: the card, which imports this module, needs none of it

    wanted = builder_name(fmt, modality)
    by_split: dict[str, list[ShardPlan]] = {}
    for shard in plan:
        by_split.setdefault(shard.split, []).append(shard)
    warnings = []
    for split, shards in by_split.items():
        first = sorted(shards, key=lambda p: p.name)[:INFERENCE_ARCHIVES]
        members = (
            itertools.chain([fmt.metadata_member], itertools.starmap(fmt.member_name, rows))
            for rows in (iter_keys_and_extensions(staging_path, p.offset, p.rows) for p in first)
        )
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
