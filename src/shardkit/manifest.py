"""The manifest, ``shards.json``: what a packed dataset holds, shard by shard.

Readers (the loading script, ``shardkit verify``, ``shardkit push``) trust nothing else. It has
no timestamps, so the same input gives the same manifest, byte for byte. It is written
atomically and only after every shard it names exists.
"""

from __future__ import annotations

import builtins
import hashlib
import itertools
import json
import operator
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from .atomicfile import WORK_DIR as WORK_DIR  # (outdir's concept; defined beside write_atomic)
from .atomicfile import replace_atomic as replace_atomic
from .atomicfile import write_atomic as write_atomic
from .errors import ManifestError, UsageError, shown_value
from .formats import (
    FORMAT_NAMES,
    FORMATS,
    METADATA_MEMBER,
    METADATA_TABLE_MEMBER,
    ShardFormat,
    format_named,
    format_of_manifest,
)
from .location import Location, local_path, read_bounded, read_upto
from .location.reading import MAX_METADATA_FILE_BYTES
from .metadata import KEY_SCHEME, MAX_NESTING
from .plan import BY_SIZE, MAX_PREFIX_LENGTH, key_ranges
from .rowrules import KEY_RE, MAX_COLUMN_NAME_CHARS, column_name_problem
from .table import TABLE_NAME

MANIFEST_NAME = "shards.json"
#: The first layout a manifest records (those before record none).
RECORDED_LAYOUT = 4


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
    #: The shard's index (formats whose ``row_index`` is set: tar), absent from shards packed
    #: before it was recorded: row ``i * row_offsets_every`` begins at byte ``row_offsets[i]``.
    row_offsets_every: int = 0
    row_offsets: tuple[int, ...] = ()
    #: A nested shard's rows in its folder's metadata file (``metadata``, shared): bytes
    #: ``[start, end)``; None for a shard with a metadata file of its own (or not placed yet:
    #: a done record, before the pack's finish writes the folder's file).
    metadata_range: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.row_offsets:  # no index: the record as shardkit wrote it before indexes
            del data["row_offsets_every"], data["row_offsets"]
        else:
            data["row_offsets"] = list(self.row_offsets)
        if self.metadata_range is None:
            del data["metadata_range"]
        else:
            data["metadata_range"] = list(self.metadata_range)
        return data

    def has_rows(self, data: builtins.bytes) -> bool:  # (builtins: the field ``bytes`` shadows the type)
        """Whether ``data`` are the rows this shard was written with (its ``metadata_sha256``)."""
        return hashlib.sha256(data).hexdigest() == self.metadata_sha256


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
        return any(_place(s).split_folder for s in self.shards)

    def nested(self, split: str) -> bool:
        """Whether the split's shards are in folders named by their names' first hex digits."""
        return any(_place(s).nested for s in self.shards if s.split == split)

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
                data_files=data_files_pattern(fmt, name if self.split_folders else None, nested=self.nested(name)),
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
            "shards": [s.to_json() for s in self.shards],
        }

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """The manifest a parsed ``shards.json`` describes, checked as a whole (:func:`checked_manifest`)."""
        return checked_manifest(data)


# --- reading a manifest: checked as a whole before any reader uses it ----------------------------

#: The largest ``shards.json`` a reader takes (about 400,000 shards; 170,000 tar shards of 64
#: indexed rows, whose index of row offsets costs about 1 KB each). It is read whole and parsed
#: in memory, from a folder, a URL or the Hub: a larger one is refused before it is parsed.
MAX_MANIFEST_BYTES = 256 << 20
#: The most columns (at any level) and class names a manifest may declare.
MAX_FEATURES = 100_000
MAX_CLASS_NAMES = 10_000_000
#: The longest string of the manifest's own vocabulary (a column or class name, a split, a tag).
MAX_NAME_CHARS = MAX_COLUMN_NAME_CHARS

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: What every manifest has had (fields added later may be absent: earlier versions' manifests).
_REQUIRED = (
    "format",
    "prefix_length",
    "max_shard_bytes",
    "target_shard_bytes",
    "input_fingerprint",
    "modality",
    "features",
    "shards",
)
#: Every top-level field :meth:`Manifest.to_json` writes (and earlier versions wrote): no other.
_FIELDS = frozenset(
    {
        *_REQUIRED,
        "key_scheme",
        "layout",
        "member_template",
        "metadata_member",
        "totals",
        "splits",
        "metadata_table",
        "metadata_table_sha256",
    }
)
#: A lone UTF-16 surrogate: JSON's ``\ud800`` escape makes one, no text holds one (it cannot
#: be written as UTF-8, and printing it fails).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: The dtypes :mod:`.schema` writes for a field, and the file column's.
FIELD_DTYPES = frozenset({"string", "int64", "float64", "bool"})
MODALITIES = ("image", "audio")
_SHARD_FIELDS = {f.name for f in fields(ManifestShard)}
_SHARD_REQUIRED = {f.name for f in fields(ManifestShard) if f.default is MISSING}

#: A shard's name as the planner makes it: ``data/[<split>/][<folder>/]<hex>[-<part>]<suffix>``
#: (the hex digits: where its keys start, up to a key's length, or its key prefix; the folder, in
#: a split of more shards than a folder may hold: the name's first hex digits, see
#: :func:`shard_place`). Readers follow nothing else: a manifest naming ``../elsewhere.zip`` or an
#: absolute path would make them read (and publish) files outside the dataset.
_SHARD_NAME = re.compile(
    rf"data/((?:[A-Za-z0-9_]{{1,64}}/){{0,2}})([0-9a-f]{{1,128}}(?:-[0-9]{{1,6}})?)\.({'|'.join(FORMAT_NAMES)})"
)
_NESTED_FOLDER = re.compile(r"[0-9a-f]{2,8}")


@dataclass(frozen=True)
class ShardPlace:
    """Where a shard's file is in ``data/``, by its path and its split."""

    split_folder: bool  # in data/<split>/ (the rows named their splits)
    nested: bool  # in a folder named by its name's first hex digits (hubplan.nested)
    stem: str  # its path under data/ without the suffix: "train/3f/3f2a" (its metadata file's too)
    suffix: str  # "zip"


def data_files_pattern(fmt: ShardFormat, split: str | None, *, nested: bool) -> str:
    """The card's ``data_files`` path of a split's shards: ``data/[<split>/][*/]*<suffix>``
    (``split`` None: a dataset without splits)."""
    folder = "data/" if split is None else f"data/{split}/"
    return f"{folder}{'*/' if nested else ''}*{fmt.suffix}"


def shard_place(file: str, split: str) -> ShardPlace | None:
    """Where ``file`` (a manifest's shard path) is, for a shard of ``split``; None if it is not
    a path the planner makes. ``data/3f/3f2a.zip`` is a shard of split ``3f`` in its split's
    folder, or of a dataset without splits (``train``) in the nested folder ``3f``: the split
    decides."""
    match = _SHARD_NAME.fullmatch(file)
    if match is None:
        return None
    folders, name = match.group(1).split("/")[:-1], match.group(2)
    split_folder = bool(folders) and folders[0] == split
    nested = folders[1:] if split_folder else folders
    if len(nested) > 1 or (nested and not _nests(nested[0], name)):
        return None
    return ShardPlace(split_folder, bool(nested), file[len("data/") : -len(match.group(3)) - 1], match.group(3))


def metadata_file_of(file: str, split: str) -> str:
    """The published file that holds a shard's rows as JSON Lines: ``metadata/<stem>.jsonl``
    beside a shard in a flat folder; for a nested shard, its folder's one file,
    ``metadata/[<split>/]<folder>.jsonl``, holding the rows of every shard of that folder one
    shard after another (each shard's part: its ``metadata_range``), so that a split of 50,000
    shards adds 256 files to the repo, not 50,000."""
    place = shard_place(file, split)
    if place is None:
        raise ValueError(f"{file!r} is not a shard's path")
    return f"metadata/{place.stem.rsplit('/', 1)[0]}.jsonl" if place.nested else own_metadata_file(file)


def own_metadata_file(file: str) -> str:
    """A metadata file of a shard's own: its path under metadata/ (``data/train/3f.zip`` ->
    ``metadata/train/3f.jsonl``). A shard whose ``metadata`` is another is nested."""
    return f"metadata/{file.removeprefix('data/').rsplit('.', 1)[0]}.jsonl"


#: Where a nested shard's part of its folder's metadata file may end, at most: far past any
#: folder's rows (256 folders of a 100M-row dataset hold a few hundred MB each), and within what
#: a file offset can hold (a hostile manifest's 2**64 is one line, not an overflow).
MAX_METADATA_PART_END = 1 << 40
#: Where nested shards' rows wait for their folder's metadata file (:func:`lines_file_of`).
LINES_DIR = f"{WORK_DIR}/lines"


def lines_file_of(file: str) -> str:
    """Where a nested shard's rows wait, as JSON Lines, until the pack's finish writes its
    folder's metadata file (and where they stay, for the next run to write it again from)."""
    return f"{LINES_DIR}/{file.removeprefix('data/').rsplit('.', 1)[0]}.jsonl"


def rows_written_to(file: str, metadata: str) -> str:
    """Where the writer puts the rows of shard ``file`` whose metadata file is ``metadata``: that
    file when it is the shard's own, else (a nested shard) its lines file, until the pack's
    finish writes its folder's metadata file."""
    return metadata if metadata == own_metadata_file(file) else lines_file_of(file)


def read_published_rows(location: Location, shard: ManifestShard) -> bytes:
    """A shard's rows as published, JSON Lines: its own metadata file whole, or a nested shard's
    part of its folder's file (fewer bytes where that file is short: :meth:`ManifestShard.has_rows`
    tells), or, in a done record before the finish placed them there, its lines file. Every
    reader of a part comes here, local or at a URL. FileNotFoundError when the file is not
    there; one line naming it past :data:`MAX_METADATA_FILE_BYTES` (a server may send an endless
    one)."""
    if shard.metadata_range is None:
        rel = rows_written_to(shard.file, shard.metadata)  # (a nested shard's lines file, not placed yet)
        with location.open_random(rel) as f:
            return read_bounded(f, MAX_METADATA_FILE_BYTES, location.where(rel))
    start, end = shard.metadata_range
    with location.open_range(shard.metadata, start, end) as f:
        return read_bounded(f, min(end - start, MAX_METADATA_FILE_BYTES), location.where(shard.metadata))


def _place(shard: ManifestShard) -> ShardPlace:
    place = shard_place(shard.file, shard.split)
    assert place is not None  # checked when the manifest was read
    return place


def _nests(folder: str, name: str) -> bool:
    """Whether ``folder`` is the one hubplan.nested puts shard ``name`` in, for its digits."""
    hex_digits = name.split("-", 1)[0]
    return _NESTED_FOLDER.fullmatch(folder) is not None and hex_digits.ljust(len(folder), "0").startswith(folder)


def parse_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in ``data`` (a ``shards.json``'s bytes), checked as a whole; anything else is
    one :class:`.ManifestError` line, ``<where>: <what is wrong>`` (``where`` names the file: its
    path or URL). Every reader of a manifest goes through here."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes, more than any shardkit manifest")
    if data.startswith(b"\xef\xbb\xbf"):  # shardkit writes none; json.loads(bytes) would skip it
        raise ManifestError(f"{where}: not a shardkit manifest (it begins with a byte order mark)")
    try:
        # Decoded strictly here: json.loads(bytes) takes UTF-16 and UTF-8-encoded surrogates too.
        parsed = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_names, parse_constant=_no_constant)
    except RecursionError:
        raise ManifestError(f"{where}: not a shardkit manifest (nested too deep)") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{where}: not a shardkit manifest (not UTF-8)") from None
    except ValueError as exc:  # JSONDecodeError, and the hooks' own
        raise ManifestError(f"{where}: not a shardkit manifest (not JSON: {exc})") from None
    try:
        return checked_manifest(parsed)
    except ValueError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def read_manifest_at(location: Location) -> Manifest | None:
    """The manifest of the repo at ``location`` (a folder, a URL, the Hub), checked
    (:func:`parse_manifest`); None when there is none. At most :data:`MAX_MANIFEST_BYTES` are read."""
    where = location.where(MANIFEST_NAME)
    try:
        with location.open(MANIFEST_NAME) as reader:
            data = read_upto(reader, MAX_MANIFEST_BYTES + 1)  # parse_manifest refuses more
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    return parse_manifest(data, where)


def _no_duplicate_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        names = [name for name, _ in pairs]
        twice = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"the name {shown_value(twice)} appears twice in one object")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", float: "a number"}
    return "null" if value is None else names.get(type(value), "a whole number")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} is {_kind(value)}, not an object")
    return value


def _whole(value: Any, where: str, low: int, high: int) -> int:
    """A JSON whole number from ``low`` to ``high`` (not a boolean, not 3.0)."""
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{where} is {shown_value(value)}, not a whole number from {low} to {high}")
    return value


def _string(value: Any, where: str, pattern: re.Pattern[str] | None = None, words: str = "") -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or (pattern and not pattern.fullmatch(value)):
        raise ValueError(f"{where} is {shown_value(value)}, not {words or 'a string'}")
    return value


def _written_as(data: dict[str, Any], name: str, written: str | None) -> None:
    """Field ``name``, where present, is ``written``: what shardkit writes there (None: nothing)."""
    if name in data and data[name] != written:
        words = f"{written!r}, what shardkit writes" if written else "a field of this format"
        raise ValueError(f"{name} is {shown_value(data[name])}, not {words}")


def _no_surrogates(data: Any) -> None:
    """No string of the manifest (a name or a value, at any depth) holds a lone surrogate
    (:data:`_SURROGATE`): a column, class or split name holding one passes every other check."""
    pending: list[tuple[Any, str]] = [(data, "")]
    while pending:
        value, path = pending.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for name, item in items:
            at = f"{path}[{name}]" if isinstance(name, int) else f"{path}.{name}" if path else name
            for text, where in ((name, f"the name of {at}"), (item, at)):
                if isinstance(text, str) and (found := _SURROGATE.search(text)):
                    shown = shown_value(text[max(0, found.start() - 20) : found.end() + 20])
                    raise ValueError(f"{shown_value(where)[1:-1]} holds a lone surrogate ({shown}), not text")
            if isinstance(item, (dict, list)):
                pending.append((item, at))


def _sha256(value: Any, where: str) -> str:
    return _string(value, where, _HEX64, "a sha256 (64 lowercase hex digits)")


def checked_manifest(data: Any) -> Manifest:
    """The :class:`Manifest` a parsed ``shards.json`` describes, every field checked for its type
    and range as shardkit writes it (its format and layout, the options, every shard, the
    features, the totals and splits against the shards); a ValueError saying what is wrong
    otherwise. Fields that manifests of earlier shardkit versions lack may be absent."""
    data = _object(data, "the manifest")
    for name in _REQUIRED:
        if name not in data:
            raise ValueError(f"the manifest has no {name!r}: not a shardkit manifest")
    if unknown := sorted(data.keys() - _FIELDS):
        raise ValueError(f"the manifest has a field shardkit does not write: {shown_value(unknown[0])}")
    _no_surrogates(data)
    tag = data["format"]
    try:
        fmt = format_of_manifest(tag) if isinstance(tag, str) else None
    except ValueError:
        fmt = None
    if fmt is None:
        tags = ", ".join(f.manifest_format for f in FORMATS.values())
        raise ValueError(f"format is {shown_value(tag)}, not one shardkit writes ({tags})")
    layout = data.get("layout")
    # Recorded from layout 4 on: one the format has had (a manifest without it is older).
    if layout is not None and (type(layout) is not int or not RECORDED_LAYOUT <= layout <= fmt.layout_version):
        known = " or ".join(map(str, range(RECORDED_LAYOUT, fmt.layout_version + 1)))
        words = "the layout shardkit writes" if fmt.layout_version == RECORDED_LAYOUT else "the layouts shardkit reads"
        raise ValueError(f"layout is {shown_value(layout)}, not {known}, {words}")
    _written_as(data, "key_scheme", KEY_SCHEME)
    _written_as(data, "member_template", fmt.member_template)
    # A ZIP shard's first member: its typed table from layout 4 on, its JSON lines before.
    zip_member = METADATA_TABLE_MEMBER if layout is not None else METADATA_MEMBER
    _written_as(data, "metadata_member", zip_member if fmt.metadata_member else None)
    prefix_length = _whole(data["prefix_length"], "prefix_length", BY_SIZE, MAX_PREFIX_LENGTH)
    cap = _whole(data["max_shard_bytes"], "max_shard_bytes", fmt.fixed_bytes + 1, fmt.max_bytes)
    target = _whole(data["target_shard_bytes"], "target_shard_bytes", 1, cap)
    fingerprint = _sha256(data["input_fingerprint"], "input_fingerprint")
    modality = data["modality"]
    if modality not in MODALITIES:
        raise ValueError(f"modality is {shown_value(modality)}, not one of {', '.join(MODALITIES)}")
    features = _checked_features(data["features"], modality)
    table = data.get("metadata_table")
    if table not in (None, TABLE_NAME):  # shardkit's one name, never a path to follow
        raise ValueError(f"metadata_table is {shown_value(table)}, not {TABLE_NAME!r}")
    table_sha256 = data.get("metadata_table_sha256")
    if table_sha256 is not None:
        _sha256(table_sha256, "metadata_table_sha256")
    shards = _checked_shards(data["shards"], fmt, cap)
    prefix_lengths = _checked_splits(data, shards, prefix_length)
    manifest = Manifest(
        options=Options(prefix_length, cap, target, fmt.name),
        input_fingerprint=fingerprint,
        modality=modality,
        features=features,
        shards=shards,
        metadata_table=table,
        metadata_table_sha256=table_sha256,
        prefix_lengths=prefix_lengths,
        layout=layout,
    )
    _check_key_ranges(manifest)
    return manifest


def _checked_shards(value: Any, fmt: ShardFormat, cap: int, *, placed: bool = True) -> list[ManifestShard]:
    """``shards`` checked entry by entry (``placed``: a manifest's, where each nested shard has
    its part of its folder's metadata file; a done record's may not have it yet)."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"shards is {shown_value(value) if value == [] else _kind(value)}, not a list of shards")
    shards: list[ManifestShard] = []
    seen: set[str] = set()
    folders: set[bool] = set()
    for index, entry in enumerate(value):
        at = f"shards[{index}]"
        entry = _object(entry, at)
        if missing := sorted(_SHARD_REQUIRED - entry.keys()):
            raise ValueError(f"{at} has no {missing[0]!r}")
        if unknown := sorted(entry.keys() - _SHARD_FIELDS):
            raise ValueError(f"{at} has a field shardkit does not write: {shown_value(unknown[0])}")
        file = entry["file"]
        split = entry.get("split", "train")
        if not isinstance(split, str):
            raise ValueError(f"{at}.split is {shown_value(split)}, not a split's name")
        place = shard_place(file, split) if isinstance(file, str) else None
        if place is None or place.suffix != fmt.name:
            raise ValueError(
                f"{at}.file is {shown_value(file)}, not data/[<split>/][<folder>/]<hex prefix>{fmt.suffix}"
                f" for a shard of split {shown_value(split)}"
            )
        at = f"shard {file!r}"
        if file in seen:
            raise ValueError(f"{at} is named twice")
        seen.add(file)
        metadata = metadata_file_of(file, split)
        if entry["metadata"] != metadata:
            raise ValueError(f"{at} has metadata {shown_value(entry['metadata'])}, not {metadata!r}")
        metadata_range = _checked_range(entry.get("metadata_range"), at, nested=place.nested, placed=placed)
        if not place.split_folder and split != "train":
            raise ValueError(f"{at} is in the folder of another split than {shown_value(split)}")
        folders.add(place.split_folder)
        # Readers plan from these (which rows a rank reads, where a cut piece ends): a shard of
        # no rows would never be opened, and its rows would be lost without a word.
        rows = _whole(entry["rows"], f"{at}: rows", 1, fmt.max_rows)
        size = _whole(entry["bytes"], f"{at}: bytes", 1, cap)
        sha256 = _sha256(entry["sha256"], f"{at}: sha256")
        metadata_sha256 = _sha256(entry["metadata_sha256"], f"{at}: metadata_sha256")
        first = _string(entry["first_key"], f"{at}: first_key", KEY_RE, "a key (8 to 128 lowercase hex digits)")
        last = _string(entry["last_key"], f"{at}: last_key", KEY_RE, "a key (8 to 128 lowercase hex digits)")
        # Keys ascend within a shard: its first is its last only when it holds one row.
        if not (first == last if rows == 1 else first < last):
            raise ValueError(f"{at} has {rows} row(s) from key {first} to {last}: its keys must ascend")
        input_sha256 = entry.get("input_sha256", "")
        if input_sha256 != "":
            _sha256(input_sha256, f"{at}: input_sha256")
        every, offsets = _checked_index(entry, fmt, at, rows, size)
        shards.append(
            ManifestShard(
                file,
                entry["metadata"],
                rows,
                size,
                sha256,
                metadata_sha256,
                first,
                last,
                split,
                input_sha256,
                every,
                offsets,
                metadata_range,
            )
        )
    if len(folders) > 1:
        raise ValueError("some shards are in a split's folder and some are not")
    if placed:
        _check_metadata_parts(shards)
    return shards


def _checked_range(value: Any, at: str, *, nested: bool, placed: bool) -> tuple[int, int] | None:
    """A nested shard's ``metadata_range``: ``[start, end]``, end after start."""
    if value is None:
        if nested and placed:
            raise ValueError(f"{at} has no metadata_range (its part of its folder's metadata file)")
        return None
    if not nested:
        raise ValueError(f"{at} has a metadata_range, but a metadata file of its own")
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
        raise ValueError(f"{at}: metadata_range is {shown_value(value)}, not [start, end]")
    start, end = value
    if not 0 <= start < end <= MAX_METADATA_PART_END:
        raise ValueError(
            f"{at}: metadata_range is {shown_value(value)}, not [start, end] with end after start, at most"
            f" {MAX_METADATA_PART_END}"
        )
    return start, end


def _check_metadata_parts(shards: list[ManifestShard]) -> None:
    """The shards of a nested folder fill its metadata file in their order, from its first
    byte, each part where the one before ends (nothing in it belongs to no shard)."""
    ends: dict[str, int] = {}
    for shard in shards:
        if shard.metadata_range is None:
            continue
        start, end = shard.metadata_range
        if start != ends.get(shard.metadata, 0):
            raise ValueError(
                f"shard {shard.file!r}: metadata_range starts at {start}, where the part before it in"
                f" {shard.metadata} ends at {ends.get(shard.metadata, 0)}"
            )
        ends[shard.metadata] = end


def _checked_index(
    entry: dict[str, Any], fmt: ShardFormat, at: str, rows: int, size: int
) -> tuple[int, tuple[int, ...]]:
    """A shard's index (``row_offsets_every``, ``row_offsets``), both or neither, only for a
    format that has one: offsets of rows 0, every, 2 * every..., from 0, ascending, within the
    shard. Whether each is where its row begins is verify's to check (and a reader's header
    check refuses one that is not a member's first header)."""
    if "row_offsets" not in entry and "row_offsets_every" not in entry:
        return 0, ()
    if not fmt.row_index:
        name = "row_offsets" if "row_offsets" in entry else "row_offsets_every"
        raise ValueError(f"{at} has {name}, which shardkit writes for tar shards only")
    every = _whole(entry.get("row_offsets_every"), f"{at}: row_offsets_every", 1, rows)
    offsets = entry.get("row_offsets")
    count = -(-rows // every)
    if not isinstance(offsets, list) or len(offsets) != count:
        shown = f"a list of {len(offsets)}" if isinstance(offsets, list) else _kind(offsets)
        raise ValueError(f"{at}: row_offsets is {shown}, not a list of {count} offsets (one per {every} rows)")
    # (One pass over every offset in C: a manifest of 20,000 tar shards holds over a million.)
    ints = all(type(offset) is int for offset in offsets)
    if not (ints and offsets[0] == 0 and offsets[-1] < size and all(map(operator.lt, offsets, offsets[1:]))):
        last = -1  # find the first offset that is wrong, for the message
        for i, offset in enumerate(offsets):
            _whole(offset, f"{at}: row_offsets[{i}]", 0 if i == 0 else last + 1, 0 if i == 0 else size - 1)
            last = offset
    return every, tuple(offsets)


def _checked_splits(data: dict[str, Any], shards: list[ManifestShard], prefix_length: int) -> dict[str, int]:
    """Each split's prefix length, from ``splits``; the totals and splits checked against the shards."""
    actual: dict[str, list[int]] = {}  # split -> rows, shards, bytes
    for shard in shards:
        sums = actual.setdefault(shard.split, [0, 0, 0])
        sums[0] += shard.rows
        sums[1] += 1
        sums[2] += shard.bytes
    if "totals" in data:
        totals = _object(data["totals"], "totals")
        whole = dict(zip(("rows", "shards", "bytes"), map(sum, zip(*actual.values(), strict=True)), strict=True))
        _check_counts(totals, whole, "totals")
    if "splits" not in data:
        return {}
    splits = _object(data["splits"], "splits")
    if set(splits) != set(actual):
        raise ValueError(f"splits names {shown_value(sorted(splits))}, but the shards are in {sorted(actual)}")
    prefix_lengths: dict[str, int] = {}
    for name, split in splits.items():
        split = _object(split, f"splits[{name!r}]")
        length = _whole(split.get("prefix_length"), f"splits[{name!r}].prefix_length", BY_SIZE, MAX_PREFIX_LENGTH)
        rows, count, size = actual[name]
        expected = {"prefix_length": length, "rows": rows, "shards": count, "bytes": size}
        _check_counts(split, expected, f"splits[{name!r}]")
        prefix_lengths[name] = length
    return prefix_lengths


def _check_counts(found: dict[str, Any], expected: dict[str, int], where: str) -> None:
    # (compared with their types: JSON's true must not pass for 1)
    if found != expected or any(type(v) is not int for v in found.values()):
        raise ValueError(f"{where} is {shown_value(found)}, but the shards add up to {expected}")


def _check_key_ranges(manifest: Manifest) -> None:
    """Each shard's first and last keys are within what its name says it holds, and no two shards
    of a split hold overlapping keys (a reader would give a row twice)."""
    ranges = key_ranges([(s.file, s.split) for s in manifest.shards], manifest.prefix_lengths_by_split())
    by_split: dict[str, list[ManifestShard]] = {}
    for shard in manifest.shards:
        keys = ranges[shard.file]
        for key in (shard.first_key, shard.last_key):
            if not keys.holds(key):
                raise ValueError(f"shard {shard.file!r} has key {key}, not in {keys.words()}")
        by_split.setdefault(shard.split, []).append(shard)
    for shards in by_split.values():
        ordered = sorted(shards, key=lambda s: s.first_key)
        for a, b in itertools.pairwise(ordered):
            if b.first_key <= a.last_key:
                raise ValueError(f"the keys of shards {a.file!r} and {b.file!r} overlap: rows would not be unique")


def _checked_features(value: Any, modality: str) -> list[dict[str, Any]]:
    """The features as :mod:`.schema` writes them: the file column, ``key``, then each field's
    (a dtype of :data:`FIELD_DTYPES`, a class label, a list or a struct), nested at most
    :data:`.metadata.MAX_NESTING` deep, names unique at each level."""
    if not isinstance(value, list):
        raise ValueError(f"features is {_kind(value)}, not a list of features")
    file_feature, key_feature = {"name": modality, "dtype": modality}, {"name": "key", "dtype": "string"}
    if value[:2] != [file_feature, key_feature]:
        raise ValueError(f"features must begin with {file_feature} and {key_feature}")
    count = [0]
    _check_fields(value[2:], "features", count, 1, {modality, "key"}, top=True)
    return value


def _check_fields(value: Any, where: str, count: list[int], depth: int, names: set[str], *, top: bool = False) -> None:
    """A list of named features (the top level's fields, or a struct's), none named as one of ``names``."""
    if not isinstance(value, list):
        raise ValueError(f"{where} is {_kind(value)}, not a list of features")
    for index, feature in enumerate(value):
        at = f"{where}[{index + 2 if top else index}]"
        feature = _object(feature, at)
        name = _string(feature.get("name"), f"{at}.name", words="a column name")
        if problem := column_name_problem(name):
            raise ValueError(f"{at}.name {shown_value(name)} {problem}")
        if name in names:
            raise ValueError(f"{at} is a second column named {shown_value(name)}")
        names.add(name)
        at = f"{where} {name!r}" if top else f"{at} ({name!r})"
        _check_type({k: v for k, v in feature.items() if k != "name"}, at, count, depth, top=top)


def _check_type(spec: dict[str, Any], where: str, count: list[int], depth: int, *, top: bool = False) -> None:
    """One feature's type: ``{"dtype": ...}``, ``{"list": ...}`` or ``{"struct": [...]}``."""
    count[0] += 1
    if count[0] > MAX_FEATURES:
        raise ValueError(f"features declare more than {MAX_FEATURES} columns")
    if depth > MAX_NESTING:
        raise ValueError(f"{where} nests deeper than {MAX_NESTING} levels")
    if len(spec) != 1 or next(iter(spec)) not in ("dtype", "list", "struct"):
        raise ValueError(f"{where} has {shown_value(sorted(spec))}, not one of dtype, list or struct")
    kind, inner = next(iter(spec.items()))
    if kind == "dtype":
        if isinstance(inner, dict) and top:
            _check_class_label(inner, where)
        elif not isinstance(inner, str) or inner not in FIELD_DTYPES:
            raise ValueError(f"{where} has dtype {shown_value(inner)}, not one of {', '.join(sorted(FIELD_DTYPES))}")
    elif kind == "struct":
        _check_fields(inner, f"{where}.struct", count, depth + 1, set())
    elif isinstance(inner, str):  # "list: string"
        _check_type({"dtype": inner}, f"{where}.list", count, depth + 1)
    elif isinstance(inner, list):  # a list of objects: "list: [fields]"
        _check_fields(inner, f"{where}.list", count, depth + 1, set())
    elif isinstance(inner, dict) and "list" in inner:  # a list of lists: "list: {list: ...}"
        _check_type(inner, f"{where}.list", count, depth + 1)
    else:
        raise ValueError(f"{where}.list is {shown_value(inner)}, not a dtype, a list of fields or a list")


def _check_class_label(dtype: dict[str, Any], where: str) -> None:
    """``{"class_label": {"names": {"0": name, "1": name, ...}}}``: unique string names, numbered from 0."""
    label = dtype.get("class_label") if list(dtype) == ["class_label"] else None
    names = label.get("names") if isinstance(label, dict) and list(label) == ["names"] else None
    if not isinstance(names, dict) or not names:
        raise ValueError(f"{where} has dtype {shown_value(dtype)}, not a class label's names")
    if len(names) > MAX_CLASS_NAMES:
        raise ValueError(f"{where} has more than {MAX_CLASS_NAMES} class names")
    if list(names) != [str(i) for i in range(len(names))]:
        raise ValueError(f"{where}'s class names are not numbered 0 to {len(names) - 1} in order")
    seen: set[str] = set()
    for number, name in names.items():
        _string(name, f"{where}'s class name {number}", words="a class name (a string)")
        if name in seen:
            raise ValueError(f"{where} has the class name {shown_value(name)} twice")
        seen.add(name)


def dump_json(data: Any) -> bytes:
    return (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def write_manifest(out_dir: str, manifest: Manifest) -> str:
    path = os.path.join(out_dir, MANIFEST_NAME)
    write_atomic(path, dump_json(manifest.to_json()))
    return path


def read_manifest(out_dir: str) -> Manifest | None:
    """The manifest of the local folder ``out_dir``, checked (:func:`read_manifest_at`); None when there is none."""
    return read_manifest_at(Location(local_path(out_dir), "folder"))
