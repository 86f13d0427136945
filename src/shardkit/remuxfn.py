"""The user's batch function: found from ``--map MODULE:FUNCTION``, called on a batch, and its
output checked and turned into rows (one file each, its other fields as JSON), every problem
named with the column and the batch."""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import io
import json
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .check import SPLIT_COLUMN, split_problem
from .errors import ShardkitError, UsageError, shown_value
from .metadata import columns_problem, non_finite_problem
from .remuxconfig import BatchFn, RemuxConfig
from .remuxsource import ClassLabelColumn
from .rowrules import EXT_RE, KEY_RE
from .schema import SchemaTracker
from .staging import ONE_FOLDER


def load_function(spec: BatchFn | str) -> BatchFn:
    """The user's function: a callable as is, or ``"module:function"``, the module imported as
    is (an installed package, PYTHONPATH) or else found in the current folder (as ``python -m``
    finds it), or ``"path/to/file.py:function"``. A module found in a folder is imported with that
    folder on ``sys.path`` (last), so it can import the files beside it."""
    return _load(spec)[0]


def function_spec(spec: BatchFn | str) -> BatchFn | str:
    """``spec`` as every process loads it, wherever it runs and whatever its current folder (a
    pool's worker, a Dask worker): a module found in the current folder, or a file, by its
    absolute path. Loads it here first: a bad ``--map`` fails once, in this process.

    Why a path and not the current folder on every worker's ``sys.path``: a Dask worker has its
    own current folder (another machine's, perhaps), and there the same name could be another
    module or none; a path names the one file this process checked."""
    return _load(spec)[1]


def function_file_sha256(spec: BatchFn | str) -> str | None:
    """The sha256 of the file that defines the function of ``spec`` (as :func:`function_spec`
    gave it; nothing is run again), None when there is no such file. A remux records it, so an
    unfinished remux whose function was edited since is not resumed with the batches the old code
    made. Only that file: a module it imports may change unseen."""
    path: str | None
    if callable(spec):
        try:
            path = inspect.getsourcefile(spec)
        except TypeError:  # a builtin, a functools.partial
            path = None
    else:
        module_name = _split_spec(spec)[0]
        if module_name.endswith(".py"):
            path = module_name
        else:
            module = sys.modules.get(module_name)
            path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _load(spec: BatchFn | str) -> tuple[BatchFn, BatchFn | str]:
    """The function, and ``spec`` with the file it was found in (if not imported as is)."""
    if callable(spec):
        return spec, spec
    module_name, attr = _split_spec(spec)
    path: str | None
    with contextlib.redirect_stdout(sys.stderr):  # what its module prints as it loads: as call_function
        if module_name.endswith(".py"):
            path = os.path.abspath(module_name)
            module = _import_file(path, spec)
        else:
            module, path = _import_module(module_name, spec)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--map {spec!r}: {module_name} ({module.__file__}) has no function {attr!r}")
    return fn, spec if path is None else f"{path}:{attr}"


_FORMS = "give MODULE:FUNCTION for a module in the current folder or an installed package, or path/to/file.py:FUNCTION"


def _split_spec(spec: str) -> tuple[str, str]:
    module_name, _, attr = spec.rpartition(":")  # (the last colon: a Windows path has one)
    if not module_name or not attr:
        raise UsageError(f"--map {spec!r}: expected MODULE:FUNCTION (e.g. my_transforms:augment); {_FORMS}")
    return module_name, attr


def _import_module(module_name: str, spec: str) -> tuple[ModuleType, str | None]:
    """``module_name`` imported as is (and None), else from the current folder (and its file)."""
    module = _import_if_there(module_name, spec)
    if module is not None:
        return module, None
    path = _in_current_folder(module_name)
    if path is None:
        raise UsageError(
            f"--map {spec!r}: cannot import {module_name}: it is neither an installed module nor a file in the"
            f" current folder ({os.getcwd()}); {_FORMS}"
        )
    return _import_file(path, spec), path


def _import_if_there(module_name: str, spec: str) -> ModuleType | None:
    """Module ``module_name`` as Python imports it; None if there is no such module (an error
    raised as it is imported, a module it imports missing included, is the user's: named so)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            return None
        raise _import_failed(exc, module_name, spec) from None
    except Exception as exc:
        raise _import_failed(exc, module_name, spec) from None


def _in_current_folder(module_name: str) -> str | None:
    """The file of module ``module_name`` (``a.b``: ``a/b.py`` or ``a/b/__init__.py``) in the
    current folder, as an absolute path; None if there is none."""
    folder = os.getcwd()
    *packages, name = module_name.split(".")
    for package in packages:
        folder = os.path.join(folder, package)
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            return None
    for path in (os.path.join(folder, f"{name}.py"), os.path.join(folder, name, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _import_file(path: str, spec: str) -> ModuleType:
    """The module of file ``path``: a file in a package (folders with ``__init__.py``) by its
    dotted name, with the folder above the package on ``sys.path``, so that its relative imports
    work; any other on its own, with its folder on ``sys.path``."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise UsageError(f"--map {spec!r}: cannot import {path}: no such file; {_FORMS}")
    folder, stem = os.path.dirname(path), os.path.splitext(os.path.basename(path))[0]
    names = [] if stem == "__init__" else [stem]
    root = folder
    while os.path.isfile(os.path.join(root, "__init__.py")):
        root, package = os.path.split(root)
        names.insert(0, package)
    if root not in sys.path:
        sys.path.append(root)
    if len(names) > 1 or stem == "__init__":
        module = _import_if_there(".".join(names), spec)
        if module is not None and os.path.abspath(module.__file__ or "") == path:  # not another of that name
            return module
    return _exec_file(path, spec)


def _exec_file(path: str, spec: str) -> ModuleType:
    name = "shardkit_user_map"
    loaded = importlib.util.spec_from_file_location(name, path)
    if loaded is None or loaded.loader is None:
        raise UsageError(f"--map {spec!r}: cannot import {path}: not a Python file; {_FORMS}")
    module = importlib.util.module_from_spec(loaded)
    sys.modules[name] = module  # (as importlib does: a dataclass in it looks its module up there)
    try:
        loaded.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _import_failed(exc, path, spec) from None
    return module


def _import_failed(exc: Exception, module: str, spec: str) -> UsageError:
    """What the user's module raised as it was imported, named as such (as ``--map`` names it),
    with its file and line (``module``'s name or file where the traceback has none of the user's)."""
    if isinstance(exc, SyntaxError):
        at = f"{exc.filename}:{exc.lineno}"
        what = f"SyntaxError: {exc.msg}"
    else:
        frames = _user_frames(exc)
        at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else module
        what = f"{type(exc).__name__}: {exc}"
    return UsageError(f"--map {spec!r}: importing {spec.rpartition(':')[0]} raised {what} (at {at})")


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


class NotStorable(TypeError):
    """A value of a type no metadata line can hold (JSON's: numbers, strings, lists, dicts, null)."""

    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.type_name = type(value).__name__


def json_value(value: Any) -> Any:
    """A field value as JSON: numpy scalars and arrays become Python numbers and lists; a value
    JSON cannot hold raises :class:`NotStorable`."""
    if value is None or isinstance(value, str | int | float):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    raise NotStorable(value)


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback in the user's code: not shardkit's, not importlib's."""
    return [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen ") and not os.path.abspath(f.filename).startswith(_HERE)
    ]


_HERE = os.path.dirname(os.path.abspath(__file__))


def where_raised(exc: BaseException) -> tuple[str, list[str]]:
    """Where the user's code raised ``exc``: its innermost frame outside shardkit, and the
    traceback of the user's frames as lines (the task may have run in another process, so as
    text); ``("", [])`` when no frame is the user's."""
    frames = _user_frames(exc)
    if not frames:
        return "", []
    last = frames[-1]
    lines = "".join(traceback.format_list(frames)).rstrip().split("\n")
    return f" (at {last.filename}:{last.lineno} in {last.name})", ["Traceback of the map function:", *lines]


def output_rows(out: Any, where: str) -> list[dict[str, Any]]:
    """The function's returned batch as rows, once checked to be a dict of equal-length lists."""
    if not isinstance(out, dict):
        raise ShardkitError(f"the map function must return a dict of lists ({where}); it returned {type(out).__name__}")
    for name, values in out.items():
        if not isinstance(values, list):
            raise ShardkitError(
                f"the map function must return a dict of lists ({where}); its column {name!r} is a"
                f" {type(values).__name__}, not a list"
            )
    lengths = {len(v) for v in out.values()}
    if len(lengths) > 1:
        (first, values), *others = out.items()
        counts = ", ".join(f"{name!r} {len(v)}" for name, v in others)
        raise ShardkitError(
            f"the map function returned columns of different lengths ({where}): column {first!r} has"
            f" {len(values)} value{'' if len(values) == 1 else 's'}, {counts}; every column needs one value per row"
        )
    names = list(out)
    return [{name: out[name][i] for name in names} for i in range(lengths.pop() if lengths else 0)]


def file_of_row(
    row: dict[str, Any], config: RemuxConfig, where: str, file_columns: Sequence[str] = (), index: int = 0
) -> tuple[str, tuple[bytes, str]]:
    """The row (``index`` in the function's output batch)'s one file column, encoded; it must be
    one of the source's ``file_columns`` (if it has any): the output's file column is the source's,
    under shardkit's name for it."""
    found = [(name, enc) for name, value in row.items() if (enc := encode_file(value, config)) is not None]
    where_row = f"{where}, row {index} of its output"
    if len(found) == 1 and (not file_columns or found[0][0] in file_columns):
        if not found[0][1][0]:
            raise ShardkitError(f"the map function returned empty bytes in column {found[0][0]!r} ({where_row})")
        return found[0]
    where = where_row
    source = " or ".join(repr(c) for c in file_columns)
    if len(found) > 1:
        what = f"{len(found)} file columns ({[n for n, _ in found]})"
    elif found:
        raise ShardkitError(
            f"the map function returned the image as column {found[0][0]!r}, not as the source's {source}"
            f" ({where}); return it as {source}: the output's file column is the source's"
        )
    elif file_columns and (held := [c for c in file_columns if c in row]):
        what = f"a {type(row[held[0]]).__name__} in column {held[0]!r}"
    else:
        what = "no image or file column" + (f" (the source's is {source})" if file_columns else "")
    raise ShardkitError(
        f"each output row needs exactly one image (PIL image or bytes); the map function returned {what} ({where})"
    )


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


def _storable(value: Any) -> bool:
    try:
        json_value(value)
    except NotStorable:
        return False
    return True


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
        # What the function prints goes to stderr, with shardkit's own messages: stdout is --json's.
        with contextlib.redirect_stdout(sys.stderr):
            out = fn(batch, seeds) if with_seeds else fn(batch)
    except Exception as exc:
        at, trace = where_raised(exc)
        # A message of lines: the error on the first, the user's traceback below it (each line
        # made one line on its own, where a message in one string has its line breaks escaped).
        first = f"the map function failed on {where.rsplit(', batch', 1)[0]}, {rows}: {type(exc).__name__}: {exc}{at}"
        raise ShardkitError([first, *trace]) from exc
    return output_rows(out, where)


def output_row(
    row: dict[str, Any],
    config: RemuxConfig,
    labels: tuple[ClassLabelColumn, ...],
    where: str,
    *,
    file_columns: Sequence[str] = (),
    index: int = 0,
) -> OutputRow:
    """One returned row, ``index`` in the function's output batch, as staged: its one file
    encoded (from one of the source's ``file_columns``, if any), its other fields as JSON values."""
    file_column, (data, ext) = file_of_row(row, config, where, file_columns, index)
    key = row.get("key")
    try:
        fields = {k: json_value(v) for k, v in row.items() if k not in (file_column, "key")}
    except NotStorable as exc:
        column = next(k for k, v in row.items() if k not in (file_column, "key") and not _storable(v))
        raise ShardkitError(
            f"the map function returned a {exc.type_name} in column {column!r} ({where}, row {index} of its"
            " output), which no metadata can hold; return numbers, strings, lists or dicts besides the image"
        ) from None
    if problem := _fields_problem(fields):
        raise ShardkitError(
            f"the map function returned a row that cannot be published ({where}, row {index} of its output): {problem}"
        )
    not_labels = {
        label.column for label in labels if label.column in fields and not as_class_names(fields, label, where)
    }
    if key is not None and not (isinstance(key, str) and KEY_RE.fullmatch(key)):
        raise ShardkitError(
            f"the map function returned {shown_value(key)} in column 'key' ({where}, row {index} of its output):"
            " a key is 8 to 128 lowercase hex digits (None, or no 'key' column, for shardkit's own; rename a column"
            " of yours named 'key')"
        )
    return OutputRow(data, ext, key, fields, not_labels)


def _fields_problem(fields: dict[str, Any]) -> str | None:
    """What the packer would refuse in a returned row's fields alone (besides its file and key),
    None if nothing: said now, of the function's batch and row, not of a staged line once the
    whole source is transformed. (Types across rows are checked as batches are committed:
    :class:`OutputTypes`.)"""
    if "file_name" in fields:  # (the packer's file column: the staged row's is the file's byte range)
        return "column 'file_name' is reserved for the file itself in the published dataset; rename it"
    if problem := columns_problem(tuple(fields)):
        return problem
    split = fields.get(SPLIT_COLUMN)
    return None if split is None else split_problem(split)


def metadata_line(file_name: list[Any], key: str, fields: dict[str, Any], where: str) -> bytes:
    """The staged metadata line of one output row; its file_name is ``[file, offset, size]``, a byte
    range of a staged file (the packer's ``file_ranges``)."""
    try:
        text = json.dumps({"file_name": file_name, "key": key, **fields}, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        cause = non_finite_problem(fields) or _unwritable_column(fields) or exc
        raise ShardkitError(
            f"the map function returned a value that is not JSON ({where}): {cause};"
            " return numbers, strings, lists or dicts besides the image"
        ) from None
    return text.encode("utf-8") + b"\n"


def _unwritable_column(fields: dict[str, Any]) -> str | None:
    """Which column json cannot write (a dict key of another type than text or a number)."""
    for column, value in fields.items():
        try:
            json.dumps(value, allow_nan=False)
        except TypeError as exc:
            return f"column {column!r}: {exc}"
        except ValueError:
            continue
    return None


class OutputTypes:
    """What the packer needs of the output's rows together, as it checks them (the same rules, the
    rows in the same order), checked as each batch is committed: one type per column
    (:class:`.schema.SchemaTracker`), and one spelling per split name (the packer refuses names
    that differ only in case). A row that breaks either is named by its batch and row when it is
    made, not by a staged file's line once the whole source is transformed. Holds the merged
    types, the split names and where each batch starts (a few numbers a batch).

    ``labels``: the source's ClassLabel columns, whose integers are staged as class names (a
    conflict there is said in those terms)."""

    def __init__(self, labels: Sequence[str] = ()) -> None:
        self.schema = SchemaTracker()
        self.rows = 0
        self._labels = tuple(labels)
        self._splits: dict[str, tuple[str, int]] = {}  # casefolded: (the name, the row that gave it first)
        self._starts: list[int] = []  # each batch's first row, counted over the whole output
        self._names: list[str] = []

    def add(self, lines: bytes, name: str) -> None:
        """Check and merge a committed batch's metadata lines (``name``: how messages name the batch)."""
        self._starts.append(self.rows)
        self._names.append(name)
        for j, line in enumerate(lines.split(b"\n")[:-1]):  # (not splitlines: U+2028 is no line break)
            fields = json.loads(line)
            split = fields.pop(SPLIT_COLUMN, None)
            for column in ("file_name", "key"):  # (not types of the published columns)
                fields.pop(column, None)
            problem = self._split_problem(split) or self.schema.check(fields, self.rows, self._seen_at)
            if problem:
                raise ShardkitError(
                    f"the map function returned a row that cannot be published ({name}, row {j} of its output):"
                    f" {problem}{self._label_note(problem)}"
                )
            self.rows += 1

    def _split_problem(self, split: Any) -> str | None:
        if not isinstance(split, str):  # (checked in the worker: None, or a name)
            return None
        first, row = self._splits.setdefault(split.casefold(), (split, self.rows))
        if first == split:
            return None
        return f"split {split!r} here and {first!r} {self._seen_at(row)}: {ONE_FOLDER}"

    def _label_note(self, problem: str) -> str:
        column = next(
            (c for c in self._labels if problem.startswith((f"column {c!r} ", f"column '{c}[", f"column '{c}."))), None
        )
        if column is None:
            return ""
        return (
            f" (the source's ClassLabel column {column!r} is staged with its class names: return its class integers"
            " or names there)"
        )

    def _seen_at(self, row: int) -> str:
        batch = bisect.bisect_right(self._starts, row) - 1
        return f"in row {row - self._starts[batch]} of the output of {self._names[batch]}"
