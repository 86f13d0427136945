# Sourced by the other scripts: make a venv (once) and install shardkit into it, by default
# .venv/ with the test and bench tools (scripts/test.sh). A script that needs less says so before
# sourcing this: SETUP_VENV_NAME (the folder, in the clone) and SETUP_EXTRAS (pyproject's extras,
# "" for none); scripts/demo.sh makes .venv-demo/ with shardkit alone.
# Needs only python3 (>= 3.10) with venv and pip, and the package registry.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${SHARDKIT_VENV:-$ROOT/${SETUP_VENV_NAME:-.venv}}"
SETUP_EXTRAS="${SETUP_EXTRAS-[test,bench]}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
# Two more environments for the readers' compatibility tests (tests/test_compat.py): datasets 3.6,
# the last release that runs loading scripts, with shardkit in it (shardkit.stream must work
# there too), and datasets 4.0, the first without scripts. Both keep the other pins of
# constraints.txt. Set SHARDKIT_SKIP_OLD_DATASETS=1 to skip them (the demo does).
# Their packages install while the main venv's do (two pip processes keep two cores busy: minutes
# off a fresh clone's set-up); shardkit's own editable install into the 3.6 venv waits for the
# main one's, as both write src/shardkit.egg-info.
# pip installs without compiling (--no-compile): pip compiles every file of every package in one
# process, about two minutes of a fresh set-up. compile_venv does it with every core instead, as
# soon as a venv's packages are in (whatever PYTHONDONTWRITEBYTECODE says, the tests' processes
# then find every module compiled). Some packages ship files that are not Python 3 (templates,
# examples): compileall's complaints about them are not failures of the set-up.
PIP_INSTALL=(-m pip install --quiet --disable-pip-version-check --no-compile)
compile_venv() {
    "$1/bin/python" -m compileall -q -j 0 \
        "$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
}
OLD_INSTALLS=()
if [ -z "${SHARDKIT_SKIP_OLD_DATASETS:-}" ]; then
    OLD_CONSTRAINTS="$VENV/old-datasets-constraints.txt"
    grep -vE '^(datasets|fsspec)==' "$ROOT/.ci/constraints.txt" > "$OLD_CONSTRAINTS"
    VENV36="${SHARDKIT_VENV36:-$ROOT/.venv-ds36}"
    VENV40="${SHARDKIT_VENV40:-$ROOT/.venv-ds40}"
    for venv in "$VENV36" "$VENV40"; do
        if [ ! -x "$venv/bin/python" ]; then
            "$PYTHON" -m venv "$venv"
        fi
    done
    # (stopped with this script if it fails before waiting for them)
    trap 'kill "${OLD_INSTALLS[@]}" 2> /dev/null || true' EXIT
    ("$VENV36/bin/python" "${PIP_INSTALL[@]}" -c "$OLD_CONSTRAINTS" "datasets==3.6.0" && compile_venv "$VENV36") &
    OLD_INSTALLS+=($!)
    ("$VENV40/bin/python" "${PIP_INSTALL[@]}" -c "$OLD_CONSTRAINTS" "datasets==4.0.0" pillow soundfile \
        && compile_venv "$VENV40") &
    OLD_INSTALLS+=($!)
fi

# SHARDKIT_VENV_READY=1: the venv already has shardkit and its tools (tests/test_demo.py runs the
# demo in the venv running the tests, which must not be re-installed from under it).
# The install is editable (a change to src/ needs none), so a venv installed from the same
# pyproject.toml, constraints and extras is not installed again: pip's no-op run costs ~13 s.
INSTALLED_FROM="$("$VENV/bin/python" -c 'import hashlib, sys; print(hashlib.sha256(b"".join(open(p, "rb").read() for p in sys.argv[1:])).hexdigest())' \
    "$ROOT/pyproject.toml" "$ROOT/.ci/constraints.txt") $SETUP_EXTRAS"
if [ -z "${SHARDKIT_VENV_READY:-}" ] && [ "$(cat "$VENV/.installed-from" 2>/dev/null)" != "$INSTALLED_FROM" ]; then
    "$VENV/bin/python" "${PIP_INSTALL[@]}" -c "$ROOT/.ci/constraints.txt" -e "$ROOT$SETUP_EXTRAS"
    compile_venv "$VENV"
    echo "$INSTALLED_FROM" > "$VENV/.installed-from"
fi
export PATH="$VENV/bin:$PATH"

if [ -z "${SHARDKIT_SKIP_OLD_DATASETS:-}" ]; then
    for pid in "${OLD_INSTALLS[@]}"; do
        wait "$pid"  # (under set -e, a failed install stops here)
    done
    trap - EXIT
    "$VENV36/bin/python" "${PIP_INSTALL[@]}" -c "$OLD_CONSTRAINTS" "datasets==3.6.0" -e "$ROOT"
    export SHARDKIT_DS36_PYTHON="$VENV36/bin/python" SHARDKIT_DS40_PYTHON="$VENV40/bin/python"
fi
