"""``metadata.parquet``: every row's metadata as one typed table, at the repo root.

``metadata/<stem>.jsonl`` holds each shard's rows as the shard does; but a tool that reads
those files together infers each file's types on its own: polars refuses a column that is
null throughout one file, pyarrow's ``concat_tables`` needs permissive promotion, and a float
column looks like integers in a file where every value was whole. This one file carries the
card's types, so a consumer who filters rows without touching the files reads it in one call
(``duckdb``: ``FROM 'metadata.parquet'``; ``polars.read_parquet``; ``pyarrow.parquet.read_table``).

Columns: ``__shard__`` (the shard file, ``data/3f.zip``; named like webdataset's ``__key__`` so
that no field clashes with it: the name is reserved), ``file_name`` (the file's name inside it),
``key``, then every field. One row group per shard, shards in name order, rows in shard
order. Written from the staged metadata lines at the end of a pack, one shard's lines in memory
at a time; deterministic for a given pyarrow version. pyarrow is imported only here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from .atomicfile import replace_file
from .errors import naming_errors
from .formats.parquet import metadata_lines_table, metadata_schema
from .hashing import sha256_stream

if TYPE_CHECKING:
    import pyarrow as pa

TABLE_NAME = "metadata.parquet"
SHARD_COLUMN = "__shard__"
#: The column before ``file_name`` and the fields, with its card type.
_SHARD_FEATURE = {"name": SHARD_COLUMN, "dtype": "string"}


def table_schema(features: list[dict[str, Any]]) -> pa.Schema:
    """The table's schema from the card's features (the first, the file column, is left out)."""
    return metadata_schema(features, leading=(_SHARD_FEATURE,))


def write_metadata_table(path: str, shards: Iterable[tuple[str, bytes]], features: list[dict[str, Any]]) -> str:
    """Write the table to ``path`` atomically from (shard file, its metadata.jsonl bytes); return
    its sha256 (the manifest records it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = table_schema(features)
    line_schema = metadata_schema(features)

    def write(out: BinaryIO) -> None:
        # An open file, not a path: pyarrow takes a path for a URI and cannot encode a folder
        # name that is not UTF-8.
        with pq.ParquetWriter(out, schema, compression="zstd") as writer:
            for shard, lines in shards:
                if not lines:
                    continue
                table = metadata_lines_table(lines, line_schema)
                table = table.add_column(0, SHARD_COLUMN, pa.array([shard] * table.num_rows, pa.string()))
                writer.write_table(table.cast(schema), row_group_size=table.num_rows)

    replace_file(path, write)  # durable before it is named, as every file shardkit publishes
    with naming_errors(path), open(path, "rb") as f:
        sha256 = sha256_stream(f)
    return sha256


def table_problems(open_table: IO[bytes], shards: list[tuple[str, int, str, str]]) -> list[str]:
    """What is wrong with a metadata table against the manifest's shards, given as (file, rows,
    first key, last key): one row group per shard, in the manifest's order, holding that shard's
    rows within its key range. Read one row group at a time (memory: one shard's keys)."""
    import pyarrow.parquet as pq

    try:
        # No pyarrow thread, of either pool: its IO pool pre-buffers by default (pre_buffer=True),
        # reading ``open_table`` (a Python file) from a C++ thread. A read still held there when
        # the interpreter exits aborts the process ("terminate called without an active
        # exception", exit 134; seen in verify under load, arrow issue 34314).
        table = pq.ParquetFile(open_table, pre_buffer=False)
        if table.num_row_groups != len(shards):
            return [f"{table.num_row_groups} row groups, the manifest has {len(shards)} shards"]
        problems = []
        for group, (file, rows, first, last) in enumerate(shards):
            part = table.read_row_group(group, columns=[SHARD_COLUMN, "key"], use_threads=False)
            names = set(part.column(SHARD_COLUMN).to_pylist())
            keys = part.column("key").to_pylist()
            if names != {file}:
                problems.append(f"row group {group} holds {sorted(map(str, names))[:3]}, not {file}")
            elif len(keys) != rows:
                problems.append(f"{len(keys)} rows of {file}, the manifest says {rows}")
            elif keys and (keys[0], keys[-1]) != (first, last):
                problems.append(f"the rows of {file} run {keys[0]}..{keys[-1]}, the manifest says {first}..{last}")
        return problems
    except Exception as exc:  # pyarrow raises several types for a damaged file
        return [f"cannot be read as Parquet: {exc}"]
