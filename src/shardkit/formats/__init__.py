"""The shard formats shardkit writes, one module each, and the registry that names them.

* :mod:`.zip` (the default): ``metadata.parquet`` (the rows, typed) first, then one stored
  member per row at ``images/<key[:3]>/<key[3:6]>/<key><ext>``. datasets' imagefolder/audiofolder, the loading
  script of datasets 3.x and ``shardkit.stream`` read it. Sizes are exact.
* :mod:`.tar`: the webdataset layout, ``<key>.json`` (the row's metadata line) then
  ``<key><ext>`` per row, ustar headers, no clock in the bytes. datasets' webdataset builder
  and the ``webdataset`` library read it. Sizes are exact.
* :mod:`.parquet`: one row per file, the file's bytes in a ``{bytes, path}`` column, the
  metadata fields as typed columns, row groups of at most 100 rows. datasets' parquet builder
  reads it. Sizes are estimated (an upper bound, checked after writing), not exact.

Each is a :class:`~.base.ShardFormat` (see :mod:`.base` for what one knows and does). A fourth
format is a module like these, listed in ``FORMATS`` below.
"""

from __future__ import annotations

from .base import METADATA_MEMBER, METADATA_TABLE_MEMBER, ShardFormat, ShardFormatError
from .parquet import PARQUET
from .tar import TAR
from .zip import ZIP

__all__ = [
    "FORMATS",
    "FORMAT_NAMES",
    "METADATA_MEMBER",
    "METADATA_TABLE_MEMBER",
    "PARQUET",
    "SHARD_SUFFIXES",
    "TAR",
    "ZIP",
    "ShardFormat",
    "ShardFormatError",
    "format_named",
    "format_of_manifest",
]

FORMATS: dict[str, ShardFormat] = {f.name: f for f in (ZIP, TAR, PARQUET)}
FORMAT_NAMES = tuple(FORMATS)
#: The shard files' endings, every format's (the LFS lines of .gitattributes).
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
