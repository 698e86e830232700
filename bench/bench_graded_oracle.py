"""The graded oracle's regenerations: throughput of the cached-prefix path against whole rows,
side by side in one run, and against the FLOP limit of the decoding work.

For each of `--n` traces (the model's greedy answers to held-out problems of the arithmetic
world, `--model arith-tiny`, or of the word-problem world, `--data wordworld:tiny` with
`--model smollm2-135m`), the graded oracle (`instruments.graded.oracle`) runs twice on the same
draws:

- cached: one forward over prompt + response, every regeneration continued on that cache
  cropped to its prefix, rows of several positions left-padded into one batch;
- whole rows: the same rows regenerated from their first token (the path without a cache).

Throughput = new tokens (each regeneration's replacement token and its greedy continuation up
to its EOS) / wall seconds. The limit: the FLOPs of decoding each new token once on its own
context (`bench_generate.useful_flops` with every row's prefix counted as already there, plus
the one clean forward per trace) over the matrix rate timed in the same process
(`bench_oar_p.matrix_rate`); "x limit" = seconds / that bound.

    python bench/bench_graded_oracle.py                        # arith-tiny, 8 traces
    python bench/bench_graded_oracle.py --model smollm2-135m --data wordworld:tiny --n 3 --k 8 --positions 8
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from oar_attrib.instruments.data.recall import (answer_key, data_records, encode_prompt_ids,  # noqa: E402
                                                       record_prompt)
from oar_attrib.instruments.graded.oracle import DecodeStats, GradedSettings, graded_oracle  # noqa: E402
from oar_attrib.attribution import attribute  # noqa: E402
from oar_attrib.models.generation import continue_groups, stop_ids  # noqa: E402
from oar_attrib.models import load_model  # noqa: E402
from oar_attrib.world import generate_problems  # noqa: E402
from bench_generate import useful_flops  # noqa: E402
from bench_oar_p import matrix_rate  # noqa: E402


def traces(model, tokenizer, args) -> list[tuple[list[int], object]]:
    """(prompt ids, attributed trace without scores) of the model's greedy answers."""
    if args.data:
        records = data_records(args.data, args.n, args.seed)
    else:
        records = [{"prompt": p.prompt} for p in generate_problems(args.n, "recall", seed=args.seed, split="test")]
    prompts = [record_prompt(r) for r in records]
    ids = [encode_prompt_ids(tokenizer, p) for p in prompts]
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    new = continue_groups(model, ids, pad, max_new_tokens=args.max_new_tokens, eos_token_id=stop or None).tolist()
    texts = [tokenizer.decode(r[:next((j for j, t in enumerate(r) if t in stop), len(r))], skip_special_tokens=True)
             for r in new]
    return list(zip(ids, attribute(model, tokenizer, prompts, texts, [])))


def run(model, tokenizer, items, settings: GradedSettings, reuse: bool) -> tuple[DecodeStats, list]:
    stats, flips = DecodeStats(), []
    for prompt_ids, trace in items:
        positions = [t for t, s in enumerate(trace.scored) if s]
        if not positions or answer_key(trace.response) is None:
            continue
        graded = graded_oracle(model, tokenizer, prompt_ids, trace.token_ids, positions, answer_key,
                               replace(settings, reuse_prefix=reuse))
        stats.add(graded.stats)
        flips.append(graded.flips)
    return stats, flips


def limit_seconds(model, stats: DecodeStats, rate: float) -> float:
    """Seconds the useful decoding work takes at the matrix rate (module docstring)."""
    return useful_flops(model, stats.forwards, stats.rows) / rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="arith-tiny")
    parser.add_argument("--data", default=None, help="wordworld:<preset> or a JSONL file (default: the arithmetic world)")
    parser.add_argument("--n", type=int, default=8, help="traces")
    parser.add_argument("--k", type=int, default=8, help="replacements per position")
    parser.add_argument("--positions", type=int, default=16, help="tested positions per trace")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    items = traces(model, tokenizer, args)
    settings = GradedSettings(k=args.k, positions=args.positions, seed=args.seed)
    rate = matrix_rate("cpu", torch.float32, seconds=2.0)
    start = time.perf_counter()
    cached, cached_flips = run(model, tokenizer, items, settings, reuse=True)
    cached_s = time.perf_counter() - start
    start = time.perf_counter()
    whole, whole_flips = run(model, tokenizer, items, settings, reuse=False)
    whole_s = time.perf_counter() - start
    tokens = sum(n for _, n in cached.rows)
    limit = limit_seconds(model, cached, rate)
    print(json.dumps({
        "model": args.model, "traces": len(cached_flips), "k": args.k, "positions": args.positions,
        "rows": len(cached.rows), "new_tokens": tokens, "same_flips": cached_flips == whole_flips,
        "cached_s": round(cached_s, 1), "cached_tokens_per_s": round(tokens / cached_s, 1),
        "whole_rows_s": round(whole_s, 1), "whole_rows_tokens_per_s": round(sum(n for _, n in whole.rows) / whole_s, 1),
        "ratio_cached_over_whole": round(whole_s / cached_s, 2),
        "rate_gflops": round(rate / 1e9, 1), "limit_tokens_per_s": round(tokens / limit, 1),
        "cached_x_limit": round(cached_s / limit, 2),
        "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
