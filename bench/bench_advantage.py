"""The advantage oracle's continuations: N samples from one prefix decoded as one batch on
the prefix's shared cache, against the same N decoded one by one, side by side in one run,
and against the FLOP limit of the decoding work.

The prefix is a held-out problem's prompt (`--model smollm2-135m`: a word problem of
`wordworld:tiny` in the chat template; `--model arith-tiny`: an arithmetic-world prompt);
`advantage_oracle.sample_continuations` samples `--samples` continuations of at most
`--new-tokens` tokens at temperature 1, batched (one prefill, its cache repeated N times, one
decode loop of N rows) and one by one (N prefills and N decode loops of one row).

Throughput = new tokens (each continuation up to its EOS) / wall seconds. The limit: the FLOPs
of prefilling the prefix once and decoding each new token once on its own context
(`bench_generate.useful_flops`) over the matrix rate timed in the same process
(`bench_oar_p.matrix_rate`); "x limit" = seconds / that bound.

    python bench/bench_advantage.py                                  # smollm2-135m, N=16, 64 tokens
    python bench/bench_advantage.py --model arith-tiny --samples 16 --new-tokens 32
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
sys.path.insert(0, str(ROOT / "bench"))

from oar_attrib.analysis.advantage_oracle import sample_continuations  # noqa: E402
from oar_attrib.analysis.counterfactual_recall import data_records, encode_prompt_ids, record_prompt  # noqa: E402
from oar_attrib.models.generation import stop_ids  # noqa: E402
from oar_attrib.models import load_model  # noqa: E402
from oar_attrib.world import generate_problems  # noqa: E402
from bench_generate import useful_flops  # noqa: E402
from bench_oar_p import matrix_rate  # noqa: E402


def prefix(model_name: str, tokenizer, seed: int) -> list[int]:
    if model_name == "arith-tiny":
        return tokenizer(generate_problems(1, "recall", seed=seed, split="test")[0].prompt,
                         add_special_tokens=False).input_ids
    return encode_prompt_ids(tokenizer, record_prompt(data_records("wordworld:tiny", 1, seed)[0]))


def timed(model, tokenizer, ids, args, batched: bool) -> tuple[float, list[list[int]]]:
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    start = time.perf_counter()
    tails = sample_continuations(model, ids, args.samples, pad_id=pad, eos=stop, max_new_tokens=args.new_tokens,
                                 temperature=1.0, seed=args.seed, batched=batched)
    return time.perf_counter() - start, tails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--samples", type=int, default=16, help="continuations N of the prefix")
    parser.add_argument("--new-tokens", type=int, default=64, help="longest continuation")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    ids = prefix(args.model, tokenizer, args.seed)
    rate = matrix_rate("cpu", torch.float32, seconds=2.0)
    timed(model, tokenizer, ids, argparse.Namespace(**{**vars(args), "samples": 2, "new_tokens": 4}), True)  # warm-up
    batched_s, batched = timed(model, tokenizer, ids, args, True)
    single_s, single = timed(model, tokenizer, ids, args, False)
    new_b, new_s = sum(len(t) + 1 for t in batched), sum(len(t) + 1 for t in single)
    limit = useful_flops(model, [len(ids)], [(len(ids), len(t) + 1) for t in batched]) / rate
    print(json.dumps({
        "model": args.model, "prefix_tokens": len(ids), "samples": args.samples, "max_new_tokens": args.new_tokens,
        "batched_s": round(batched_s, 2), "batched_tokens_per_s": round(new_b / batched_s, 1),
        "one_by_one_s": round(single_s, 2), "one_by_one_tokens_per_s": round(new_s / single_s, 1),
        "ratio_batched_over_one_by_one": round((new_b / batched_s) / (new_s / single_s), 2),
        "rate_gflops": round(rate / 1e9, 1), "limit_tokens_per_s": round(new_b / limit, 1),
        "batched_x_limit": round(batched_s / limit, 1), "one_by_one_x_limit": round(single_s / (limit * new_b / new_s), 1),
        "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
