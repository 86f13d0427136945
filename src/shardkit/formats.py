"""The shard formats shardkit writes, and what the planner must know of each.

All three share the planner, the cap, the manifest, ``verify`` and ``push``; they differ in the
container and in who reads them:

* ``zip`` (the default): ``metadata.jsonl`` first, then one stored member per row at
  ``images/<key[:3]>/<key[3:6]>/<key><ext>``. datasets' imagefolder/audiofolder, the loading
  script of datasets 3.x and ``shardkit.stream`` read it. Sizes are exact.
* ``tar``: the webdataset layout, ``<key>.json`` (the row's metadata line) then ``<key><ext>``
  per row, ustar headers, no clock in the bytes. datasets' webdataset builder and the
  ``webdataset`` library read it. Sizes are exact.
* ``parquet``: one row per file, the file's bytes in a ``{bytes, path}`` column, the metadata
  fields as typed columns, row groups of at most 100 rows. datasets' parquet builder reads it.
  Parquet encodes as it goes, so a shard's size is estimated (an upper bound, checked after
  writing), not exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import MEMBER_NAME_FIXED, member_name
from .tarformat import END_BYTES, MAX_NAME_BYTES, member_bytes
from .zipformat import END_RECORD_SIZE, MAX_ZIP_BYTES, MAX_ZIP_MEMBERS, member_overhead_for_length

FORMAT_NAMES = ("zip", "tar", "parquet")
METADATA_MEMBER = "metadata.jsonl"
#: Rows per Parquet row group: what datasets' own writer uses for image datasets, so a streaming
#: reader holds about 100 images at a time.
PARQUET_ROWS_PER_GROUP = 100
#: Row groups are also cut before they pass this many bytes of file data.
PARQUET_GROUP_BYTES = 32 << 20


@dataclass(frozen=True)
class ShardFormat:
    name: str  # "zip" | "tar" | "parquet", also the shard files' extension
    exact: bool  # the planner knows each shard's size to the byte before writing it
    fixed_bytes: int  # what a shard costs with no rows
    max_rows: int
    max_bytes: int  # the largest shard the container can describe
    #: The card declares the features in the config too: the datasets builder for this format
    #: reads them there (imagefolder/audiofolder, parquet); webdataset's config has no such
    #: field (a warning), it reads ``dataset_info.features``.
    config_features: bool = True

    @property
    def suffix(self) -> str:
        return "." + self.name

    @property
    def manifest_format(self) -> str:
        return f"shardkit.{self.name}/1"

    @property
    def data_files_pattern(self) -> str:
        return f"data/*{self.suffix}"

    def member_name(self, key: str, ext: str) -> str:
        """The row's file name inside the shard (the ``file_name`` its metadata line gives)."""
        raise NotImplementedError

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        """Bytes a row adds to a shard (``line_bytes``: its metadata line without the newline)."""
        raise NotImplementedError

    def key_problem(self, key: str, ext: str) -> str | None:
        """Why a row cannot go into this format (None if it can)."""
        return None


class _Zip(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        return member_name(key, ext)

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        name_bytes = MEMBER_NAME_FIXED + key_length + ext_length
        return member_overhead_for_length(name_bytes) + file_bytes + line_bytes + 1


class _Tar(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        # Lower case: webdataset readers name the column after the extension, so "x.JPG" and
        # "y.jpg" would otherwise land in two columns.
        return f"{key}{ext.lower()}"

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        return member_bytes(line_bytes) + member_bytes(file_bytes)  # <key>.json, then the file

    def key_problem(self, key: str, ext: str) -> str | None:
        if ext.lower() == ".json":
            return "a .json file cannot go into a tar shard: <key>.json holds the row's metadata there"
        longest = len(key) + max(len(ext), len(".json"))
        if longest > MAX_NAME_BYTES:
            return (
                f"key {key} is {len(key)} digits: with --format tar a member name must fit in"
                f" {MAX_NAME_BYTES} bytes, so keys can be at most {MAX_NAME_BYTES - max(len(ext), 5)} digits"
            )
        return None


class _Parquet(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        return f"{key}{ext}"

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        # An upper bound: the file stored plain (4-byte length) plus 0.2% for page headers, its
        # path (value and dictionary), the fields (their JSON text, twice: once for the values,
        # once for each row's share of the footer's per-row-group column metadata), and levels.
        return file_bytes + file_bytes // 512 + 4 + 2 * (key_length + ext_length + 4) + 2 * line_bytes + 128


ZIP = _Zip(
    "zip",
    exact=True,
    fixed_bytes=member_overhead_for_length(len(METADATA_MEMBER)) + END_RECORD_SIZE,
    max_rows=MAX_ZIP_MEMBERS - 1,  # one member is metadata.jsonl
    max_bytes=MAX_ZIP_BYTES,
)
TAR = _Tar(
    "tar",
    exact=True,
    fixed_bytes=END_BYTES,
    max_rows=MAX_ZIP_MEMBERS - 1,
    max_bytes=MAX_ZIP_BYTES,
    config_features=False,
)
PARQUET = _Parquet("parquet", exact=False, fixed_bytes=16 << 10, max_rows=MAX_ZIP_MEMBERS - 1, max_bytes=MAX_ZIP_BYTES)

FORMATS = {f.name: f for f in (ZIP, TAR, PARQUET)}
#: What a file in data/ may end with to be a shard of some format (for stray and stale checks).
SHARD_SUFFIXES = tuple(f.suffix for f in FORMATS.values())


def format_named(name: str) -> ShardFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown shard format {name!r} (choose from {', '.join(FORMAT_NAMES)})") from None


def format_of_manifest(tag: str) -> ShardFormat:
    """The format a manifest's ``format`` field names ("shardkit.zip/1"...)."""
    for fmt in FORMATS.values():
        if fmt.manifest_format == tag:
            return fmt
    raise ValueError(f"not a shardkit manifest format: {tag!r}")
