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
up to and with its EOS, padding not counted) / wall seconds. `--max-new-tokens` is small (128)
so that the old path's run stays short; the ratio grows with it (the old path's repeated
prefills and second decode loop cost more the longer the answers).

With `--generate-batch`, a third path: transformers' continuous batching (`generate_batch`, a
paged KV cache; finished requests leave the batch and waiting ones join at once), the greedy
and the sampled answers as two calls of it. It runs last, since it switches the model's
attention to its paged form.

The limit: the FLOPs the useful work needs (each prompt prefilled once, each answer token
decoded once on its own context: 2 x decoder parameters + 2 x vocabulary x hidden for the head,
and 4 x layers x heads x head_dim per query-key pair; no padding, no row decoded after its EOS)
over the CPU's matrix rate timed in the same process (`bench_oar_p.matrix_rate`) give the
highest throughput the hardware allows for these answers; "x limit" = seconds / that bound.

    python bench/bench_generate.py                      # 20 problems x (greedy + 2 samples), 128 tokens
    python bench/bench_generate.py --generate-batch     # and transformers' continuous batching
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

from oar_attrib import rollouts  # noqa: E402
from oar_attrib.models import generation  # noqa: E402
from oar_attrib.models import load_model  # noqa: E402
from oar_attrib.training import callbacks  # noqa: E402
from oar_attrib.training.data import math_dataset  # noqa: E402
from oar_attrib.training.math_eval import evaluate_math  # noqa: E402
from oar_attrib.training.rewards import math_verify_reward  # noqa: E402
from shared_data import data_file  # noqa: E402
from bench_oar_p import flop_terms, matrix_rate  # noqa: E402


class Counted:
    """Wraps a decode function (model, rows, ... -> (R, N) new ids, R a multiple of the rows)
    and counts the generated tokens (each answer up to and with its first stop id, all N
    without one) and the prompt and answer lengths that the useful FLOPs are counted from."""

    def __init__(self, fn, stop: list[int]):
        self.fn, self.stop, self.tokens = fn, set(stop), 0
        self.prompts: list[int] = []
        self.answers: list[tuple[int, int]] = []  # (prompt length, answer length)

    def __call__(self, model, rows, *args, **kwargs):
        out = self.fn(model, rows, *args, **kwargs)
        per_row = out.shape[0] // len(rows)
        self.prompts += [len(r) for r in rows]
        for i, row in enumerate(out.tolist()):
            n = len(generation.cut_at_stop(row, self.stop))
            self.tokens += n
            self.answers.append((len(rows[i // per_row]), n))
        return out


def useful_flops(model, prompts: list[int], answers: list[tuple[int, int]]) -> float:
    """FLOPs of prefilling each prompt once and decoding each answer token once on its own
    context (see the module docstring); a lower bound on what any decoder must compute."""
    decoder, per_pair = flop_terms(model)
    head = 2 * model.config.vocab_size * model.config.hidden_size
    total = sum(2 * decoder * p + per_pair * p * (p + 1) / 2 for p in prompts)
    for p, n in answers:  # answer token i attends to p + i + 1 positions, one head each
        total += n * (2 * decoder + head) + per_pair * (n * (p + 1) + n * (n - 1) / 2)
    return total


def run_old(model, tokenizer, path, args) -> tuple[dict, float, Counted]:
    counted = Counted(generation.continue_rows, generation.stop_ids(model, tokenizer))
    callbacks.continue_rows = counted  # the name the old loop calls
    dataset = math_dataset(path, tokenizer, "boxed", None, args.n)
    evaluate = callbacks.reward_evaluator(tokenizer, dataset, math_verify_reward, args.max_new_tokens,
                                          16, samples=args.samples, seed=args.seed)
    start = time.perf_counter()
    result = evaluate(model)
    return result, time.perf_counter() - start, counted


def run_new(model, tokenizer, path, args) -> tuple[dict, float, Counted]:
    counted = Counted(generation.continue_groups, generation.stop_ids(model, tokenizer))
    rollouts.continue_groups = counted
    start = time.perf_counter()
    result = evaluate_math(model, tokenizer, path, n=args.n, samples=args.samples,
                           max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed)
    return result, time.perf_counter() - start, counted


def run_generate_batch(model, tokenizer, path, args) -> tuple[float, int]:
    """(seconds, generated tokens) of the same answers by `model.generate_batch`."""
    from transformers.generation import ContinuousBatchingConfig, GenerationConfig

    dataset = math_dataset(path, tokenizer, "boxed", None, args.n)
    rows = [rollouts.prompt_ids(tokenizer, prompt) for prompt in dataset["prompt"]]
    stop = generation.stop_ids(model, tokenizer)
    common = {"max_new_tokens": args.max_new_tokens, "eos_token_id": stop, "pad_token_id": tokenizer.pad_token_id}
    # a cache for every answer at once (pages of 256 tokens), no CUDA graphs or warm-up on a CPU
    pages = len(rows) * max(args.samples, 1) * (-(-(max(map(len, rows)) + args.max_new_tokens) // 256))
    batching = ContinuousBatchingConfig(num_blocks=pages, max_batch_tokens=args.cb_batch_tokens, use_cuda_graph=False)

    def decode(prompts, config):
        return list(model.generate_batch(prompts, config, continuous_batching_config=batching,
                                         progress_bar=False, warmup=False).values())

    torch.manual_seed(args.seed)
    start = time.perf_counter()
    outs = decode(rows, GenerationConfig(do_sample=False, **common))
    if args.samples:
        outs += decode(rows * args.samples, GenerationConfig(do_sample=True, temperature=1.0, top_k=None,
                                                             top_p=None, **common))
    seconds = time.perf_counter() - start
    return seconds, sum(len(generation.cut_at_stop(out.generated_tokens, stop)) for out in outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="GSM8K problems (the first ones)")
    parser.add_argument("--samples", type=int, default=2, help="sampled answers per problem (plus the greedy one)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=20, help="problems per batch of the new path")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generate-batch", action="store_true",
                        help="also time transformers' continuous batching (generate_batch) on the same problems")
    parser.add_argument("--cb-batch-tokens", type=int, default=2048,
                        help="--generate-batch: tokens in one forward (prefill chunks and decode rows)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m")
    path = data_file("gsm8k_test")
    rate = matrix_rate("cpu", torch.float32, seconds=2.0)
    new, new_s, new_count = run_new(model, tokenizer, path, args)
    old, old_s, old_count = run_old(model, tokenizer, path, args)
    new_tokens, old_tokens = new_count.tokens, old_count.tokens
    # each path's own answers; the prompts once each (the old path prefills them once per answer)
    new_limit_s = useful_flops(model, new_count.prompts, new_count.answers) / rate
    old_limit_s = useful_flops(model, new_count.prompts, old_count.answers) / rate
    extra = {}
    if args.generate_batch:
        cb_s, cb_tokens = run_generate_batch(model, tokenizer, path, args)
        extra = {"generate_batch_tokens": cb_tokens, "generate_batch_s": round(cb_s, 1),
                 "generate_batch_tokens_per_s": round(cb_tokens / cb_s, 2),
                 "ratio_generate_batch_over_new": round((cb_tokens / cb_s) / (new_tokens / new_s), 2)}
    print(json.dumps({
        "problems": args.n, "answers_per_problem": 1 + args.samples, "max_new_tokens": args.max_new_tokens,
        "old_tokens": old_tokens, "old_s": round(old_s, 1), "old_tokens_per_s": round(old_tokens / old_s, 2),
        "new_tokens": new_tokens, "new_s": round(new_s, 1), "new_tokens_per_s": round(new_tokens / new_s, 2),
        "ratio_new_over_old": round((new_tokens / new_s) / (old_tokens / old_s), 2),
        "old_accuracy": old["accuracy"], "new_accuracy": new["accuracy"],
        "rate_gflops": round(rate / 1e9, 1), "limit_tokens_per_s": round(new_tokens / new_limit_s, 1),
        "new_x_limit": round(new_s / new_limit_s, 2), "old_x_limit": round(old_s / old_limit_s, 2),
        **extra, "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
