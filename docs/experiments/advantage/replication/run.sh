#!/usr/bin/env bash
# The preregistered replication of plan.json, resumable: every group of answers, every group's
# attribution and every step boundary's continuation rewards are appended to cache.jsonl as
# soon as they are made, and a rerun reads back what the cache holds. It analyses 4 groups (16
# traces) more per chunk until the family (traces of at least 5 steps) holds WANT traces (74,
# the plan's), then runs the analysis once. Before the stop it keeps only counts: each chunk's
# report is read for its counts (progress.json) and deleted unread. From the repository root:
#   OMP_NUM_THREADS=2 nohup bash docs/experiments/advantage/replication/run.sh > docs/experiments/advantage/replication/run.log 2>&1 &
# `run.sh N` stops once N traces are in the family (the plan's early stop: at least 42).
set -euo pipefail
OAR=${OAR:-oar}
PYTHON=${PYTHON:-python3}
DIR=docs/experiments/advantage/replication
WANT=${1:-74}
ARGS=(--model smollm2-135m --data $DIR/questions.jsonl --seed 1 --group-samples 4 --continuations 16
      --temperature 0.7 --max-new-tokens 128 --min-steps 5 --label all
      --methods oar_p_step oar_p_hier oar_p oar_g entropy random --oar-g-n-noise 8 --cf-cache $DIR/cache.jsonl)
count() {  # the counts of a chunk's report, nothing else of it; the report is deleted
  $PYTHON - "$DIR" "$1" <<'PY'
import json, os, sys
folder, n = sys.argv[1], int(sys.argv[2])
report = json.load(open(f"{folder}/.chunk.json"))
keep = {"n": report["n"], "n_labelled": report["n_labelled"], "family": report["n_scored"],
        "groups": report["groups"]}
os.remove(f"{folder}/.chunk.json")
json.dump(keep, open(f"{folder}/progress.json", "w"), indent=1)
print(keep["family"])
PY
}
for n in $(seq 16 16 400); do
  $OAR recall advantage "${ARGS[@]}" --n $n --json --no-progress > $DIR/.chunk.json
  family=$(count $n)
  echo "replication: $n traces drawn, $family in the family $(date -u +%FT%TZ)"
  [ "$family" -ge "$WANT" ] && break
done
$OAR recall advantage "${ARGS[@]}" --n $n --json --no-progress > $DIR/replication.json.part
mv $DIR/replication.json.part $DIR/replication.json
echo "replication: stopped at $n traces drawn; the analysis is in $DIR/replication.json"
$PYTHON -m oar_attrib.analysis.preregistered $DIR/plan.json $DIR/replication.json
