"""The manifest, ``shards.json``: what a packed dataset holds, shard by shard.

Readers (the loading script, ``shardkit verify``, ``shardkit push``) trust nothing else. It has
no timestamps, so the same input gives the same manifest, byte for byte. It is written
atomically and only after every shard it names exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from .errors import UsageError, naming
from .formats import FORMAT_NAMES, ShardFormat, format_named, format_of_manifest
from .metadata import KEY_SCHEME
from .table import TABLE_NAME

MANIFEST_NAME = "shards.json"


@dataclass(frozen=True)
class ManifestShard:
    """One written shard, as the manifest (and the writer's result) records it."""

    file: str  # "data/3f.zip", relative to OUT_DIR
    metadata: str  # "metadata/3f.jsonl"
    rows: int
    bytes: int
    sha256: str
    metadata_sha256: str
    first_key: str
    last_key: str
    split: str = "train"  # the split it belongs to (data/<split>/ when the rows named splits)
    #: sha256 of the rows it was written from (keys, file sizes and names, published lines; for
    #: Parquet the features too): ``pack --update`` keeps a shard whose rows did not change.
    input_sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SplitSummary:
    """One split as the manifest and the card describe it."""

    name: str
    rows: int
    shards: int
    bytes: int  # of its shard files
    prefix_length: int
    data_files: str  # the card's pattern for its shards, e.g. "data/test/*.zip"


@dataclass(frozen=True)
class Options:
    """The packing options that shape the output: a resume must use the same ones."""

    prefix_length: int
    max_shard_bytes: int
    target_shard_bytes: int
    format: str = "zip"

    @property
    def shard_format(self) -> ShardFormat:
        return format_named(self.format)


@dataclass(frozen=True)
class Manifest:
    options: Options
    input_fingerprint: str
    modality: str
    features: list[dict[str, Any]]
    shards: list[ManifestShard]
    key_scheme: str = KEY_SCHEME
    #: Every row's metadata as one typed table (:mod:`.table`); None in manifests from before it.
    metadata_table: str | None = TABLE_NAME
    metadata_table_sha256: str | None = None
    #: Each split's prefix length: 0 cut by size (shards named by where their keys start, see
    #: :mod:`.plan`), L >= 1 by key prefix; a manifest from before splits has the one of
    #: options.prefix_length, for ``train``.
    prefix_lengths: dict[str, int] = field(default_factory=dict)
    #: The format's layout version it was packed with (:attr:`.ShardFormat.layout_version`);
    #: None in manifests from before layout 4, which did not record it.
    layout: int | None = None

    def prefix_lengths_by_split(self) -> dict[str, int]:
        """Each split's prefix length (0: cut by size)."""
        return {s.name: s.prefix_length for s in self.splits()}

    @property
    def split_folders(self) -> bool:
        """Whether the shards are in a folder per split (the rows named their splits)."""
        return any(s.file.count("/") > 1 for s in self.shards)

    def splits(self) -> list[SplitSummary]:
        """The splits, in the order of their shards (names sorted, as the packer writes them)."""
        fmt = self.options.shard_format
        out: dict[str, list[ManifestShard]] = {}
        for shard in self.shards:
            out.setdefault(shard.split, []).append(shard)
        return [
            SplitSummary(
                name=name,
                rows=sum(s.rows for s in shards),
                shards=len(shards),
                bytes=sum(s.bytes for s in shards),
                prefix_length=self.prefix_lengths.get(name, self.options.prefix_length),
                data_files=f"data/{name}/*{fmt.suffix}" if self.split_folders else fmt.data_files_pattern,
            )
            for name, shards in out.items()
        ]

    def shards_of(self, split: str) -> list[ManifestShard]:
        """The shards of one split; a UsageError naming the splits there are for another name."""
        shards = [s for s in self.shards if s.split == split]
        if not shards:
            names = ", ".join(s.name for s in self.splits())
            raise UsageError(f"the dataset has no split {split!r}; its splits: {names}")
        return shards

    def to_json(self) -> dict[str, Any]:
        fmt = self.options.shard_format
        return {
            "format": fmt.manifest_format,
            "key_scheme": self.key_scheme,
            **({"layout": self.layout} if self.layout is not None else {}),
            "member_template": fmt.member_template,
            **({"metadata_member": fmt.metadata_member} if fmt.metadata_member else {}),
            "prefix_length": self.options.prefix_length,
            "max_shard_bytes": self.options.max_shard_bytes,
            "target_shard_bytes": self.options.target_shard_bytes,
            "input_fingerprint": self.input_fingerprint,
            "modality": self.modality,
            "totals": {
                "rows": sum(s.rows for s in self.shards),
                "shards": len(self.shards),
                "bytes": sum(s.bytes for s in self.shards),
            },
            "splits": {
                s.name: {"prefix_length": s.prefix_length, "rows": s.rows, "shards": s.shards, "bytes": s.bytes}
                for s in self.splits()
            },
            "features": self.features,
            **({"metadata_table": self.metadata_table} if self.metadata_table else {}),
            **({"metadata_table_sha256": self.metadata_table_sha256} if self.metadata_table_sha256 else {}),
            "shards": [asdict(s) for s in self.shards],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        fmt = format_of_manifest(str(data.get("format")))
        return cls(
            options=Options(data["prefix_length"], data["max_shard_bytes"], data["target_shard_bytes"], fmt.name),
            input_fingerprint=data["input_fingerprint"],
            modality=data["modality"],
            features=data["features"],
            shards=_checked_shards([ManifestShard(**s) for s in data["shards"]], fmt),
            metadata_table=_table_name(data.get("metadata_table")),
            metadata_table_sha256=data.get("metadata_table_sha256"),
            prefix_lengths={
                str(name): int(split["prefix_length"]) for name, split in (data.get("splits") or {}).items()
            },
            layout=int(data["layout"]) if data.get("layout") is not None else None,
        )


#: A shard's name as the planner makes it: ``data/[<split>/]<hex>[-<part>]<suffix>`` (the hex
#: digits: where its keys start, up to a key's length, or its key prefix). Readers follow nothing
#: else: a manifest naming ``../elsewhere.zip`` or an absolute path would make them read (and
#: publish) files outside the dataset.
_SHARD_NAME = re.compile(
    rf"data/((?:([A-Za-z0-9_]{{1,64}})/)?[0-9a-f]{{1,128}}(?:-[0-9]{{1,6}})?)\.({'|'.join(FORMAT_NAMES)})"
)


def _checked_shards(shards: list[ManifestShard], fmt: ShardFormat) -> list[ManifestShard]:
    seen: set[str] = set()
    folders: set[bool] = set()
    for shard in shards:
        match = _SHARD_NAME.fullmatch(shard.file)
        if match is None or match.group(3) != fmt.name:
            raise ValueError(f"shard {shard.file!r} is not data/[<split>/]<hex prefix>{fmt.suffix}")
        if shard.metadata != f"metadata/{match.group(1)}.jsonl":
            raise ValueError(
                f"shard {shard.file!r} has metadata {shard.metadata!r}, not metadata/{match.group(1)}.jsonl"
            )
        if shard.split != (match.group(2) or "train"):
            raise ValueError(f"shard {shard.file!r} is in the folder of another split than {shard.split!r}")
        folders.add(match.group(2) is not None)
        if shard.file in seen:
            raise ValueError(f"shard {shard.file!r} is named twice")
        # Readers plan from these (which rows a rank reads, where a cut piece ends): a shard of
        # no rows would never be opened, and its rows would be lost without a word.
        for name, value in (("rows", shard.rows), ("bytes", shard.bytes)):
            if type(value) is not int or value < 1:
                raise ValueError(f"shard {shard.file!r} has {name} {value!r}, not a whole number of at least 1")
        seen.add(shard.file)
    if len(folders) > 1:
        raise ValueError("some shards are in a split's folder and some are not")
    return shards


def _table_name(value: Any) -> str | None:
    """The manifest's ``metadata_table``: shardkit's one name, or absent (never a path to follow)."""
    if value not in (None, TABLE_NAME):
        raise ValueError(f"metadata_table must be {TABLE_NAME!r}, got {value!r}")
    return value  # type: ignore[no-any-return]


def dump_json(data: Any) -> bytes:
    return (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


#: A repo's working folder (:mod:`.outdir`); the temporary files of its root go in its ``tmp``.
WORK_DIR = ".shardkit"


def write_atomic(path: str, content: bytes) -> None:
    """Write a small file so that readers see the old or the new content, never a mix."""
    replace_atomic(path, lambda f: f.write(content))


def replace_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write`` writes to the open file it is given: readers see the
    old or the new content, never a mix, and a failed write leaves the old file as it was.

    In a repo root that has a working folder, the temporary file is written there (in
    ``.shardkit/tmp``, never published, on the same filesystem): a run killed part-way must
    not leave ``README.md.partial`` beside the files a push publishes. A write error names the
    file (a full disk shows on the write or the flush, whose errors name none).
    """
    folder, name = os.path.split(path)
    scratch = os.path.join(folder, WORK_DIR, "tmp")
    tmp = os.path.join(scratch if os.path.isdir(scratch) else folder, f"{name}.{secrets.token_hex(4)}.partial")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # Ctrl-C too: no partial file is left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise naming(exc, path) from None
        raise


def write_manifest(out_dir: str, manifest: Manifest) -> str:
    path = os.path.join(out_dir, MANIFEST_NAME)
    write_atomic(path, dump_json(manifest.to_json()))
    return path


def read_manifest(out_dir: str) -> Manifest | None:
    path = os.path.join(out_dir, MANIFEST_NAME)
    try:
        with open(path, "rb") as f:
            return Manifest.from_json(json.load(f))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} is not a shardkit manifest: {exc}") from None
