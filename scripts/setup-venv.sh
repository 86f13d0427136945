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
    -c "$ROOT/.ci/constraints.txt" -e "$ROOT[test]"
export PATH="$VENV/bin:$PATH"
