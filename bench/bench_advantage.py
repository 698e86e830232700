"""The advantage oracle's continuations: N samples from one prefix decoded as one batch on
the prefix's shared cache, against the same N decoded one by one, side by side in one run,
and against the FLOP limit of the decoding work.

The prefix is a held-out problem's prompt (`--model smollm2-135m`: a word problem of
`wordworld:tiny` in the chat template; `--model arith-tiny`: an arithmetic-world prompt), or,
for a model shape of `bench_oar_p.SHAPES` (`--model qwen2-0.5b`, `qwen2.5-1.5b`), a model of
that shape with RANDOM weights and a prompt of `--prompt-tokens` random token ids: such a
model has no EOS, so every continuation runs to `--new-tokens`, which is what a throughput
measurement wants. `advantage_oracle.sample_continuations` samples `--samples` continuations of
at most `--new-tokens` tokens at temperature 1, batched (one prefill, its cache repeated N
times, one decode loop of N rows) and one by one (a prefill and a decode loop of one row per
sample, as its `batched=False` path; `--one-by-one-seconds` stops starting samples once the
next one would end past that many seconds, for a run under a time limit).

Throughput = new tokens decoded (each continuation up to and with its EOS) / wall seconds. The
limit: the FLOPs of prefilling the prefix once and decoding each new token once on its own
context (`bench_generate.useful_flops`) over the matrix rate timed on the same device in the
model's dtype (`bench_oar_p.matrix_rate`); "x limit" = seconds / that bound. On CUDA the
device is synchronized before and after every timed span.

    python bench/bench_advantage.py                                  # smollm2-135m, N=16, 64 tokens
    python bench/bench_advantage.py --model arith-tiny --samples 16 --new-tokens 32
    python bench/bench_advantage.py --model qwen2-0.5b --device cuda --new-tokens 128   # GPU, bf16
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from oar_attrib.analysis.advantage_oracle import sample_continuations  # noqa: E402
from bench_generate import useful_flops  # noqa: E402
from bench_oar_p import PAD_ID, SHAPES, build_model, matrix_rate  # noqa: E402

RANDOM_IDS = 150000  # prompt ids drawn below Qwen2's special tokens (PAD_ID among them)


@dataclass
class Setup:
    """The model on its device, the prefix's ids, the ids that stop a continuation (none for
    RANDOM weights) and the pad id."""

    model: object
    ids: list[int]
    stop: list[int]
    pad: int
    weights: str  # "RANDOM" or "pretrained"


def real_prefix(model_name: str, tokenizer, seed: int) -> list[int]:
    """A held-out problem's prompt ids for a catalogue model (imported here: the random shapes
    need none of it)."""
    from oar_attrib.analysis.counterfactual_recall import data_records, encode_prompt_ids, record_prompt
    from oar_attrib.world import generate_problems

    if model_name == "arith-tiny":
        return tokenizer(generate_problems(1, "recall", seed=seed, split="test")[0].prompt,
                         add_special_tokens=False).input_ids
    return encode_prompt_ids(tokenizer, record_prompt(data_records("wordworld:tiny", 1, seed)[0]))


def load(args) -> Setup:
    """`--model` on `--device` in `--dtype`: a shape of `SHAPES` with RANDOM weights and a
    random prompt, else a catalogue model and a held-out problem's prompt."""
    dtype = getattr(torch, args.dtype)
    if args.model in SHAPES:
        gen = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, RANDOM_IDS, (args.prompt_tokens,), generator=gen).tolist()
        with torch.device(args.device):  # the random weights drawn there: seconds less on a GPU
            model = build_model(args.model, None, args.device, dtype)
        # random_qwen2 sets no EOS id: generate stops only at --new-tokens
        return Setup(model, ids, [], PAD_ID, "RANDOM")
    from oar_attrib.models import load_model
    from oar_attrib.models.generation import stop_ids

    model, tokenizer = load_model(args.model)
    model = model.to(args.device, dtype)
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    return Setup(model, real_prefix(args.model, tokenizer, args.seed), stop, pad, "pretrained")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sample(setup: Setup, n: int, max_new: int, seed: int, batched: bool) -> list[list[int]]:
    return sample_continuations(setup.model, setup.ids, n, pad_id=setup.pad, eos=setup.stop,
                                max_new_tokens=max_new, temperature=1.0, seed=seed, batched=batched)


def timed_batched(setup: Setup, n: int, max_new: int, args) -> tuple[float, list[list[int]]]:
    """Seconds and continuations of the n samples decoded as one batch."""
    sync(args.device)
    start = time.perf_counter()
    tails = sample(setup, n, max_new, args.seed, True)
    sync(args.device)
    return time.perf_counter() - start, tails


def timed_one_by_one(setup: Setup, args) -> tuple[float, list[list[int]]]:
    """Seconds and continuations of the samples decoded one by one (sample i seeded seed + i),
    all N, or those that end within --one-by-one-seconds at the pace so far (at least one)."""
    tails: list[list[int]] = []
    sync(args.device)
    start = time.perf_counter()
    for i in range(args.samples):
        elapsed = time.perf_counter() - start
        if i and args.one_by_one_seconds and elapsed * (i + 1) / i > args.one_by_one_seconds:
            break
        tails += sample(setup, 1, args.new_tokens, args.seed + i, False)
        sync(args.device)
    return time.perf_counter() - start, tails


def decoded(tail: list[int], max_new: int) -> int:
    """New tokens decoded for one continuation: one cut before its EOS (shorter than max_new)
    decoded that EOS too."""
    return len(tail) + (len(tail) < max_new)


def limit_seconds(setup: Setup, tails: list[list[int]], max_new: int, rate: float) -> float:
    """Seconds the FLOP limit allows for these continuations: one prefill of the prefix, each
    new token decoded once on its own context (`useful_flops`), at `rate`."""
    p = len(setup.ids)
    return useful_flops(setup.model, [p], [(p, decoded(t, max_new)) for t in tails]) / rate


def shape(model) -> dict:
    c = model.config
    return {"hidden": c.hidden_size, "intermediate": c.intermediate_size, "layers": c.num_hidden_layers,
            "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads, "vocab": c.vocab_size}


def report(args, setup: Setup, rate: float, batched: tuple, single: tuple) -> dict:
    """The JSON line: both paths' tokens, seconds, tokens/s, their ratio and x of the limit."""
    (batched_s, b_tails), (single_s, s_tails) = batched, single
    new_b, new_s = (sum(decoded(t, args.new_tokens) for t in tails) for tails in (b_tails, s_tails))
    limit_b, limit_1 = (limit_seconds(setup, tails, args.new_tokens, rate) for tails in (b_tails, s_tails))
    gpu = args.device.startswith("cuda")
    return {
        "model": args.model, "weights": setup.weights, "shape": shape(setup.model),
        "device": args.device, "gpu": torch.cuda.get_device_name(args.device) if gpu else None,
        "dtype": args.dtype, "prefix_tokens": len(setup.ids), "eos": bool(setup.stop),
        "samples": args.samples, "max_new_tokens": args.new_tokens,
        "batched_tokens": new_b, "batched_s": round(batched_s, 2),
        "batched_tokens_per_s": round(new_b / batched_s, 1),
        "one_by_one_samples": len(s_tails), "one_by_one_tokens": new_s, "one_by_one_s": round(single_s, 2),
        "one_by_one_tokens_per_s": round(new_s / single_s, 1),
        "ratio_batched_over_one_by_one": round((new_b / batched_s) / (new_s / single_s), 2),
        "rate_gflops": round(rate / 1e9, 1), "limit_tokens_per_s": round(new_b / limit_b, 1),
        "batched_x_limit": round(batched_s / limit_b, 1), "one_by_one_x_limit": round(single_s / limit_1, 1),
        "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
    }


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="a catalogue model (smollm2-135m, arith-tiny) or a shape with RANDOM "
                             f"weights ({', '.join(SHAPES)})")
    parser.add_argument("--samples", type=int, default=16, help="continuations N of the prefix")
    parser.add_argument("--new-tokens", type=int, default=64, help="longest continuation")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="random prompt ids of a RANDOM-weight shape")
    parser.add_argument("--one-by-one-seconds", type=float, default=0.0,
                        help="start no one-by-one sample that would end past this (0: all N)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.samples, args.new_tokens, args.prompt_tokens) < 1 or args.one_by_one_seconds < 0:
        parser.error("--samples, --new-tokens and --prompt-tokens must be >= 1, --one-by-one-seconds >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    setup = load(args)
    ending = ("no EOS: every continuation runs to --new-tokens" if not setup.stop
              else "each continuation up to its EOS")
    print(f"{args.model}: {setup.weights} weights, {args.dtype} on {args.device}, prefix of "
          f"{len(setup.ids)} tokens{' (random ids)' if setup.weights == 'RANDOM' else ''}, "
          f"{args.samples} x <= {args.new_tokens} new tokens, {ending}", flush=True)
    gpu = args.device.startswith("cuda")
    rate = matrix_rate(args.device, getattr(torch, args.dtype), seconds=1.0 if gpu else 2.0)
    timed_batched(setup, 2, 4, args)  # warm-up
    batched = timed_batched(setup, args.samples, args.new_tokens, args)
    tokens = sum(decoded(t, args.new_tokens) for t in batched[1])
    print(f"batched: {tokens} tokens in {batched[0]:.2f} s (one by one next)", flush=True)
    single = timed_one_by_one(setup, args)
    print(json.dumps(report(args, setup, rate, batched, single)))


if __name__ == "__main__":
    main()
