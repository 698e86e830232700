#!/usr/bin/env bash
# The preregistered replication of plan.json, resumable and split over two processes
# (../chunked.sh says how). From the repository root:
#   nohup bash docs/experiments/advantage/replication/run.sh > docs/experiments/advantage/replication/run.log 2>&1 &
# `run.sh N` stops once N traces are in the family (74, the plan's; its early stop: at least 42).
# Once the run is done, a rerun reads every group back from the committed shard caches.
set -euo pipefail
DIR=docs/experiments/advantage/replication
WANT=${1:-74}
ARGS=(--model smollm2-135m --data $DIR/questions.jsonl --seed 1 --group-samples 4 --continuations 16
      --temperature 0.7 --max-new-tokens 128 --min-steps 5 --label all
      --methods oar_p_step oar_p_hier oar_p oar_g entropy random --oar-g-n-noise 8)
source docs/experiments/advantage/chunked.sh
