#!/usr/bin/env bash
# The project's test command (README): creates .venv if needed, installs the project with its
# test/dev extras, then runs lint, types and the whole test suite (unit, property, integration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_system_deps.sh
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
PYTHON=.venv/bin/python bash scripts/install_emulators.sh   # azurite (npm), emulator clients
.venv/bin/ruff check .
.venv/bin/mypy
# The core installs and works alone: a throwaway venv, `pip install .` with no extras (plus the
# test runner), then the unit tier (tests/unit) run against the installed copy (-P: not the
# source tree) without pylance, pyspark, obstore or numpy. An undeclared import fails here.
# (tests/property runs below with everything; it needs nothing beyond the core either.)
CORE_TMP="$(mktemp -d)"
trap 'rm -rf "$CORE_TMP"' EXIT
"$PY" -m venv "$CORE_TMP/venv"
"$CORE_TMP/venv/bin/python" -m pip install -q --disable-pip-version-check \
  . pytest pytest-xdist pytest-timeout hypothesis
if "$CORE_TMP/venv/bin/python" -P -c "import lance" 2>/dev/null; then
  echo "core check: pylance must not come with a plain 'pip install .'" >&2; exit 1
fi
"$CORE_TMP/venv/bin/python" -P -m pytest -n 2 -p no:cacheprovider tests/unit
# Everything, with every extra (historical fixtures: scripts/gen_historical_fixtures.py, cached).
# --dist loadgroup: the Spark standalone-cluster tests share one xdist worker (one cluster).
.venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
