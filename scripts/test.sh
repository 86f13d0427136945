#!/usr/bin/env bash
# The whole check: lint (ruff), types (mypy), and every test (pytest). Sets itself up.
set -euo pipefail
source "$(dirname "$0")/setup-venv.sh"
cd "$ROOT"
echo "== ruff" && ruff check src tests bench scripts example_datasets && ruff format --check src tests bench scripts example_datasets
echo "== mypy" && mypy
echo "== pytest" && python -m pytest -q "$@"
