"""Token, step and hierarchical OAR-P (oar_p, oar_p_step, oar_p_hier) on the same long traces,
side by side in one run, each against its FLOP limit.

Models (`--models`):
- `qwen2-0.5b` (or `qwen2.5-1.5b`): the shape of bench_oar_p with RANDOM weights (the timings
  do not depend on the weights; the overlap figure on them says nothing about real text). The
  trace is one row: a 64-token prompt, `--length` reasoning tokens cut into `--steps` steps of
  about equal length (+-25%), a 1-token bridge, a 2-token answer span and a 1-token tail.
- `smollm2`: the real SmolLM2-135M-Instruct (`load_model("smollm2-135m")`) on real text:
  GSM8K and MATH-500 solutions joined (`tests/longtrace.py`: `long_responses`, from the shared data
  folder), cut at `--length` tokens, then "The answer is 42." (the answer's value does not
  matter to the cost); its steps are the text's own (`--step-unit`, default lines).
All three methods score every reasoning token with the same budget, probe (as_mean) and mask
(pad). Printed per trace: seconds of each; the FLOPs of its exact windowed work
(`bench_oar_p.exact_flops`: the clean pass plus one window [min(t, q_1), q_K] per copy, at
the step's first position for a step copy) over the matrix rate measured in the same run
("x of limit"); oar_p_hier's cost as a ratio to token OAR-P (time and FLOPs); and the top-10%
token overlap of oar_p_hier with token OAR-P over the whole trace (random: 0.10).

    python bench/bench_steps.py --models qwen2-0.5b smollm2 --lengths 512 2048 4096   # the figures
    python bench/bench_steps.py --models qwen2-0.5b --layers 2 --lengths 256 --steps 8   # smoke run
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # longtrace: the long-trace builder

from bench_oar_p import CLOCK, PAD_ID, SHAPES, build_model, exact_flops, matrix_rate  # noqa: E402
from oar_attrib.inputs.batch import ScoringBatch, step_ids_from_ranges  # noqa: E402
from oar_attrib.methods.oar_p import oar_p  # noqa: E402
from oar_attrib.methods.oar_p_hier import choose_steps, oar_p_hier  # noqa: E402
from oar_attrib.methods.oar_p_step import oar_p_step, step_units  # noqa: E402
from oar_attrib.methods.perturb import reachable_positions, unit_anchors  # noqa: E402
from oar_attrib.methods.probes import probe_sites  # noqa: E402

PROBE = "as_mean"
MODELS = (*SHAPES, "smollm2")


def synthetic_trace(length: int, n_steps: int, vocab: int, prompt_len: int = 64,
                    seed: int = 0) -> ScoringBatch:
    """One row: prompt | `length` reasoning tokens in `n_steps` steps | bridge | answer (2) | tail."""
    gen = torch.Generator().manual_seed(seed)
    total = prompt_len + length + 4
    ids = torch.randint(1, min(vocab, 150000), (1, total), generator=gen)
    scored = torch.zeros((1, total), dtype=torch.bool)
    scored[0, prompt_len:prompt_len + length] = True
    answer = torch.zeros((1, total), dtype=torch.bool)
    answer[0, prompt_len + length + 1:prompt_len + length + 3] = True
    mean = length / n_steps
    ranges, start = [], prompt_len
    while start < prompt_len + length:
        size = max(1, round(mean * (0.75 + 0.5 * float(torch.rand((), generator=gen)))))
        ranges.append((start, min(start + size, prompt_len + length)))
        start = ranges[-1][1]
    return ScoringBatch(ids, torch.ones_like(ids), scored, answer, PAD_ID,
                        step_ids_from_ranges((1, total), [ranges]))


def text_trace(tokenizer, length: int, step_unit: str) -> ScoringBatch:
    """One row of real text of `length` reasoning tokens (module docstring)."""
    from oar_attrib.inputs.encoding import encode_pairs
    from longtrace import long_responses, shared_dir
    from shared_data import shared_folder  # $OAR_SHARED, else ../shared beside the repository

    prompt, response = long_responses(shared_dir(shared_folder()), tokenizer, 1, target_tokens=length + 64)[0]
    offsets = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    response = response[:offsets[length][0]].rstrip() + "\nThe answer is 42."
    batch, pairs = encode_pairs(tokenizer, [prompt], [response], answer_format="answer_is",
                                chat=True, step_unit=step_unit)
    if not pairs[0].span_found:
        raise SystemExit("the answer span of the text trace was not found")
    return batch


def _timed(fn):
    start = CLOCK[0]()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out.float().cpu(), CLOCK[0]() - start


def top_overlap(a: torch.Tensor, b: torch.Tensor, scored: torch.Tensor, frac: float = 0.1) -> float:
    """|top-k(a) & top-k(b)| / k over the (L,) scored positions, k = ceil(frac * |S|)."""
    k = max(1, math.ceil(frac * int(scored.sum()) - 1e-9))
    top = [set(x[scored].topk(k).indices.tolist()) for x in (a, b)]
    return len(top[0] & top[1]) / k


def measure(model, batch: ScoringBatch, args, rate: float) -> dict:
    """One trace: every method timed, its exact FLOPs, ratios and the overlap."""
    kwargs = dict(probe=PROBE, max_batch_tokens=args.budget)
    choice = dict(top_steps=args.top_steps, top_mass=args.top_mass)
    step_scores, step_s = _timed(lambda: oar_p_step(model, batch, **kwargs))
    hier_scores, hier_s = _timed(lambda: oar_p_hier(model, batch, **kwargs, **choice))
    reachable = reachable_positions(batch, probe_sites(batch))
    steps = step_units(batch, reachable)
    chosen = choose_steps(step_scores, steps, **choice)
    step_copies = unit_anchors(steps).long()
    flops = {"oar_p": exact_flops(model, batch), "oar_p_step": exact_flops(model, batch, step_copies),
             "oar_p_hier": exact_flops(model, batch, step_copies + chosen.long())}
    row = dict(length=int(batch.scored_mask.sum()), seq_len=int(batch.input_ids.shape[1]),
               steps=int(step_copies.sum()), chosen_tokens=int(chosen.sum()),
               flops=flops, limit_s={m: f / rate for m, f in flops.items()},
               seconds={"oar_p_step": step_s, "oar_p_hier": hier_s},
               token_over_hier_flops=flops["oar_p"] / flops["oar_p_hier"])
    if not args.skip_token:
        token_scores, row["seconds"]["oar_p"] = _timed(lambda: oar_p(model, batch, **kwargs))
        row["token_over_hier_s"] = row["seconds"]["oar_p"] / hier_s
        scored = batch.scored_mask[0]
        row["top10_overlap"] = top_overlap(hier_scores[0], token_scores[0], scored)
        row["max_diff_in_chosen"] = float((hier_scores - token_scores)[chosen].abs().max())
    row["x_of_limit"] = {m: s / row["limit_s"][m] for m, s in row["seconds"].items()}
    return row


def _format(name: str, row: dict) -> str:
    text = (f"{name} reasoning {row['length']} (seq {row['seq_len']}), {row['steps']} steps, "
            f"{row['chosen_tokens']} tokens in the chosen steps:")
    for method, seconds in row["seconds"].items():
        text += (f"\n    {method:<10} {seconds:9.2f}s  limit {row['limit_s'][method]:8.2f}s "
                 f"({row['flops'][method] / 1e12:.3f} TFLOP)  {row['x_of_limit'][method]:5.2f}x of limit")
    text += f"\n    oar_p / oar_p_hier FLOPs {row['token_over_hier_flops']:.2f}x"
    if "token_over_hier_s" in row:
        text += (f", seconds {row['token_over_hier_s']:.2f}x; top-10% overlap with oar_p "
                 f"{row['top10_overlap']:.2f} (random 0.10); max |diff| in the chosen steps "
                 f"{row['max_diff_in_chosen']:.1e}")
    return text


def load(name: str, args):
    """(model, trace builder) of `--models` entry `name`."""
    dtype = getattr(torch, args.dtype)
    if name == "smollm2":
        from oar_attrib.models import load_model

        model, tokenizer = load_model("smollm2-135m")
        model = model.to(args.device, dtype)
        return model, lambda length: text_trace(tokenizer, length, args.step_unit)
    model = build_model(name, args.layers, args.device, dtype)
    return model, lambda length: synthetic_trace(length, args.steps, model.config.vocab_size)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=["qwen2-0.5b"],
                        help="qwen2 shapes have random weights; smollm2 is the real model on real text")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096],
                        help="reasoning tokens per trace")
    parser.add_argument("--steps", type=int, default=20, help="steps per synthetic trace")
    parser.add_argument("--step-unit", default="line", help="step unit of the smollm2 text (steps.step_spans)")
    parser.add_argument("--top-steps", type=int, default=3, help="oar_p_hier: steps scored per token")
    parser.add_argument("--top-mass", type=float, default=None, help="oar_p_hier: choose steps by mass instead")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers of a qwen2 shape (smoke runs)")
    parser.add_argument("--budget", type=int, default=None, help="max_batch_tokens (default: auto)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                        help="default: bfloat16 on a GPU, float32 on CPU")
    parser.add_argument("--skip-token", action="store_true",
                        help="do not run token OAR-P (no time ratio, no overlap; FLOP ratio only)")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="wall seconds, or this process's CPU seconds (one thread, shared CPU)")
    args = parser.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    if args.clock == "cpu":
        CLOCK[0] = time.process_time
    rate = matrix_rate(args.device, torch.bfloat16 if gpu else getattr(torch, args.dtype))
    print(f"{args.dtype} on {args.device} ({torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, {platform.machine()}), {args.clock} clock, matrix rate "
          f"{rate / 1e12:.3f} TFLOP/s; probe {PROBE}, budget {args.budget or 'auto'}, oar_p_hier "
          f"top_steps {args.top_steps} top_mass {args.top_mass}. qwen2 shapes: RANDOM weights "
          f"(layers: {args.layers or 'the shape own'}).", flush=True)
    results = []
    for name in args.models:
        model, trace = load(name, args)
        with torch.no_grad():  # warm-up, charged to no method
            oar_p_step(model, trace(min(args.lengths)).to(args.device), probe=PROBE)
        for length in args.lengths:
            row = {"model": name, **measure(model, trace(length).to(args.device), args, rate)}
            results.append(row)
            print(_format(name, row), flush=True)
        del model
    print(json.dumps({"bench": "steps", "device": args.device, "dtype": args.dtype,
                      "layers": args.layers, "matrix_tflops": rate / 1e12,
                      "random_weights": [m for m in args.models if m != "smollm2"],
                      "results": results}))


if __name__ == "__main__":
    main()
