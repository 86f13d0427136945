"""Read packed datasets with one venv's ``datasets``; print every row's bytes digest and typed fields.

Run as a script by tests/test_compat.py with each venv's Python (datasets 3.6, 4.0, 5.x): it
imports nothing from the project but ``shardkit`` (for the ``shardkit`` reader cells), so it
works wherever that venv is. Standard input is a JSON list of cells::

    {"id": "...", "reader": "builtin" | "script" | "shardkit", "path": folder, repo id or script,
     "streaming": bool, "modality": "image" | "audio", "repeat": 2}

Standard output is one JSON object: cell id -> {"runs": [{"n_shards", "rows", "seconds"} or
{"error"}], "version"}. Each run has a cache folder of its own (the failures this catches were
intermittent: datasets picked the shard it inferred types from differently from run to run).
``rows`` maps each key to the sha256 of its file and its fields as ``typed`` gives them: the
value with its Python type, so ``2`` and ``2.0`` differ.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
import tempfile
import time
import traceback
from typing import Any


def typed(value: Any) -> Any:
    """A value with its Python type made explicit, so that 2 and 2.0 (or 1 and True) differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return ["list", [typed(v) for v in value]]
    return [type(value).__name__, value]


def file_bytes(value: dict[str, Any]) -> bytes:
    if value.get("bytes") is not None:
        return bytes(value["bytes"])
    import fsspec

    with fsspec.open(value["path"], "rb") as f:
        return f.read()  # type: ignore[no-any-return]


def _undecoded(ds: Any, modality: str) -> Any:
    """``ds`` with every file column cast to ``decode=False`` (bytes and path, as packed)."""
    import datasets

    if isinstance(ds, datasets.IterableDataset) and hasattr(ds, "decode"):
        # datasets 4+: streaming from the Hub, imagefolder's rows ignored cast_column(decode=False) in 5.2
        return ds.decode(False)
    feature = datasets.Image(decode=False) if modality == "image" else datasets.Audio(decode=False)
    for name, current in (ds.features or {}).items():
        if type(current).__name__ in ("Image", "Audio"):
            ds = ds.cast_column(name, feature)
    return ds


def _is_file_feature(feature: Any) -> bool:
    """An Image or Audio column, or the {bytes, path} struct shardkit.stream gives without torchcodec."""
    if type(feature).__name__ in ("Image", "Audio"):
        return True
    return isinstance(feature, dict) and set(feature) == {"bytes", "path"}


def _load(cell: dict[str, Any], cache: str) -> Any:
    import datasets

    if cell["reader"] == "shardkit":
        import shardkit

        return shardkit.stream(cell["path"])
    kwargs: dict[str, Any] = {"split": "train", "streaming": cell["streaming"], "cache_dir": cache}
    if cell["reader"] == "script":
        kwargs["trust_remote_code"] = True
        if cell.get("revision"):
            kwargs["revision"] = cell["revision"]
    return datasets.load_dataset(cell["path"], **kwargs)


def read_cell(cell: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compat-cache-") as cache:
        ds = _load(cell, cache)
        n_shards = getattr(ds, "n_shards", None) if cell["streaming"] else None
        ds = _undecoded(ds, cell["modality"])
        file_columns = [n for n, f in (ds.features or {}).items() if _is_file_feature(f)]
        rows: dict[str, Any] = {}
        duplicates = 0
        for row in ds:
            files = [row[c] for c in file_columns if row[c] is not None]
            fields = {k: v for k, v in row.items() if k not in file_columns and k not in ("__key__", "__url__")}
            if list(fields) == ["json"]:  # webdataset builder: the row's metadata line as a struct
                fields = {k: v for k, v in fields["json"].items() if k != "file_name"}
            if len(files) != 1:
                raise AssertionError(f"row {fields.get('key')!r} has {len(files)} files: {files}")
            key = fields["key"]
            duplicates += key in rows
            rows[key] = {"sha256": hashlib.sha256(file_bytes(files[0])).hexdigest(), "fields": typed(fields)}
        return {
            "n_shards": n_shards,
            "rows": rows,
            "duplicates": duplicates,
            "seconds": time.perf_counter() - started,
        }


def main() -> None:
    import datasets

    cells = json.load(sys.stdin)
    out: dict[str, Any] = {}
    for cell in cells:
        runs = []
        for _ in range(cell.get("repeat", 1)):
            try:
                runs.append(read_cell(cell))
            except Exception as exc:
                runs.append({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2500:]})
        out[cell["id"]] = {"runs": runs, "version": datasets.__version__}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
    gc.freeze()  # the exit's last collection of every object datasets made is left out: the output is written
