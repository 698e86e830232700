"""The advantage oracle's decoding, per trace: every step boundary of a trace decoded together
(`advantage_oracle`'s path), against one boundary per pass (its reference,
`AdvantageSettings(batched=False)`: the same continuations) and against the path before it
(one boundary per pass through `model.generate`, `generation.continue_groups`, every row
running until the last one ends), side by side in one run, and against the FLOP limit of
the decoding work.

The trace is a held-out problem's prompt and the model's own greedy answer to it, split into
its steps (`--model smollm2-135m`: a word problem of `wordworld:tiny` in the chat template;
`--model arith-tiny`: an arithmetic-world prompt), or, for a model shape of `bench_oar_p.SHAPES`
(`--model qwen2-0.5b`, `qwen2.5-1.5b`), a model of that shape with RANDOM weights, a prompt of
`--prompt-tokens` random token ids and a response of `--new-tokens` random ids cut into
`--boundaries` equal steps: such a model has no EOS, so every continuation runs to its
budget (the rest of the response plus the oracle's margin), which is what a throughput
measurement wants. Each boundary's `--samples` continuations are sampled at temperature 1.

Throughput = new tokens written (each continuation up to and with its EOS) / wall seconds; the
paths that waste work on rows that ended (the generate path) are slower per written token.
`--one-by-one-seconds S` starts no boundary of the two per-pass paths that would end past S
seconds at the pace so far (at least one runs), for a run under a time limit; their
`*_boundaries` say how many ran. The limit: the FLOPs of prefilling each boundary's prefix once
and decoding each new token once on its own context (`bench_generate.useful_flops`) over the
matrix rate timed on the same device in the model's dtype (`bench_oar_p.matrix_rate`); "x limit"
= seconds / that bound. On CUDA the device is synchronized around every timed span.

    python bench/bench_advantage.py                                  # smollm2-135m, N=16
    python bench/bench_advantage.py --model arith-tiny --samples 16
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

from oar_attrib.instruments.advantage.oracle import REGENERATION_MARGIN, prefix_chunks  # noqa: E402
from oar_attrib.models.generation import continue_groups, cut_at_stop, sample_prefixes  # noqa: E402
from bench_generate import useful_flops  # noqa: E402
from bench_oar_p import PAD_ID, SHAPES, build_model, matrix_rate  # noqa: E402

RANDOM_IDS = 150000  # prompt ids drawn below Qwen2's special tokens (PAD_ID among them)


@dataclass
class Setup:
    """The model on its device, the trace (prompt ids, response ids, the response lengths that
    end each boundary's prefix), the ids that stop a continuation (none for RANDOM weights)
    and the pad id."""

    model: object
    prompt: list[int]
    response: list[int]
    heads: list[int]
    stop: list[int]
    pad: int
    weights: str  # "RANDOM" or "pretrained"

    def prefixes(self) -> list[list[int]]:
        return [self.prompt + self.response[:h] for h in self.heads]

    def budgets(self) -> list[int]:
        return [len(self.response) - h + REGENERATION_MARGIN for h in self.heads]


def real_trace(model, tokenizer, model_name: str, seed: int) -> tuple[list[int], list[int], list[int]]:
    """A held-out problem's prompt ids, the model's greedy answer's ids and its boundaries (the
    prompt, then the end of every step but the last), for a catalogue model."""
    from oar_attrib.instruments.data.recall import data_records, encode_prompt_ids, record_prompt
    from oar_attrib.attribution import attribute
    from oar_attrib.rollouts import decode_answers
    from oar_attrib.world import generate_problems

    if model_name == "arith-tiny":
        prompt = generate_problems(1, "recall", seed=seed, split="test")[0].prompt
    else:
        prompt = record_prompt(data_records("wordworld:tiny", 1, seed)[0])
    ids = encode_prompt_ids(tokenizer, prompt)
    text = decode_answers(model, tokenizer, [(ids, None)], samples=1, greedy=True, temperature=1.0,
                          max_new_tokens=128)[0][0][0]
    trace = attribute(model, tokenizer, [prompt], [text], [])[0]
    return ids, list(trace.token_ids), [0] + [b for _, b in trace.steps[:-1]]


def load(args) -> Setup:
    """`--model` on `--device` in `--dtype`: a shape of `SHAPES` with RANDOM weights and a
    random trace, else a catalogue model and its own answer to a held-out problem."""
    dtype = getattr(torch, args.dtype)
    if args.model in SHAPES:
        gen = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, RANDOM_IDS, (args.prompt_tokens + args.new_tokens,), generator=gen).tolist()
        with torch.device(args.device):  # the random weights drawn there: seconds less on a GPU
            model = build_model(args.model, None, args.device, dtype)
        step = args.new_tokens // args.boundaries
        # random_qwen2 sets no EOS id: a continuation stops only at its budget
        return Setup(model, ids[:args.prompt_tokens], ids[args.prompt_tokens:],
                     [k * step for k in range(args.boundaries)], [], PAD_ID, "RANDOM")
    from oar_attrib.models import load_model
    from oar_attrib.models.generation import stop_ids

    model, tokenizer = load_model(args.model)
    model = model.to(args.device, dtype)
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    prompt, response, heads = real_trace(model, tokenizer, args.model, args.seed)
    return Setup(model, prompt, response, heads, stop, pad, "pretrained")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def together(setup: Setup, n: int, seed: int, chunks: list[list[int]]) -> list[list[list[int]]]:
    """Every boundary's continuations, as many boundaries per pass as `chunks` say (the oracle's
    path; one boundary a chunk: its reference)."""
    prefixes, budgets = setup.prefixes(), setup.budgets()
    out = []
    for chunk in chunks:
        out += sample_prefixes(setup.model, [prefixes[k] for k in chunk], [seed + k for k in chunk],
                               [budgets[k] for k in chunk], samples=n, temperature=1.0, pad_id=setup.pad,
                               stop=setup.stop)
    return out


def through_generate(setup: Setup, n: int, seed: int, k: int) -> list[list[int]]:
    """Boundary k's continuations as the oracle decoded them before: one prefill, one
    `model.generate` loop of n rows running until the last one ends."""
    torch.manual_seed(seed + k)
    rows = continue_groups(setup.model, [setup.prefixes()[k]], setup.pad, max_new_tokens=setup.budgets()[k],
                           samples=n, greedy=False, temperature=1.0, eos_token_id=setup.stop or None)
    return [cut_at_stop(row, setup.stop, keep=False) for row in rows.tolist()]


def timed(device: str, work) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    out = work()
    sync(device)
    return time.perf_counter() - start, out


def per_pass(setup: Setup, args, one) -> tuple[float, list[list[list[int]]]]:
    """Seconds and continuations of the boundaries decoded one per pass by `one(k)`, all, or
    those that end within --one-by-one-seconds at the pace so far (at least one)."""
    done: list[list[list[int]]] = []
    sync(args.device)
    start = time.perf_counter()
    for k in range(len(setup.heads)):
        elapsed = time.perf_counter() - start
        if k and args.one_by_one_seconds and elapsed * (k + 1) / k > args.one_by_one_seconds:
            break
        done.append(one(k))
        sync(args.device)
    return time.perf_counter() - start, done


def written(setup: Setup, tails: list[list[list[int]]]) -> int:
    """New tokens written: each continuation up to and with its EOS (one cut before an EOS wrote
    that EOS too)."""
    budgets = setup.budgets()
    return sum(len(t) + (len(t) < budgets[k]) for k, rows in enumerate(tails) for t in rows)


def limit_seconds(setup: Setup, tails: list[list[list[int]]], rate: float) -> float:
    """Seconds the FLOP limit allows for these continuations: each boundary's prefix prefilled
    once, each new token decoded once on its own context (`useful_flops`), at `rate`."""
    budgets, lengths = setup.budgets(), [len(p) for p in setup.prefixes()]
    answers = [(lengths[k], len(t) + (len(t) < budgets[k])) for k, rows in enumerate(tails) for t in rows]
    return useful_flops(setup.model, lengths[:len(tails)], answers) / rate


def shape(model) -> dict:
    c = model.config
    return {"hidden": c.hidden_size, "intermediate": c.intermediate_size, "layers": c.num_hidden_layers,
            "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads, "vocab": c.vocab_size}


def path_figures(name: str, setup: Setup, seconds: float, tails, rate: float) -> dict:
    tokens = written(setup, tails)
    return {f"{name}_boundaries": len(tails), f"{name}_tokens": tokens, f"{name}_s": round(seconds, 2),
            f"{name}_tokens_per_s": round(tokens / seconds, 1),
            f"{name}_x_limit": round(seconds / limit_seconds(setup, tails, rate), 1)}


def report(args, setup: Setup, rate: float, chunks, runs: dict) -> dict:
    """The JSON line: each path's boundaries, tokens, seconds, tokens/s and x of the limit, the
    ratios of tokens/s, and the seconds a whole trace takes on the oracle's path."""
    gpu = args.device.startswith("cuda")
    out = {"model": args.model, "weights": setup.weights, "shape": shape(setup.model),
           "device": args.device, "gpu": torch.cuda.get_device_name(args.device) if gpu else None,
           "dtype": args.dtype, "prompt_tokens": len(setup.prompt), "response_tokens": len(setup.response),
           "boundaries": len(setup.heads), "passes_together": len(chunks), "eos": bool(setup.stop),
           "samples": args.samples}
    for name, (seconds, tails) in runs.items():
        out.update(path_figures(name, setup, seconds, tails, rate))
    speed = {name: out[f"{name}_tokens_per_s"] for name in runs}
    out.update({"ratio_together_over_one_per_pass": round(speed["together"] / speed["one_per_pass"], 2),
                "ratio_together_over_generate": round(speed["together"] / speed["generate"], 2),
                "seconds_per_trace": out["together_s"], "rate_gflops": round(rate / 1e9, 1),
                "threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__})
    return out


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="a catalogue model (smollm2-135m, arith-tiny) or a shape with RANDOM "
                             f"weights ({', '.join(SHAPES)})")
    parser.add_argument("--samples", type=int, default=16, help="continuations N per boundary")
    parser.add_argument("--new-tokens", type=int, default=64, help="response ids of a RANDOM-weight shape")
    parser.add_argument("--boundaries", type=int, default=4, help="boundaries of a RANDOM-weight shape's trace")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="random prompt ids of a RANDOM-weight shape")
    parser.add_argument("--one-by-one-seconds", type=float, default=0.0,
                        help="per-pass paths: start no boundary that would end past this (0: all)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.samples, args.new_tokens, args.prompt_tokens, args.boundaries) < 1 or args.one_by_one_seconds < 0:
        parser.error("--samples, --new-tokens, --prompt-tokens and --boundaries must be >= 1, "
                     "--one-by-one-seconds >= 0")
    if args.boundaries > args.new_tokens:
        parser.error(f"--boundaries {args.boundaries}: at most --new-tokens ({args.new_tokens}), one token a step")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    setup = load(args)
    ending = "no EOS: every continuation runs to its budget" if not setup.stop else "each continuation up to its EOS"
    print(f"{args.model}: {setup.weights} weights, {args.dtype} on {args.device}, prompt of {len(setup.prompt)} "
          f"tokens, response of {len(setup.response)}{' (random ids)' if setup.weights == 'RANDOM' else ''}, "
          f"{len(setup.heads)} boundaries x {args.samples} continuations, {ending}", flush=True)
    rate = matrix_rate(args.device, getattr(torch, args.dtype), seconds=1.0 if args.device.startswith("cuda") else 2.0)
    chunks = prefix_chunks(setup.model, [len(p) + b for p, b in zip(setup.prefixes(), setup.budgets())], args.samples)
    together(setup, 2, args.seed, [[0]])  # warm-up
    runs = {"together": timed(args.device, lambda: together(setup, args.samples, args.seed, chunks))}
    print(f"together: {written(setup, runs['together'][1])} tokens in {runs['together'][0]:.2f} s "
          "(one per pass next)", flush=True)
    runs["one_per_pass"] = per_pass(setup, args, lambda k: together(setup, args.samples, args.seed, [[k]])[0])
    runs["generate"] = per_pass(setup, args, lambda k: through_generate(setup, args.samples, args.seed, k))
    if runs["one_per_pass"][1] != runs["together"][1][:len(runs["one_per_pass"][1])]:
        raise SystemExit("bench_advantage: the boundaries decoded one per pass differ from those decoded together")
    print(json.dumps(report(args, setup, rate, chunks, runs)))


if __name__ == "__main__":
    main()
