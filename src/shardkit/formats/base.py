"""What a shard format is: :class:`ShardFormat`, and what its three operations are given.

A format is one object (``ZIP``, ``TAR``, ``PARQUET`` in :mod:`shardkit.formats`) that knows
everything shardkit does differently per format:

* for the planner: its suffix, what a shard costs empty (``fixed_bytes``) and per row
  (:meth:`~ShardFormat.row_cost`), whether that is exact, the most rows and bytes a shard holds,
  and which rows it cannot hold (:meth:`~ShardFormat.key_problem`);
* for the manifest: its tag and member names (what datasets' builtin loaders do with the
  shards is :mod:`shardkit.builtin`'s, how the card words them :mod:`shardkit.card`'s);
* three operations: :meth:`~ShardFormat.write` a shard from its rows (the writer's frame gives a
  :class:`ShardRows`), :meth:`~ShardFormat.read_rows` a shard for ``shardkit.stream`` (the
  stream reader gives an open file and a :class:`ShardRecord`), and
  :meth:`~ShardFormat.verify_shard`, member by member (``verify`` gives a :class:`ShardCheck`).

The stages (writer, streaming, verify, card...) call these and never ask which format it is.
This package imports only I/O and small helpers, never a stage: the Protocols below are what
the stages hand in.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, Protocol

from ..errors import ShardkitError
from ..streamio import Output

#: Largest shard and member count a ZIP without ZIP64 records can describe. tar and Parquet
#: shards keep to the same row cap and largest shard, so one plan fits any format.
MAX_ZIP_BYTES = 0xFFFFFFFF
MAX_ZIP_MEMBERS = 0xFFFF

#: About how many places in a shard a ranged read of part of it can start at: a tar shard's
#: index records the offset of every ceil(rows / INDEX_POINTS)-th row (:class:`ShardRecord`), a
#: Parquet shard's row groups hold about 1 / INDEX_POINTS of it. A cut piece then fetches at
#: most about 1 / INDEX_POINTS of its shard (and a row) at each end beyond its own rows.
INDEX_POINTS = 64

#: A ZIP shard's first member before layout 4: every row's metadata line, before any file.
METADATA_MEMBER = "metadata.jsonl"
#: A ZIP shard's first member since layout 4: the rows' metadata as a table typed by the card's
#: features (:func:`.parquet.encode_metadata_table`), before any file.
METADATA_TABLE_MEMBER = "metadata.parquet"


class ShardFormatError(ShardkitError, ValueError):
    """A shard's bytes are not what shardkit writes in its format, or are damaged."""


# --- what the writer's frame gives a format ---------------------------------------------------


class RowFile(Protocol):
    """One row and its file, read at its turn (the writer's read-ahead holds the bytes)."""

    @property
    def key(self) -> str: ...
    @property
    def ext(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def metadata_line(self) -> str: ...  # the published line, without its newline
    @property
    def crc(self) -> int: ...  # the file's CRC-32

    def copy_to(self, write: Callable[[bytes | memoryview], object]) -> None:
        """Write the file's bytes (in one piece or several)."""

    def read_all(self) -> bytes: ...


class ShardRows(Protocol):
    """A planned shard's rows, as the writer's frame hands them to :meth:`ShardFormat.write`."""

    @property
    def name(self) -> str: ...  # the shard's name, "data/3f.zip", for messages
    @property
    def features(self) -> list[dict[str, Any]] | None: ...  # the card's features (what types Parquet's columns)
    @property
    def planned_bytes(self) -> int: ...  # the shard's size as planned (Parquet: an estimate)

    def published_lines(self) -> Iterator[bytes]:
        """The rows' metadata lines (UTF-8, each with its newline), read again at each call."""

    def files(self) -> AbstractContextManager[Iterator[RowFile]]:
        """The rows with their files, in order (read once)."""

    def record_line(self, line: bytes) -> None:
        """Add a line (with its newline) to the shard's ``metadata/<stem>.jsonl``."""

    def metadata_table(self) -> bytes:
        """The rows' metadata as a typed table (formats whose ``metadata_table`` is set): encoded
        by the packer before the shard's size is planned, so that size is exact."""

    def record_row_offsets(self, every: int, offsets: list[int]) -> None:
        """Record the shard's index (formats whose ``row_index`` is set): ``offsets[i]`` is where
        row ``i * every`` begins, the manifest's ``row_offsets`` (:class:`ShardRecord`)."""


# --- what the stream reader gives a format ----------------------------------------------------


@dataclass(frozen=True)
class ShardRecord:
    """What a reader holds one shard to, from the dataset's manifest."""

    where: str  # the shard's path or URL, the start of every message about it
    file_column: str  # "image" or "audio": the column the file's bytes go in
    features: list[dict[str, Any]] | None = None
    max_bytes: int | None = None  # the manifest's cap
    bytes: int | None = None  # what the manifest records of this shard (None: not recorded)
    rows: int | None = None
    #: The shard's index, where its manifest record has one (formats whose ``row_index`` is set,
    #: packed since shardkit recorded it): row ``i * row_offsets_every`` begins at byte
    #: ``row_offsets[i]``, so a cut piece is read from the index point at or before its first row.
    row_offsets_every: int = 0
    row_offsets: tuple[int, ...] = ()

    def index_point(self, row: int) -> tuple[int, int]:
        """The indexed row at or before ``row`` and its offset: ``(0, 0)`` without an index."""
        if not self.row_offsets:
            return 0, 0
        point = min(row // self.row_offsets_every, len(self.row_offsets) - 1)
        return point * self.row_offsets_every, self.row_offsets[point]

    def index_end(self, stop: int) -> int | None:
        """Where the indexed row at or after ``stop`` begins (a ranged read of rows before
        ``stop`` may end there); None when no indexed row is at or after it (or no index)."""
        if not self.row_offsets:
            return None
        point = -(-stop // self.row_offsets_every)
        return self.row_offsets[point] if point < len(self.row_offsets) else None


class ShardSource(Protocol):
    """One shard's bytes where they are (a folder, a URL, the Hub), for :meth:`ShardFormat.read_piece`."""

    def open(self) -> BinaryIO:
        """A forward-only stream over the whole shard (one request)."""

    def open_random(self) -> BinaryIO:
        """A seekable file whose every read is one ranged request of exactly its bytes."""

    def open_range(self, start: int, end: int) -> BinaryIO:
        """A forward-only stream over bytes ``[start, end)`` (one ranged request)."""


# --- what verify gives a format ---------------------------------------------------------------


class ShardCheck(Protocol):
    """One shard being verified: where problems go, and the checks every format shares."""

    @property
    def shard_file(self) -> str: ...  # "data/3f.zip", relative to the dataset
    @property
    def metadata_file(self) -> str: ...  # "metadata/3f.jsonl"
    def open(self, relative: str) -> AbstractContextManager[IO[bytes]]:
        """Open one of the dataset's files (raises FileNotFoundError if it is not there)."""

    def problem(
        self, message: str, member: str | None = None, source: str | None = None, *, file: str | None = None
    ) -> None:
        """Record a problem of the shard (or of ``file``), of one ``member`` (its row's ``source``)."""

    def check_rows(self, data: str | bytes, where: str) -> tuple[dict[str, str], dict[str, str]]:
        """Check metadata lines (bytes: each must be UTF-8), each row held to the manifest
        (``where``: what names them in messages, "row", "metadata.jsonl"...);
        return file_name -> key, and file_name -> source_path of the rows that have one."""

    def file(self, name: str, data: bytes, source: str | None) -> None:
        """A row's file met in the shard: with ``deep``, it is decoded."""

    @property
    def features(self) -> list[dict[str, Any]]: ...  # the manifest's: what a typed table inside is held to


@dataclass
class Walk:
    """What walking one shard found, for the checks every format shares."""

    sha256: str  # of the whole file
    members: int  # file members (rows' files) met
    keys: list[str]  # every row's key, sorted
    metadata: bytes | None  # the metadata lines the shard holds, to compare with metadata/; None: compared already
    #: Where each row begins in the shard, as walked (formats whose ``row_index`` is set; None: the
    #: walk did not get through the shard): what verify holds the manifest's ``row_offsets`` to.
    row_starts: list[int] | None = None


class HashingReader:
    """A forward-only reader that hashes everything read through it (one pass: walk + sha256)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.sound = True  # False once the walk over it met a shard that is not sound

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.raw.read(n)
        self.sha256.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def source_of_row(row: object, column: str) -> str | None:
    """A row's source_path (``--keep-source-path``), for messages only; None if it has none."""
    source = row.get(column) if isinstance(row, dict) else None
    return source if isinstance(source, str) else None


# --- the format ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardFormat(abc.ABC):
    name: str  # "zip" | "tar" | "parquet", also the shard files' extension
    exact: bool  # the planner knows each shard's size to the byte before writing it
    fixed_bytes: int  # what a shard costs with no rows
    max_rows: int
    max_bytes: int  # the largest shard the container can describe
    #: The manifest's ``member_template``: where a row's file is inside a shard.
    member_template: str
    #: The member a shard's rows are in, before the files (the manifest names it); None: none.
    metadata_member: str | None = None
    #: The shard holds its rows' metadata as a table typed by the card's features, which the
    #: packer encodes (:meth:`ShardRows.metadata_table`) before the shard's exact size is known.
    metadata_table: bool = False
    #: The template's loading script (datasets 3.6) reads shards of this format.
    loading_script: bool = False
    #: Read with ranged reads of a seekable file (its footer first), not front to back in one read.
    random_access: bool = False
    #: The writer records an index of where rows begin (:meth:`ShardRows.record_row_offsets`),
    #: which the manifest keeps and a cut piece is read from (:attr:`ShardRecord.row_offsets`).
    row_index: bool = False
    #: What a pack publishes in this format, beyond the input and options: a new layout rewrites
    #: unchanged input (with --force). packresume.py's LAYOUT_CHANGES says what each number changed.
    layout_version: int = 4

    @property
    def suffix(self) -> str:
        return "." + self.name

    @property
    def manifest_format(self) -> str:
        return f"shardkit.{self.name}/1"

    @property
    def data_files_pattern(self) -> str:
        return f"data/*{self.suffix}"

    @abc.abstractmethod
    def member_name(self, key: str, ext: str) -> str:
        """The row's file name inside the shard (the ``file_name`` its metadata line gives)."""

    @abc.abstractmethod
    def row_cost(self, key_length: int, ext_length: int, file_bytes: int, line_bytes: int) -> int:
        """Bytes a row adds to a shard (``line_bytes``: its metadata line without the newline)."""

    def key_problem(self, key: str, ext: str) -> str | None:
        """Why a row cannot go into this format (None if it can)."""
        return None

    def features_salt(self, features: list[dict[str, Any]]) -> bytes:
        """What of the card's features a shard's bytes follow from, besides its rows (an update
        keeps a shard whose rows and salt did not change): nothing, by default."""
        return b""

    @abc.abstractmethod
    def write(self, out: Output, rows: ShardRows) -> int:
        """Write one shard's bytes to ``out`` and its metadata lines to ``rows.record_line``;
        return the shard's size."""

    @abc.abstractmethod
    def read_rows(self, f: BinaryIO, record: ShardRecord) -> Iterator[dict[str, Any]]:
        """The rows of one shard, in order: metadata fields plus ``{file_column: {"bytes", "path"}}``.
        ``f`` is read front to back, or (``random_access``) seekable. Damage raises a
        :class:`ShardFormatError` naming ``record.where``."""

    def read_piece(
        self, shard: ShardSource, record: ShardRecord, start: int = 0, stop: int | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """Rows ``start`` to ``stop`` (exclusive; None: the last) of one shard, as :meth:`read_rows`
        gives them. A read that ends at the shard's last row goes on to its end, where the last
        checks are (a format's directory, rows without a file). Fewer rows than ``stop`` is a
        :class:`ShardFormatError`.

        This default reads the shard from its front and passes over the rows before ``start``:
        what a format without an index of its rows can do (tar). Formats with one read only the
        piece's bytes."""
        f = shard.open_random() if self.random_access else shard.open()
        try:
            yield from rows_between(self.read_rows(f, record), record, start, stop)
        finally:
            f.close()

    @abc.abstractmethod
    def verify_shard(self, check: ShardCheck) -> Walk:
        """Walk a shard member by member, every problem to ``check.problem``."""

    @property
    def metadata_inside(self) -> str:
        """How a message names the copy of the metadata lines inside a shard ("the X inside")."""
        return f"the {self.metadata_member} inside" if self.metadata_member else "the rows of"


def rows_between(
    rows: Iterator[dict[str, Any]], record: ShardRecord, start: int, stop: int | None, *, first: int = 0
) -> Iterator[dict[str, Any]]:
    """Rows ``start`` to ``stop`` of a shard, from ``rows``, which begin at row ``first`` (0: a
    read from the shard's front; ``start``: a format that found the piece's first row itself). A
    read that stops short of the shard's last row stops after row ``stop - 1`` (no byte more);
    one to the end (``stop`` None or the recorded row count) reads on to the end, so the format's
    end checks run. Fewer rows than ``stop``, or more than the manifest records, is an error."""
    to_end = stop is None or stop == record.rows
    index = first
    for row in rows:
        if stop is not None and index == stop:  # to_end only: one row too many
            raise ShardFormatError(f"{record.where}: more than the {record.rows} rows the manifest records")
        if index >= start:
            yield row
        index += 1
        if index == stop and not to_end:
            return
    if stop is not None and index < stop:
        raise ShardFormatError(f"{record.where}: {index} rows, where the manifest records {record.rows}")
