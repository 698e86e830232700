#!/usr/bin/env bash
# The graded-oracle runs of docs/experiments/graded/README.md, resumable: every answer, score,
# KTAE group and oracle is appended to the data set's cache as soon as it is made, and a rerun
# reads back what the cache holds. Each data set runs in chunks of 10 traces (each chunk's JSON
# covers every trace so far). From the repository root, one process per data set:
#   OMP_NUM_THREADS=1 nohup nice -n 10 bash docs/experiments/graded/run.sh words > docs/experiments/graded/words.log 2>&1 &
#   OMP_NUM_THREADS=1 nohup nice -n 10 bash docs/experiments/graded/run.sh gsm8k > docs/experiments/graded/gsm8k.log 2>&1 &
set -euo pipefail
OAR=${OAR:-oar}
OUT=docs/experiments/graded
COMMON="--model smollm2-135m --graded-k 8 --positions 8 --oar-g-n-noise 8 --json"

case "${1:?usage: run.sh words|gsm8k}" in
  words)
    for n in 10 20 30 40 50; do
      $OAR recall graded $COMMON --data wordworld:tiny --n $n --max-new-tokens 160 \
          --methods oar_p oar_p_step oar_g grail entropy ig ktae random --group-samples 8 \
          --cf-cache $OUT/words-cache.jsonl > $OUT/words.json.part
      mv $OUT/words.json.part $OUT/words.json
      echo "word problems: $n traces done $(date -u +%FT%TZ)"
    done ;;
  gsm8k)
    # KTAE is left out: the model answers none of these questions right (0 of 30 greedy,
    # docs/experiments/gsm8k/), so every group would be all wrong and KTAE's values all 0.
    for n in 10 20 30; do
      $OAR recall graded $COMMON --data ../shared/data/gsm8k_test.jsonl --n $n --max-new-tokens 256 \
          --methods oar_p oar_p_step oar_g grail entropy ig random \
          --cf-cache $OUT/gsm8k-cache.jsonl > $OUT/gsm8k.json.part
      mv $OUT/gsm8k.json.part $OUT/gsm8k.json
      echo "GSM8K: $n traces done $(date -u +%FT%TZ)"
    done ;;
  *) echo "usage: run.sh words|gsm8k" >&2; exit 2 ;;
esac
