"""Stage 1: read the metadata JSONL, check every row and the file it names.

The reader streams: it never holds more than a bounded window of rows. Each row becomes either
a :class:`SourceRecord` (ready to be sorted and packed) or an :class:`InputProblem` that names
its line. File checks (stat, and hashing when the row has no ``key``) run on a thread pool so
that a slow or network filesystem does not serialise them; results keep input order.

Key scheme: a key is 8 to 128 lowercase hex digits. A row without ``key`` gets
``sha256(file bytes)[:32]`` (reproduce it with ``sha256sum FILE | cut -c1-32``), so content
decides the key and the shard. Shards group rows by the first hex digits of the key.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import posixpath
import re
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import jsonlines

from .errors import InputProblem

KEY_RE = re.compile(r"^[0-9a-f]{8,128}$")
EXT_RE = re.compile(r"^\.[A-Za-z0-9]{1,16}$")
CONTENT_KEY_HEX_DIGITS = 32
KEY_SCHEME = "hex: the row's 'key' (8-128 lowercase hex digits), else sha256(file bytes)[:32]"
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class SourceRecord:
    """One checked row: where its file is, what it weighs, and the fields to publish."""

    line: int  # 1-based line in the metadata file
    key: str
    source: str  # file_name as given, relative to IMAGES_DIR
    size: int  # bytes of the file
    ext: str  # extension kept from the source name, e.g. ".jpg"
    fields: dict[str, Any]  # every other column, in input order, without file_name and key


def member_name(key: str, ext: str) -> str:
    """Where a row's file lives inside its shard (the YFCC layout, without a leading 'data/')."""
    return f"images/{key[:3]}/{key[3:6]}/{key}{ext}"


def metadata_line(record: SourceRecord) -> str:
    """The row as published in metadata.jsonl: file_name (relative to the ZIP root), key, fields."""
    row = {"file_name": member_name(record.key, record.ext), "key": record.key, **record.fields}
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def content_key(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()[:CONTENT_KEY_HEX_DIGITS]


def open_metadata(path: str) -> IO[bytes]:
    """Open a .jsonl (or .jsonl.gz) file for binary reading."""
    if path.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


@dataclass(frozen=True)
class _Row:
    line: int
    raw: str
    obj: dict[str, Any] | None = None
    problem: str | None = None


def _raw_text(raw: Any) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return str(raw)


def _parse_rows(stream: IO[bytes]) -> Iterator[_Row]:
    """Yield one _Row per line; blank lines are skipped (but still counted)."""
    lines = iter(stream)
    reader = jsonlines.Reader(lines)
    lineno = 0
    while True:
        try:
            obj = reader.read(type=dict)
        except EOFError:
            return
        except jsonlines.InvalidLineError as exc:
            lineno = exc.lineno
            raw = _raw_text(exc.line)
            if raw.strip() in ("", "\ufeff"):
                continue
            reason = str(exc).removesuffix(f" (line {exc.lineno})")
            if "does not match requested type" in reason:
                reason = "line is not a JSON object"
            yield _Row(lineno, raw, problem=reason)
            continue
        lineno += 1
        yield _Row(lineno, "", obj=obj)


def _check_row(obj: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | str:
    """Check a row's columns; return (file_name, key or None, other fields) or a problem."""
    file_name = obj.get("file_name")
    if not isinstance(file_name, str) or not file_name:
        return "missing or empty 'file_name' (the file's path relative to IMAGES_DIR)"
    for column in obj:
        if column != "file_name" and (column.endswith("file_name") or column.endswith("file_names")):
            return f"column {column!r} ends in 'file_name': datasets would take it as a second file column; rename it"
    key = obj.get("key")
    if key is not None and (not isinstance(key, str) or not KEY_RE.match(key)):
        return (
            f"key {key!r} does not fit the key scheme (8 to 128 lowercase hex digits);"
            " drop the 'key' column to use content hashes"
        )
    fields = {k: v for k, v in obj.items() if k not in ("file_name", "key")}
    return file_name, key, fields


def _check_path(images_root: str, file_name: str) -> str | tuple[str, str]:
    """Return (path, ext) for a safe relative path, or a problem."""
    if "\x00" in file_name:
        return "file_name contains a NUL byte"
    if file_name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", file_name):
        return f"file_name {file_name!r} is absolute; give it relative to IMAGES_DIR"
    if ".." in file_name.split("/"):
        return f"file_name {file_name!r} contains '..'; paths must stay inside IMAGES_DIR"
    ext = posixpath.splitext(posixpath.basename(file_name))[1]
    if not EXT_RE.match(ext):
        return (
            f"file_name {file_name!r} has no usable extension (need e.g. .jpg, .png, .flac);"
            " the extension tells loaders the file type"
        )
    return os.path.join(images_root, file_name), ext


def _stat_file(
    images_real: str, path: str, file_name: str, max_file_bytes: int, want_key: bool
) -> tuple[int, str | None] | str:
    real = os.path.realpath(path)
    if real != images_real and not real.startswith(images_real + os.sep):
        return f"file_name {file_name!r} resolves outside IMAGES_DIR (a symlink to {real!r}?)"
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return f"file not found: {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if not os.path.isfile(real):
        return f"not a regular file: {path}"
    if st.st_size == 0:
        return f"empty file: {path}"
    if st.st_size > max_file_bytes:
        return f"file is {st.st_size} bytes, more than fits in one shard ({max_file_bytes} bytes): {path}"
    if not want_key:
        return st.st_size, None
    try:
        return st.st_size, content_key(real)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"


def read_metadata(
    metadata_path: str,
    images_dir: str,
    *,
    max_file_bytes: int,
    threads: int = 8,
) -> Iterator[SourceRecord | InputProblem]:
    """Stream checked records (or problems) from a metadata file, in input order.

    ``max_file_bytes`` is the largest file that still fits in a shard on its own.
    """
    images_root = os.path.abspath(images_dir)
    images_real = os.path.realpath(images_root)
    window: deque[tuple[_Row, str, str | None, dict[str, Any], str, Future[Any]]] = deque()
    with open_metadata(metadata_path) as stream, ThreadPoolExecutor(max_workers=threads) as pool:
        for row in _parse_rows(stream):
            if row.problem is not None or row.obj is None:
                yield from _drain(window)
                yield InputProblem(row.line, row.problem or "not a JSON object", row.raw)
                continue
            checked = _check_row(row.obj)
            if isinstance(checked, str):
                yield from _drain(window)
                yield InputProblem(row.line, checked, _dump(row.obj))
                continue
            file_name, key, fields = checked
            located = _check_path(images_root, file_name)
            if isinstance(located, str):
                yield from _drain(window)
                yield InputProblem(row.line, located, _dump(row.obj))
                continue
            path, ext = located
            future = pool.submit(_stat_file, images_real, path, file_name, max_file_bytes, key is None)
            window.append((row, file_name, key, fields, ext, future))
            if len(window) >= threads * 8:
                yield _finish(*window.popleft())
        yield from _drain(window)


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _drain(window: deque[Any]) -> Iterable[SourceRecord | InputProblem]:
    while window:
        yield _finish(*window.popleft())


def _finish(
    row: _Row, file_name: str, key: str | None, fields: dict[str, Any], ext: str, future: Future[Any]
) -> SourceRecord | InputProblem:
    result = future.result()
    if isinstance(result, str):
        return InputProblem(row.line, result, _dump(row.obj))
    size, hashed = result
    return SourceRecord(line=row.line, key=key or hashed, source=file_name, size=size, ext=ext, fields=fields)
