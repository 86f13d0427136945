"""Read a dataset back with a real ``datasets`` (5.x in this venv, 3.6 in .venv-ds36) in a subprocess.

A subprocess, because each datasets version lives in its own venv, and because huggingface_hub
reads ``HF_ENDPOINT`` once, at import. The result is every row as (key, sha256 of the file
bytes, the other fields as JSON), sorted, so tests compare whole datasets at once. A webdataset
row (file column named by its extension, fields in ``json``, plus ``__key__``/``__url__``) is
flattened to the same shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.corpus import EXAMPLE_DIR, REPO_ROOT

# datasets 3.6 (the last that runs loading scripts) and 4.0 (the first without), each in its own
# venv: scripts/test.sh (scripts/setup-venv.sh) makes them, or these variables point at others.
DS36_PYTHON = os.environ.get("SHARDKIT_DS36_PYTHON", str(REPO_ROOT / ".venv-ds36" / "bin" / "python"))
DS40_PYTHON = os.environ.get("SHARDKIT_DS40_PYTHON", str(REPO_ROOT / ".venv-ds40" / "bin" / "python"))


def missing_old_datasets() -> list[str]:
    """The venvs of older datasets this machine lacks (the tests that read with them fail)."""
    return [python for python in (DS36_PYTHON, DS40_PYTHON) if not os.path.exists(python)]


DIGEST_SCRIPT = r"""
import hashlib, json, sys
import datasets
from datasets import load_dataset

path, streaming, column, cache, kwargs = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
kwargs = json.loads(kwargs)
if path.endswith(".py"):
    kwargs["trust_remote_code"] = True
ds = load_dataset(path, split="train", streaming=streaming, cache_dir=cache, **kwargs)
shards = ds.n_shards if streaming else None
ds = ds.cast_column(column, datasets.Image(decode=False))
rows = []
for row in ds:
    data = row[column]["bytes"]
    if data is None:
        import fsspec
        with fsspec.open(row[column]["path"], "rb") as f:
            data = f.read()
    fields = {k: v for k, v in row.items() if k not in (column, "__key__", "__url__")}
    if list(fields) == ["json"]:  # the webdataset builder: the metadata line, file_name included
        fields = {k: v for k, v in fields["json"].items() if k != "file_name"}
    rows.append([fields["key"], hashlib.sha256(data).hexdigest(), json.dumps(fields, sort_keys=True)])
print(json.dumps({"version": datasets.__version__, "n_shards": shards, "rows": sorted(rows)}))
"""


def expected_rows() -> list[list[str]]:
    """The shipped example dataset's rows, as :func:`read_with` reports them."""
    rows = []
    for line in (EXAMPLE_DIR / "metadata.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        data = (EXAMPLE_DIR / "images" / row.pop("file_name")).read_bytes()
        rows.append([row["key"], hashlib.sha256(data).hexdigest(), json.dumps(row, sort_keys=True)])
    return sorted(rows)


def read_with(
    python: str,
    path: Path | str,
    streaming: bool,
    cache: Path,
    *,
    env: dict[str, str] | None = None,
    column: str = "image",
    **load_kwargs: Any,
) -> dict[str, Any]:
    """``load_dataset(path, **load_kwargs)`` with ``python``; ``.py`` paths get ``trust_remote_code``."""
    args = [python, "-c", DIGEST_SCRIPT, str(path), "1" if streaming else "0", column, str(cache)]
    # A loading script's module is cached by its code, with the README.md beside it when it was
    # first loaded: two datasets packed with the same features would share one card's split sizes.
    env = {**(os.environ if env is None else env), "HF_MODULES_CACHE": str(cache / "modules")}
    result = subprocess.run(
        [*args, json.dumps(load_kwargs)], capture_output=True, text=True, check=False, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_reader(
    python: str, reader: Path, cells: list[dict[str, Any]], env: dict[str, str] | None, timeout: float
) -> Any:
    """Run a reader script (tests/compat_reader.py, tests/splits_reader.py) with a venv's
    ``python`` over ``cells`` given as JSON on stdin; its last stdout line is the JSON result."""
    assert Path(python).exists(), f"{python} missing: scripts/test.sh builds it"
    result = subprocess.run(
        [python, str(reader)],
        input=json.dumps(cells),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def split_problems(where: str, got: dict[str, Any], expected: dict[str, Any], names: Any) -> list[str]:
    """What differs between one split as tests/splits_reader.py read it (``got``) and the rows
    it must hold (``expected``: row id -> file digest and typed fields), class names included;
    each problem starts with ``where``. Rows are compared one by one, and only the first
    differing row is named."""
    problems = []
    if got["repeats"]:
        problems.append(f"{where}: {got['repeats']} rows more than once")
    if got["names"] != names:
        problems.append(f"{where}: class names {got['names']}, expected {names}")
    if set(got["rows"]) != set(expected):
        missing, extra = set(expected) - set(got["rows"]), set(got["rows"]) - set(expected)
        return [*problems, f"{where}: rows differ: missing {sorted(missing)[:3]}, extra {sorted(extra)[:3]}"]
    for row_id, row in expected.items():
        if got["rows"][row_id] != row:
            problems.append(f"{where}: row {row_id}: got {got['rows'][row_id]}, expected {row}")
            break
    return problems
