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
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from .plan import ShardPlan

HUB_MAX_FOLDER_ENTRIES = 10_000
HUB_MAX_REPO_FILES = 100_000
FILES_PER_COMMIT = 100  # the Hub's advice for commits made over HTTP: push's default
#: Files each shard puts in the repo: itself (``data/``) and its rows as JSON Lines (``metadata/``).
FILES_PER_SHARD = 2
#: The repo's top-level files shardkit may write (card, manifest, metadata table, preview,
#: ``.gitattributes``, ``.gitignore``, a loading script): at most this many.
TOP_LEVEL_FILES = 7
#: The largest --max-shard-size (ZIP and tar entries, Parquet pages: 32-bit sizes).
LARGEST_SHARD_BYTES = 4 << 30


@dataclass(frozen=True)
class SplitFiles:
    """One split's share of the repo."""

    name: str
    shards: int
    bytes: int
    folder: str  # where its shards go: "data/" for a dataset without splits, else "data/<split>/"


@dataclass(frozen=True)
class RepoPlan:
    """The repo a plan makes: its splits' shards and folders, its files, the commits to push it."""

    splits: list[SplitFiles]
    files: int  # at most: every shard's files and every top-level file shardkit may write
    commits: int  # of up to FILES_PER_COMMIT files

    @property
    def fullest(self) -> SplitFiles:
        """The split whose folder holds the most entries (data/<split>/ and metadata/<split>/
        hold one file per shard each)."""
        return max(self.splits, key=lambda s: s.shards)

    def to_json(self) -> dict[str, object]:
        return {
            "files": self.files,
            "max_files": HUB_MAX_REPO_FILES,
            "fullest_folder": self.fullest.folder,
            "fullest_folder_entries": self.fullest.shards,
            "max_folder_entries": HUB_MAX_FOLDER_ENTRIES,
            "commits": self.commits,
            "files_per_commit": FILES_PER_COMMIT,
            "splits": [asdict(s) for s in self.splits],
        }

    def lines(self) -> Iterator[str]:
        """The figures against the limits, as --dry-run prints them."""
        fullest, commits = self.fullest, self.commits
        yield (
            f"Hub: {self.files:,} files at most (limit {HUB_MAX_REPO_FILES:,}); fullest folder {fullest.folder}:"
            f" {fullest.shards:,} shard{'s' if fullest.shards != 1 else ''} (limit {HUB_MAX_FOLDER_ENTRIES:,});"
            f" {commits:,} commit{'s' if commits != 1 else ''} of up to {FILES_PER_COMMIT} files to push"
        )


def repo_plan(plan: Sequence[ShardPlan]) -> RepoPlan:
    """The repo ``plan`` makes (its shards' names say their folders)."""
    splits: dict[str, SplitFiles] = {}
    for shard in plan:
        folder = shard.name.rsplit("/", 1)[0] + "/"
        was = splits.get(shard.split, SplitFiles(shard.split, 0, 0, folder))
        splits[shard.split] = SplitFiles(shard.split, was.shards + 1, was.bytes + shard.bytes, folder)
    files = FILES_PER_SHARD * len(plan) + TOP_LEVEL_FILES
    return RepoPlan(list(splits.values()), files, math.ceil(files / FILES_PER_COMMIT))


def limit_problem(repo: RepoPlan, *, target_bytes: int, max_shard_bytes: int, prefix_length: int) -> str | None:
    """The first Hub limit the repo breaks, in one line with the option that fixes it; None if
    it keeps them all. ``prefix_length``: the --prefix-length given (0: shards cut by size)."""
    fullest = repo.fullest
    if fullest.shards > HUB_MAX_FOLDER_ENTRIES:
        what = (
            f"{fullest.folder} would hold {fullest.shards:,} shards, over the {HUB_MAX_FOLDER_ENTRIES:,} entries"
            " the Hub allows in a folder"
        )
        bytes_, most = fullest.bytes, HUB_MAX_FOLDER_ENTRIES
    elif repo.files > HUB_MAX_REPO_FILES:
        what = (
            f"the repo would hold up to {repo.files:,} files (each shard and its metadata file), over the"
            f" {HUB_MAX_REPO_FILES:,} the Hub allows"
        )
        bytes_, most = sum(s.bytes for s in repo.splits), (HUB_MAX_REPO_FILES - TOP_LEVEL_FILES) // FILES_PER_SHARD
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
