#!/usr/bin/env bash
# One prepared GPU run of the benchmarks (bench/gpu.py; docs/benchmarks.md, "One prepared GPU run").
#   bash bench/gpu.sh --prepare     here, with network: the wheels and the model parts to carry
#   bash bench/gpu.sh --dry-run     here: arguments, bench scripts and flags, the file plan (seconds)
#   bash bench/gpu.sh --stash       on the GPU machine, call 1: keeps part 1 of the model
#   bash bench/gpu.sh [--out PATH]  on the GPU machine, call 2: the stages, one JSON ($OUT/gpu.json)
# Python: $PYTHON when set, else the project's .venv where there is one, else the python3 on the
# PATH (on the GPU machine, the one that holds torch).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
exec "$PY" bench/gpu.py "$@"
