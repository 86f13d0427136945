"""Read the metadata JSONL, check every row and the file it names (the first step of the check).

The reader streams: it never holds more than a bounded window of rows. Each row becomes either
a :class:`SourceRecord` (ready to be sorted and packed) or an :class:`InputProblem` that names
its line. File checks (stat, and hashing when the row has no ``key``) run on a thread pool so
that a slow or network filesystem does not serialise them; results keep input order.

Key scheme: a key is 8 to 128 lowercase hex digits. A row without ``key`` gets
``sha256(file bytes)[:32]`` (reproduce it with ``sha256sum FILE | cut -c1-32``), so content
decides the key and the shard. Shards group rows by the first hex digits of the key.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import os
import re
import shlex
import stat
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

from .decode import can_decode, decode_problem
from .errors import InputProblem, ShardkitError, listed, naming
from .formats.zip import member_name  # a row's file inside a ZIP shard: metadata_line's default
from .hashing import sha256_crc32_fd
from .inputfile import OutsideImagesDir, open_inside, stamp
from .localdisk import on_local_disk
from .rowrules import CONTROL_RE, EXT_RE, KEY_RE, MAX_LINE_BYTES, column_name_problem
from .threads import interruptible_pool

CONTENT_KEY_HEX_DIGITS = 32
KEY_SCHEME = "hex: the row's 'key' (8-128 lowercase hex digits), else sha256(file bytes)[:32]"


@dataclass(slots=True)
class SourceRecord:
    """One checked row: where its file is, what it weighs, and the fields to publish."""

    line: int  # 1-based line in the metadata file
    key: str
    source: str  # file_name as given, relative to IMAGES_DIR
    size: int  # bytes of the file
    ext: str  # extension kept from the source name, e.g. ".jpg"
    fields: dict[str, Any]  # every other column, in input order, without file_name and key
    #: The file as the check saw it (:func:`~shardkit.inputfile.stamp`), for the writer to compare.
    stamp: str = ""
    content_keyed: bool = False  # the key is the hash of the file's bytes (the row gave none)
    split: str = ""  # the row's split column ("": none)
    #: A content-keyed file's CRC-32, of the bytes the check hashed (the writer compares its own
    #: with it, instead of hashing the file again); -1: unknown.
    crc: int = -1
    #: Where the row's ``size`` bytes start in its file; -1: the file is the row's, whole. Only
    #: remux's staging names byte ranges (:func:`read_metadata`'s ``file_ranges``).
    file_offset: int = -1


def metadata_line(record: SourceRecord, file_name: str | None = None) -> str:
    """The row as published in metadata.jsonl: file_name (its name inside the shard; by default
    where a ZIP shard puts it), key, fields."""
    if file_name is None:
        file_name = member_name(record.key, record.ext)
    return published_json({"file_name": file_name, "key": record.key, **record.fields})


def published_json(row: dict[str, Any]) -> str:
    """A row as shardkit publishes it in JSON: UTF-8 text, compact, no NaN or infinity."""
    return _PUBLISHED.encode(row)


# json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False), made once
_PUBLISHED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def non_finite_problem(fields: dict[str, Any]) -> str | None:
    """Which column holds NaN or an infinity (a bare ``NaN`` or ``Infinity`` in the JSON, or a
    number too large for a float, such as 1e999), even nested: JSON has no such value, and a
    published row must be JSON. None when none does."""
    for column, value in fields.items():
        if (found := _non_finite(value, repr(column))) is not None:
            where, number = found
            what = "NaN" if math.isnan(number) else ("-" if number < 0 else "") + "Infinity (or a number past 1e308)"
            return f"column {where} holds {what}, which JSON has no value for: write null for a missing value"
    return None


def _non_finite(value: Any, where: str) -> tuple[str, float] | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    if isinstance(value, dict):
        for key, item in value.items():
            if (found := _non_finite(item, f"{where}, field {key!r}")) is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _non_finite(item, f"{where}, item {index}")) is not None:
                return found
    return None


def content_key_of(sha256_hex: str) -> str:
    """A row's key when it gives none: the first hex digits of its file's sha256."""
    return sha256_hex[:CONTENT_KEY_HEX_DIGITS]


@contextlib.contextmanager
def open_metadata(path: str, start: int = 0) -> Iterator[IO[bytes]]:
    """A .jsonl (or .jsonl.gz) file open for binary reading, from byte ``start`` (of a .jsonl).

    A file whose first bytes say it is compressed otherwise than its name says is refused with
    one line naming it: read as text it would be a problem per line, and gzip's own message
    ("Not a gzipped file") names no file. (Read through the one descriptor: a FIFO is read once.)
    A .jsonl.gz is read as gzip(1) reads it: all its members, and zero bytes after the last are
    padding (tar and tape writers add it; gzip -t and zcat accept it), not data; other trailing bytes
    are refused.
    """
    with open(path, "rb", buffering=HEAD_BYTES) as raw:
        assert isinstance(raw, io.BufferedReader)  # (what a buffered binary open makes; typeshed says BinaryIO)
        if start:
            raw.seek(start)
        else:
            _refuse_misnamed(path, raw.peek(_MAGIC_BYTES)[:_MAGIC_BYTES])
        if not path.endswith(".gz"):
            if not start:
                _refuse_not_json_lines(path, raw.peek(HEAD_BYTES)[:HEAD_BYTES])
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            try:
                head = stream.peek(HEAD_BYTES)[:HEAD_BYTES]
            except (EOFError, OSError, zlib.error) as exc:
                raise _read_problem(path, 1, exc) from None
            _refuse_not_json_lines(path, head)
            yield stream  # type: ignore[misc]


#: The first bytes of compressed data, by compression.
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_MAGIC_BYTES = max(len(magic) for magic in _MAGIC)


def _refuse_misnamed(path: str, head: bytes) -> None:
    kind = next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)
    gz = path.endswith(".gz")
    if gz and kind != "gzip" and head:  # (an empty .gz holds no rows; that message names the file)
        found = f"{kind} data" if kind else f"not gzip data (it starts with {head[:4]!r})"
        raise ShardkitError(f"{path}: {found}, though its name ends in .gz; give the metadata as .jsonl or .jsonl.gz")
    if not gz and kind is not None:
        fix = "name it .jsonl.gz" if kind == "gzip" else "decompress it (or give it gzip-compressed, as .jsonl.gz)"
        raise ShardkitError(f"{path}: {kind}-compressed data, not JSON lines; {fix}")


#: How much of the file's start :func:`_refuse_not_json_lines` looks at (at least its first two lines, mostly).
HEAD_BYTES = 1 << 16


def _refuse_not_json_lines(path: str, head: bytes) -> None:
    """Refuse, in one line saying what it looks like and how to convert it, a metadata file that
    is not JSON Lines at all: empty, UTF-16, Parquet, a ZIP or spreadsheet, a JSON array or
    indented JSON, CSV or TSV. Read line by line such a file is a problem per line, each naming
    a symptom ("invalid JSON"). Only what its first bytes show for sure is refused here: a file
    whose first line or second line is a JSON object is JSON Lines with bad lines, if any."""
    given = path.removesuffix(".gz")
    stem = os.path.splitext(given)[0]
    out = stem + ".jsonl" if stem + ".jsonl" != given else stem + ".converted.jsonl"
    # A gzip file goes to the fix uncompressed (bash and zsh's process substitution).
    read = f"<(zcat {shlex.quote(path)})" if given != path else shlex.quote(path)
    if problem := not_json_lines(head, f"{read} > {shlex.quote(out)}"):
        raise ShardkitError(f"{path}: {problem}")


#: A one-liner that writes a JSON file (an array of objects, or one object) as JSON Lines.
_JSON_TO_JSONL = (
    "python -c \"import json,sys; d=json.load(open(sys.argv[1], encoding='utf-8-sig'));"
    ' [print(json.dumps(r, ensure_ascii=False)) for r in (d if isinstance(d, list) else [d])]"'
)


def not_json_lines(head: bytes, io: str) -> str | None:
    """What the file whose first bytes are ``head`` is instead of JSON Lines, with the fix (None:
    it may be JSON Lines); ``io`` is the fix's input and output (``in.csv > in.jsonl``). Public as
    the seam its tests hold a head cut anywhere to (tests/test_input_causes.py)."""
    if not head:
        return "the file is empty: no rows to pack"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(head) > 1 and (head[0] == 0) != (head[1] == 0)):
        return (
            "UTF-16 text (its first bytes hold NULs or a UTF-16 byte order mark), not UTF-8; convert it:"
            f" iconv -f UTF-16 -t UTF-8 {io}"
        )
    if head.startswith(b"PAR1"):
        return (
            'a Parquet file, not JSON Lines; convert it: python -c "import json,sys,pyarrow.parquet as pq;'
            ' [print(json.dumps(r, ensure_ascii=False, default=str)) for r in pq.read_table(sys.argv[1]).to_pylist()]"'
            f" {io}"
        )
    if head.startswith(b"PK\x03\x04"):
        return "a ZIP archive (or a spreadsheet such as .xlsx), not JSON Lines (one JSON object per line)"
    text = head.removeprefix(_BOM)
    # Only whole lines are judged: the head may end inside a line (a long row, a pipe's first write).
    ended = text.rpartition(b"\n")[0]
    lines = [line.decode("utf-8", "replace").rstrip("\r") for line in ended.split(b"\n") if line.strip()][:2]
    parsed = [_json_or_none(line) for line in lines]
    array = f"a JSON array (it starts with '['), not JSON Lines (an object per line); convert it: {_JSON_TO_JSONL} {io}"
    if not lines:  # no whole line: one document without a line end, if it parses
        return array if b"\n" not in text and isinstance(_json_or_none(text.decode("utf-8", "replace")), list) else None
    if any(isinstance(value, dict) for value in parsed):
        return None
    first = lines[0].strip()
    if first.startswith("["):
        # A whole array on line 1 and another JSON value on line 2: JSON Lines of arrays, each a bad row.
        return None if parsed[0] is not None and len(lines) > 1 and parsed[1] is not None else array
    if first.startswith("{"):
        if not _unfinished(first):  # a bad row (single quotes, a trailing comma): the rows' checks say which
            return None
        return (
            "JSON written over several lines (line 1 is an object's start), not JSON Lines (one object per line);"
            f" convert it: {_JSON_TO_JSONL} {io}"
        )
    delimiter = next((d for d in "\t,;" if d in first), ",")
    header = next(csv.reader([first], delimiter=delimiter))
    if len(header) < 2 or (len(lines) > 1 and len(next(csv.reader([lines[1]], delimiter=delimiter))) != len(header)):
        return None
    kind = "TSV" if delimiter == "\t" else "CSV"
    shown = listed([repr(name) for name in header], 4)
    return (
        f"looks like {kind}, not JSON Lines: its first line is a header ({shown}); convert it (each column's type"
        " is inferred: numbers, true/false, empty number cells as null; check with --dry-run): "
        f"{_csv_to_jsonl(delimiter)} {io}"
    )


def _csv_to_jsonl(delimiter: str) -> str:
    """A one-liner that writes a CSV (or TSV...) file as JSON Lines with pyarrow, which infers each
    column's type so ids and coordinates stay numbers and empty cells become null. Its timestamp
    parsing is turned off (the '' format matches no cell) so a date-time such as YFCC's
    "2005-04-05 09:17:45.0" stays the text the file has; a plain date is written back as it was.
    The file is opened by Python, not by name: pyarrow cannot read a pipe (``<(zcat ...)``) by name.
    One thread: pyarrow's thread pool, torn down at the interpreter's exit, aborted the command
    (exit 134) on a busy machine."""
    parse = "" if delimiter == "," else f", parse_options=c.ParseOptions(delimiter={delimiter!r})"
    return (
        'python -c "import json,sys,pyarrow.csv as c; [print(json.dumps(r, ensure_ascii=False, default=str))'
        f" for r in c.read_csv(open(sys.argv[1], 'rb'), read_options=c.ReadOptions(use_threads=False){parse},"
        " convert_options=c.ConvertOptions(timestamp_parsers=[''])).to_pylist()]\""
    )


def _unfinished(line: str) -> bool:
    """Whether ``line`` is the start of a JSON value that goes on past it (not one that is wrong)."""
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return exc.pos >= len(line)
    return False


def _json_or_none(text: str) -> Any:
    """``text`` parsed as JSON; None when it is not JSON (or is ``null``)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _read_problem(path: str, line: int, exc: Exception) -> Exception:
    """The error for a read of the metadata file that failed at ``line``: one line naming both."""
    if isinstance(exc, EOFError):
        return ShardkitError(f"{path}:{line}: the gzip data ends early (the file is truncated)")
    if isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
        return ShardkitError(f"{path}:{line}: bytes after the end of the gzip data are not gzip data (damaged file?)")
    if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        return ShardkitError(f"{path}:{line}: damaged gzip data ({exc})")
    if isinstance(exc, OSError):
        return naming(exc, path)
    return exc


@dataclass(slots=True)
class _Row:
    line: int
    raw: str
    obj: dict[str, Any] | None = None
    problem: str | None = None
    kind: str = ""  # the problem's kind (InputProblem.kind)
    span: tuple[int, int] | None = None  # a byte range of the file (read_metadata's file_ranges)


_BOM = b"\xef\xbb\xbf"
# datasets' folder builders take any column ending in these as another file column.
_FILE_COLUMN_SUFFIXES = ("file_name", "file_names")
#: Columns the loaders create from the file: a metadata column of that name would collide.
RESERVED_COLUMNS = frozenset({"image", "audio", "__shard__"})  # __shard__: metadata.parquet's shard column


def _parse_rows(stream: Iterable[bytes], first_line: int = 1) -> Iterator[_Row]:
    """Yield one _Row per non-blank line, numbered from ``first_line`` (1: as an editor numbers them).

    Accepts a UTF-8 byte order mark on the first line and CRLF line ends. Lines are parsed
    with the stdlib ``json`` directly (jsonlines' reader adds work per row and gives nothing here).
    """
    for lineno, raw in enumerate(stream, first_line):
        if raw is TOO_LONG:
            yield _Row(lineno, "", problem=f"line is longer than {MAX_LINE_BYTES >> 20} MiB; not packed")
            continue
        raw = _line_bytes(lineno, raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            shown = raw.decode("utf-8", errors="replace")
            yield _Row(
                lineno,
                shown,
                problem=f"line is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                kind=NOT_UTF8,
            )
            continue
        if not text.strip():
            continue
        if (deep := _nesting(text)) > MAX_NESTING:
            yield _Row(lineno, text, problem=f"JSON nested {deep} deep; at most {MAX_NESTING} levels are packed")
            continue
        try:
            obj = _DECODER.decode(text)
        except _DuplicateKey as exc:
            yield _Row(lineno, text, problem=f"key {exc.args[0]!r} appears twice in one object; keep one")
            continue
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            column = f" (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
            yield _Row(lineno, text, problem=f"invalid JSON: {reason}{column}", kind=NOT_JSON)
            continue
        if not isinstance(obj, dict):
            yield _Row(lineno, text, problem=f"line is not a JSON object (found {type(obj).__name__})", kind=NOT_OBJECT)
            continue
        if _SURROGATE_ESCAPE.search(text) and (bad := _lone_surrogate(obj)):
            yield _Row(
                lineno, text, problem=f"{bad} holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
            )
            continue
        yield _Row(lineno, "", obj=obj)


def _line_bytes(lineno: int, raw: bytes) -> bytes:
    """A line as a row: without its line end, nor on line 1 a UTF-8 byte order mark."""
    if lineno == 1 and raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    return raw.rstrip(b"\r\n")


def raw_lines(metadata_path: str) -> Iterator[tuple[int, bytes]]:
    """Every line of a metadata file as its rows are read (:func:`_line_bytes`), numbered as
    problems name them; :data:`TOO_LONG` in place of a line longer than MAX_LINE_BYTES."""
    with open_metadata(metadata_path) as stream:
        for lineno, raw in enumerate(_bounded_lines(stream, None, metadata_path, 1), 1):
            yield lineno, raw if raw is TOO_LONG else _line_bytes(lineno, raw)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key given twice is an error, not "the last one wins" silently."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
#: Deeper JSON is refused: Python's parser overflows its stack near 1,000 levels, and the type
#: checks and Arrow nest once per level.
MAX_NESTING = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _nesting(text: str) -> int:
    """How deep the line's arrays and objects nest (brackets inside strings counted too: an
    upper bound, exact for ordinary lines; only worked out when there are many brackets)."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _lone_surrogate(value: Any, where: str = "the line") -> str | None:
    """Where a decoded value holds a lone UTF-16 surrogate (valid pairs were joined by json)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if found := _lone_surrogate(key, f"a column name ({key.encode('utf-8', 'backslashreplace').decode()})"):
                return found
            if found := _lone_surrogate(item, f"column {str(key)!r}"):
                return found
    if isinstance(value, list):
        for item in value:
            if found := _lone_surrogate(item, where):
                return found
    return None


def check_row(obj: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | str:
    """Check a row's columns; return (file_name, key or None, other fields) or a problem. Public,
    with :func:`check_path`, as the seam tests/test_metadata.py holds these fast paths to."""
    file_name = obj.get("file_name")
    if not isinstance(file_name, str) or not file_name:
        return "missing or empty 'file_name' (the file's path relative to IMAGES_DIR)"
    columns = tuple(obj)
    if columns not in _GOOD_COLUMNS:  # rows mostly share their columns: check each set once
        if problem := columns_problem(columns):
            return problem
        if len(_GOOD_COLUMNS) > 1000:
            _GOOD_COLUMNS.clear()
        _GOOD_COLUMNS.add(columns)
    key = obj.get("key")
    if key is not None and (not isinstance(key, str) or not KEY_RE.fullmatch(key)):
        return (
            f"key {key!r} does not fit the key scheme (8 to 128 lowercase hex digits);"
            " drop the 'key' column to use content hashes"
        )
    fields = obj.copy()
    fields.pop("file_name")
    fields.pop("key", None)
    return file_name, key, fields


_GOOD_COLUMNS: set[tuple[str, ...]] = set()


def columns_problem(columns: tuple[str, ...]) -> str | None:
    """Why a row with these columns cannot be published (a name the packer refuses, or one a loader
    takes for itself), None if it can; a remux checks its function's output rows with it too."""
    for column in columns:
        if problem := column_name_problem(column):
            return f"column {column!r} {problem}; rename it"
        if column in RESERVED_COLUMNS:
            what = "the metadata table's shard column" if column == "__shard__" else "the file itself"
            return f"column {column!r} is reserved for {what} in the published dataset; rename it"
        if column.endswith(_FILE_COLUMN_SUFFIXES) and column != "file_name":
            return f"column {column!r} ends in 'file_name': datasets would take it as a second file column; rename it"
    return None


def check_path(images_root: str, file_name: str) -> str | tuple[str, str]:
    """Return (path, ext) for a safe relative path, or a problem.

    ``images_root`` is absolute and ends in a separator.
    """
    if not file_name.isprintable() and (control := _CONTROL.search(file_name)):  # (most names: printable)
        return (
            f"file_name {file_name!r} holds {control.group()!r}: a file name holds no control character"
            " (NUL, tab, newline...) or line break; rename the file"
        )
    if file_name[0] == "/" or (file_name[1:2] == ":" and _DRIVE_RE.match(file_name)):
        return f"file_name {file_name!r} is absolute; give it relative to IMAGES_DIR"
    if ".." in file_name and ".." in file_name.split("/"):
        return f"file_name {file_name!r} contains '..'; paths must stay inside IMAGES_DIR"
    base = file_name.rpartition("/")[2]
    dot = base.rfind(".")
    ext = base[dot:] if dot > 0 and base[:dot].strip(".") else ""  # as posixpath.splitext: not leading dots
    if not EXT_RE.fullmatch(ext):
        return (
            f"file_name {file_name!r} has no usable extension (need e.g. .jpg, .png, .flac);"
            " the extension tells loaders the file type"
        )
    return images_root + file_name, ext


_DRIVE_RE = re.compile(r"[A-Za-z]:[\\/]")
#: What no file_name may hold (:data:`.rowrules.CONTROL_RE`). A file name is shown in messages,
#: one line each, and published in --keep-source-path's column; a file that needs one is renamed.
_CONTROL = CONTROL_RE


@dataclass(slots=True)
class _Pending:
    """A row whose file still needs its stat (and hash); checked on the thread pool."""

    row: _Row
    file_name: str
    key: str | None
    fields: dict[str, Any]
    ext: str
    path: str
    span: tuple[int, int] | None = None  # (offset, size) of a byte range of the file; None: all of it


class _FileChecker:
    """Checks files: inside IMAGES_DIR, regular, non-empty, not too big; hashes when asked.

    Directories' real paths are cached, so a row costs one lstat, not one per path component;
    only a file that is itself a symlink is resolved in full.
    """

    def __init__(self, images_real: str, max_file_bytes: int, decode: bool = False) -> None:
        self.images_real = images_real
        self.prefix = images_real + os.sep
        self.max_file_bytes = max_file_bytes
        self.decode = decode
        self._dirs: dict[str, str] = {}
        self._listings: dict[str, dict[str, str]] = {}  # a folder's names by case, for messages

    def _real_dir(self, directory: str) -> str:
        real = self._dirs.get(directory)
        if real is None:
            if len(self._dirs) > 100_000:
                self._dirs.clear()
            real = self._dirs[directory] = os.path.realpath(directory)
        return real

    def check(self, p: _Pending) -> SourceRecord | InputProblem:
        outcome = self._stat(p)
        if isinstance(outcome, str):
            return InputProblem(p.row.line, outcome, _dump(p.row.obj))
        if isinstance(outcome[0], str):
            return InputProblem(p.row.line, outcome[0], _dump(p.row.obj), outcome[1])
        st, hashed = outcome
        key = p.key or content_key_of(hashed[0] if hashed else "")
        if p.span is not None:  # (always keyed: see _ranged)
            offset, size = p.span
            return SourceRecord(p.row.line, key, p.file_name, size, p.ext, p.fields, stamp(st), file_offset=offset)
        crc = hashed[1] if hashed else -1
        return SourceRecord(
            p.row.line, key, p.file_name, st.st_size, p.ext, p.fields, stamp(st), p.key is None, crc=crc
        )

    def check_batch(self, batch: list[_Pending | InputProblem]) -> list[SourceRecord | InputProblem]:
        return [item if isinstance(item, InputProblem) else self.check(item) for item in batch]

    def _stat(self, p: _Pending) -> tuple[os.stat_result, tuple[str, int] | None] | tuple[str, str] | str:
        """The file's stat and, for a row without a key, its sha256 and CRC-32; or a problem."""
        directory, _, base = p.path.rpartition(os.sep)
        try:
            real = os.path.join(self._real_dir(directory), base)
            st = os.lstat(real)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(real)
                st = os.stat(real)
        except FileNotFoundError:
            return self._not_found(p)
        except OSError as exc:
            return f"cannot read {p.path}: {exc.strerror}"
        if not real.startswith(self.prefix):
            return f"file_name {p.file_name!r} resolves outside IMAGES_DIR (a symlink to {real!r}?)"
        if stat.S_ISDIR(st.st_mode):
            return f"file_name {p.file_name!r} is a folder, not a file: {p.path}"
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file: {p.path}"
        if p.span is not None:
            return self._span_problem(p, st) or (st, None)
        if problem := self._size_problem(p, st):
            return problem
        hashing = p.key is None
        decoding = self.decode and can_decode(p.ext)
        if not (hashing or decoding):
            return st, None
        # Hashed and decoded through one descriptor that cannot leave IMAGES_DIR (see .inputfile).
        try:
            fd, st = open_inside(p.path, self.prefix)
        except OutsideImagesDir as exc:
            return str(exc)
        except OSError as exc:
            return f"cannot read {p.path}: {exc.strerror}"
        with os.fdopen(fd, "rb") as f:
            try:
                if problem := self._size_problem(p, st):
                    return problem
                hashed = sha256_crc32_fd(fd) if hashing else None
                if decoding:
                    f.seek(0)
                    if problem := decode_problem(f, p.ext):
                        return f"{p.path}: {problem}"
            except OSError as exc:
                return f"cannot read {p.path}: {exc.strerror}"
        return st, hashed

    def _not_found(self, p: _Pending) -> str | tuple[str, str]:
        """A missing file's problem, with what may be meant where it is clear: a Windows path
        (backslashes), a URL, a file whose name differs only in case (found on a case-sensitive
        filesystem only). A tuple (message, kind) where the whole file may have the cause."""
        missing = f"{FILE_NOT_FOUND}{p.path}"
        name = p.file_name
        if "://" in name:
            return f"{missing} (file_name is a URL; shardkit packs files: download them into IMAGES_DIR first)", URL
        if "\\" in name:
            slashed = name.replace("\\", "/")
            found = f", and {slashed!r} is a file" if os.path.isfile(p.path[: -len(name)] + slashed) else ""
            return f"{missing} (file_name separates folders with '\\', as Windows does{found}; use '/')", BACKSLASH
        directory, _, base = p.path.rpartition(os.sep)
        other = self._names_by_case(directory).get(base.lower())
        if other is not None and other != base:
            return f"{missing} ({other!r} is there: file names are case-sensitive)", OTHER_CASE
        return missing

    def _names_by_case(self, directory: str) -> dict[str, str]:
        """A folder's entries by their lower-case names (read once per folder)."""
        names = self._listings.get(directory)
        if names is None:
            if len(self._listings) > 1000:
                self._listings.clear()
            try:
                names = {entry.lower(): entry for entry in os.listdir(directory)}
            except OSError:
                names = {}
            self._listings[directory] = names
        return names

    def _span_problem(self, p: _Pending, st: os.stat_result) -> str | None:
        assert p.span is not None
        offset, size = p.span
        if offset + size > st.st_size:
            return f"{p.path}: bytes {offset} to {offset + size} are past its end ({st.st_size} bytes)"
        if size > self.max_file_bytes:
            return f"file is {size} bytes, more than fits in one shard ({self.max_file_bytes} bytes): {p.path}"
        return None

    def _size_problem(self, p: _Pending, st: os.stat_result) -> str | None:
        if st.st_size == 0:
            return f"empty file: {p.path}"
        if st.st_size > self.max_file_bytes:
            return f"file is {st.st_size} bytes, more than fits in one shard ({self.max_file_bytes} bytes): {p.path}"
        return None


#: Rows per thread-pool task: the hand-off to a thread costs more than the cached stat most rows
#: need, so it is paid once per batch (the figures: docs/performance.md).
BATCH = 256


def read_metadata(
    metadata_path: str,
    images_dir: str,
    *,
    max_file_bytes: int,
    threads: int = 8,
    decode: bool = False,
    start: int = 0,
    end: int | None = None,
    first_line: int = 1,
    file_ranges: bool = False,
) -> Iterator[SourceRecord | InputProblem]:
    """Stream checked records (or problems) from a metadata file, in input order.

    ``max_file_bytes`` is the largest file that still fits in a shard on its own. Rows are
    parsed here, in batches. A batch whose files must be read (rows without a key are hashed;
    ``decode`` decodes every image and audio file) is checked on ``threads`` threads (about twice
    ``threads`` batches in flight), and so is every batch on a network, FUSE or unknown
    filesystem: this thread only waits for the results, oldest first, a wait Ctrl-C interrupts
    even while a stat hangs on a dead network mount. A batch that needs only stats of files on
    a local disk (ext4, XFS, btrfs, F2FS) is checked here: handing it to a thread costs more than
    the stats (docs/performance.md). Either way the results come in input order.
    ``start``, ``end`` and ``first_line`` read one range of whole lines (an uncompressed file).
    ``file_ranges``: each row's file_name is ``[name, offset, size]``, a byte range of a file, and
    the row has a key (remux stages a batch's output rows in one file: :mod:`.remux`).
    """
    if file_ranges and decode:
        raise ValueError("byte ranges of files are not decoded by the check")
    images_root = os.path.join(os.path.abspath(images_dir), "")  # ends in a separator
    checker = _FileChecker(os.path.realpath(images_root), max_file_bytes, decode)
    window: deque[Future[list[SourceRecord | InputProblem]]] = deque()
    batch: list[_Pending | InputProblem] = []
    local_disk = on_local_disk(images_root)

    def submit(batch: list[_Pending | InputProblem]) -> Future[list[SourceRecord | InputProblem]]:
        if local_disk and not decode and all(isinstance(p, InputProblem) or p.key is not None for p in batch):
            done: Future[list[SourceRecord | InputProblem]] = Future()
            done.set_result(checker.check_batch(batch))  # stats only, on a local disk: here
            return done
        return pool.submit(checker.check_batch, batch)

    with open_metadata(metadata_path, start) as stream, interruptible_pool(threads, "shardkit-check") as pool:
        lines = _bounded_lines(stream, None if end is None else end - start, metadata_path, first_line)
        for row in _parse_rows(lines, first_line):
            batch.append(_pending_or_problem(_ranged(row) if file_ranges else row, images_root))
            if len(batch) < BATCH:
                continue
            window.append(submit(batch))
            if len(window) > threads * 2:
                yield from window.popleft().result()
            batch = []
        if batch:
            window.append(submit(batch))
        while window:
            yield from window.popleft().result()


#: What :func:`_bounded_lines` yields in place of a line longer than MAX_LINE_BYTES.
TOO_LONG = b"\0too long"


def _bounded_lines(stream: IO[bytes], length: int | None, path: str, first_line: int) -> Iterator[bytes]:
    """The lines of ``stream`` (of its next ``length`` bytes, whole lines: a range ends just
    after a newline), each at most MAX_LINE_BYTES; :data:`TOO_LONG` for each longer one.
    A read that fails (damaged gzip data, an I/O error) raises an error naming ``path`` and
    the line it reached (``first_line`` is the first line's number)."""
    line = first_line
    try:
        while length is None or length > 0:
            raw = stream.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if length is not None:
                length -= len(raw)
            if len(raw) > MAX_LINE_BYTES:
                while raw and not raw.endswith(b"\n"):  # skip the rest of it, a chunk at a time
                    raw = stream.readline(1 << 20)
                    if length is not None:
                        length -= len(raw)
                raw = TOO_LONG
            yield raw
            line += 1
    except (EOFError, OSError, zlib.error) as exc:
        raise _read_problem(path, line, exc) from None


def _pending_or_problem(row: _Row, images_root: str) -> _Pending | InputProblem:
    if row.problem is not None or row.obj is None:
        return InputProblem(row.line, row.problem or "not a JSON object", row.raw, row.kind)
    if not isinstance(row.obj.get("file_name"), str) or not row.obj["file_name"]:
        return _no_file_name(row, row.obj, images_root)
    checked = check_row(row.obj)
    if isinstance(checked, str):
        return InputProblem(row.line, checked, _dump(row.obj))
    file_name, key, fields = checked
    located = check_path(images_root, file_name)
    if isinstance(located, str):
        if file_name.startswith(images_root):  # an absolute path into IMAGES_DIR: say what to give
            located += f": {file_name[len(images_root) :]!r}"
        kind = ABSOLUTE if "is absolute" in located else ""
        return InputProblem(row.line, located, _dump(row.obj), kind)
    path, ext = located
    return _Pending(row, file_name, key, fields, ext, path, row.span)


def _ranged(row: _Row) -> _Row:
    """A row whose file_name is ``[name, offset, size]`` (:func:`read_metadata`'s ``file_ranges``)
    as a row naming the file, with the range aside; or the row with its problem."""
    if row.problem is not None or row.obj is None:
        return row
    given = row.obj.get("file_name")
    match given:
        case [str(name), int(offset), int(size)] if (
            offset >= 0 and size > 0 and bool not in (type(offset), type(size)) and row.obj.get("key") is not None
        ):
            row.obj["file_name"], row.span = name, (offset, size)
        case _:
            row.problem = f"file_name {json.dumps(given)[:100]} is not [name, offset, size > 0] of a keyed row"
    return row


#: Kinds of problem (InputProblem.kind) a whole file can have: see problems.whole_file_problem.
NOT_UTF8, NOT_JSON, NOT_OBJECT, ABSOLUTE = "not UTF-8", "not JSON", "not an object", "absolute"
BACKSLASH, OTHER_CASE, URL = "backslash", "other case", "URL"
#: How a row's missing file is said (pack reads it back to tell a wrong IMAGES_DIR from bad rows).
FILE_NOT_FOUND = "file not found: "
#: The kind of a row without file_name; followed by ":" and the column that looks like it, if one does.
NO_FILE_NAME = "no file_name"
#: Names (lower case, without "_", "-", " ") a file column goes by elsewhere: a weaker sign than
#: a value that names a file in IMAGES_DIR.
_FILE_COLUMN_NAMES = frozenset(
    {"path", "file", "filename", "filepath", "fname", "name", "image", "img", "imagepath", "imagefile", "imagename"}
    | {"imgpath", "imgname", "picture", "photo", "audio", "audiopath", "audiofile", "sound", "relpath", "location"}
)


def _no_file_name(row: _Row, obj: dict[str, Any], images_root: str) -> InputProblem:
    """A row without a usable file_name: which column looks like the file column, if one does
    (a value naming a file in IMAGES_DIR is the strong sign, a usual name the weaker)."""
    what = "the file's path relative to IMAGES_DIR"
    if "file_name" in obj:
        given = obj["file_name"]
        held = "is empty" if given == "" else f"holds {json.dumps(given)[:100]}, not a path (a string)"
        return InputProblem(row.line, f"'file_name' {held} ({what})", _dump(obj))
    named = None
    for column, value in obj.items():
        if not isinstance(value, str) or not EXT_RE.fullmatch(os.path.splitext(value)[1]):
            continue
        relative = value[len(images_root) :] if value.startswith(images_root) else value
        if not relative.startswith("/") and ".." not in relative and os.path.isfile(images_root + relative):
            seen = f"{value!r} is a file in IMAGES_DIR"
            break
        if named is None and re.sub(r"[-_ ]", "", column.lower()) in _FILE_COLUMN_NAMES:
            named = column
    else:
        if named is None:
            columns = listed([repr(c) for c in obj], 8) or "none"
            message = f"no 'file_name' ({what}); the row's columns: {columns}"
            return InputProblem(row.line, message, _dump(obj), NO_FILE_NAME)
        column, seen = named, f"{obj[named]!r} is not a file in IMAGES_DIR, though"
    message = f"no 'file_name' ({what}); column {column!r} looks like it ({seen}): rename it to file_name"
    return InputProblem(row.line, message, _dump(obj), f"{NO_FILE_NAME}:{column}")


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)
