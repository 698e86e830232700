#!/usr/bin/env bash
# The preregistered replication of plan.json, resumable and split over two processes: each chunk
# is run as two shards of one command (`--shard 1/2`, `2/2`: the chosen groups of even and odd
# index, each in a cache of its own beside cache.jsonl), their caches are joined
# (`oar recall merge`, checked) and the unsharded command reads every group back from the join.
# Every group of answers, every group's attribution and every step boundary's continuation
# rewards are appended to a shard's cache as soon as they are made, and a rerun reads back what
# the caches hold. It analyses 4 groups (16 traces) more per chunk until the family (traces of
# at least 5 steps) holds WANT traces (74, the plan's), then runs the analysis once. Before the
# stop it keeps only counts: each chunk's report is read for its counts (progress.json) and
# deleted unread. From the repository root:
#   nohup bash docs/experiments/advantage/replication/run.sh > docs/experiments/advantage/replication/run.log 2>&1 &
# `run.sh N` stops once N traces are in the family (the plan's early stop: at least 42).
set -euo pipefail
OAR=${OAR:-oar}
PYTHON=${PYTHON:-python3}
DIR=docs/experiments/advantage/replication
WANT=${1:-74}
ARGS=(--model smollm2-135m --data $DIR/questions.jsonl --seed 1 --group-samples 4 --continuations 16
      --temperature 0.7 --max-new-tokens 128 --min-steps 5 --label all
      --methods oar_p_step oar_p_hier oar_p oar_g entropy random --oar-g-n-noise 8)
SHARDS=("$DIR/cache.shard-1-of-2.jsonl" "$DIR/cache.shard-2-of-2.jsonl")
count() {  # the counts of a chunk's report, nothing else of it; the report is deleted
  $PYTHON - "$DIR" <<'PY'
import json, os, sys
folder = sys.argv[1]
report = json.load(open(f"{folder}/.chunk.json"))
keep = {"n": report["n"], "n_labelled": report["n_labelled"], "family": report["n_scored"],
        "groups": report["groups"]}
os.remove(f"{folder}/.chunk.json")
json.dump(keep, open(f"{folder}/progress.json", "w"), indent=1)
print(keep["family"])
PY
}
joined() {  # the shards' caches joined into cache.jsonl (a new file each time)
  rm -f $DIR/cache.jsonl
  $OAR recall merge $DIR/cache.jsonl "${SHARDS[@]}" >&2
}
for n in $(seq 16 16 400); do
  # each shard's own report holds outcomes of its share: it is not kept
  OMP_NUM_THREADS=1 $OAR recall advantage "${ARGS[@]}" --n $n --shard 1/2 --cf-cache $DIR/cache.jsonl --json --no-progress > /dev/null &
  first=$!
  OMP_NUM_THREADS=1 $OAR recall advantage "${ARGS[@]}" --n $n --shard 2/2 --cf-cache $DIR/cache.jsonl --json --no-progress > /dev/null &
  second=$!
  wait $first
  wait $second
  joined
  $OAR recall advantage "${ARGS[@]}" --n $n --cf-cache $DIR/cache.jsonl --json --no-progress > $DIR/.chunk.json
  family=$(count)
  echo "replication: $n traces drawn, $family in the family $(date -u +%FT%TZ)"
  [ "$family" -ge "$WANT" ] && break
done
$OAR recall advantage "${ARGS[@]}" --n $n --cf-cache $DIR/cache.jsonl --json --no-progress > $DIR/replication.json.part
mv $DIR/replication.json.part $DIR/replication.json
$PYTHON -m oar_attrib.analysis.preregistered $DIR/plan.json $DIR/replication.json
