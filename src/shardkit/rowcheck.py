"""Each row a reader yields agrees with the manifest: the one check every shardkit reader runs.

A shard's CRCs say its bytes are the ones written, not that they hold what the manifest
declares: a forger who recomputes them could publish rows without a key, values of another type
than the features declare (datasets would turn an int into the string a ``string`` feature asks
for, without a word), columns the features do not declare (dropped without a word), keys outside
the shard's range, or the same key in two shards (read twice). So every row is held here to:

* its columns: only those the features declare, each value of the declared type (a ``null``
  wherever shardkit's types allow one: everywhere but ``key`` and a class label), no NaN or
  infinity, an integer within 64 bits, a class label's index one of its names (or -1, no label);
* its key: 8 to 128 lowercase hex digits, within the shard's range (:class:`.plan.KeyRange`, by
  its name) and the manifest's first and last key, above the previous row's (strictly: keys are
  unique in a shard);
* its member: the name the format gives its key and extension (``member_template``).

The manifest's shards of one split hold key ranges (first to last key) that do not overlap and
lie within each shard's :class:`.plan.KeyRange` (:func:`.manifest.checked_manifest` sees to it
before any reader uses a manifest). With every row within its shard's range, a key in two shards
is then impossible, and no reader needs to remember the keys it has seen.

``shardkit.stream``, remux and the preview check each row as :func:`.shardrows.iter_shard`
yields it (:meth:`ShardRowCheck.rows`); ``verify`` checks each metadata line
(:meth:`ShardRowCheck.problem`). The template's loading script (datasets 3.6, which cannot
import shardkit) has its own copy of these rules for the rows it reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from .errors import source_note
from .formats import ShardFormat, ShardFormatError
from .manifest import Manifest, ManifestShard
from .plan import KeyRange, key_ranges
from .rowrules import EXT_RE, KEY_RE, SOURCE_PATH_COLUMN

#: Why a value does not fit its feature (None: it fits).
ValueCheck = Callable[[Any], "str | None"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SCALAR_TYPES = ("string", "int64", "float64", "bool", "binary")
_NONE = type(None)
_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", bytes: "bytes", list: "a list"}


def _kind(value: Any) -> str:
    return "null" if value is None else _WORDS.get(type(value), "an object" if isinstance(value, dict) else "a value")


def _scalar_check(dtype: str, int_floats: bool) -> tuple[frozenset[type], ValueCheck]:
    """The Python types a scalar feature's values come as (null included), and the check of one."""
    types: dict[str, tuple[type, ...]] = {  # (one for each of _SCALAR_TYPES)
        "string": (str,),
        "int64": (int,),
        "float64": (float, int) if int_floats else (float,),
        "bool": (bool,),
        "binary": (bytes,),
    }
    allowed = frozenset((*types[dtype], _NONE))

    def check(value: Any) -> str | None:
        if type(value) not in allowed:
            return f"{_kind(value)} where the features declare {dtype}"
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            return f"{value}, outside the 64-bit integers {dtype} holds"
        if type(value) is float and not math.isfinite(value):
            return f"{value}, which shardkit never packs (NaN and infinities are refused)"
        return None

    return allowed, check


def _feature_check(feature: dict[str, Any], int_floats: bool) -> ValueCheck:
    """The check of one feature's values (the card's YAML form: dtype, list or struct)."""
    if "dtype" in feature:
        dtype = feature["dtype"]
        if isinstance(dtype, dict) and "class_label" in dtype:
            return _label_check(len(dtype["class_label"].get("names") or ()))
        if dtype in ("image", "audio"):  # a file column inside a row: shardkit never writes one
            return lambda value: f"{_kind(value)} where the features declare {dtype}"
        return _scalar_check(str(dtype), int_floats)[1]
    if "struct" in feature:
        return _struct_check({f["name"]: _feature_check(f, int_floats) for f in feature["struct"]})
    inner = feature["list"]
    if isinstance(inner, str):  # "list: string"
        inner = {"dtype": inner}
    elif isinstance(inner, list):  # a list of objects: "list: [fields]"
        inner = {"struct": inner}
    return _list_check(_feature_check(inner, int_floats))


def _label_check(count: int) -> ValueCheck:
    """A class label's values: an index of one of its ``count`` names, or -1 (no label)."""

    def label(value: Any) -> str | None:
        if type(value) is not int:
            return f"{_kind(value)} where the features declare a class label (its index)"
        if not -1 <= value < count:
            return f"class label {value}, not -1 (no label) or one of the {count} names' indexes"
        return None

    return label


def _struct_check(fields: dict[str, ValueCheck]) -> ValueCheck:
    """An object's values (or null): only the declared ``fields``, each held to its check."""

    def struct(value: Any) -> str | None:
        if value is None:
            return None
        if type(value) is not dict:
            return f"{_kind(value)} where the features declare an object"
        for name, item in value.items():
            check = fields.get(name)
            if check is None:
                return f"field {name!r}, which the features do not declare"
            if (problem := check(item)) is not None:
                return f"field {name!r}: {problem}"
        return None

    return struct


def _list_check(item_check: ValueCheck) -> ValueCheck:
    """A list's values (or null): each item held to ``item_check``."""

    def items(value: Any) -> str | None:
        if value is None:
            return None
        if type(value) is not list:
            return f"{_kind(value)} where the features declare a list"
        for number, item in enumerate(value):
            if (problem := item_check(item)) is not None:
                return f"item {number}: {problem}"
        return None

    return items


class DatasetRows:
    """What every row of a dataset is held to, from its manifest (built once per manifest): the
    columns' checks, and each shard's key range."""

    def __init__(self, manifest: Manifest) -> None:
        self.fmt: ShardFormat = manifest.options.shard_format
        features = manifest.features or []
        # Layout 1 published a float column's whole numbers as 2, not 2.0 (manifests before layout
        # 4 do not say which layout they were): those rows may hold an int where float64 is declared.
        int_floats = manifest.layout is None
        self.typed = bool(features)
        self.declared = frozenset(f["name"] for f in features[1:])
        # The common case is checked in bulk: the types of a group of columns' values against the
        # types they may have (one C loop per group), every value of int64 and float64 columns as a
        # sum or a bound. A row that fails it, and every other feature, is checked value by value
        # (ValueCheck), which also words the problem.
        groups: dict[frozenset[type], list[str]] = {}
        self.ints: tuple[str, ...] = ()
        self.floats: tuple[str, ...] = ()
        self.others: list[tuple[str, ValueCheck]] = []
        self.value_checks: dict[str, ValueCheck] = {}
        for feature in features[1:]:
            name = feature["name"]
            if name == "key":
                continue  # checked as a key
            self.value_checks[name] = check = _feature_check(feature, int_floats)
            dtype = feature.get("dtype")
            if dtype in _SCALAR_TYPES:
                groups.setdefault(_scalar_check(dtype, int_floats)[0], []).append(name)
                self.ints += (name,) if dtype == "int64" else ()
                self.floats += (name,) if dtype == "float64" else ()
            else:
                self.others.append((name, check))
        self.groups = [(types, tuple(names)) for types, names in groups.items()]
        self.ranges = key_ranges([(s.file, s.split) for s in manifest.shards], manifest.prefix_lengths_by_split())
        self.shards = {s.file: s for s in manifest.shards}

    def shard(self, file: str, where: str, *, file_column: str | None = None) -> ShardRowCheck:
        """The check of shard ``file``'s rows (``where``: its path or URL, for messages), as a reader
        gives them (the file's bytes and member name in ``file_column``), or as metadata lines
        (``file_column`` None: the member name in ``file_name``)."""
        shard = self.shards.get(file)
        if shard is None:
            raise ShardFormatError(f"{where}: not a shard shards.json names")
        return ShardRowCheck(self, shard, self.ranges[file], where, file_column)


class ShardRowCheck:
    """One shard's rows, in order, held to the manifest (:class:`DatasetRows`). Keeps the previous
    row's key: make one per read of a shard (or of a cut piece of one)."""

    def __init__(
        self, rules: DatasetRows, shard: ManifestShard, keys: KeyRange, where: str, file_column: str | None
    ) -> None:
        self.rules = rules
        self.where = where
        self.keys = keys
        self.first_key, self.last_key = shard.first_key, shard.last_key
        self.file_column = file_column
        self.member_column = file_column or "file_name"
        self.allowed = rules.declared | {self.member_column} if rules.typed else None
        self.previous = ""
        self.extensions: set[str] = set()  # of the members met so far, each matched by EXT_RE

    def problem(self, row: dict[str, Any]) -> str | None:
        """Why ``row`` does not agree with the manifest (None: it does). Call once per row, in order."""
        key = row.get("key")
        if type(key) is not str or not KEY_RE.fullmatch(key):
            return f"key {key!r} is not 8 to 128 lowercase hex digits" if "key" in row else "no key"
        if not self.keys.holds(key):
            return f"key {key} is not in {self.keys.words()}"
        if not self.first_key <= key <= self.last_key:
            return f"key {key} is not within the shard's keys in shards.json ({self.first_key}..{self.last_key})"
        if key <= self.previous:
            return f"key {key} is not above the previous row's ({self.previous})"
        self.previous = key
        member = row.get(self.member_column)
        if self.file_column is not None:  # {"bytes", "path"}: the name is its path
            member = member.get("path") if type(member) is dict else member
        if type(member) is not str:
            return f"its file has no name ({self.member_column!r} is {_kind(member)})"
        dot = member.rfind(".")
        ext = member[dot:] if dot > member.rfind("/") else ""  # os.path.splitext's, for names shardkit writes
        if member != self.rules.fmt.member_name(key, ext) or (ext not in self.extensions and not self._extension(ext)):
            return f"its member {member!r} is not where key {key} belongs: {self.rules.fmt.member_template}"
        allowed = self.allowed
        if allowed is None:  # a manifest without features: nothing to hold the columns to
            return None
        if not allowed.issuperset(row):
            return f"column {sorted(set(row) - allowed)[0]!r}, which the features do not declare"
        rules = self.rules
        get = row.get
        for types, names in rules.groups:
            if not types.issuperset(map(type, map(get, names))):
                return self._column_problem(row)
        # JSON holds integers of any size, an int64 64 bits (-2**63 too, which this sends to the slow path).
        if rules.ints and max(map(abs, filter(None, map(get, rules.ints))), default=0) > _INT64_MAX:
            return self._column_problem(row)
        if rules.floats:  # NaN or an infinity makes the sum one (so may a sum past 1.8e308: then checked one by one)
            try:
                total = sum(filter(None, map(get, rules.floats)))
            except OverflowError:  # an integer too large for a float (manifests before layout 4)
                return self._column_problem(row)
            if total - total != 0.0:
                return self._column_problem(row)
        for name, check in rules.others:
            if (problem := check(get(name))) is not None:
                return f"column {name!r}: {problem}"
        return None

    def _extension(self, ext: str) -> bool:
        """Whether ``ext`` is an extension shardkit publishes (those seen are remembered)."""
        if EXT_RE.fullmatch(ext):
            self.extensions.add(ext)
            return True
        return False

    def _column_problem(self, row: dict[str, Any]) -> str | None:
        for name, check in self.rules.value_checks.items():
            if (problem := check(row.get(name))) is not None:
                return f"column {name!r}: {problem}"
        return None

    def rows(self, rows: Iterator[dict[str, Any]], first: int) -> Iterator[dict[str, Any]]:
        """``rows`` (row ``first`` of the shard on, 0-based), each checked before it is passed on:
        one that does not agree is a :class:`.formats.ShardFormatError` naming the shard and row."""
        for number, row in enumerate(rows, first + 1):
            if (problem := self.problem(row)) is not None:
                key = row.get("key")
                named = f" (key {key})" if type(key) is str and KEY_RE.fullmatch(key) else ""
                raise ShardFormatError(
                    f"{self.where}: row {number}{named}{source_note(row.get(SOURCE_PATH_COLUMN))}: {problem}"
                )
            yield row
