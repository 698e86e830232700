#!/usr/bin/env bash
# The intervention control on SmolLM2-135M-Instruct (README.md), resumable: the model's answers
# and every prefix's continuation rewards are appended to the cache as soon as they are made, and
# a rerun reads back what the cache holds. From the repository root:
#   OMP_NUM_THREADS=2 nohup bash docs/experiments/intervention/run.sh > docs/experiments/intervention/run.log 2>&1 &
set -euo pipefail
OAR=${OAR:-oar}
DIR=docs/experiments/intervention
$OAR recall intervention --model smollm2-135m --data wordworld:tiny --n 240 --seed 2 --continuations 16 \
    --temperature 0.7 --negative placebo --cf-cache $DIR/smollm2-cache.jsonl --json > $DIR/smollm2.json.part
mv $DIR/smollm2.json.part $DIR/smollm2.json
$OAR recall intervention --model smollm2-135m --data wordworld:tiny --n 240 --seed 2 --continuations 16 \
    --temperature 0.7 --negative placebo --cf-cache $DIR/smollm2-cache.jsonl --no-progress
