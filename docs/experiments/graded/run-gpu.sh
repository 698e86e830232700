#!/usr/bin/env bash
# The graded-oracle runs at GPU size: a 0.5-1.5B model (a local checkpoint folder or a
# catalogue name), 200 word problems and 200 GSM8K questions, 24 positions x 16 replacements.
# Resumable like run.sh (each cache is keyed by the model's weights, so another model starts
# its own entries). Not run here (no GPU on the machine these results came from).
#   bash docs/experiments/graded/run-gpu.sh /path/to/Qwen2.5-0.5B-Instruct
set -euo pipefail
MODEL=${1:?usage: run-gpu.sh MODEL_FOLDER_OR_NAME}
OAR=${OAR:-oar}
OUT=docs/experiments/graded/gpu
mkdir -p $OUT
COMMON="--model $MODEL --device cuda --dtype bfloat16 --graded-k 16 --positions 24 --json"
$OAR recall graded $COMMON --data wordworld:tiny --n 200 --max-new-tokens 256 \
    --methods oar_p oar_p_step oar_g grail entropy ig ktae random --group-samples 8 \
    --cf-cache $OUT/words-cache.jsonl > $OUT/words.json
$OAR recall graded $COMMON --data ../shared/data/gsm8k_test.jsonl --n 200 --max-new-tokens 512 \
    --methods oar_p oar_p_step oar_g grail entropy ig ktae random --group-samples 8 \
    --cf-cache $OUT/gsm8k-cache.jsonl > $OUT/gsm8k.json
