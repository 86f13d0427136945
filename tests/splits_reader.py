"""Read every split of packed datasets with one venv's ``datasets``; print each row's bytes digest,
typed fields and class names.

Run as a script by tests/test_splits_labels.py and tests/test_update.py with each venv's Python
(datasets 3.6 or 5.x), like tests/compat_reader.py, whose :func:`typed` it shares. Standard
input is a JSON list of cells::

    {"id": "...", "reader": "builtin" | "script" | "shardkit", "path": folder, repo id or script,
     "revision": str | null, "streaming": bool, "splits": ["train", ...], "data_dir": optional}

Standard output is one JSON object: {"version", "cells": {cell id: {split: {"rows", "names",
"n_shards", "repeats"} or {"error", "traceback"}}}}. ``rows`` maps each row's ``source_path``
(its ``key`` without one) to the sha256 of its file, its fields as ``typed`` gives them, and
``labels``: each ClassLabel column's value as ``int2str`` names it (None for -1, no label). ``names``
maps each ClassLabel column to its ``names``. A webdataset row (file column per extension,
fields in ``json``) is flattened to the same shape.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
import tempfile
import traceback
from typing import Any

from compat_reader import _is_file_feature, _undecoded, file_bytes, typed


def _load(cell: dict[str, Any], split: str, cache: str) -> Any:
    import datasets

    if cell["reader"] == "shardkit":
        import shardkit

        return shardkit.stream(cell["path"], split=split, revision=cell.get("revision"))
    kwargs: dict[str, Any] = {"split": split, "streaming": cell["streaming"], "cache_dir": cache}
    if cell["reader"] == "script":
        kwargs["trust_remote_code"] = True
    if cell.get("revision"):
        kwargs["revision"] = cell["revision"]
    if cell.get("data_dir"):  # the loading script reads the repository there (a folder or a URL)
        kwargs["data_dir"] = cell["data_dir"]
    return datasets.load_dataset(cell["path"], **kwargs)


def _class_labels(features: Any) -> dict[str, Any]:
    """The ClassLabel features by column, also inside a webdataset row's ``json`` struct."""
    found = {name: f for name, f in features.items() if type(f).__name__ == "ClassLabel"}
    inner = features.get("json")
    if isinstance(inner, dict):
        found.update({name: f for name, f in inner.items() if type(f).__name__ == "ClassLabel"})
    return found


def read_split(cell: dict[str, Any], split: str, cache: str) -> dict[str, Any]:
    ds = _load(cell, split, cache)
    n_shards = getattr(ds, "n_shards", None) if cell["streaming"] else None
    ds = _undecoded(ds, "image")
    labels = _class_labels(ds.features)
    file_columns = [n for n, f in ds.features.items() if _is_file_feature(f)]
    rows: dict[str, Any] = {}
    repeats = 0
    for row in ds:
        files = [row[c] for c in file_columns if row[c] is not None]
        fields = {k: v for k, v in row.items() if k not in file_columns and k not in ("__key__", "__url__")}
        if list(fields) == ["json"]:  # the webdataset builder: the row's metadata line as a struct
            fields = {k: v for k, v in fields["json"].items() if k != "file_name"}
        if len(files) != 1:
            raise AssertionError(f"row {fields.get('key')!r} has {len(files)} files")
        name = fields.get("source_path") or fields["key"]
        repeats += name in rows
        rows[name] = {
            "sha256": hashlib.sha256(file_bytes(files[0])).hexdigest(),
            "fields": typed(fields),
            "labels": {c: None if fields[c] in (None, -1) else f.int2str(fields[c]) for c, f in labels.items()},
        }
    return {
        "rows": rows,
        "names": {c: list(f.names) for c, f in labels.items()},
        "n_shards": n_shards,
        "repeats": repeats,
    }


def main() -> None:
    import datasets

    cells = json.load(sys.stdin)
    out: dict[str, Any] = {}
    for cell in cells:
        got: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="splits-cache-") as cache:
            for split in cell["splits"]:
                try:
                    got[split] = read_split(cell, split, cache)
                except Exception as exc:
                    got[split] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2500:]}
        out[cell["id"]] = got
    print(json.dumps({"version": datasets.__version__, "cells": out}))


if __name__ == "__main__":
    main()
    gc.freeze()  # the exit's last collection of every object datasets made is left out: the output is written
