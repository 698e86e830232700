"""OAR-G's noise draws: 1 draw, n draws batched into shared passes, and n draws one by one, on
the same trace, side by side in one run, against the FLOP limit of n draws.

Models (`--models`): `smollm2`, the real SmolLM2-135M-Instruct on real text (GSM8K and MATH-500
solutions cut at `--length` tokens, bench_steps.text_trace); `qwen2-0.5b`, that shape with
RANDOM weights on random tokens (bench_steps.synthetic_trace). The noise is only on the scored
positions, so what every draw shares is computed once: the prompt's key/value cache (no
autograd) and the clean forward of the probe. A draw is one forward and one embedding-only
backward of the rest of the row; batched, each pass repeats the rows once per draw, as many
draws as the token budget holds (`oar_g(draws_per_pass=None)`).

FLOPs (`bench_oar_p.window_flops`): the prompt once, the clean forward once, and per draw the
forward again plus a backward that costs the same for the linear layers (input gradients only:
no weight gradient is taken) and twice for attention (dQ, dK, dV): about 2 forwards per draw.
So n draws cost (prompt + clean + 2n) forwards against (prompt + clean + 2) for one, whatever
the batching: the figure printed as "FLOP ratio" is the least the n-draw time can be against
one draw's at equal efficiency.

    python bench/bench_oar_g.py --models smollm2 qwen2-0.5b --lengths 128 512 --draws 8
    python bench/bench_oar_g.py --models qwen2-0.5b --layers 2 --lengths 64 --draws 4   # smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_oar_p import CLOCK, SHAPES, build_model, matrix_rate, window_flops  # noqa: E402
from bench_steps import synthetic_trace, text_trace  # noqa: E402
from oar_attrib.models.budget import backward_tokens  # noqa: E402
from oar_attrib.inputs.batch import ScoringBatch  # noqa: E402
from oar_attrib.models.lm import scoreable  # noqa: E402
from oar_attrib.methods.oar_g import oar_g  # noqa: E402
from oar_attrib.methods.probes import probe_sites  # noqa: E402

PROBE = "as_mean"


def oar_g_flops(model, batch: ScoringBatch, draws: int) -> float:
    """FLOPs of OAR-G with `draws` noise draws on `batch` (module docstring): per row with a
    span, its prompt [0, s) once, the clean forward of [s, q_K] once, and 2 such per draw."""
    sites = probe_sites(batch)
    first = scoreable(batch).int().argmax(dim=1)  # (B,) first scored column
    total = 0.0
    for row in range(batch.input_ids.shape[0]):
        if not bool(sites.has_answer[row]):
            continue
        start, end, k = int(first[row]), int(sites.last[row]) + 1, int(sites.valid[row].sum())
        total += window_flops(model, 0, start, 1) + (1 + 2 * draws) * window_flops(model, start, end, k)
    return total


def _timed(fn, repeats: int):
    """(result, least seconds over `repeats` runs): the least is the one least disturbed."""
    best = float("inf")
    for _ in range(repeats):
        start = CLOCK[0]()
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, CLOCK[0]() - start)
    return out.float().cpu(), best


def measure(model, batch: ScoringBatch, args, rate: float) -> dict:
    """One trace: 1 draw, n batched, n one by one; FLOPs, limits and the batched-vs-one-by-one
    difference."""
    seeded = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    run = lambda n, per_pass=None: oar_g(model, batch, probe=PROBE, n_noise=n, generator=seeded(),  # noqa: E731
                                         max_batch_tokens=args.budget, draws_per_pass=per_pass)
    _, one_s = _timed(lambda: run(1), args.repeats)
    batched, batched_s = _timed(lambda: run(args.draws), args.repeats)
    single, single_s = _timed(lambda: run(args.draws, 1), args.repeats)
    budget = args.budget or backward_tokens(model, batch.input_ids.device, batch.input_ids.shape[1],
                                            int(probe_sites(batch).valid.sum(dim=1).max()))
    flops = {1: oar_g_flops(model, batch, 1), args.draws: oar_g_flops(model, batch, args.draws)}
    limit = flops[args.draws] / rate
    return dict(tokens=int(batch.input_ids.shape[1]), scored=int(batch.scored_mask.sum()),
                budget=budget, draws_per_pass=max(1, min(args.draws, budget // batch.input_ids.shape[1])),
                seconds={"1": one_s, "batched": batched_s, "one_by_one": single_s},
                ratio_batched_over_one=batched_s / one_s, ratio_one_by_one_over_one=single_s / one_s,
                flops={str(n): f for n, f in flops.items()}, flop_ratio=flops[args.draws] / flops[1],
                limit_s=limit, x_of_limit=batched_s / limit,
                equal=bool(torch.equal(batched, single)),
                max_diff=float((batched - single).abs().max()), max_score=float(single.abs().max()))


def _format(name: str, n: int, row: dict) -> str:
    return (f"{name} {row['tokens']} tokens ({row['scored']} scored), budget {row['budget']} tokens: "
            f"{row['draws_per_pass']} draws per pass\n"
            f"    1 draw {row['seconds']['1']:.2f}s | {n} draws batched {row['seconds']['batched']:.2f}s "
            f"({row['ratio_batched_over_one']:.2f}x of one) | {n} one by one "
            f"{row['seconds']['one_by_one']:.2f}s ({row['ratio_one_by_one_over_one']:.2f}x)\n"
            f"    FLOPs: 1 draw {row['flops']['1'] / 1e12:.4f} T, {n} draws {row['flops'][str(n)] / 1e12:.4f} T "
            f"(ratio {row['flop_ratio']:.2f}x); limit of {n} draws {row['limit_s']:.2f}s, batched at "
            f"{row['x_of_limit']:.2f}x of it\n"
            f"    batched vs one by one: {'bit for bit equal' if row['equal'] else 'not bit-equal'}, "
            f"max |diff| {row['max_diff']:.1e} (scores up to {row['max_score']:.1e})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=("smollm2", *SHAPES), default=["smollm2"],
                        help="smollm2: the real model on real text; qwen2 shapes: random weights")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512], help="reasoning tokens")
    parser.add_argument("--draws", type=int, default=8, help="noise draws n")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers of a qwen2 shape (smoke runs)")
    parser.add_argument("--budget", type=int, default=None, help="max_batch_tokens (default: auto, from memory)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, the least time kept")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="wall seconds, or this process's CPU seconds (one thread, shared CPU)")
    args = parser.parse_args(argv)
    if args.clock == "cpu":
        CLOCK[0] = time.process_time
    dtype = getattr(torch, args.dtype)
    rate = matrix_rate(args.device, dtype)
    print(f"{args.dtype} on {args.device} ({torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"{platform.machine()}), {args.clock} clock, matrix rate {rate / 1e12:.3f} TFLOP/s; probe "
          f"{PROBE}; MKL_CBWR={os.environ.get('MKL_CBWR', 'unset')}. qwen2 shapes: RANDOM weights.",
          flush=True)
    results = []
    for name in args.models:
        if name == "smollm2":
            from oar_attrib.models import load_model

            model, tokenizer = load_model("smollm2-135m")
            model = model.to(args.device, dtype)
            trace = lambda n: text_trace(tokenizer, n, "line")  # noqa: E731
        else:
            model = build_model(name, args.layers, args.device, dtype)
            trace = lambda n: synthetic_trace(n, 10, model.config.vocab_size)  # noqa: E731
        oar_g(model, trace(min(args.lengths)).to(args.device), probe=PROBE)  # warm-up
        for length in args.lengths:
            row = {"model": name, **measure(model, trace(length).to(args.device), args, rate)}
            results.append(row)
            print(_format(name, args.draws, row), flush=True)
        del model
    print(json.dumps({"bench": "oar_g", "draws": args.draws, "device": args.device, "dtype": args.dtype,
                      "mkl_cbwr": os.environ.get("MKL_CBWR"), "matrix_tflops": rate / 1e12,
                      "random_weights": [m for m in args.models if m != "smollm2"], "results": results}))


if __name__ == "__main__":
    main()
