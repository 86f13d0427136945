"""``metadata.parquet``: every row's metadata as one typed table, at the repo root.

``metadata/<stem>.jsonl`` holds each shard's rows as the shard does; but a tool that reads
those files together infers each file's types on its own: polars refuses a column that is
null throughout one file, pyarrow's ``concat_tables`` needs permissive promotion, and a float
column looks like integers in a file where every value was whole. This one file carries the
card's types, so a consumer who filters rows without touching the files reads it in one call
(``duckdb``: ``FROM 'metadata.parquet'``; ``polars.read_parquet``; ``pyarrow.parquet.read_table``).

Columns: ``__shard__`` (the shard file, ``data/3f.zip``; named like webdataset's ``__key__`` so
that no field clashes with it: the name is reserved), ``file_name`` (the file's name inside it),
``key``, then every field. Shards in name order, rows in shard order, in row groups of
:data:`ROWS_PER_GROUP` rows (fewer where the rows are wide, :data:`GROUP_BYTES`, and at the end;
a shard's rows may span several). Written from the staged metadata lines at the end of a pack,
parsed :data:`PARSE_BYTES` at a time; deterministic for a given pyarrow version. pyarrow is imported only here.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from .atomicfile import replace_file
from .errors import naming_errors
from .formats.parquet import metadata_lines_table, metadata_schema, string_array, typed
from .hashing import sha256_stream

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

TABLE_NAME = "metadata.parquet"
SHARD_COLUMN = "__shard__"
#: The column before ``file_name`` and the fields, with its card type.
_SHARD_FEATURE = {"name": SHARD_COLUMN, "dtype": "string"}


def table_schema(features: list[dict[str, Any]]) -> pa.Schema:
    """The table's schema from the card's features (the first, the file column, is left out)."""
    return metadata_schema(features, leading=(_SHARD_FEATURE,))


#: Rows in a row group of the table, at most. Not one row group a shard: at the Hub's scale
#: (50,000 shards) that made a footer of hundreds of MB, which every reader of the table parses,
#: and the writer held it all in memory (about 1 KB a column of each row group).
ROWS_PER_GROUP = 1 << 16
#: Arrow bytes a row group holds, at most: wide rows (embeddings of 1,536 floats are 32 KB of
#: JSON each) make row groups of fewer rows, so the rows held while a group fills stay bounded.
GROUP_BYTES = 64 << 20


#: JSON lines parsed in one call: many small shards' rows at once (a call a shard costs more than
#: a tiny shard's rows), in a block bounded whatever the rows' width.
PARSE_BYTES = 1 << 20


def write_metadata_table(path: str, shards: Iterable[tuple[str, bytes]], features: list[dict[str, Any]]) -> str:
    """Write the table to ``path`` atomically from (shard file, its metadata.jsonl bytes); return
    its sha256 (the manifest records it)."""
    import pyarrow.parquet as pq

    schema = table_schema(features)

    def write(out: BinaryIO) -> None:
        # An open file, not a path: pyarrow takes a path for a URI and cannot encode a folder
        # name that is not UTF-8.
        with pq.ParquetWriter(out, schema, compression="zstd") as writer:
            groups = _RowGroups(writer, schema, metadata_schema(features))
            for shard, lines in shards:
                groups.add(shard, lines)
            groups.close()

    replace_file(path, write)  # durable before it is named, as every file shardkit publishes
    with naming_errors(path), open(path, "rb") as f:
        sha256 = sha256_stream(f)
    return sha256


class _RowGroups:
    """The table's rows, given shard after shard, written as row groups (:data:`ROWS_PER_GROUP`)."""

    def __init__(self, writer: pq.ParquetWriter, schema: pa.Schema, line_schema: pa.Schema) -> None:
        self.writer, self.schema, self.line_schema = writer, schema, line_schema
        self.lines: list[bytes] = []  # not parsed yet: under PARSE_BYTES, but for the last shard's
        self.shards: list[str] = []  # their shard, line by line
        self.size = 0
        self.held: list[pa.Table] = []  # parsed, not written: under a row group, but for the last parse

    def add(self, shard: str, lines: bytes) -> None:
        if not lines:
            return
        if not lines.endswith(b"\n"):
            lines += b"\n"
        start = 0
        while start < len(lines):  # a large shard's lines a PARSE_BYTES at a time (whole lines)
            room = PARSE_BYTES - self.size  # (over 0: a block is parsed as soon as it is full)
            end = lines.find(b"\n", start + room - 1) + 1 or len(lines)
            piece = lines[start:end]
            self.lines.append(piece)
            self.shards += [shard] * piece.count(b"\n")  # (a JSON line holds no raw newline)
            self.size += len(piece)
            start = end
            if self.size >= PARSE_BYTES:
                self._parse()

    def close(self) -> None:
        if self.lines:
            self._parse()
        if self.held:
            self._write(everything=True)

    def _parse(self) -> None:
        table = metadata_lines_table(b"".join(self.lines), self.line_schema)
        if table.num_rows != len(self.shards):  # (never: a line is a row)
            raise AssertionError(f"{table.num_rows} rows from {len(self.shards)} lines")
        table = typed(table.add_column(0, SHARD_COLUMN, string_array(self.shards)), self.schema)
        self.lines, self.shards, self.size = [], [], 0
        self.held.append(table)  # (a table a PARSE_BYTES of lines: a few to sum)
        if sum(t.num_rows for t in self.held) >= ROWS_PER_GROUP or sum(t.nbytes for t in self.held) >= GROUP_BYTES:
            self._write(everything=False)

    def _write(self, *, everything: bool) -> None:
        """Write the held rows as whole row groups (ROWS_PER_GROUP rows, fewer as GROUP_BYTES
        allows) and, with ``everything``, the rest."""
        import pyarrow as pa

        table = pa.concat_tables(self.held)
        per_group = max(1, min(ROWS_PER_GROUP, table.num_rows * GROUP_BYTES // max(table.nbytes, 1)))
        rest = 0 if everything else table.num_rows % per_group
        self.writer.write_table(table.slice(0, table.num_rows - rest), row_group_size=per_group)
        self.held = [table.slice(table.num_rows - rest)] if rest else []


def table_problems(open_table: IO[bytes], shards: list[tuple[str, int, str, str]]) -> list[str]:
    """What is wrong with a metadata table against the manifest's shards, given as (file, rows,
    first key, last key): each shard's rows, in the manifest's order, within its key range. Read
    one row group at a time (memory: its shard names and keys)."""
    import pyarrow.parquet as pq

    try:
        # No pyarrow thread, of either pool: its IO pool pre-buffers by default (pre_buffer=True),
        # reading ``open_table`` (a Python file) from a C++ thread. A read still held there when
        # the interpreter exits aborts the process ("terminate called without an active
        # exception", exit 134; seen in verify under load, arrow issue 34314).
        runs = _shard_runs(pq.ParquetFile(open_table, pre_buffer=False))
        problems: list[str] = []
        for file, rows, first, last in shards:
            run = next(runs, None)
            if run is None:
                return [*problems, f"it ends before the rows of {file}"]
            name, count, first_key, last_key = run
            if name != file:
                return [*problems, f"it holds rows of {name} where the manifest has {file}"]
            if count != rows:
                problems.append(f"{count} rows of {file}, the manifest says {rows}")
            elif (first_key, last_key) != (first, last):
                problems.append(f"the rows of {file} run {first_key}..{last_key}, the manifest says {first}..{last}")
        extra = next(runs, None)
        if extra is not None:
            problems.append(f"it holds rows of {extra[0]}, after the manifest's last shard")
        return problems
    except Exception as exc:  # pyarrow raises several types for a damaged file
        return [f"cannot be read as Parquet: {exc}"]


def _shard_runs(table: pq.ParquetFile) -> Iterator[tuple[str, int, str, str]]:
    """The table's rows as runs of one shard each, in order: (shard, rows, first key, last key)."""
    run: tuple[str, int, str, str] | None = None
    for group in range(table.num_row_groups):
        part = table.read_row_group(group, columns=[SHARD_COLUMN, "key"], use_threads=False)
        pairs = zip(part.column(SHARD_COLUMN).to_pylist(), part.column("key").to_pylist(), strict=True)
        for name, same in itertools.groupby(pairs, key=operator.itemgetter(0)):
            keys = [key for _, key in same]
            if run is not None and run[0] == name:  # a shard's rows go on in this row group
                run = (name, run[1] + len(keys), run[2], keys[-1])
                continue
            if run is not None:
                yield run
            run = (name, len(keys), keys[0], keys[-1])
    if run is not None:
        yield run
