#!/usr/bin/env bash
# The whole check: lint (ruff), types (mypy), the docs site (mkdocs), and every test (pytest). Sets itself up.
# Its exit code is pytest's, or 1 where only mypy failed.
# Each step on its own line: under `set -e` a failure inside an `a && b` chain would not stop us.
set -euo pipefail
source "$(dirname "$0")/setup-venv.sh"
cd "$ROOT"
LINTED=(src tests bench scripts example_datasets)
echo "== ruff"
ruff check "${LINTED[@]}"
ruff format --check "${LINTED[@]}"
# mypy runs beside the docs step and the tests, its output after theirs: alone first, it was a
# step of its own on one core in a fresh clone's run (no cache).
MYPY_LOG="$(mktemp)"
mypy > "$MYPY_LOG" 2>&1 &
MYPY_PID=$!
trap 'kill "$MYPY_PID" 2> /dev/null || true; rm -f "$MYPY_LOG"' EXIT
echo "== docs"
# The docs site (mkdocs.yml, into build/site/): --strict fails on a link to a missing page or heading.
mkdocs build --strict
echo "== pytest"
# The tests start hundreds of Python processes (the CLI, other venvs' readers); where the
# environment sets PYTHONDONTWRITEBYTECODE, each would compile shardkit's modules again. Compiled
# once here instead; never the template, whose folder cookiecutter copies into new repos.
python -m compileall -q -x '/templates/' src/shardkit tests > /dev/null
# Three processes (pytest-xdist) on CI's two cores: a test spends much of its time waiting on the
# processes and servers it starts, and the others' tests run meanwhile (with two, an eighth of the
# cores' time went unused; docs/performance.md, "Test time"). Each test file
# goes whole to one process, longest files first (tests/conftest.py's LONGEST_FIRST): a file's
# module fixtures are then made once, not once in each. Options given
# to this script come after and win (`-n 0` runs the tests in this one process, as plain pytest does).
# `bash scripts/test.sh -m "not slow"` is the fast subset (under 3 minutes on 2 cores): it leaves
# out the tests marked slow (pyproject.toml's markers), which this whole check runs too.
STATUS=0
python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder "$@" || STATUS=$?
echo "== mypy"
wait "$MYPY_PID" || STATUS=1
cat "$MYPY_LOG"
exit "$STATUS"
