"""The repo a pack's plan makes, against the Hub's limits for one repository: its files, its
fullest folder, the commits a push needs. Checked before anything is written: pack refuses a
plan over a limit in one line naming the option that fixes it, ``--dry-run`` shows the figures,
and push checks the files it would publish again before uploading any.

The Hub's limits (https://huggingface.co/docs/hub/repositories-recommendations, 2026): under
100,000 files in a repo, under 10,000 entries in a folder, files under 50 GB (a shard is at
most 4 GiB), about 100 files per commit (push's ``--files-per-commit``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

from .plan import ShardPlan, shard_stem

#: The Hub takes fewer entries (files and folders) than this in a folder, fewer files in a repo.
HUB_MAX_FOLDER_ENTRIES = 10_000
HUB_MAX_REPO_FILES = 100_000
FILES_PER_COMMIT = 100  # the Hub's advice for commits made over HTTP: push's default
#: The repo's top-level files shardkit may write (card, manifest, metadata table, preview,
#: ``.gitattributes``, ``.gitignore``, a loading script): at most this many.
TOP_LEVEL_FILES = 7
#: The largest --max-shard-size (ZIP and tar entries, Parquet pages: 32-bit sizes).
LARGEST_SHARD_BYTES = 4 << 30
#: A split of this many shards (more than a folder may hold) puts each in a subfolder named by
#: NESTED_FOLDER_DIGITS first hex digits of its name (256 folders for hashed keys), or more where
#: keys crowd one. (A name of its own: the tests nest a few shards by lowering it in a subprocess.)
NEST_FROM_SHARDS = HUB_MAX_FOLDER_ENTRIES
NESTED_FOLDER_DIGITS = 2
MAX_NESTED_FOLDER_DIGITS = 8


@dataclass(frozen=True)
class SplitFiles:
    """One split's share of the repo."""

    name: str
    shards: int
    bytes: int
    folder: str  # where its shards go: "data/" for a dataset without splits, else "data/<split>/"
    nested: bool  # its shards are in folders named by their names' first hex digits (see :func:`nested`)
    files: int = 0  # its shards and their metadata files
    fullest_folder: str = ""  # of its folders (its own, or its nested ones), the one with the most entries
    fullest_entries: int = 0


@dataclass(frozen=True)
class RepoPlan:
    """The repo a plan makes: its splits' shards and folders, its files, the commits to push it."""

    splits: list[SplitFiles]
    files: int  # at most: every shard's files and every top-level file shardkit may write
    commits: int  # of up to FILES_PER_COMMIT files
    fullest_folder: str  # the folder of data/ holding the most entries (metadata/ mirrors data/)
    fullest_entries: int

    @property
    def fullest_split(self) -> SplitFiles:
        """The split whose shards are in the fullest folder."""
        folder = self.fullest_folder
        return max(self.splits, key=lambda s: (folder.startswith(s.folder), s.shards))

    def to_json(self) -> dict[str, object]:
        return {
            "files": self.files,
            "max_files": HUB_MAX_REPO_FILES,
            "fullest_folder": self.fullest_folder,
            "fullest_folder_entries": self.fullest_entries,
            "max_folder_entries": HUB_MAX_FOLDER_ENTRIES,
            "commits": self.commits,
            "files_per_commit": FILES_PER_COMMIT,
            "splits": [asdict(s) for s in self.splits],
        }

    def lines(self) -> Iterator[str]:
        """The figures against the limits, as --dry-run prints them."""
        entries, commits = self.fullest_entries, self.commits
        yield (
            f"Hub: {self.files:,} files at most (limit {HUB_MAX_REPO_FILES:,}); fullest folder {self.fullest_folder}:"
            f" {_entries(entries)} (limit {HUB_MAX_FOLDER_ENTRIES:,});"
            f" {commits:,} commit{'s' if commits != 1 else ''} of up to {FILES_PER_COMMIT} files to push"
        )
        if len(self.splits) == 1 and not self.splits[0].nested:
            return  # the line above says it all
        for split in self.splits:
            nested = f", each in {split.folder}<first hex digits of its name>/" if split.nested else ""
            yield (
                f"  split {split.name}: {split.shards:,} shard{'s' if split.shards != 1 else ''}{nested};"
                f" {split.files:,} files; fullest folder {split.fullest_folder}: {_entries(split.fullest_entries)}"
            )


def nested(shards: list[ShardPlan]) -> list[ShardPlan]:
    """One split's shards, each in a folder the Hub takes: as planned while they fit in one
    folder (fewer than :data:`NEST_FROM_SHARDS`), else each in a subfolder named by the first hex
    digits of its name (``data/train/3f2a.zip`` -> ``data/train/3f/3f2a.zip``, its rows in
    ``metadata/train/3f.jsonl`` with the folder's other shards'): two digits, or more where keys crowd a folder
    (keys given by the rows need not be spread as hashes are). Keys being sorted, the folders are
    too: a shard's folder sorts at or before every later shard's."""
    if len(shards) < NEST_FROM_SHARDS:
        return shards
    stems = [shard_stem(s.name) for s in shards]
    for digits in range(NESTED_FOLDER_DIGITS, MAX_NESTED_FOLDER_DIGITS + 1):
        per_folder = Counter(_folder_of(stem, digits) for stem in stems)
        if max(per_folder.values()) < HUB_MAX_FOLDER_ENTRIES or len(per_folder) >= HUB_MAX_FOLDER_ENTRIES:
            break  # (if none fits, limit_problem refuses the fullest folder)
    placed = []
    for shard, stem in zip(shards, stems, strict=True):
        folder, file = shard.name.rsplit("/", 1)
        placed.append(replace(shard, name=f"{folder}/{_folder_of(stem, digits)}/{file}"))
    return placed


def _folder_of(stem: str, digits: int) -> str:
    """A nested shard's folder: the first ``digits`` hex digits of its name, a shorter name's
    padded with 0s (``8``, where keys from ``80...`` start, is in ``80/``), which keeps the
    folders in the order of the names in them."""
    return stem.split("-", 1)[0].ljust(digits, "0")[:digits]


def folder_entries(paths: Iterable[str]) -> Counter[str]:
    """How many entries each folder of a repo holding ``paths`` has (the Hub counts files and
    subfolders alike): ``{"data/": 2, "data/train/": 256, "data/train/3f/": 180, ...}`` (the
    repo's root is ``""``)."""
    entries: Counter[str] = Counter()
    folders: set[str] = set()
    for path in paths:
        folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        entries[folder] += 1
        while folder and folder not in folders:  # a folder is an entry of its parent, once
            folders.add(folder)
            parent = folder[:-1].rsplit("/", 1)[0] + "/" if "/" in folder[:-1] else ""
            entries[parent] += 1
            folder = parent
    return entries


def repo_plan(plan: Sequence[ShardPlan]) -> RepoPlan:
    """The repo ``plan`` makes (its shards' names say their folders)."""
    splits: dict[str, SplitFiles] = {}
    # Each shard has its rows as JSON Lines: in a file of its own beside a flat shard, in one
    # file per folder for nested shards (manifest.metadata_file_of).
    metadata_files: dict[str, set[str]] = {}
    for shard in plan:
        flat = _is_flat(shard)
        folder = shard.name.rsplit("/", 1)[0] + "/"
        was = splits.get(shard.split) or SplitFiles(
            shard.split, 0, 0, folder if flat else folder[:-1].rsplit("/", 1)[0] + "/", not flat
        )
        splits[shard.split] = replace(was, shards=was.shards + 1, bytes=was.bytes + shard.bytes)
        metadata_files.setdefault(shard.split, set()).add(shard.name if flat else folder)
    folders = folder_entries(shard.name for shard in plan)
    folders.pop("", None)  # the root holds data/, metadata/ and the top-level files: never many
    for name, split in splits.items():
        # Its folder and those nested in it (a split's folder is data/ only in a dataset without splits).
        fullest_folder, fullest_entries = _fullest(
            Counter({f: n for f, n in folders.items() if f.startswith(split.folder)})
        )
        files = split.shards + len(metadata_files[name])
        splits[name] = replace(split, files=files, fullest_folder=fullest_folder, fullest_entries=fullest_entries)
    files = sum(s.files for s in splits.values()) + TOP_LEVEL_FILES
    fullest, entries = _fullest(folders)
    return RepoPlan(list(splits.values()), files, math.ceil(files / FILES_PER_COMMIT), fullest, entries)


def _entries(n: int) -> str:
    return f"{n:,} entr{'ies' if n != 1 else 'y'}"


def _fullest(folders: Counter[str]) -> tuple[str, int]:
    """The folder with the most entries (the first of them in name order), and how many."""
    if not folders:
        return "data/", 0
    return min(folders.items(), key=lambda item: (-item[1], item[0]))


def _is_flat(shard: ShardPlan) -> bool:
    """Whether a planned shard is in its split's folder, not in one :func:`nested` made."""
    return shard.name.rsplit("/", 1)[0] in ("data", f"data/{shard.split}")


def limit_problem(repo: RepoPlan, *, target_bytes: int, max_shard_bytes: int, prefix_length: int) -> str | None:
    """The first Hub limit the repo breaks, in one line with the option that fixes it; None if
    it keeps them all. ``prefix_length``: the --prefix-length given (0: shards cut by size)."""
    if repo.fullest_entries >= HUB_MAX_FOLDER_ENTRIES:  # a split nested() could not spread
        split = repo.fullest_split
        if split.folder != repo.fullest_folder:
            held = "shards (the keys given crowd there)"
        else:
            held = "folders of shards" if split.nested else "shards"
        what = (
            f"{repo.fullest_folder} would hold {repo.fullest_entries:,} {held}; the Hub allows fewer than"
            f" {HUB_MAX_FOLDER_ENTRIES:,} entries in a folder"
        )
        # As many shards as one folder holds always fit (in the split's own folder).
        bytes_, most = repo.fullest_split.bytes, HUB_MAX_FOLDER_ENTRIES - 1
    elif repo.files >= HUB_MAX_REPO_FILES:
        what = (
            f"the repo would hold up to {repo.files:,} files (its shards and their metadata files); the Hub"
            f" allows fewer than {HUB_MAX_REPO_FILES:,}"
        )
        # As many shards as leave room for a metadata file per nested folder of every split.
        room = HUB_MAX_REPO_FILES - 1 - TOP_LEVEL_FILES - 16**NESTED_FOLDER_DIGITS * len(repo.splits)
        bytes_, most = sum(s.bytes for s in repo.splits), room
    else:
        return None
    return f"{what}; {_fewer_shards(bytes_, most, target_bytes, max_shard_bytes, prefix_length)}"


def _fewer_shards(total: int, shards: int, target_bytes: int, max_shard_bytes: int, prefix_length: int) -> str:
    """The option that cuts ``total`` bytes into at most ``shards`` shards, as advice."""
    if prefix_length:
        return f"a shorter --prefix-length than {prefix_length} makes fewer shards"
    # Shards land near the target (round(split bytes / target) of them): a few percent of room.
    need = math.ceil(total / (shards * 0.98))
    if need > LARGEST_SHARD_BYTES:
        return (
            f"even shards of {LARGEST_SHARD_BYTES >> 30} GiB, the largest, would be too many: publish the"
            " dataset as several repos (a split or a range of keys each)"
        )
    fix = f"--target-shard-size {_size(need)} or more (now {_size(target_bytes)}) makes fewer"
    if need > max_shard_bytes:
        fix += f", with --max-shard-size at least as large (now {_size(max_shard_bytes)})"
    return fix


def _size(n: int) -> str:
    """A size as the CLI takes it (``1400``, ``620MB``), rounded up to whole MB from 1 MB on."""
    return f"{math.ceil(n / 1e6)}MB" if n >= 1_000_000 else str(n)
