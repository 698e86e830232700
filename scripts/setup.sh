#!/usr/bin/env bash
# Creates .venv and installs oar-attrib with its test extras. Torch is pinned first to the CPU
# build (an unpinned torch would pull several GB of CUDA packages); on a GPU machine install
# the torch build you need before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
