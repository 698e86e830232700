"""Step-level OAR-P against token OAR-P on the same long trace, side by side in one run.

Model: a small Qwen2 with random weights (the timings do not depend on the weights; the ratio
is what this measures: one perturbation per step instead of one per token). The trace is one
row: a prompt, a reasoning of `--length` tokens cut into steps of 20-40 tokens (the length of
a GSM8K / MATH-500 solution line), a 1-token bridge, a 2-token answer span and a 1-token tail.
Both engines score every reasoning token (token OAR-P: one perturbation per token; oar_p_step:
one per step) with the same budget, probe and defaults, and the script prints seconds, the
number of perturbations and the ratio.

    OMP_NUM_THREADS=1 python bench/bench_steps.py --length 2048
    python bench/bench_steps.py --length 256 --skip-token   # smoke run
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oar_attrib.inputs.batch import ScoringBatch, step_ids_from_ranges  # noqa: E402
from oar_attrib.methods.oar_p import oar_p  # noqa: E402
from oar_attrib.methods.oar_p_step import oar_p_step  # noqa: E402

PAD_ID = 0


def build_model(hidden: int, layers: int, vocab: int, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192, tie_word_embeddings=True, pad_token_id=PAD_ID,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(device).eval()


def make_trace(length: int, vocab: int, prompt_len: int = 64, seed: int = 0) -> ScoringBatch:
    """One row: prompt | `length` reasoning tokens in steps of 20-40 | bridge | answer (2) | tail."""
    gen = torch.Generator().manual_seed(seed)
    total = prompt_len + length + 4
    ids = torch.randint(1, vocab, (1, total), generator=gen)
    scored = torch.zeros((1, total), dtype=torch.bool)
    scored[0, prompt_len:prompt_len + length] = True
    answer = torch.zeros((1, total), dtype=torch.bool)
    answer[0, prompt_len + length + 1:prompt_len + length + 3] = True
    ranges, start = [], prompt_len
    while start < prompt_len + length:
        end = min(start + int(torch.randint(20, 41, (1,), generator=gen)), prompt_len + length)
        ranges.append((start, end))
        start = end
    return ScoringBatch(ids, torch.ones_like(ids), scored, answer, PAD_ID,
                        step_ids_from_ranges((1, total), [ranges]))


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=2048, help="reasoning tokens")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--budget", type=int, default=16384, help="max_batch_tokens of both engines")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-token", action="store_true", help="time oar_p_step only")
    args = parser.parse_args()
    model = build_model(args.hidden, args.layers, args.vocab, args.device)
    batch = make_trace(args.length, args.vocab).to(args.device)
    n_steps = len(batch.step_ranges(0))
    with torch.no_grad():
        oar_p_step(model, make_trace(64, args.vocab).to(args.device), probe="as_mean")  # warm-up
    step_scores, step_s = timed(oar_p_step, model, batch, probe="as_mean", max_batch_tokens=args.budget)
    result = {"length": args.length, "steps": n_steps, "oar_p_step_s": round(step_s, 3),
              "device": args.device, "machine": platform.machine(), "torch": torch.__version__}
    if not args.skip_token:
        token_scores, token_s = timed(oar_p, model, batch, probe="as_mean", max_batch_tokens=args.budget)
        # A sanity link between the two: both are >= 0 on the reasoning and 0 elsewhere.
        assert (token_scores[~batch.scored_mask] == 0).all() and (step_scores[~batch.scored_mask] == 0).all()
        result |= {"perturbations_token": int(batch.scored_mask.sum()), "oar_p_s": round(token_s, 3),
                   "ratio_token_over_step": round(token_s / step_s, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
