"""The user's batch function: found from ``--map MODULE:FUNCTION``, called on a batch, and its
output checked and turned into rows (one file each, its other fields as JSON), every problem
named with the column and the batch."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import io
import json
import os
from dataclasses import dataclass
from typing import Any

from .errors import ShardkitError, UsageError
from .metadata import non_finite_problem
from .remuxconfig import BatchFn, RemuxConfig
from .remuxsource import ClassLabelColumn
from .rowrules import EXT_RE, KEY_RE


def load_function(spec: BatchFn | str) -> BatchFn:
    """The user's function: a callable as is, or ``"module:function"`` (a module path or a file.py)."""
    if callable(spec):
        return spec
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--map {spec!r}: expected MODULE:FUNCTION (e.g. my_transforms:augment)")
    try:
        if module_name.endswith(".py"):
            loaded = importlib.util.spec_from_file_location("shardkit_user_map", module_name)
            if loaded is None or loaded.loader is None:
                raise ImportError(f"cannot load {module_name}")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except (ImportError, OSError) as exc:
        raise UsageError(f"--map {spec!r}: cannot import {module_name}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--map {spec!r}: {module_name} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


def wants_seeds(fn: BatchFn) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def sample_seed(seed: int, identity: str) -> int:
    """A 63-bit seed for one source row: the same row and seed always give the same number."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{identity}".encode()).digest()[:8], "big") >> 1


def derived_key(identity: str) -> str:
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:32]


_IMAGE_EXTENSIONS = {"jpeg": ".jpg", "png": ".png", "webp": ".webp"}


def encode_file(value: Any, config: RemuxConfig) -> tuple[bytes, str] | None:
    """(bytes, extension) of a file-column value, or None if it is not one."""
    from PIL import Image

    if isinstance(value, Image.Image):
        image = value
        fmt = config.image_format
        if fmt == "jpeg" and image.mode not in ("RGB", "L", "CMYK"):
            image = image.convert("RGB")
        buf = io.BytesIO()
        options: dict[str, Any] = {"quality": config.quality} if fmt in ("jpeg", "webp") else {}
        image.save(buf, format=fmt.upper(), **options)
        return buf.getvalue(), _IMAGE_EXTENSIONS[fmt]
    if isinstance(value, dict) and isinstance(value.get("bytes"), bytes | bytearray):
        ext = os.path.splitext(str(value.get("path") or ""))[1].lower()
        if not EXT_RE.fullmatch(ext):  # no extension, or one no file name may carry (a source's path is data)
            ext = _sniff(value["bytes"])
        return bytes(value["bytes"]), ext
    if isinstance(value, bytes | bytearray):
        return bytes(value), _sniff(bytes(value))
    return None


def _sniff(data: bytes) -> str:
    signatures = {b"\xff\xd8\xff": ".jpg", b"\x89PNG": ".png", b"RIFF": ".webp", b"GIF8": ".gif"}
    for magic, ext in signatures.items():
        if data.startswith(magic):
            return ".wav" if magic == b"RIFF" and data[8:12] == b"WAVE" else ext
    return ".bin"


def json_value(value: Any) -> Any:
    """A field value as JSON: numpy scalars and arrays become Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def where_raised(exc: BaseException) -> str:
    """Where the user's code raised ``exc``: its innermost frame outside shardkit, and the
    traceback of the user's frames (the task may have run in another process, so as text)."""
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(here)]
    if not frames:
        return ""
    last = frames[-1]
    lines = "".join(traceback.format_list(frames)).rstrip()
    return f" (at {last.filename}:{last.lineno} in {last.name})\nTraceback of the map function:\n{lines}"


def output_rows(out: Any, where: str) -> list[dict[str, Any]]:
    """The function's returned batch as rows, once checked to be a dict of equal-length lists."""
    if not isinstance(out, dict) or not all(isinstance(v, list) for v in out.values()):
        raise ShardkitError(f"the map function must return a dict of lists ({where}); it returned {type(out).__name__}")
    lengths = {len(v) for v in out.values()}
    if len(lengths) > 1:
        raise ShardkitError(f"the map function returned columns of different lengths {sorted(lengths)} ({where})")
    names = list(out)
    return [{name: out[name][i] for name in names} for i in range(lengths.pop() if lengths else 0)]


def file_of_row(row: dict[str, Any], config: RemuxConfig, where: str) -> tuple[str, tuple[bytes, str]]:
    found = [(name, enc) for name, value in row.items() if (enc := encode_file(value, config)) is not None]
    if len(found) != 1:
        what = "no image or file column" if not found else f"{len(found)} file columns ({[n for n, _ in found]})"
        raise ShardkitError(
            f"each output row needs exactly one image (PIL image or bytes); the map function returned {what} ({where})"
        )
    return found[0]


def as_class_names(fields: dict[str, Any], label: ClassLabelColumn, where: str) -> bool:
    """Put a ClassLabel column's class names in place of its integers (what the packer numbers
    again, in the source's order); False if it holds something else (then it is no ClassLabel)."""
    value = fields[label.column]

    def name_of(v: Any) -> Any:
        if not isinstance(v, int) or isinstance(v, bool):
            return v
        if v == -1:  # datasets' "no label"
            return None
        if not 0 <= v < len(label.names):
            raise ShardkitError(
                f"column {label.column!r} is a ClassLabel of {len(label.names)} names in the source, and the map"
                f" function returned {v} in it ({where}); return a class's number or name, or rename the column"
            )
        return label.names[v]

    if label.in_list:
        if isinstance(value, list):
            fields[label.column] = [name_of(v) for v in value]
        return False  # the packer makes one ClassLabel, of single values: the names stay as strings
    fields[label.column] = value = name_of(value)
    return value is None or isinstance(value, str)


@dataclass
class OutputRow:
    """One row the function returned, ready to stage: its file and its other fields."""

    data: bytes
    ext: str  # the file's extension, with its dot
    key: str | None  # the row's own ``key`` if it returned a valid one
    fields: dict[str, Any]  # JSON values; a source ClassLabel column's integers as class names
    not_labels: set[str]  # source ClassLabel columns this row filled with something else


def call_function(
    fn: BatchFn, with_seeds: bool, batch: dict[str, list[Any]], seeds: list[int], *, where: str, rows: str
) -> list[dict[str, Any]]:
    """``fn``'s output for ``batch`` as rows; what it raises, or an output that is not a batch, is
    a ShardkitError naming ``where`` (the split, source piece and batch) and ``rows``."""
    try:
        out = fn(batch, seeds) if with_seeds else fn(batch)
    except Exception as exc:
        raise ShardkitError(
            f"the map function failed on {where.rsplit(', batch', 1)[0]}, {rows}:"
            f" {type(exc).__name__}: {exc}{where_raised(exc)}"
        ) from exc
    return output_rows(out, where)


def output_row(row: dict[str, Any], config: RemuxConfig, labels: tuple[ClassLabelColumn, ...], where: str) -> OutputRow:
    """One returned row as staged: its one file encoded, its other fields as JSON values."""
    file_column, (data, ext) = file_of_row(row, config, where)
    key = row.get("key")
    fields = {k: json_value(v) for k, v in row.items() if k not in (file_column, "key")}
    not_labels = {
        label.column for label in labels if label.column in fields and not as_class_names(fields, label, where)
    }
    return OutputRow(data, ext, key if isinstance(key, str) and KEY_RE.fullmatch(key) else None, fields, not_labels)


def metadata_line(file_name: str, key: str, fields: dict[str, Any], where: str) -> bytes:
    """The staged metadata line of one output row."""
    try:
        text = json.dumps({"file_name": file_name, "key": key, **fields}, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        cause = non_finite_problem(fields) or exc
        raise ShardkitError(
            f"the map function returned a value that is not JSON ({where}): {cause};"
            " return numbers, strings, lists or dicts besides the image"
        ) from None
    return text.encode("utf-8") + b"\n"
