"""``--format parquet``: rows as Parquet, the file's bytes in a ``{bytes, path}`` column.

One row per file, the metadata fields as typed columns, row groups of at most 100 rows and
about 1/64 of the shard.
datasets' parquet builder reads it. Parquet encodes as it goes, so a shard's size is estimated
(an upper bound, checked after writing), not exact. This module holds the container code, the
format's size cost and member names, and its writer, reader and verifier parts
(:class:`ParquetFormat`, at the end).

The column types come from the same features the dataset card declares (inferred from every
row by :mod:`.schema`), so datasets' parquet builder decodes the image (or audio) column and
types every field as the card says. The file column is stored without compression,
dictionary or statistics (images are compressed already, and min/max of JPEG bytes is
useless); the other columns use zstd. Row groups hold at most
:data:`PARQUET_ROWS_PER_GROUP` rows, about 32 MiB of files and (since layout 5) about 1/64 of
the shard, 64 KiB at least (:func:`group_bytes`): a reader holds about one group at a time and
so does the writer, and a cut piece of a shard (a rank's share) reads only the groups that hold
its rows. Every page carries a CRC-32 of its bytes
(``write_page_checksum``), the Parquet shard's equivalent of a ZIP member's CRC.

Reading (:func:`open_parquet_shard`, the one place shardkit opens a Parquet shard: stream,
verify and remux): pyarrow allocates what a page header declares and decodes what a dictionary
multiplies, without comparing either with the footer. So shardkit reads the footer and each row
group's bytes itself, walks every page header, and refuses a shard whose footer or pages
declare more than a shard of its size can hold, before pyarrow decompresses anything; pyarrow
then reads only those checked bytes, verifying each page's checksum, and the group's values
stay dictionary-encoded until their decoded size has been checked too.

pyarrow is imported only here: ZIP and tar workers never load it.
"""

from __future__ import annotations

import array
import io
import itertools
import json
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from ..errors import ShardkitError
from ..rowrules import MAX_LINE_BYTES, SOURCE_PATH_COLUMN
from ..streamio import Output, jsonl_lines
from .base import (
    INDEX_POINTS,
    MAX_ZIP_BYTES,
    MAX_ZIP_MEMBERS,
    HashingReader,
    RowFile,
    ShardCheck,
    ShardFormat,
    ShardFormatError,
    ShardRecord,
    ShardRows,
    ShardSource,
    Walk,
    rows_between,
    source_of_row,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

#: Rows per Parquet row group: what datasets' own writer uses for image datasets, so a streaming
#: reader holds about 100 images at a time.
PARQUET_ROWS_PER_GROUP = 100
#: Row groups are also cut before they pass this many bytes of file data.
PARQUET_GROUP_BYTES = 32 << 20
#: ... and once they hold 1 / INDEX_POINTS of the shard's planned bytes (since layout 5), so that
#: a cut piece of a shard (a rank's share) fetches at most about that much beyond its rows at
#: each end, but never under this: each group costs about 250 bytes per column in the footer
#: and page headers (measured), a few percent of a group this small.
PARQUET_MIN_GROUP_BYTES = 64 << 10


def group_bytes(planned_bytes: int) -> int:
    """Where a row group of a shard planned at ``planned_bytes`` is cut (it also closes at
    PARQUET_ROWS_PER_GROUP rows): 1 / INDEX_POINTS of the shard, from PARQUET_MIN_GROUP_BYTES to
    PARQUET_GROUP_BYTES."""
    return min(max(planned_bytes // INDEX_POINTS, PARQUET_MIN_GROUP_BYTES), PARQUET_GROUP_BYTES)


_SCALARS = {"string": "string", "int64": "int64", "float64": "float64", "bool": "bool_", "binary": "binary"}


def _arrow_type(feature: dict[str, Any]) -> pa.DataType:
    """The Arrow type of one feature in the card's YAML form (dtype / list / struct)."""
    import pyarrow as pa

    if "dtype" in feature:
        dtype = feature["dtype"]
        if dtype in ("image", "audio"):
            return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        if isinstance(dtype, dict) and "class_label" in dtype:  # ClassLabel: stored as int64
            return pa.int64()
        return getattr(pa, _SCALARS[dtype])()
    if "struct" in feature:
        return pa.struct([(f["name"], _arrow_type(f)) for f in feature["struct"]])
    inner = feature["list"]
    if isinstance(inner, str):  # "list: string"
        return pa.list_(_arrow_type({"dtype": inner}))
    if isinstance(inner, list):  # a list of objects: "list: [fields]"
        return pa.list_(_arrow_type({"struct": inner}))
    return pa.list_(_arrow_type(inner))


def _hf_feature(feature: dict[str, Any]) -> Any:
    """One feature in datasets' JSON form (what datasets reads from a Parquet file's metadata)."""
    if "dtype" in feature:
        dtype = feature["dtype"]
        if dtype in ("image", "audio"):
            return {"_type": dtype.capitalize()}
        if isinstance(dtype, dict) and "class_label" in dtype:
            names = dtype["class_label"]["names"]
            return {"names": [names[k] for k in sorted(names, key=int)], "_type": "ClassLabel"}
        return {"dtype": dtype, "_type": "Value"}
    if "struct" in feature:
        return {f["name"]: _hf_feature(f) for f in feature["struct"]}
    inner = feature["list"]
    if isinstance(inner, str):
        return [_hf_feature({"dtype": inner})]
    if isinstance(inner, list):
        return [_hf_feature({"struct": inner})]
    return [_hf_feature(inner)]


def arrow_schema(features: list[dict[str, Any]]) -> pa.Schema:
    """The shard's schema, with datasets' features in its metadata so that a Parquet file read on
    its own (``load_dataset("parquet", data_files=...)``) still decodes the image column."""
    import pyarrow as pa

    hf = {"info": {"features": {f["name"]: _hf_feature(f) for f in features}}}
    metadata = {b"huggingface": json.dumps(hf, separators=(",", ":")).encode()}
    return pa.schema([(f["name"], _arrow_type(f)) for f in features], metadata=metadata)


#: The column a row's file is named by in a metadata table (the name inside its shard), as
#: datasets' imagefolder/audiofolder read it.
FILE_NAME_FEATURE: dict[str, Any] = {"name": "file_name", "dtype": "string"}


def metadata_schema(features: list[dict[str, Any]], leading: tuple[dict[str, Any], ...] = ()) -> pa.Schema:
    """The schema of a table of metadata lines: ``leading`` columns, ``file_name``, then every
    field the card declares (``features[1:]``: ``key`` first; the file column is left out),
    datasets' features in its metadata."""
    return arrow_schema([*leading, FILE_NAME_FEATURE, *features[1:]])


def shard_table_schema(features: list[dict[str, Any]]) -> pa.Schema:
    """A ZIP shard's ``metadata.parquet`` schema: :func:`metadata_schema`'s columns and types,
    without datasets' features in its metadata. datasets' folder builders compare the features
    of one metadata file per split, and a class label's names there would make every shard's
    bytes depend on every class name (one new name, every shard rewritten by an update); the
    card's ``configs`` give the builders the ClassLabel."""
    return metadata_schema(features).remove_metadata()


def metadata_lines_table(lines: bytes, schema: pa.Schema) -> pa.Table:
    """Metadata lines (JSON, one object a line) as a table typed by ``schema``: a column null
    or empty throughout these lines, or absent from them, keeps the schema's type. A field the
    schema does not have is an error, as is a value that does not fit its type."""
    import pyarrow.json as pa_json

    table = pa_json.read_json(
        io.BytesIO(lines),
        # One block for all the lines: a block boundary inside a line is an error.
        read_options=pa_json.ReadOptions(block_size=len(lines) + 1, use_threads=False),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
    )
    return typed(table.select(schema.names), schema)


def typed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table.cast(schema)``, without the cast where the types are already ``schema``'s, as they
    usually are: a cast's first call imports pyarrow.compute, which a pack needs for nothing else."""
    if table.schema.equals(schema):  # (metadata aside)
        return table.replace_schema_metadata(schema.metadata)
    return table.cast(schema)


def encode_metadata_table(lines: bytes, features: list[dict[str, Any]]) -> bytes:
    """A ZIP shard's ``metadata.parquet``: its metadata lines typed by the card's features, so
    that datasets' imagefolder/audiofolder read every shard of every split with the same types
    (from ``metadata.jsonl`` they infer a column null throughout a shard as another type, and
    refuse splits whose inferred types differ). The same lines and features give the same bytes
    for a given pyarrow version: no compression, dictionary or statistics (the ZIP stores it
    as it is; the few bytes saved are not worth bytes that depend on the data's repetitions),
    row groups of :data:`PARQUET_ROWS_PER_GROUP` rows, a checksum on every page."""
    schema = shard_table_schema(features)
    return encode_table(metadata_lines_table(lines, schema) if lines else _empty_table(schema))


def _empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows, as ``schema.empty_table()`` gives (the same Parquet bytes), made without
    ``pa.array``: its first call imports pandas (pyarrow checks its argument against pandas' types),
    which the packer never needs, and which took longer than the rest of a small pack's plan."""
    import pyarrow as pa

    return pa.Table.from_arrays([pa.nulls(0, field.type) for field in schema], schema=schema)


def string_array(values: list[str]) -> pa.Array:
    """``values`` (under 2 GB of text) as an Arrow string array, as ``pa.array(values,
    pa.string())`` gives, built from its buffers: ``pa.array`` would import pandas (see
    :func:`_empty_table`)."""
    import pyarrow as pa

    encoded = [v.encode() for v in values]
    # (in the machine's byte order, as Arrow holds buffers in memory)
    offsets = array.array("i", itertools.accumulate(map(len, encoded), initial=0))
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def encode_table(table: pa.Table) -> bytes:
    """``table`` as :func:`encode_metadata_table` writes a shard's metadata table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    with pq.ParquetWriter(
        pa.PythonFile(buffer, mode="w"),
        table.schema,
        compression="NONE",
        use_dictionary=False,
        write_statistics=False,
        write_page_checksum=True,
    ) as writer:
        writer.write_table(table, row_group_size=PARQUET_ROWS_PER_GROUP)
    return buffer.getvalue()


def read_metadata_table(data: bytes, features: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The rows of a ZIP shard's ``metadata.parquet`` (each with its ``file_name``), all at once
    (:func:`metadata_table_rows` reads them as they are asked for)."""
    return list(metadata_table_rows(data, features))


def metadata_table_rows(data: bytes, features: list[dict[str, Any]] | None) -> TableRows:
    """The rows of a ZIP shard's ``metadata.parquet`` (each with its ``file_name``), checked as a
    Parquet shard is (:func:`open_parquet_shard`), its columns held to ``features`` (the
    manifest's; None: not held); each read when it is asked for (:class:`TableRows`): a reader of
    the shard holds a row group of them, not all (a shard of tiny files holds tens of thousands)."""
    schema = shard_table_schema(features) if features else None
    return TableRows(open_parquet_shard(io.BytesIO(data), max_bytes=len(data), schema=schema))


class TableRows:
    """A metadata table's rows by index, read in order a row group at a time: asked for in
    order (as shardkit writes the members), each is read once; asked for again, the last one
    is at hand; asked for before it, the reading starts again from that row's group. Opening
    the table checks its footer; each row group is checked as it is reached
    (:meth:`ParquetShard.rows`), so a damaged one raises :class:`ParquetShardError` then."""

    def __init__(self, shard: ParquetShard) -> None:
        self._shard = shard
        self._rows: Iterator[dict[str, Any]] | None = None
        self._next = 0  # the index of the row self._rows gives next
        self._last: tuple[int, dict[str, Any]] | None = None

    def __len__(self) -> int:
        return int(self._shard.num_rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._shard.rows(batch_size=PARQUET_ROWS_PER_GROUP)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self._shard.num_rows:
            raise IndexError(index)
        if self._last is not None and self._last[0] == index:
            return self._last[1]
        if self._rows is None or index < self._next:
            self._rows = self._shard.rows(batch_size=PARQUET_ROWS_PER_GROUP, start=index)
            self._next = index
        row: dict[str, Any] | None = None
        while self._next <= index:
            row = next(self._rows, None)
            if row is None:  # (never: the footer's count is checked against its row groups')
                raise ParquetShardError(f"no row {index}: the table ends before its footer's {len(self)} rows")
            self._next += 1
        assert row is not None
        self._last = (index, row)
        return row


def table_difference(rows: list[dict[str, Any]], lines: list[str], *, strict: bool = False) -> str | None:
    """Where metadata ``lines`` (JSON) first differ from a metadata table's ``rows`` (values
    compared as typed: ``2`` equals ``2.0`` in a float column, unless ``strict``; an absent field
    equals null); None where they hold the same rows in the same order."""
    if len(lines) != len(rows):
        return f"{len(lines)} lines, {len(rows)} rows there"
    for number, (line, row) in enumerate(zip(lines, rows, strict=True), 1):
        try:
            expected = json.loads(line)
        except (ValueError, RecursionError):
            return f"line {number} is not JSON"
        if not isinstance(expected, dict) or not _same_value(expected, row, strict):
            return f"line {number} (file_name {row.get('file_name')!r}) holds other values"
    return None


class _Sink:
    """The file object pyarrow writes to: forwards to the shard file and counts."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.out.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:  # the caller closes (and fsyncs) the real file
        self.closed = True


_MAX_GROUP_FILE_BYTES = (1 << 31) - 1


class ParquetShardWriter:
    """Collects rows into row groups and writes them; :meth:`close` returns the file's size.

    A row group is built from buffers, not Python objects: the files' bytes appended to one
    buffer with their offsets (the file column's ``bytes``), the metadata lines parsed as one
    block of JSON typed by the schema (:func:`metadata_lines_table`: the other columns, and
    ``file_name`` as the file column's ``path``). Each file is copied once, and ``pa.array``,
    which imports pandas into every worker (see :func:`_empty_table`), is never called.
    """

    def __init__(self, out: Output, features: list[dict[str, Any]], planned_bytes: int | None = None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self.schema = arrow_schema(features)
        self.file_column = features[0]["name"]
        self._file_type = self.schema.field(self.file_column).type
        self._others = [f["name"] for f in features[1:]]
        self._line_schema = metadata_schema(features)
        self._sink = _Sink(out)
        self._writer = pq.ParquetWriter(
            pa.PythonFile(self._sink, mode="w"),
            self.schema,
            compression={f"{self.file_column}.bytes": "NONE", f"{self.file_column}.path": "ZSTD"}
            | {name: "ZSTD" for name in self._others},
            use_dictionary=[f"{self.file_column}.path", *self._others],
            write_statistics=[f"{self.file_column}.path", *self._others],
            write_page_checksum=True,
        )
        self._lines: list[bytes] = []
        self._data = bytearray()
        self._offsets = array.array("i", [0])
        self._bytes = 0
        # (No planned size: groups as before layout 5, cut by rows and PARQUET_GROUP_BYTES only.)
        self._group_bytes = PARQUET_GROUP_BYTES if planned_bytes is None else group_bytes(planned_bytes)

    def add(self, metadata_line: str, file: RowFile | bytes) -> None:
        """A row: its published line and its file (or the file's bytes)."""
        size = len(file) if isinstance(file, bytes) else file.size
        # The file column's offsets are 32-bit (pa.binary()'s), and so are a Parquet page's sizes.
        if size > _MAX_GROUP_FILE_BYTES:
            name = json.loads(metadata_line).get("file_name")
            raise ShardkitError(f"file {name!r} is {size} bytes: a Parquet shard holds files under 2 GiB")
        if self._lines and len(self._data) + size > _MAX_GROUP_FILE_BYTES:
            self._flush()
        if isinstance(file, bytes):
            self._data += file
        else:
            file.copy_to(self._data.extend)
        self._offsets.append(len(self._data))
        self._lines.append(metadata_line.encode())
        # A group is cut by what it decodes to, which readers bound (decoded_limit): the file's
        # bytes, and at most LINE_DECODE_FACTOR bytes per byte of its metadata line.
        self._bytes += size + LINE_DECODE_FACTOR * len(metadata_line)
        if len(self._lines) >= PARQUET_ROWS_PER_GROUP or self._bytes >= self._group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._lines:
            return
        pa = self._pa
        lines = metadata_lines_table(b"\n".join(self._lines) + b"\n", self._line_schema)
        buffers = [None, pa.py_buffer(self._offsets), pa.py_buffer(self._data)]
        data = pa.Array.from_buffers(pa.binary(), len(self._lines), buffers)
        paths = lines.column("file_name").combine_chunks()
        files = pa.StructArray.from_arrays([data, paths], fields=list(self._file_type))
        columns = [files, *(lines.column(name).combine_chunks() for name in self._others)]
        table = pa.Table.from_arrays(columns, schema=self.schema)
        self._writer.write_table(table, row_group_size=len(self._lines))
        self._lines, self._data, self._offsets = [], bytearray(), array.array("i", [0])
        self._bytes = 0

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self._sink.size


# --- reading -------------------------------------------------------------------------------------


class ParquetShardError(ShardFormatError):
    """A Parquet shard that is damaged, or declares more than a shardkit shard can hold. The
    message names the row group (and column) where known; the caller puts the file in front."""


_MAGIC = b"PAR1"
#: pyarrow reads this much of a file's end to find the footer.
_TAIL_BYTES = 64 << 10
#: Footers of shardkit shards are a few hundred bytes per row group and column; more is not ours.
_MAX_FOOTER_BYTES = 16 << 20
#: pyarrow turns each struct of the footer into a C++ object of up to about a kilobyte, however
#: few bytes the struct took in the file: a footer of many tiny structs is a memory bomb. A
#: shardkit footer has about six per row group and column.
_MAX_FOOTER_STRUCTS = 300_000
#: ... or one per this many footer bytes, if more: a wide shard (many columns, the row cap's 656
#: row groups) has millions of structures legitimately, each of 15 bytes or more in the file.
_FOOTER_BYTES_PER_STRUCT = 10
_MAX_THRIFT_DEPTH = 24
#: Page types pyarrow reads.
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
#: Value encodings pyarrow writes for shardkit's columns (PLAIN, PLAIN_DICTIONARY, RLE,
#: RLE_DICTIONARY). The others are refused: DELTA_BYTE_ARRAY's shared prefixes, for one, let a
#: small page decode to far more than its declared size.
_VALUE_ENCODINGS = frozenset({0, 2, 3, 8})
_LEVEL_ENCODINGS = frozenset({3, 4})  # RLE, BIT_PACKED
#: What a value costs decoded besides its bytes, at most: a number or an offset, and its levels.
_VALUE_BYTES = 8
#: pyarrow cuts a page once it holds 1 MiB of data, checking every 1,024 values: a chunk of many
#: more pages than its size and values call for (here with four-fold slack, plus one per row) is
#: not one it wrote, and walking millions of tiny page headers would take minutes.
_PAGE_BYTES = 256 << 10
_PAGE_VALUES = 1000


#: What one byte of a metadata line may become once its fields are decoded (and counted with
#: _VALUE_BYTES per value): a value takes two bytes of JSON at least (``0,``) and sixteen
#: decoded (an int64 and its _VALUE_BYTES); a string, its bytes, an offset, a dictionary entry.
LINE_DECODE_FACTOR = 10


def decoded_limit(shard_bytes: int) -> int:
    """The most one row group of a ``shard_bytes`` shard may decode to.

    The writer cuts a group once its files and LINE_DECODE_FACTOR times its metadata lines
    pass PARQUET_GROUP_BYTES, so a group decodes to less than that plus its last row: a file
    (stored uncompressed, so within the shard's size) and a line of at most MAX_LINE_BYTES.
    """
    return PARQUET_GROUP_BYTES + shard_bytes + LINE_DECODE_FACTOR * MAX_LINE_BYTES


class _ThriftError(ValueError):
    pass


class _Compact:
    """A bounded reader of Thrift's compact protocol (Parquet's footer and page headers).

    Every size is checked against the bytes left before anything is read, nesting is limited,
    and so is the number of structs (the footer's memory bomb). ``keep=False`` only walks.
    """

    def __init__(self, buf: bytes, pos: int, end: int, *, keep: bool = True, max_structs: int = 1 << 20) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.keep = keep
        self.structs_left = max_structs

    def _byte(self) -> int:
        if self.pos >= self.end:
            raise _ThriftError("ends inside a structure")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def _varint(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        shift = result = 0
        while pos < end and shift <= 63:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7
        raise _ThriftError("has a number past its end or past 64 bits")

    def _int(self) -> int:
        n = self._varint()
        return (n >> 1) ^ -(n & 1)

    def _take(self, n: int) -> bytes | None:
        if n > self.end - self.pos:
            raise _ThriftError(f"has a {n}-byte value past its end")
        start = self.pos
        self.pos += n
        return self.buf[start : self.pos] if self.keep else None

    def _value(self, kind: int, depth: int) -> Any:
        if kind in (1, 2):  # a boolean in a field header
            return kind == 1
        if kind == 3:
            return self._byte()
        if kind in (4, 5, 6):
            return self._int()
        if kind == 7:
            return self._take(8)
        if kind == 8:
            return self._take(self._varint())
        if kind in (9, 10):  # list, set
            header = self._byte()
            size, element = header >> 4, header & 15
            if size == 15:
                size = self._varint()
            if size > self.end - self.pos:  # every element takes a byte at least
                raise _ThriftError(f"has a list of {size} elements in fewer bytes")
            if element in (1, 2):
                items = [self._byte() == 1 for _ in range(size)]
            else:
                items = [self._value(element, depth) for _ in range(size)]
            return items if self.keep else None
        if kind == 11:  # map
            size = self._varint()
            if size == 0:
                return {}
            if 2 * size > self.end - self.pos:
                raise _ThriftError(f"has a map of {size} entries in fewer bytes")
            types = self._byte()
            pairs = [(self._value(types >> 4, depth), self._value(types & 15, depth)) for _ in range(size)]
            return dict(pairs) if self.keep else None
        if kind == 12:
            return self.struct(depth + 1)
        raise _ThriftError(f"has a value of unknown Thrift type {kind}")

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > _MAX_THRIFT_DEPTH:
            raise _ThriftError(f"is nested more than {_MAX_THRIFT_DEPTH} deep")
        self.structs_left -= 1
        if self.structs_left < 0:
            raise _ThriftError("holds more structures than its size allows (pyarrow makes each an object)")
        fields: dict[int, Any] = {}
        last = 0
        while True:
            header = self._byte()
            if header == 0:
                return fields
            kind, delta = header & 15, header >> 4
            last = last + delta if delta else self._int()
            value = self._value(kind, depth)
            if self.keep:
                fields[last] = value


class _Window(io.RawIOBase):
    """The shard as pyarrow sees it: the footer and the one row group shardkit has read and
    checked. pyarrow reads nothing else, so it decodes no byte that was not checked first."""

    def __init__(self, size: int, tail_start: int, tail: bytes) -> None:
        super().__init__()
        self._size = size
        self._pos = 0
        self._tail = (tail_start, tail)
        self._group: tuple[int, bytes] = (0, b"")

    def hold(self, start: int, data: bytes) -> None:
        self._group = (start, data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset + (self._pos if whence == 1 else self._size if whence == 2 else 0)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), max(self._size - self._pos, 0))
        for start, data in (self._group, self._tail):
            if start <= self._pos and self._pos + n <= start + len(data):
                offset = self._pos - start
                memoryview(buffer)[:n] = data[offset : offset + n]
                self._pos += n
                return n
        raise ParquetShardError(f"pyarrow read bytes {self._pos}..{self._pos + n}, outside the parts shardkit checked")


@dataclass
class _Chunk:
    """One column chunk as its page headers describe it."""

    decoded: int  # declared bytes once decompressed, headers included
    values: int  # values (nulls included) of its data pages
    entries: int  # dictionary entries
    pages: int = 0
    unchecked: int = 0  # pages without a checksum


class ParquetShard:
    """A Parquet shard opened by :func:`open_parquet_shard`: its columns, then its rows."""

    def __init__(self, raw: IO[bytes], max_bytes: int | None, schema: pa.Schema | None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._raw = raw
        self.size = raw.seek(0, 2)
        if max_bytes is not None and self.size > max_bytes:
            raise ParquetShardError(f"{self.size} bytes, over the manifest's cap of {max_bytes}")
        if self.size < 12:
            raise ParquetShardError(f"{self.size} bytes: too short for a Parquet file")
        self.limit = decoded_limit(self.size)
        self._checksums: set[bool] = set()  # whether the pages seen so far carry checksums
        self._held: tuple[int, bytes] = (self.size, b"")  # the file's end as read already, from where
        tail_start = max(self.size - _TAIL_BYTES, 0)
        tail = self._read(tail_start, self.size - tail_start)
        if tail[-4:] != _MAGIC:
            raise ParquetShardError("does not end with PAR1: not a Parquet file (or an encrypted one)")
        footer_bytes = struct.unpack("<I", tail[-8:-4])[0]
        if footer_bytes > min(self.size - 12, _MAX_FOOTER_BYTES):
            raise ParquetShardError(f"a footer of {footer_bytes} bytes in a {self.size}-byte file")
        self._footer_start = self.size - 8 - footer_bytes
        if self._footer_start < tail_start:
            tail = self._read(self._footer_start, self.size - self._footer_start)
            tail_start = self._footer_start
        self._held = (tail_start, tail)
        walk = _Compact(
            tail,
            self._footer_start - tail_start,
            len(tail) - 8,
            keep=False,
            max_structs=max(_MAX_FOOTER_STRUCTS, footer_bytes // _FOOTER_BYTES_PER_STRUCT),
        )
        try:
            walk.struct()
        except _ThriftError as exc:
            raise ParquetShardError(f"the footer {exc}") from None
        if walk.pos != walk.end:
            raise ParquetShardError("the footer does not end where its length says")
        self._window = _Window(self.size, tail_start, tail)
        try:
            plain = pq.ParquetFile(pa.PythonFile(self._window, mode="r"), pre_buffer=False)
            got = plain.metadata.schema.to_arrow_schema()
            leaves = [plain.schema.column(j) for j in range(plain.metadata.num_columns)]
        except (pa.ArrowException, OSError) as exc:
            raise ParquetShardError(f"unreadable footer: {_one_line(exc)}") from None
        if schema is not None and not (got.equals(schema) and got.metadata == schema.metadata):
            raise ParquetShardError("its columns are not those the manifest's features declare")
        self.columns: list[str] = got.names
        self._dense = got
        self._metadata = plain.metadata
        self._repeated = [c.max_repetition_level > 0 for c in leaves]
        # Strings stay dictionary-encoded until their decoded size is known; the file's bytes
        # (never dictionary-encoded by shardkit, and refused if they are) are read as they are.
        file_bytes = f"{self.columns[0]}.bytes" if self.columns else ""
        self._dictionary = [c.physical_type == "BYTE_ARRAY" and c.path != file_bytes for c in leaves]
        self._file = pq.ParquetFile(
            pa.PythonFile(self._window, mode="r"),
            metadata=plain.metadata,
            pre_buffer=False,
            page_checksum_verification=True,
            read_dictionary=[c.path for c, d in zip(leaves, self._dictionary, strict=True) if d],
        )
        rows = sum(self._metadata.row_group(i).num_rows for i in range(self._metadata.num_row_groups))
        if rows != self._metadata.num_rows:
            raise ParquetShardError(f"the footer counts {self._metadata.num_rows} rows, its row groups {rows}")
        if rows > PARQUET.max_rows:
            raise ParquetShardError(f"{rows} rows; a shardkit shard holds at most {PARQUET.max_rows}")
        self.num_rows = rows

    def _read(self, start: int, n: int) -> bytes:
        """Bytes ``start`` to ``start + n`` of the file; what of them the tail read holds is not
        asked for again (a small shard's last row groups are in its 64 KiB tail, or all of them)."""
        held_start, held = self._held
        if start + n <= held_start:
            return self._fetch(start, n)
        head = self._fetch(start, held_start - start) if start < held_start else b""
        return head + held[max(start - held_start, 0) : start + n - held_start]

    def _fetch(self, start: int, n: int) -> bytes:
        self._raw.seek(start)
        data = self._raw.read(n)
        if len(data) != n:
            raise ParquetShardError(f"ended at byte {start + len(data)}, before its {self.size} bytes")
        return bytes(data)

    def rows(self, batch_size: int = 16, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """Rows ``start`` to ``stop`` (default: every row) as Python values, row group by row group,
        each group checked before it is decoded. Groups wholly outside are not read."""
        import pyarrow as pa

        last_end = len(_MAGIC)
        first_row = 0  # of the group at hand
        for index in range(self._metadata.num_row_groups):
            group_rows = self._metadata.row_group(index).num_rows
            if not 1 <= group_rows <= PARQUET_ROWS_PER_GROUP:  # (checked here too: it places the rows after it)
                raise ParquetShardError(
                    f"row group {index}: {group_rows} rows; shardkit writes 1 to {PARQUET_ROWS_PER_GROUP} a group"
                )
            first_row += group_rows
            if first_row <= start:
                continue  # not read: the next group read is checked against the start of the file
            if stop is not None and first_row - group_rows >= stop:
                return
            try:
                last_end = self._check_group(index, last_end)
            except ParquetShardError as exc:
                raise ParquetShardError(f"row group {index}: {exc}") from None
            try:
                # One thread: with pyarrow's pool, a column that fails its checksum raises while
                # the other columns still decode on pool threads, and a process that exits then
                # can abort in C++ teardown ("terminate called without an active exception").
                table = self._file.read_row_group(index, use_threads=False)
            except ParquetShardError as exc:
                raise ParquetShardError(f"row group {index}: {exc}") from None
            except (pa.ArrowException, OSError):  # only checked bytes in memory: the data is bad
                raise self._named_failure(index) from None
            decoded = _decoded_bytes(table)
            if decoded > self.limit:
                raise ParquetShardError(
                    f"row group {index} decodes to {decoded} bytes, more than a {self.size}-byte shard can"
                    f" hold ({self.limit})"
                )
            table = table.cast(self._dense)  # its decoded size is known now; Python values come faster from it
            group_first = first_row - group_rows
            skip = max(start - group_first, 0)
            table = table.slice(skip, min(stop if stop is not None else first_row, first_row) - group_first - skip)
            for offset in range(0, table.num_rows, batch_size):
                try:
                    batch = table.slice(offset, batch_size).to_pylist()
                except (UnicodeDecodeError, pa.ArrowException) as exc:  # e.g. a string that is not UTF-8
                    raise ParquetShardError(f"row group {index}: {_one_line(exc)}") from None
                yield from batch
            del table
            self._window.hold(0, b"")

    def _named_failure(self, index: int) -> ParquetShardError:
        """Why row group ``index`` could not be read, naming the column (pyarrow's message does not)."""
        import pyarrow as pa

        for name in self.columns:
            try:
                self._file.read_row_group(index, columns=[name], use_threads=False)
            except (pa.ArrowException, OSError) as exc:
                return ParquetShardError(f"row group {index}, column {name}: {_one_line(exc)}")
        return ParquetShardError(f"row group {index}: unreadable as a whole, though each column reads")

    def _check_group(self, index: int, last_end: int) -> int:
        """Read row group ``index`` into the window after checking its footer entry and every
        page header against what a shard of this size can hold; return where the group ends."""
        group = self._metadata.row_group(index)
        if not 1 <= group.num_rows <= PARQUET_ROWS_PER_GROUP:
            raise ParquetShardError(f"{group.num_rows} rows; shardkit writes 1 to {PARQUET_ROWS_PER_GROUP} a group")
        ranges = []
        for j in range(group.num_columns):
            column = group.column(j)
            if column.file_path:
                raise ParquetShardError(f"column {column.path_in_schema} is in another file, {column.file_path!r}")
            start = column.data_page_offset
            if column.has_dictionary_page and 0 < (column.dictionary_page_offset or 0) < start:
                start = column.dictionary_page_offset
            end = start + column.total_compressed_size
            if start < last_end or end > self._footer_start or column.total_compressed_size <= 0:
                raise ParquetShardError(
                    f"column {column.path_in_schema} claims bytes {start}..{end}, not after the previous"
                    f" column's ({last_end}) and before the footer ({self._footer_start})"
                )
            ranges.append((start, end))
            last_end = end
        group_start = ranges[0][0] if ranges else last_end
        data = self._read(group_start, last_end - group_start)
        declared = 0
        for j, span in enumerate(ranges):
            column = group.column(j)
            chunk = _walk_pages(data, group_start, span, column, group.num_rows, self._dictionary[j], self.limit)
            if chunk.values != column.num_values or chunk.decoded != column.total_uncompressed_size:
                raise ParquetShardError(
                    f"column {column.path_in_schema}: its pages hold {chunk.values} values and {chunk.decoded}"
                    f" bytes, the footer says {column.num_values} and {column.total_uncompressed_size}"
                )
            if not self._repeated[j] and chunk.values != group.num_rows:
                raise ParquetShardError(
                    f"column {column.path_in_schema} holds {chunk.values} values for {group.num_rows} rows"
                )
            declared += chunk.decoded + _VALUE_BYTES * (chunk.values + chunk.entries)
            # Every page checksummed (shardkit since layout 3), or none (shards packed before,
            # read without a data check as old tar shards are): a mix is not a shard shardkit wrote.
            self._checksums.update({chunk.unchecked == 0, chunk.unchecked < chunk.pages} if chunk.pages else set())
            if len(self._checksums) > 1:
                raise ParquetShardError(f"column {column.path_in_schema}: some pages have a checksum and others not")
        if declared > self.limit:
            raise ParquetShardError(
                f"declares {declared} bytes once decompressed and decoded, more than a {self.size}-byte shard"
                f" can hold ({self.limit})"
            )
        self._window.hold(group_start, data)
        return last_end


def _walk_pages(
    data: bytes,
    base: int,
    span: tuple[int, int],
    column: pq.ColumnChunkMetaData,
    rows: int,
    dictionary: bool,
    limit: int,
) -> _Chunk:
    """The pages of the column chunk at ``span`` (``data`` holds the file from ``base``), each
    header checked; ``limit`` bounds what the footer may claim for it (checked after the walk)."""
    start, end = span
    where = f"column {column.path_in_schema}"
    chunk = _Chunk(0, 0, 0)
    size, values = min(column.total_uncompressed_size, limit), min(column.num_values, limit // _VALUE_BYTES)
    most_pages = 2 + rows + size // _PAGE_BYTES + values // _PAGE_VALUES
    pos, pages = start - base, 0
    while pos < end - base:
        pages += 1
        if pages > most_pages:
            raise ParquetShardError(f"{where}: more than {most_pages} pages")
        reader = _Compact(data, pos, end - base)
        try:
            header = reader.struct()
        except _ThriftError as exc:
            raise ParquetShardError(f"{where}: the page header at byte {base + pos} {exc}") from None
        kind, decoded, stored = header.get(1), header.get(2), header.get(3)
        at = f"{where}: page at byte {base + pos}"
        if not (isinstance(decoded, int) and isinstance(stored, int) and 0 <= stored <= end - base - reader.pos):
            raise ParquetShardError(f"{at}: sizes {decoded!r} and {stored!r} do not fit its column chunk")
        if decoded < 0:
            raise ParquetShardError(f"{at}: a negative size")
        chunk.pages += 1
        chunk.unchecked += 4 not in header  # shards from before page checksums have none
        if kind == _DICTIONARY_PAGE:
            info = header.get(7) or {}
            if pages != 1 or (not dictionary and column.physical_type == "BYTE_ARRAY"):
                raise ParquetShardError(f"{at}: a dictionary page where shardkit writes none")
            if info.get(2) not in (0, 2) or not isinstance(info.get(1), int) or info[1] < 0:
                raise ParquetShardError(f"{at}: not a dictionary page shardkit writes")
            chunk.entries += info[1]
        elif kind in (_DATA_PAGE, _DATA_PAGE_V2):
            info = header.get(5 if kind == _DATA_PAGE else 8) or {}
            levels = (info.get(3), info.get(4)) if kind == _DATA_PAGE else (3, 3)
            values = info.get(1)
            if not isinstance(values, int) or values < 0:
                raise ParquetShardError(f"{at}: no count of values")
            if (
                info.get(4 if kind == _DATA_PAGE_V2 else 2) not in _VALUE_ENCODINGS
                or not set(levels) <= _LEVEL_ENCODINGS
            ):
                raise ParquetShardError(f"{at}: an encoding shardkit does not write")
            chunk.values += values
        else:
            raise ParquetShardError(f"{at}: page type {kind!r}, not one shardkit writes")
        chunk.decoded += reader.pos - pos + decoded
        pos = reader.pos + stored
    if pos != end - base:
        raise ParquetShardError(f"{where}: its last page runs past the chunk's end")
    return chunk


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _decoded_bytes(table: pa.Table) -> int:
    """What ``table`` takes once every dictionary is expanded into its values (what Python gets)."""
    return sum(_array_bytes(chunk) for column in table.columns for chunk in column.chunks)


def _array_bytes(array: pa.Array) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.binary_length(array.dictionary)
        total = pc.sum(pc.take(lengths, array.indices)).as_py() or 0
        return int(total) + _VALUE_BYTES * len(array)
    if pa.types.is_struct(kind):
        return sum(_array_bytes(field) for field in array.flatten()) + len(array)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _array_bytes(array.flatten()) + _VALUE_BYTES * len(array)
    return int(array.nbytes)


def open_parquet_shard(
    raw: IO[bytes], *, max_bytes: int | None = None, schema: pa.Schema | None = None
) -> ParquetShard:
    """Open a Parquet shard for reading (``raw``: a seekable binary file; nothing else is read).

    Refused with :class:`ParquetShardError`: a file over ``max_bytes`` (the manifest's cap), a
    footer that is not a Parquet footer or is a memory bomb, columns other than ``schema``'s (the
    manifest's features, :func:`arrow_schema`). Each row group is then checked as
    :meth:`ParquetShard.rows` reaches it: its page headers (sizes, counts, encodings, a checksum on
    every page) and, once decoded, each page's checksum and the group's decoded size.
    """
    return ParquetShard(raw, max_bytes, schema)


# --- the format: member names, size cost, writer, reader, verifier --------------------------------


class ParquetFormat(ShardFormat):
    def member_name(self, key: str, ext: str) -> str:
        return f"{key}{ext}"

    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        # An upper bound: the file stored plain (4-byte length) plus 0.2% for page headers, its
        # path (value and dictionary), the fields (their JSON text, twice: once for the values,
        # once for each row's share of the footer's per-row-group column metadata), and levels.
        # Since layout 5 a row of over 1/64 of a small shard is a group alone, whose footer entry
        # and page headers this may not cover (measured: 0.2% over, six shards of 20-58 rows of
        # 75 KB files): the writer's check against the cap stands, and shards are planned near
        # the target, half the cap by default.
        return file_bytes + file_bytes // 512 + 4 + 2 * (key_length + ext_length + 4) + 2 * line_bytes + 128

    def features_salt(self, features: list[dict[str, Any]]) -> bytes:
        return json.dumps(features, sort_keys=True).encode()  # the schema and datasets' features in its metadata

    def write(self, out: Output, rows: ShardRows) -> int:
        if not rows.features:
            raise ShardkitError(f"internal error: no features to type {rows.name}'s columns")
        pw = ParquetShardWriter(out, rows.features, rows.planned_bytes)
        with rows.files() as files:
            for row in files:
                pw.add(row.metadata_line, row)
                rows.record_line(row.metadata_line.encode("utf-8") + b"\n")
        return pw.close()

    def read_rows(self, f: BinaryIO, record: ShardRecord) -> Iterator[dict[str, Any]]:
        """Each row group checked before it is decoded (:func:`open_parquet_shard`). The
        manifest's cap, the shard's recorded size and rows and the columns its features declare
        are what the shard is held to."""
        return self._rows(f, record, 0, None)

    def read_piece(
        self, shard: ShardSource, record: ShardRecord, start: int = 0, stop: int | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """The footer, then only the row groups that hold rows ``start`` to ``stop``, each in one
        ranged read."""
        f = shard.open_random()
        try:
            yield from rows_between(self._rows(f, record, start, stop), record, start, stop, first=start)
        finally:
            f.close()

    def _rows(self, f: BinaryIO, record: ShardRecord, start: int, stop: int | None) -> Iterator[dict[str, Any]]:
        schema = arrow_schema(record.features) if record.features else None
        where = record.where
        try:
            parquet = open_parquet_shard(f, max_bytes=record.max_bytes, schema=schema)
            recorded = (record.bytes, record.rows)
            if record.bytes is not None and (parquet.size, parquet.num_rows) != recorded:
                raise ParquetShardError(
                    f"{parquet.size} bytes and {parquet.num_rows} rows, the manifest says {record.bytes} and"
                    f" {record.rows}"
                )
            # Each row's path, key and fields are held to the manifest where every reader's rows
            # pass (:mod:`shardkit.rowcheck`).
            yield from parquet.rows(start=start, stop=stop)
        except ParquetShardError as exc:
            raise ParquetShardError(f"{where}: {exc}") from None

    def verify_shard(self, check: ShardCheck) -> Walk:
        """Every row against its metadata line (values compared as typed), in order. The shard is
        opened as every reader opens it (:func:`open_parquet_shard`): each row group checked
        before it is decoded, each page's checksum verified."""
        with check.open(check.shard_file) as raw:
            reader = HashingReader(raw)
            reader.drain()
        try:
            with check.open(check.metadata_file) as f:
                data = f.read()
        except FileNotFoundError:
            data = b""  # reported by the shared check
        rows, _ = check.check_rows(data, check.metadata_file)
        text = data.decode("utf-8", "replace")
        lines = iter(jsonl_lines(text))
        count = 0
        try:
            with check.open(check.shard_file) as raw_file:
                # Held to the features, as every reader holds it: its values are then exactly the
                # declared types, which the comparison with the lines (2 equals 2.0 and True) is not.
                schema = arrow_schema(check.features) if check.features else None
                parquet = open_parquet_shard(raw_file, schema=schema)
                file_column = parquet.columns[0] if parquet.columns else ""
                for record in parquet.rows(batch_size=64):
                    count += 1
                    content = record.pop(file_column, None) or {}
                    name = str(content.get("path"))
                    _compare_row(check, count, name, record, next(lines, None))
                    if content.get("bytes") is not None:
                        check.file(name, content["bytes"], source_of_row(record, SOURCE_PATH_COLUMN))
        except (ParquetShardError, OSError) as exc:
            check.problem(f"not a sound shard: {exc}")
        if next(lines, None) is not None:
            check.problem(f"has more lines than {check.shard_file} has rows", file=check.metadata_file)
        return Walk(reader.sha256.hexdigest(), count, sorted(rows.values()), None)


def _same_value(a: Any, b: Any, strict: bool = False) -> bool:
    """A JSON value equals what Parquet returned for it (an absent struct field reads as null);
    ``strict``: of the same type too (``2`` is not ``2.0``, nor ``True`` ``1``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_same_value(a.get(k), b.get(k), strict) for k in a.keys() | b.keys())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y, strict) for x, y in zip(a, b, strict=True))
    return bool(a == b) and (not strict or type(a) is type(b))


def _compare_row(check: ShardCheck, count: int, name: str, record: dict[str, Any], line: str | None) -> None:
    """A Parquet row (its path ``name`` and typed fields) against its line in metadata/."""
    try:
        expected = json.loads(line) if line is not None else None
    except (ValueError, RecursionError):
        expected = {}  # check_rows reported it
    source = source_of_row(record, SOURCE_PATH_COLUMN)  # the shard's own row: the one the problem is about
    meta = check.metadata_file
    if not isinstance(expected, dict):
        check.problem(f"row {count} has no line in {meta}", name, source)
        return
    if expected.pop("file_name", None) != name:
        check.problem(f"row {count}: path differs from {meta}", name, source)
    if not _same_value(expected, record):
        check.problem(f"row {count}: fields differ from {meta}", name, source)


PARQUET = ParquetFormat(
    "parquet",
    exact=False,
    fixed_bytes=16 << 10,
    max_rows=MAX_ZIP_MEMBERS - 1,  # the same row cap and largest shard as ZIP's
    max_bytes=MAX_ZIP_BYTES,
    member_template="{key}{ext} (the path in the file column)",
    random_access=True,
    layout_version=5,  # row groups of about 1/64 of the shard (packresume.LAYOUT_CHANGES)
)
