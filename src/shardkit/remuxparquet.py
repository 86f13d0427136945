"""A remux source that datasets reads with its Parquet builder (what ``push_to_hub`` writes, or
``.parquet`` data files), read here with pyarrow, file by file, a few rows at a time.

Why not through ``load_dataset(..., streaming=True)``, as any other source: its Parquet reader
holds whole row groups (datasets writes them up to 100 MB) and more; reading a 517 MB file
one row at a time took 1.1 to 1.5 GB, and twice that for twice the file (docs/performance.md,
remux). Here a file is read with ``pre_buffer`` off and a buffered stream, so memory is a few
pages and one batch, whatever the file and its row groups. The rows are what datasets gives:
datasets resolves the files and the features (``load_dataset_builder``), each table is cast to
those features (``datasets.table.table_cast``, as the builder casts it) and its rows are Python
values, file columns as ``{"bytes", "path"}`` dicts. The reads go through :mod:`.location`, so a
Hub or http(s) file is read with its retries (a dropped connection resumes from the next byte).

:class:`ParquetSplit` stands in for the streaming dataset remux reads otherwise: ``features``,
iteration, ``state_dict``/``load_state_dict``. Its state is the next row's file and row, so a
resumed run starts at that row group without reading the files before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import unquote

from .errors import ShardkitError
from .location import Location

#: What pyarrow reads at a time from a file: pages stream through this buffer.
READ_BUFFER_BYTES = 8 << 20
_HUB_FILE = re.compile(r"hf://datasets/([^/@]+/[^/@]+)(?:@([^/]+))?/(.+)")


def open_data_file(url: str) -> BinaryIO:
    """A seekable file over a data file datasets resolved: ``hf://datasets/ns/name@rev/path``, a
    local path, or another URL; each read asks for its bytes (and over the network, retries)."""
    if match := _HUB_FILE.fullmatch(url):
        repo, revision, path = match.groups()
        hub = Location.parse(f"hf://datasets/{repo}", revision=unquote(revision) if revision else None)
        return hub.open_random(path, exact=True)
    if "://" not in url:
        return open(url, "rb")
    base, _, name = url.rpartition("/")
    return Location.parse(base).open_random(name, exact=True)


class ParquetSplit:
    """One split of a Parquet source: its files in datasets' order, read with its features."""

    def __init__(self, files: list[str], features: Any, info: Any = None) -> None:
        self.files = files
        self.features = features
        self.info = info  # datasets' DatasetInfo: the card's row counts, if it has them
        self.n_shards = len(files)
        self._next = (0, 0)  # the file and row of the next row to give
        self._start = (0, 0)

    def state_dict(self) -> dict[str, int]:
        return {"file": self._next[0], "row": self._next[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        file, row = state.get("file"), state.get("row")
        if not (type(file) is int and type(row) is int and 0 <= file <= len(self.files) and row >= 0):
            raise ValueError(f"not a position in {len(self.files)} Parquet files: {state!r}")
        self._start = (file, row)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        first_file, first_row = self._start
        for index in range(first_file, len(self.files)):
            self._next = (index, first_row if index == first_file else 0)
            try:
                yield from self._file_rows(index, self._next[1])
            except ShardkitError:
                raise
            except Exception as exc:  # pyarrow and the network raise many types: name the file
                raise ShardkitError(f"{self.files[index]}: {type(exc).__name__}: {exc}") from None
        self._next = (len(self.files), 0)

    def _file_rows(self, index: int, start: int) -> Iterator[dict[str, Any]]:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from datasets.table import table_cast

        schema = self.features.arrow_schema
        with open_data_file(self.files[index]) as f:
            parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
            groups, skip = _groups_from(parquet.metadata, start)
            if not groups:
                return
            row = start
            for record_batch in parquet.iter_batches(batch_size=256, row_groups=groups, use_threads=False):
                if skip >= record_batch.num_rows:
                    skip -= record_batch.num_rows
                    continue
                table = table_cast(pa.Table.from_batches([record_batch.slice(skip)]), schema)
                skip = 0
                for values in table.to_pylist():
                    row += 1
                    self._next = (index, row)
                    yield values


def _groups_from(metadata: Any, start: int) -> tuple[list[int], int]:
    """The row groups from the one holding row ``start`` on, and the rows of it before ``start``."""
    seen = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if start < seen + rows:
            return list(range(group, metadata.num_row_groups)), start - seen
        seen += rows
    return [], 0


def parquet_splits(
    source: str, config_name: str | None, revision: str | None, files_split: str = "train"
) -> dict[str, ParquetSplit] | None:
    """The splits of ``source`` as Parquet files, when datasets reads it with its Parquet builder
    (None otherwise, or when datasets cannot tell: then it is read with ``load_dataset``, which
    says what is wrong). Data files named directly are the split ``files_split``."""
    import datasets

    from .remuxsource import data_files_builder

    builder_name = data_files_builder(source)
    if builder_name not in (None, "parquet"):
        return None
    try:
        if builder_name == "parquet":
            builder = datasets.load_dataset_builder("parquet", data_files={files_split: source})
        else:
            builder = datasets.load_dataset_builder(source, config_name, revision=revision)
    except Exception:  # a source datasets cannot read this way: load_dataset names the problem
        return None
    from datasets.packaged_modules.parquet.parquet import Parquet

    data_files = getattr(builder.config, "data_files", None)
    if not isinstance(builder, Parquet) or not data_files:  # (a Hub repo's builder is a subclass of it)
        return None
    files = {str(name): [str(f) for f in listed] for name, listed in data_files.items() if listed}
    features = builder.info.features
    if features is None:  # as the builder does: the first file's schema (with datasets' own metadata)
        import pyarrow.parquet as pq

        first = next(iter(files.values()))[0]
        try:
            with open_data_file(first) as f:
                features = datasets.Features.from_arrow_schema(pq.read_schema(f))
        except ShardkitError:
            raise
        except Exception as exc:  # pyarrow and the network raise many types for a file that is not Parquet
            raise ShardkitError(f"cannot read {source!r}: {first}: {type(exc).__name__}: {exc}") from None
    return {name: ParquetSplit(listed, features, builder.info) for name, listed in files.items()}
