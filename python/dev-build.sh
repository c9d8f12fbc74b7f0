#!/usr/bin/env bash
# Builds the native extension and installs the package editable into a Python environment
# (default: the interpreter in $PYTHON, else /tmp/torch-venv/bin/python, else python3), with
# maturin and pytest. Python edits under python/streamsan take effect at once; Rust edits need
# this script again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x /tmp/torch-venv/bin/python ]; then PY=/tmp/torch-venv/bin/python; else PY=python3; fi
fi
"$PY" -m pip install -q "maturin>=1.5,<2" "pytest>=7"
# The build backend runs the `maturin` executable installed beside the interpreter.
BIN=$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))')
PATH="$BIN:$PATH" "$PY" -m pip install -q --no-build-isolation -e .
"$PY" -c "import streamsan._native as n; print('streamsan._native', n.__version__, 'in', n.__file__)"
