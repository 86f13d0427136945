# Sourced by the other scripts: make .venv (once) and install shardkit into it with the test tools.
# Needs only python3 (>= 3.10) with venv and pip, and the package registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${SHARDKIT_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$ROOT/.ci/constraints.txt" -e "$ROOT[test,bench]"
export PATH="$VENV/bin:$PATH"

# A second environment with datasets 3.6, the last release that runs loading scripts: the tests
# load the template's script with it (set SHARDKIT_SKIP_DS36=1 to skip building it, e.g. for the demo).
if [ -z "${SHARDKIT_SKIP_DS36:-}" ]; then
    VENV36="${SHARDKIT_VENV36:-$ROOT/.venv-ds36}"
    if [ ! -x "$VENV36/bin/python" ]; then
        "$PYTHON" -m venv "$VENV36"
    fi
    "$VENV36/bin/python" -m pip install --quiet --disable-pip-version-check "datasets==3.6.0" "pillow>=10"
    export SHARDKIT_DS36_PYTHON="$VENV36/bin/python"
fi
