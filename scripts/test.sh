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
.venv/bin/python -m pytest -n 2 "$@"
