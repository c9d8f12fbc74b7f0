#!/usr/bin/env bash
# The Python package's tests, on a machine without a GPU: makes a virtual environment
# ($STREAMSAN_VENV, default target/py-venv), installs torch from the package registry (its
# CPU-capable default wheel, without triton: the tests run CPU tensors with a stand-in for the
# CUDA hooks), pytest, numpy and expecttest (for torch's OpInfo database) and the package itself
# with `pip install .` (maturin builds the native extension), then runs python/tests twice: with
# the dispatch mode (STREAMSAN_TORCH_NATIVE=0), and with the native recorder, the default (which
# this builds with the machine's C++ compiler on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${STREAMSAN_VENV:-target/py-venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
# No pip cache: torch's CUDA libraries are gigabytes, and CI's disk is not always large.
export PIP_NO_CACHE_DIR=1
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q --no-deps torch
    # Its requirements but triton (1 GB: torch.compile's GPU code generator, which no test
    # here uses) and its optional extras; pip evaluates the platform markers.
    reqs="$VENV/torch-requirements.txt"
    "$PY" -c "
from importlib.metadata import requires
for r in requires('torch'):
    if not r.startswith('triton') and 'extra ==' not in r:
        print(r)" >"$reqs"
    "$PY" -m pip install -q -r "$reqs"
fi
# numpy and expecttest: torch's OpInfo database (python/tests/test_op_db.py) imports them.
# ninja: the native recorder (streamsan/torch/_observer.cpp) is built with torch's extension
# builder, which needs it.
"$PY" -m pip install -q "maturin>=1.5,<2" "pytest>=7" numpy expecttest ninja
"$PY" -m pip install -q --force-reinstall --no-deps .
# From the repository root: the installed package is imported, not python/streamsan.
STREAMSAN_TORCH_NATIVE=0 STREAMSAN_REQUIRE_OP_DB=1 STREAMSAN_REQUIRE_NATIVE=1 \
    "$PY" -m pytest -q -p no:cacheprovider python/tests
# Again with the native recorder (python/tests/conftest.py): the same records are expected.
STREAMSAN_TORCH_NATIVE=1 STREAMSAN_REQUIRE_OP_DB=1 STREAMSAN_REQUIRE_NATIVE=1 \
    "$PY" -m pytest -q -p no:cacheprovider python/tests
