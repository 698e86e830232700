"""Time the fast OAR-P engine against the brute-force reference and captum, on the same traces.

Model: Qwen2-0.5B shapes with random weights (the timings do not depend on the weights).
Each trace is a ~64-token prompt, a response of the given length ending in a 1-token bridge,
a 2-3 token answer span and a 1-token tail. All three methods score the same evenly spread
subset of `--positions` reasoning tokens (a full reference pass at 512 tokens is hundreds of
0.5B forwards), so their times are comparable. The probe is `as_joint`, the answer-span
log-likelihood, which is what captum's LLMAttribution attributes:
captum's attribution of position t is sum_k log p(a_k) - sum_k log p'(a_k) = K (phi - phi'),
so our score is max(attr / K, 0).

    python bench/bench_oar_p.py --lengths 128 512 --positions 16
    python bench/bench_oar_p.py --layers 2 --lengths 32 64 --positions 8   # smoke run
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oar_attrib.batch import ScoringBatch  # noqa: E402
from oar_attrib.oar_p import oar_p, oar_p_reference  # noqa: E402

PROBE = "as_joint"
PAD_ID = 151643  # Qwen2's <|endoftext|>, its pad token


def build_model(layers: int, device: str, dtype: torch.dtype):
    """Qwen2-0.5B shapes, random weights, eval mode."""
    from oar_attrib.models import random_qwen2

    model = random_qwen2(151936, hidden=896, intermediate=4864, layers=layers, heads=14, kv_heads=2,
                         max_positions=32768, init_std=0.02, pad_id=PAD_ID, dtype=dtype,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    return model.to(device)


def make_trace(response_len: int, n_positions: int, seed: int, prompt_len: int = 64,
               vocab: int = 151936) -> ScoringBatch:
    """One row: prompt | reasoning | bridge | answer (2-3 tokens) | tail; the scored mask
    holds `n_positions` reasoning positions spread evenly (all of them if 0)."""
    gen = torch.Generator().manual_seed(seed)
    k = 2 + seed % 2
    length = prompt_len + response_len
    ids = torch.randint(0, 150000, (1, length), generator=gen)
    answer_start = length - 1 - k
    reasoning = torch.arange(prompt_len, answer_start - 1)
    if 0 < n_positions < len(reasoning):
        pick = torch.linspace(0, len(reasoning) - 1, n_positions).round().long()
        reasoning = reasoning[pick]
    scored = torch.zeros((1, length), dtype=torch.bool)
    scored[0, reasoning] = True
    answer = torch.zeros((1, length), dtype=torch.bool)
    answer[0, answer_start:answer_start + k] = True
    return ScoringBatch(ids, torch.ones_like(ids), scored, answer, PAD_ID)


class _Tokenizer:
    """The little of a tokenizer that captum's LLMAttribution uses when it is given token ids
    (it decodes and re-encodes the target to pretty-print it): token i is the text <i>."""

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(f"<{i}>" for i in (ids if isinstance(ids, list) else [ids]))

    def __call__(self, text: str, **kwargs) -> dict:
        spans = [m.span() for m in re.finditer(r"<(\d+)>", text)]
        return {"input_ids": [int(text[a + 1:b - 1]) for a, b in spans], "offset_mapping": spans}

    def encode(self, text: str, **kwargs) -> list[int]:
        return self(text)["input_ids"]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [f"<{i}>" for i in ids]


def captum_scores(model, batch: ScoringBatch, mode: str = "seq") -> torch.Tensor:
    """OAR-P `as_joint` scores of the batch's single row by captum's FeatureAblation: each
    scored position is replaced by the pad token (the prompt is never perturbed) and the
    target is the answer span.

    mode "seq": one forward of input + answer per ablation (`forward_in_tokens=False`), the
    exact log-likelihood. mode "tokens": captum's default, the answer generated token by token
    with a cache; with transformers 5.x captum feeds the whole sequence again on top of the
    cache at every answer token after the first, so it is slower and its log-probabilities
    of answer tokens 2..K are wrong (the score differences show it).
    """
    from captum.attr import FeatureAblation, LLMAttribution, TextTokenInput

    class PositionsInput(TextTokenInput):
        """TextTokenInput whose features are chosen positions of a token-id sequence."""

        def __init__(self, input_ids: torch.Tensor, positions: torch.Tensor, pad_id: int):
            self.inp_tensor = input_ids  # (1, n)
            self.itp_mask = torch.zeros_like(input_ids, dtype=torch.bool)
            self.itp_mask[0, positions] = True
            self.itp_tensor = input_ids[self.itp_mask].unsqueeze(0)
            self.skip_tokens = None
            self.tokenizer = None
            self.values = [str(p) for p in positions.tolist()]
            self.n_itp_features = len(self.values)
            self.baselines = pad_id

    answer_pos = batch.answer_mask[0].nonzero().flatten()
    input_ids = batch.input_ids[:, :int(answer_pos[0])]
    positions = batch.scored_mask[0].nonzero().flatten()
    llm_attr = LLMAttribution(FeatureAblation(model), _Tokenizer(), attr_target="log_prob")
    with torch.no_grad():
        result = llm_attr.attribute(PositionsInput(input_ids, positions, batch.pad_token_id),
                                    target=batch.input_ids[0, answer_pos],
                                    forward_in_tokens=(mode == "tokens"))
    scores = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    scores[0, positions] = (result.seq_attr.float().cpu() / len(answer_pos)).clamp_min(0.0)
    return scores


def _timed(fn, model):
    """(seconds, result, number of model forwards) of fn()."""
    calls = [0]

    def count(*args):
        calls[0] += 1

    # On the decoder: captum calls model.forward directly, which skips the model's own hooks.
    handle = model.get_decoder().register_forward_hook(count)
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result.float().cpu(), calls[0]
    finally:
        handle.remove()


def run(args) -> list[dict]:
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    model = build_model(args.layers, args.device, dtype)
    with torch.no_grad():  # warm-up: thread pools and allocator, charged to no method
        model(torch.zeros((1, 64), dtype=torch.long, device=args.device))
    rows = []
    for index, length in enumerate(args.lengths):
        batch = make_trace(length, args.positions, seed=index)
        n_scored = int(batch.scored_mask.sum())
        fast_s, fast, fast_fwd = _timed(
            lambda: oar_p(model, batch, probe=PROBE, max_batch_tokens=args.max_batch_tokens), model)
        ref_s, ref, ref_fwd = _timed(lambda: oar_p_reference(model, batch, PROBE), model)
        row = dict(response_len=length, seq_len=int(batch.input_ids.shape[1]), positions=n_scored,
                   fast_s=fast_s, reference_s=ref_s, fast_forwards=fast_fwd,
                   reference_forwards=ref_fwd, ratio_reference_fast=ref_s / fast_s,
                   maxdiff_fast_reference=float((fast - ref).abs().max()))
        if not args.skip_captum:
            cap_s, cap, cap_fwd = _timed(lambda: captum_scores(model, batch, args.captum_mode),
                                           model)
            row.update(captum_s=cap_s, captum_forwards=cap_fwd, ratio_captum_fast=cap_s / fast_s,
                       maxdiff_fast_captum=float((fast - cap).abs().max()),
                       maxdiff_reference_captum=float((ref - cap).abs().max()))
        rows.append(row)
        print(_format_row(row), flush=True)
    return rows


def _format_row(row: dict) -> str:
    text = (f"response {row['response_len']:>5} (seq {row['seq_len']}), "
            f"{row['positions']} positions"
            f" | fast {row['fast_s']:8.2f}s ({row['fast_forwards']} fwd)"
            f" | reference {row['reference_s']:8.2f}s ({row['reference_forwards']} fwd)"
            f" | ref/fast {row['ratio_reference_fast']:5.2f}x")
    if "captum_s" in row:
        text += (f" | captum {row['captum_s']:8.2f}s ({row['captum_forwards']} fwd)"
                 f" | captum/fast {row['ratio_captum_fast']:5.2f}x")
    text += f"\n    max |score diff|: fast-ref {row['maxdiff_fast_reference']:.2e}"
    if "captum_s" in row:
        text += (f", fast-captum {row['maxdiff_fast_captum']:.2e}"
                 f", ref-captum {row['maxdiff_reference_captum']:.2e}")
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512],
                        help="response lengths in tokens (the prompt adds 64)")
    parser.add_argument("--positions", type=int, default=16,
                        help="scored positions per trace, evenly spread (0: all reasoning tokens)")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--layers", type=int, default=24, help="decoder layers (24 = Qwen2-0.5B)")
    parser.add_argument("--max-batch-tokens", type=int, default=16384,
                        help="token budget of one fast-engine forward")
    parser.add_argument("--skip-captum", action="store_true", help="do not run captum")
    parser.add_argument("--captum-mode", default="seq", choices=["seq", "tokens"],
                        help="seq: one exact forward per ablation; tokens: captum's default "
                             "token-by-token generation (inexact under transformers 5.x)")
    args = parser.parse_args(argv)
    captum = "off" if args.skip_captum else args.captum_mode
    print(f"Qwen2-0.5B shapes, {args.layers} layers, random weights, {args.dtype} on {args.device}"
          f" ({torch.get_num_threads()} threads, torch {torch.__version__}, {platform.machine()});"
          f" probe {PROBE}; captum mode {captum}.\nEvery method scores the SAME "
          f"{args.positions or 'all'} evenly spread reasoning positions per trace, so the time "
          "ratios compare equal work.", flush=True)
    rows = run(args)
    print(json.dumps({"bench": "oar_p", "layers": args.layers, "dtype": args.dtype,
                      "captum_mode": None if args.skip_captum else args.captum_mode,
                      "device": args.device, "probe": PROBE, "results": rows}))


if __name__ == "__main__":
    main()
