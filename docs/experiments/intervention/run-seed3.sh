#!/usr/bin/env bash
# The placebo check of README.md ("A rerun at other seeds"): the SmolLM2 run again at seed 3
# (other questions, other continuation seeds), everything else as run.sh. Resumable and split
# over two single-thread processes (`--shard 1/2`, `2/2`, each in a cache of its own beside
# seed3-cache.jsonl), joined (`oar recall merge`, checked) and read back once. From the
# repository root:
#   nohup bash docs/experiments/intervention/run-seed3.sh > docs/experiments/intervention/seed3.log 2>&1 &
set -euo pipefail
OAR=${OAR:-oar}
DIR=docs/experiments/intervention
ARGS=(--model smollm2-135m --data wordworld:tiny --n 240 --seed 3 --continuations 16 --temperature 0.7
      --negative placebo)
for k in 1 2; do
  OMP_NUM_THREADS=1 $OAR recall intervention "${ARGS[@]}" --shard $k/2 --cf-cache $DIR/seed3-cache.jsonl \
      --json --no-progress > /dev/null &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
rm -f $DIR/seed3-cache.jsonl
$OAR recall merge $DIR/seed3-cache.jsonl $DIR/seed3-cache.shard-1-of-2.jsonl $DIR/seed3-cache.shard-2-of-2.jsonl
$OAR recall intervention "${ARGS[@]}" --cf-cache $DIR/seed3-cache.jsonl --json > $DIR/seed3.json.part
mv $DIR/seed3.json.part $DIR/seed3.json
$OAR recall intervention "${ARGS[@]}" --cf-cache $DIR/seed3-cache.jsonl --no-progress
