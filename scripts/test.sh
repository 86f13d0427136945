#!/usr/bin/env bash
# The whole check: lint (ruff), types (mypy), and every test (pytest). Sets itself up.
# Each step on its own line: under `set -e` a failure inside an `a && b` chain would not stop us.
set -euo pipefail
source "$(dirname "$0")/setup-venv.sh"
cd "$ROOT"
LINTED=(src tests bench scripts example_datasets)
echo "== ruff"
ruff check "${LINTED[@]}"
ruff format --check "${LINTED[@]}"
echo "== mypy"
mypy
echo "== pytest"
python -m pytest -q "$@"
