"""Infer one type per metadata column across ALL rows, as datasets features.

datasets' imagefolder infers features from the first rows of the first shard only, so a column
that is null there and a number elsewhere fails later with a cast error. shardkit instead sees
every row while streaming, merges their JSON types, and declares the result in the dataset
card (``dataset_info.features``). A row whose value cannot share a type with earlier rows (a
string where numbers were seen, say) is an input problem naming both lines.

Type lattice: null < bool; null < int < float; null < string; lists and objects merge
element-wise. Columns that are only ever null are declared as strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .metadata import published_json
from .rowrules import column_name_problem

_SCALARS = {bool: "bool", int: "int64", float: "float64", str: "string"}


@dataclass
class Kind:
    """The merged type of the values seen so far at one place in the rows."""

    name: str = "null"  # null | bool | int64 | float64 | string | list | struct
    first_line: int = 0  # the line that fixed the kind (for messages)
    item: Kind | None = None  # for list
    fields: dict[str, Kind] = field(default_factory=dict)  # for struct, in first-seen order


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "struct"
    return _SCALARS.get(type(value), "unknown")


def _clash(name: str, other: str) -> bool:
    """Whether values of these two kinds cannot share a column (null fits anything; int and float meet)."""
    return "null" not in (name, other) and name != other and {name, other} != {"int64", "float64"}


_INT64 = range(-(2**63), 2**63)  # (every int64 converts to float64, so a float column is safe too)


def on_line(line: int) -> str:
    """Where a message says a column's type was first seen: the metadata file's line (a remux names
    the batch and the row of the function's output instead)."""
    return f"on line {line}"


def find_conflict(kind: Kind, value: Any, line: int, where: str, seen_at: Callable[[int], str] = on_line) -> str | None:
    """Why ``value`` cannot merge into ``kind`` (None if it can). Never changes ``kind``. ``seen_at``
    says where the row that fixed a kind's type is (from its ``first_line``)."""
    new = _kind_of(value)
    if new == "unknown":
        return f"column {where!r} holds an unsupported value {value!r}"
    if new == "null":
        return None
    if new == "int64" and value not in _INT64:
        return (
            f"column {where!r} holds {value}, outside the 64-bit integers datasets and Arrow store;"
            " write it as a string"
        )
    if _clash(kind.name, new):
        return (
            f"column {where!r} is {_article(new)} here but {_article(kind.name)} {seen_at(kind.first_line)};"
            " datasets needs one type per column"
        )
    if new == "list":
        # The items must agree with what was seen before AND with each other: merge into a copy.
        scratch = _copy(kind.item) if kind.item is not None else Kind()
        for item in value:
            if problem := find_conflict(scratch, item, line, where + "[]", seen_at):
                return problem
            merge_value(scratch, item, line)
    elif new == "struct":
        for name, item in value.items():
            if (kind.fields.get(name) is None) and (wrong := column_name_problem(name)):
                return f"column {where!r}: its field {name!r} {wrong}; rename it"
            if problem := find_conflict(kind.fields.get(name, Kind()), item, line, f"{where}.{name}", seen_at):
                return problem
    return None


def _copy(kind: Kind) -> Kind:
    return Kind(
        name=kind.name,
        first_line=kind.first_line,
        item=_copy(kind.item) if kind.item is not None else None,
        fields={k: _copy(v) for k, v in kind.fields.items()},
    )


def merge_value(kind: Kind, value: Any, line: int) -> None:
    """Merge one JSON value into ``kind``; call :func:`find_conflict` first."""
    new = _kind_of(value)
    if new == "null":
        return
    if kind.name == "null":
        kind.name = new
        kind.first_line = line
    elif kind.name != new:
        kind.name = "float64"  # int and float meet (find_conflict allowed nothing else)
    if new == "list":
        if kind.item is None:
            kind.item = Kind()
        for item in value:
            merge_value(kind.item, item, line)
    elif new == "struct":
        for name, item in value.items():
            merge_value(kind.fields.setdefault(name, Kind()), item, line)


def _article(name: str) -> str:
    words = {
        "string": "a string",
        "int64": "an integer",
        "float64": "a number",
        "bool": "a boolean",
        "list": "a list",
        "struct": "an object",
    }
    return words.get(name, name)


_NULL = Kind()
# Value types that merge into a settled kind without changing it.
_FITS: dict[str, tuple[type, ...]] = {
    "string": (str, type(None)),
    "int64": (type(None),),  # integers: range-checked in SchemaTracker.check
    "float64": (float, type(None)),  # integers in a float column too (their size)
    "bool": (bool, type(None)),
}


class SchemaTracker:
    """Merges the fields of every row into one Kind per column."""

    def __init__(self) -> None:
        self.columns: dict[str, Kind] = {}

    def check(self, fields: dict[str, Any], line: int, seen_at: Callable[[int], str] = on_line) -> str | None:
        """Merge a row; return a problem message instead if a value conflicts (row not merged).
        ``seen_at`` as for :func:`find_conflict`."""
        columns = self.columns
        slow: list[tuple[str, Any]] = []
        for name, value in fields.items():
            # Fast path, the common case: a scalar that fits the column's settled type.
            kind = columns.get(name)
            if kind is not None and (
                type(value) in _FITS.get(kind.name, ())
                or (type(value) is int and kind.name == "int64" and -(2**63) <= value < 2**63)
            ):
                continue
            if problem := find_conflict(kind or _NULL, value, line, name, seen_at):
                return problem
            slow.append((name, value))
        for name, value in slow:
            merge_value(columns.setdefault(name, Kind()), value, line)
        return None

    def absorb(self, later: SchemaTracker) -> bool:
        """Merge the types of rows that come after this tracker's; False (nothing merged) on a conflict."""
        if any(
            _kinds_conflict(self.columns[name], kind) for name, kind in later.columns.items() if name in self.columns
        ):
            return False
        for name, kind in later.columns.items():
            if name in self.columns:
                _merge_kind(self.columns[name], kind)
            else:
                self.columns[name] = _copy(kind)
        return True

    def features_yaml(self, base_column: str, base_dtype: str) -> list[dict[str, Any]]:
        """The card's ``dataset_info.features`` list: the file column, ``key``, then every column."""
        out: list[dict[str, Any]] = [{"name": base_column, "dtype": base_dtype}, {"name": "key", "dtype": "string"}]
        for name, kind in self.columns.items():
            out.append({"name": name, **_yaml_type(kind)})
        return out


def _kinds_conflict(kind: Kind, later: Kind) -> bool:
    """Whether some value of ``later`` would conflict with ``kind`` (see :func:`find_conflict`)."""
    if _clash(kind.name, later.name):
        return True
    if "null" in (kind.name, later.name):
        return False
    if kind.name == "list" and kind.item is not None and later.item is not None:
        return _kinds_conflict(kind.item, later.item)
    if kind.name == "struct":
        return any(_kinds_conflict(kind.fields[n], k) for n, k in later.fields.items() if n in kind.fields)
    return False


def _merge_kind(kind: Kind, later: Kind) -> None:
    """Merge ``later`` into ``kind`` as its values would have merged; check :func:`_kinds_conflict` first."""
    if later.name == "null":
        return
    if kind.name == "null":
        copied = _copy(later)
        kind.name, kind.first_line, kind.item, kind.fields = copied.name, copied.first_line, copied.item, copied.fields
        return
    if kind.name != later.name:
        kind.name = "float64"  # int and float meet
    if later.item is not None:
        if kind.item is None:
            kind.item = _copy(later.item)
        else:
            _merge_kind(kind.item, later.item)
    for name, field_kind in later.fields.items():
        if name in kind.fields:
            _merge_kind(kind.fields[name], field_kind)
        else:
            kind.fields[name] = _copy(field_kind)


def _yaml_type(kind: Kind) -> dict[str, Any]:
    """One feature in the YAML form datasets reads from a card (dtype / list / struct)."""
    if kind.name == "list":
        inner = _yaml_type(kind.item or Kind())
        # A list of scalars is "list: string"; of objects "list: [fields]"; of lists "list: {list: ...}".
        if "dtype" in inner:
            return {"list": inner["dtype"]}
        if "struct" in inner:
            return {"list": inner["struct"]}
        return {"list": inner}
    if kind.name == "struct":
        return {"struct": [{"name": k, **_yaml_type(v)} for k, v in kind.fields.items()]}
    return {"dtype": "string" if kind.name == "null" else kind.name}


# --- published lines: a float column's whole numbers written as floats -----------------------

#: Where a feature holds float64 values: "float", ("list", spec) or ("struct", {name: spec}).
_FloatSpec = Any


def _float_spec(feature: dict[str, Any]) -> _FloatSpec | None:
    """The float64 places inside one feature of the card's YAML list (None: it holds none)."""
    if feature.get("dtype") == "float64":
        return "float"
    if "struct" in feature:
        inner = {f["name"]: spec for f in feature["struct"] if (spec := _float_spec(f)) is not None}
        return ("struct", inner) if inner else None
    if "list" in feature:
        item = feature["list"]
        spec = _float_spec(
            {"dtype": item} if isinstance(item, str) else {"struct": item} if isinstance(item, list) else item
        )
        return ("list", spec) if spec is not None else None
    return None


def _as_floats(value: Any, spec: _FloatSpec) -> Any:
    if value is None:
        return None
    if spec == "float":
        return float(value) if type(value) is int else value
    kind, inner = spec
    if kind == "list":
        return [_as_floats(v, inner) for v in value]
    return {k: _as_floats(v, inner[k]) if k in inner else v for k, v in value.items()}


def float_retyper(features: list[dict[str, Any]]) -> Callable[[str], str] | None:
    """A function that rewrites a published metadata line so that every value of a float64
    column is a JSON float (``2`` -> ``2.0``); None when no column is float64.

    Exports often write whole numbers as integers (``"score": 2`` beside ``"score": 2.5``).
    shardkit declares the column float64, but a reader that infers types from one file (polars,
    duckdb, datasets' folder builders without the card's features) would see integers there;
    published floats look like floats everywhere. Lines without such an integer are returned
    unchanged: a cheap search rules out most of them before any parsing.
    """
    specs = {f["name"]: spec for f in features if (spec := _float_spec(f)) is not None}
    if not specs:
        return None
    scalars = [name for name, spec in specs.items() if spec == "float"]
    nested = len(scalars) < len(specs)
    names = "|".join(re.escape(json.dumps(name, ensure_ascii=False)) for name in scalars)
    may_hold_int = re.compile(rf"(?:{names}):-?[0-9]+[,}}]").search if scalars else None

    def retype(line: str) -> str:
        if not nested and may_hold_int is not None and not may_hold_int(line):
            return line
        row = json.loads(line)
        fixed = {k: _as_floats(v, specs[k]) if k in specs else v for k, v in row.items()}
        return published_json(fixed)

    return retype


# --- class labels: a column of class names published as ClassLabel integers ------------------


def class_label_feature(column: str, names: list[str]) -> dict[str, Any]:
    """The card's YAML for a ClassLabel column: integer i is ``names[i]``."""
    return {"name": column, "dtype": {"class_label": {"names": {str(i): name for i, name in enumerate(names)}}}}


def class_label_names(feature: dict[str, Any]) -> list[str] | None:
    """A feature's class names if it is a ClassLabel (None otherwise)."""
    dtype = feature.get("dtype")
    if not isinstance(dtype, dict) or not isinstance(dtype.get("class_label"), dict):
        return None
    names = dtype["class_label"].get("names")
    if isinstance(names, dict):
        return [str(names[k]) for k in sorted(names, key=int)]
    return [str(n) for n in names] if isinstance(names, list) else None


def with_class_label(features: list[dict[str, Any]], column: str, names: list[str]) -> list[dict[str, Any]]:
    """``features`` with ``column`` (a string column) declared as a ClassLabel of ``names``."""
    return [class_label_feature(column, names) if f["name"] == column else f for f in features]


def label_retyper(column: str, names: list[str]) -> Callable[[str], str]:
    """A function that rewrites a published line's class name in ``column`` to its index in
    ``names``; a row without a label (null, or no such field) gets -1, datasets' number for
    "no label". A number in every row, never a null: datasets' folder builders infer each split's
    types from one of its metadata files and refuse splits that differ (a test split without
    labels would be null there)."""
    index = {name: i for i, name in enumerate(names)}

    def retype(line: str) -> str:
        row = json.loads(line)
        value = row.get(column)
        row[column] = -1 if value is None else index[value]
        return published_json(row)

    return retype
