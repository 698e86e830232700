#!/usr/bin/env bash
# The preregistered second replication of plan.json (token OAR-P and OAR-G), resumable and split
# over two processes (../chunked.sh says how). From the repository root:
#   DEADLINE=$(date -d 'today 14:00 UTC' +%s) nohup bash docs/experiments/advantage/replication-2/run.sh > docs/experiments/advantage/replication-2/run.log 2>&1 &
# It stops once the family holds 46 traces (the plan's), or, when DEADLINE passes, at the end of
# the chunk then running if the family holds at least 30 (the plan's min_traces).
set -euo pipefail
DIR=docs/experiments/advantage/replication-2
WANT=${1:-46}
LEAST=30
ARGS=(--model smollm2-135m --data $DIR/questions.jsonl --seed 3 --group-samples 4 --continuations 16
      --temperature 0.7 --max-new-tokens 128 --min-steps 5 --label scored
      --methods oar_p oar_g oar_p_step random --oar-g-n-noise 8)
source docs/experiments/advantage/chunked.sh
