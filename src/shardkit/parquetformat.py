"""``--format parquet``: rows as Parquet, the file's bytes in a ``{bytes, path}`` column.

The column types come from the same features the dataset card declares (inferred from every
row by :mod:`.schema`), so datasets' parquet builder decodes the image (or audio) column and
types every field as the card says. The file column is stored without compression,
dictionary or statistics (images are compressed already, and min/max of JPEG bytes is
useless); the other columns use zstd. Row groups hold at most
:data:`~shardkit.formats.PARQUET_ROWS_PER_GROUP` rows and about 32 MiB of files, so a reader
holds about one group at a time and so does the writer.

pyarrow is imported only here: ZIP and tar workers never load it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .formats import PARQUET_GROUP_BYTES, PARQUET_ROWS_PER_GROUP
from .streamio import Output

if TYPE_CHECKING:
    import pyarrow as pa

_SCALARS = {"string": "string", "int64": "int64", "float64": "float64", "bool": "bool_", "binary": "binary"}


def _arrow_type(feature: dict[str, Any]) -> pa.DataType:
    """The Arrow type of one feature in the card's YAML form (dtype / list / struct)."""
    import pyarrow as pa

    if "dtype" in feature:
        dtype = feature["dtype"]
        if dtype in ("image", "audio"):
            return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
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


class ParquetShardWriter:
    """Collects rows into row groups and writes them; :meth:`close` returns the file's size."""

    def __init__(self, out: Output, features: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self.schema = arrow_schema(features)
        self.file_column = features[0]["name"]
        others = [f["name"] for f in features[1:]]
        self._sink = _Sink(out)
        self._writer = pq.ParquetWriter(
            pa.PythonFile(self._sink, mode="w"),
            self.schema,
            compression={f"{self.file_column}.bytes": "NONE", f"{self.file_column}.path": "ZSTD"}
            | {name: "ZSTD" for name in others},
            use_dictionary=[f"{self.file_column}.path", *others],
            write_statistics=[f"{self.file_column}.path", *others],
        )
        self._rows: list[dict[str, Any]] = []
        self._bytes = 0

    def add(self, metadata_line: str, data: bytes) -> None:
        row = json.loads(metadata_line)
        row[self.file_column] = {"bytes": data, "path": row.pop("file_name")}
        self._rows.append(row)
        self._bytes += len(data)
        if len(self._rows) >= PARQUET_ROWS_PER_GROUP or self._bytes >= PARQUET_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            table = self._pa.Table.from_pylist(self._rows, schema=self.schema)
            self._writer.write_table(table, row_group_size=len(self._rows))
            self._rows = []
            self._bytes = 0

    def close(self) -> int:
        self._flush()
        self._writer.close()
        return self._sink.size
