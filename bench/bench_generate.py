"""`oar eval --data` before and after batched rollouts, side by side in one run: tokens per second.

The same first `--n` GSM8K test problems, each answered greedily and `--samples` times sampled
(what `oar eval --data ... --samples 2` does), by SmolLM2-135M-Instruct (`smollm2-135m`, float32):

- old: the previous loop, still the training callback's (`callbacks.reward_evaluator`): batches
  of 16 in file order, greedy and sampled answers in two `generate` calls, each prompt
  prefilled once per answer (`num_return_sequences` repeats it before the prefill);
- new: `rollouts.sample_groups` as `oar eval` now runs it: batches sorted by prompt length,
  each prompt prefilled once, its cache repeated for the group, the greedy answer decoded in
  the same loop as the sampled ones.

Both stop when every row of a batch has hit EOS. Throughput = generated tokens (each answer
up to and with its EOS, padding not counted) / wall seconds. `--max-new-tokens` is small
(128) so that the old path's run stays short; the ratio grows with it (the old path's
repeated prefills and second decode loop cost more the longer the answers).

    python bench/bench_generate.py                      # 20 problems x (greedy + 2 samples), 128 tokens
    python bench/bench_generate.py --n 8 --max-new-tokens 64 --threads 2
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from oar_attrib import generation, rollouts  # noqa: E402
from oar_attrib.models import load_model  # noqa: E402
from oar_attrib.training import callbacks  # noqa: E402
from oar_attrib.training.data import math_dataset  # noqa: E402
from oar_attrib.training.math_eval import evaluate_math  # noqa: E402
from oar_attrib.training.rewards import math_verify_reward  # noqa: E402
from shared_data import data_file  # noqa: E402


class Counted:
    """Wraps a decode function (-> (R, N) new ids) and counts the generated tokens: each row up
    to and with its first stop id, all N without one."""

    def __init__(self, fn, stop: list[int]):
        self.fn, self.stop, self.tokens = fn, set(stop), 0

    def __call__(self, *args, **kwargs):
        out = self.fn(*args, **kwargs)
        for row in out.tolist():
            end = next((i for i, t in enumerate(row) if t in self.stop), None)
            self.tokens += len(row) if end is None else end + 1
        return out


def run_old(model, tokenizer, path, args) -> tuple[dict, float, int]:
    counted = Counted(generation.continue_rows, generation.stop_ids(model, tokenizer))
    callbacks.continue_rows = counted  # the name the old loop calls
    dataset = math_dataset(path, tokenizer, "boxed", None, args.n)
    evaluate = callbacks.reward_evaluator(tokenizer, dataset, math_verify_reward, args.max_new_tokens,
                                          16, samples=args.samples, seed=args.seed)
    start = time.perf_counter()
    result = evaluate(model)
    return result, time.perf_counter() - start, counted.tokens


def run_new(model, tokenizer, path, args) -> tuple[dict, float, int]:
    counted = Counted(generation.continue_groups, generation.stop_ids(model, tokenizer))
    rollouts.continue_groups = counted
    start = time.perf_counter()
    result = evaluate_math(model, tokenizer, path, n=args.n, samples=args.samples,
                           max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed)
    return result, time.perf_counter() - start, counted.tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="GSM8K problems (the first ones)")
    parser.add_argument("--samples", type=int, default=2, help="sampled answers per problem (plus the greedy one)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=20, help="problems per batch of the new path")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m")
    path = data_file("gsm8k_test")
    new, new_s, new_tokens = run_new(model, tokenizer, path, args)
    old, old_s, old_tokens = run_old(model, tokenizer, path, args)
    print(json.dumps({
        "problems": args.n, "answers_per_problem": 1 + args.samples, "max_new_tokens": args.max_new_tokens,
        "old_tokens": old_tokens, "old_s": round(old_s, 1), "old_tokens_per_s": round(old_tokens / old_s, 2),
        "new_tokens": new_tokens, "new_s": round(new_s, 1), "new_tokens_per_s": round(new_tokens / new_s, 2),
        "ratio_new_over_old": round((new_tokens / new_s) / (old_tokens / old_s), 2),
        "old_accuracy": old["accuracy"], "new_accuracy": new["accuracy"],
        "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
