#!/usr/bin/env bash
# The advantage-oracle run of docs/experiments/advantage/README.md, resumable: every group of
# answers, every group's attribution and every step boundary's continuation rewards are
# appended to the cache as soon as they are made, and a rerun reads back what the cache holds.
# It runs in chunks of 8 traces (2 groups of 4) until 40 of them are scored (a trace with fewer
# than 5 steps is skipped: about 4 in 9 on SmolLM2, so about 72 traces are drawn), at most 120;
# each chunk's JSON covers every trace so far and is committed as it grows. From the repository root:
#   OMP_NUM_THREADS=1 nohup nice -n 10 bash docs/experiments/advantage/run.sh > docs/experiments/advantage/words.log 2>&1 &
# `run.sh N` stops once N traces are scored (whole groups: `run.sh 1` analyses one group of 4, a timing check).
set -euo pipefail
OAR=${OAR:-oar}
PYTHON=${PYTHON:-python3}
OUT=docs/experiments/advantage
WANT=${1:-40}
METHODS="oar_p oar_p_step oar_p_hier oar_g grail entropy ig ktae random"
for n in $(seq 8 8 120); do
  $OAR recall advantage --model smollm2-135m --data wordworld:tiny --n $n \
      --group-samples 4 --continuations 16 --temperature 0.7 --max-new-tokens 128 --min-steps 5 --label scored \
      --methods $METHODS --oar-g-n-noise 8 --cf-cache $OUT/words-cache.jsonl --json > $OUT/words.json.part
  mv $OUT/words.json.part $OUT/words.json
  scored=$($PYTHON -c "import json, sys; print(json.load(open(sys.argv[1]))['n_scored'])" $OUT/words.json)
  echo "word problems: $n traces drawn, $scored scored $(date -u +%FT%TZ)"
  [ "$scored" -ge "$WANT" ] && break
done
