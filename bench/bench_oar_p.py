"""Time the fast OAR-P engine against the brute-force reference and captum, on the same traces,
and against the hardware: the FLOPs the exact method needs over the device's measured matrix rate.

Models: Qwen2-0.5B and Qwen2.5-1.5B shapes with random weights (the timings do not depend on
the weights).
Each trace is a ~64-token prompt, a response of the given length ending in a 1-token bridge,
a 2-3 token answer span and a 1-token tail. All three methods score the same evenly spread
subset of `--positions` reasoning tokens (a full reference pass at 512 tokens is hundreds of
0.5B forwards), so their times are comparable. The probe is `as_joint`, the answer-span
log-likelihood, which is what captum's LLMAttribution attributes:
captum's attribution of position t is sum_k log p(a_k) - sum_k log p'(a_k) = K (phi - phi'),
so our score is max(attr / K, 0).

The limit: `exact_flops` counts what the windowed definition needs, the clean pass of each row
plus, per scored t, positions [min(t, q_1), q_K] recomputed on the clean cache (2 x non-embedding
decoder parameters per token, 4 x heads x head_dim per layer and query-key pair, the head at the
K probe sites); a timed square GEMM in the same run gives the device's matrix rate (bf16 on a
GPU, the bench's dtype on CPU); "x of limit" = measured seconds / (FLOPs / rate).

    python bench/bench_oar_p.py --lengths 128 512 --positions 16 --captum seq   # CPU
    python bench/bench_oar_p.py --layers 2 --lengths 32 64 --positions 8   # smoke run
    python bench/bench_oar_p.py           # with CUDA: bf16, 512/2048/4096, all positions, both shapes
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

from oar_attrib.inputs.batch import ScoringBatch  # noqa: E402
from oar_attrib.methods.oar_p import oar_p, oar_p_reference  # noqa: E402

PROBE = "as_joint"
# Wall time by default; `--clock cpu` times this process's CPU seconds instead, which other
# processes on a shared CPU machine do not inflate (single-threaded runs only).
CLOCK = [time.perf_counter]
PAD_ID = 151643  # Qwen2's <|endoftext|>, its pad token


SHAPES = {  # hidden, intermediate, layers, heads, kv heads
    "qwen2-0.5b": (896, 4864, 24, 14, 2),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2),
}


def build_model(shape: str, layers: int | None, device: str, dtype: torch.dtype):
    """A model of the named shape (optionally fewer layers), random weights, eval mode."""
    from oar_attrib.models import random_qwen2

    hidden, intermediate, n_layers, heads, kv_heads = SHAPES[shape]
    model = random_qwen2(151936, hidden=hidden, intermediate=intermediate,
                         layers=layers or n_layers, heads=heads, kv_heads=kv_heads,
                         max_positions=32768, init_std=0.02, pad_id=PAD_ID, dtype=dtype,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    return model.to(device)


def flop_terms(model) -> tuple[int, int]:
    """(non-embedding decoder parameters, FLOPs per causal query-key pair over all layers): a
    token's forward costs 2 x the first, attention 4 x heads x head_dim per layer and pair."""
    config = model.config
    decoder = sum(p.numel() for p in model.get_decoder().layers.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return decoder, 4 * config.num_hidden_layers * config.num_attention_heads * head_dim


def window_flops(model, start: int, end: int, kept: int) -> float:
    """FLOPs of one forward of positions [start, end) on a cache of [0, start): the decoder's
    linear layers, causal attention over every key up to each position, and the head at
    `kept` positions (`flop_terms`)."""
    decoder, per_pair = flop_terms(model)
    pairs = (end * (end + 1) - start * (start + 1)) / 2  # causal query-key pairs
    return 2 * decoder * (end - start) + per_pair * pairs + 2 * model.config.vocab_size * model.config.hidden_size * kept


def exact_flops(model, batch: ScoringBatch, copies: torch.Tensor | None = None) -> float:
    """FLOPs of the exact windowed method on `batch` (see the module docstring): the clean pass
    of every row with a copy, plus one window [min(t, q_1), q_K] per copy anchored at t.

    copies: (B, L) int, the number of perturbed copies anchored at each position (a step copy
    at its step's first position, `perturb.unit_anchors`); default one per reachable position,
    token OAR-P."""
    from oar_attrib.methods.perturb import reachable_positions
    from oar_attrib.methods.probes import probe_sites

    sites = probe_sites(batch)
    if copies is None:
        copies = reachable_positions(batch, sites).long()
    window = lambda start, end, k: window_flops(model, start, end, k)  # noqa: E731
    total = 0.0
    for row in range(batch.input_ids.shape[0]):
        if not bool(copies[row].any()):
            continue
        end, first, k = int(sites.last[row]) + 1, int(sites.positions[row, 0]), int(sites.valid[row].sum())
        total += window(0, end, k)
        total += sum(int(copies[row, t]) * window(min(t, first), end, k)
                     for t in copies[row].nonzero().flatten().tolist())
    return total


def matrix_rate(device: str, dtype: torch.dtype, seconds: float = 1.0) -> float:
    """FLOP/s of a square matrix product on `device` in `dtype`, timed for ~`seconds`."""
    n = 8192 if device.startswith("cuda") else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b  # warm-up
    sync()
    count, start = 0, CLOCK[0]()
    while CLOCK[0]() - start < seconds:
        a @ b
        count += 1
        sync()
    return 2 * n ** 3 * count / (CLOCK[0]() - start)


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
    """(seconds, result, number of model forwards, peak extra device memory in GiB) of fn()."""
    calls = [0]
    cuda = next(model.parameters()).device.type == "cuda"

    def count(*args):
        calls[0] += 1

    # On the decoder: captum calls model.forward directly, which skips the model's own hooks.
    handle = model.get_decoder().register_forward_hook(count)
    try:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        start = CLOCK[0]()
        result = fn()
        if cuda:
            torch.cuda.synchronize()
        seconds = CLOCK[0]() - start
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else float("nan")
        return seconds, result.float().cpu(), calls[0], peak
    finally:
        handle.remove()


def run(args, shape: str, rate: float) -> list[dict]:
    dtype = getattr(torch, args.dtype)
    model = build_model(shape, args.layers, args.device, dtype)
    with torch.no_grad():  # warm-up: thread pools and allocator, charged to no method
        model(torch.zeros((1, 64), dtype=torch.long, device=args.device))
    from oar_attrib.methods.oar_p_packed import mask_kind

    packings = ["padded"] + (["packed"] if mask_kind(model) else [])
    rows = []
    for index, length in enumerate(args.lengths):
        batch = make_trace(length, args.positions, seed=index)
        flops = exact_flops(model, batch)
        row = dict(shape=shape, response_len=length, seq_len=int(batch.input_ids.shape[1]),
                   positions=int(batch.scored_mask.sum()), exact_tflop=flops / 1e12,
                   limit_s=flops / rate)
        fast = {}
        for packing in packings:
            seconds, fast[packing], forwards, peak = _timed(
                lambda: oar_p(model, batch, probe=PROBE, max_batch_tokens=args.max_batch_tokens,
                              packing=packing), model)
            row[packing] = dict(s=seconds, forwards=forwards, peak_gib=peak,
                                x_of_limit=seconds / row["limit_s"])
        best = min(packings, key=lambda p: row[p]["s"])
        row["best"] = best
        if len(packings) > 1:
            row["maxdiff_packed_padded"] = float((fast["packed"] - fast["padded"]).abs().max())
        if not args.skip_reference:
            ref_s, ref, ref_fwd, ref_peak = _timed(lambda: oar_p_reference(model, batch, PROBE), model)
            row["reference"] = dict(s=ref_s, forwards=ref_fwd, peak_gib=ref_peak)
            row["ratio_reference_fast"] = {p: ref_s / row[p]["s"] for p in packings}
            row["maxdiff_fast_reference"] = max(float((fast[p] - ref).abs().max()) for p in packings)
        if not args.skip_captum:
            cap_s, cap, cap_fwd, _ = _timed(lambda: captum_scores(model, batch, args.captum_mode),
                                            model)
            row["captum"] = dict(s=cap_s, forwards=cap_fwd)
            row["ratio_captum_fast"] = cap_s / row[best]["s"]
            row["maxdiff_fast_captum"] = float((fast[best] - cap).abs().max())
        rows.append(row)
        print(_format_row(row, packings), flush=True)
    return rows


def _format_row(row: dict, packings: list[str]) -> str:
    text = (f"{row['shape']} response {row['response_len']:>5} (seq {row['seq_len']}), "
            f"{row['positions']} positions: exact method {row['exact_tflop']:.3f} TFLOP, "
            f"limit {row['limit_s']:.3f} s")
    for packing in packings:
        r = row[packing]
        peak = "" if r["peak_gib"] != r["peak_gib"] else f", peak +{r['peak_gib']:.2f} GiB"
        text += (f"\n    fast {packing:<6} {r['s']:8.2f}s ({r['forwards']} fwd{peak})"
                 f"  {r['x_of_limit']:5.2f}x of the limit")
        if "reference" in row:
            text += f"  ref/fast {row['ratio_reference_fast'][packing]:5.2f}x"
    if "reference" in row:
        text += f"\n    reference    {row['reference']['s']:8.2f}s ({row['reference']['forwards']} fwd)"
    if "captum" in row:
        text += (f"\n    captum       {row['captum']['s']:8.2f}s ({row['captum']['forwards']} fwd)"
                 f"  captum/fast {row['ratio_captum_fast']:5.2f}x")
    diffs = [f"{name} {row[key]:.2e}" for name, key in (
        ("fast-ref", "maxdiff_fast_reference"), ("packed-padded", "maxdiff_packed_padded"),
        ("fast-captum", "maxdiff_fast_captum")) if key in row]
    return text + ("\n    max |score diff|: " + ", ".join(diffs) if diffs else "")


def _defaults(args) -> None:
    """Fill the settings left unset: a GPU run is bf16, 512/2048/4096 tokens, every reasoning
    position, both shapes; a CPU run float32, 128/512 tokens, 8 positions, Qwen2-0.5B (about
    2-3 minutes on one thread)."""
    gpu = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    args.lengths = args.lengths or ([512, 2048, 4096] if gpu else [128, 512])
    args.positions = (0 if gpu else 8) if args.positions is None else args.positions
    args.shapes = args.shapes or (list(SHAPES) if gpu else ["qwen2-0.5b"])
    if not args.skip_captum:
        try:
            import captum  # noqa: F401
        except ImportError:
            print("captum is not installed: skipping it", flush=True)
            args.skip_captum = True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="response lengths in tokens (the prompt adds 64); default 128 512 "
                             "on CPU, 512 2048 4096 on a GPU")
    parser.add_argument("--positions", type=int, default=None,
                        help="scored positions per trace, evenly spread (0: all reasoning tokens; "
                             "default 8 on CPU, 0 on a GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="torch device (default: cuda when present)")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                        help="model dtype (default: bfloat16 on a GPU, float32 on CPU)")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=None,
                        help="model shapes (default: qwen2-0.5b on CPU, both on a GPU)")
    parser.add_argument("--layers", type=int, default=None,
                        help="decoder layers (default: the shape's own)")
    parser.add_argument("--max-batch-tokens", type=int, default=None,
                        help="token budget of one fast-engine forward (default: auto)")
    parser.add_argument("--skip-reference", action="store_true", help="do not run the reference")
    parser.add_argument("--captum", default="off", choices=["off", "seq", "tokens"],
                        help="also time captum: seq, one exact forward per ablation; tokens, "
                             "captum's default token-by-token generation (inexact under "
                             "transformers 5.x); default off")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="wall seconds, or this process's CPU seconds (for a CPU run with "
                             "one thread on a shared machine)")
    args = parser.parse_args(argv)
    args.skip_captum, args.captum_mode = args.captum == "off", args.captum
    if args.clock == "cpu":
        if args.device.startswith("cuda"):
            parser.error("--clock cpu times CPU work only; use wall time on a GPU")
        CLOCK[0] = time.process_time
    _defaults(args)
    gemm_dtype = torch.bfloat16 if args.device.startswith("cuda") else getattr(torch, args.dtype)
    rate = matrix_rate(args.device, gemm_dtype)
    captum = "off" if args.skip_captum else args.captum_mode
    print(f"{', '.join(args.shapes)} shapes, random weights, {args.dtype} on {args.device}"
          f" ({torch.get_num_threads()} threads, torch {torch.__version__}, {platform.machine()});"
          f" probe {PROBE}; captum mode {captum}; {args.clock} clock; budget "
          f"{args.max_batch_tokens or 'auto'}.\nMeasured matrix rate: {rate / 1e12:.3f} TFLOP/s "
          f"({str(gemm_dtype).replace('torch.', '')} GEMM). Every method scores the SAME "
          f"{args.positions or 'all'} evenly spread reasoning positions per trace, so the time "
          "ratios compare equal work.", flush=True)
    rows = [row for shape in args.shapes for row in run(args, shape, rate)]
    print(json.dumps({"bench": "oar_p", "layers": args.layers, "dtype": args.dtype,
                      "captum_mode": None if args.skip_captum else args.captum_mode,
                      "device": args.device, "probe": PROBE, "matrix_tflops": rate / 1e12,
                      "results": rows}))


if __name__ == "__main__":
    main()
