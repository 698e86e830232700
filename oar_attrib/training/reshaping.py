"""Token weights of a generation batch, in the layout TRL trains on (METHOD.md 2, 6).

TRL hands over left-padded prompts and right-padded completions. Each row is unpadded, its
completion decoded with character offsets (`offsets_from_ids`), split into segments, and the
rows laid out as a right-padded `ScoringBatch`. Importances of the current policy (the method
from the registry, `methods.method_spec`) go through a registered weighting (the method's own
unless the settings name another, `weightings`), and the weights are mapped back to the (B, C)
completion positions. Everything outside the scored reasoning positions S, and every
row without an answer span, gets weight 1.

Weights depend only on the sample, never on which rank or batch it lands in: random numbers
come from a generator per row, seeded from a hash of the row's token ids (`sample_seed`), and a
method registered `random=True` draws row b's numbers from generator b, as it would alone.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from oar_attrib.batch import ScoringBatch
from oar_attrib.budget import CPU_BATCH_TOKENS
from oar_attrib.inputs import EncodedPair, pair_from_offsets, pairs_to_batch
from oar_attrib.lm import eval_mode
from oar_attrib.methods import method_spec
from oar_attrib.spans import offsets_from_ids_batch
from oar_attrib.step_gating import step_weights
from oar_attrib.weightings import WeightingParams, get_weighting


@dataclass(frozen=True)
class ReshapeSettings:
    """What `token_weights` computes; mirrors the oar_* fields of `OARConfig`."""

    method: str = "oar_g"
    probe: str = "as_mean"
    tau: float = 0.4
    beta: float = 2.0
    w_min: float = 0.1
    noise_std: float | None = None  # None: OAR-G's relative noise
    max_batch_tokens: int | None = None  # None: OAR-P's auto budget; rows grouped by 16384
    weighting: str | None = None
    rho: float = 0.2
    answer_format: str = "auto"
    answer_pattern: str | None = None
    seed: int = 0
    granularity: str = "token"
    step_pool: str = "mean"

    @classmethod
    def from_config(cls, args, probe: str | None = None) -> "ReshapeSettings":
        return cls(
            method=args.oar_method, probe=probe or args.oar_probe, tau=args.oar_tau,
            beta=args.oar_beta, w_min=args.oar_w_min, noise_std=args.oar_noise_std,
            max_batch_tokens=args.oar_max_batch_tokens, weighting=args.oar_weighting,
            rho=args.oar_entropy_rho, answer_format=args.answer_format,
            answer_pattern=args.answer_pattern, seed=args.seed,
            granularity=args.oar_granularity,
            step_pool=args.oar_step_pool,
        )


@dataclass
class TokenWeights:
    """Weights of B completions, aligned with TRL's right-padded completion tensor (B, C).

    weights:     (B, C) float32, 1 outside S and on padding.
    importances: (B, C) float32, the method's scores on S, 0 elsewhere.
    scored:      (B, C) bool, the scored reasoning positions S.
    span_found:  (B,) bool, rows whose answer span was found.
    attributed:  (B,) bool, rows the importance method scored (found span, scored positions,
                 and selected: the trainer skips completions whose advantage is 0).
    nonfinite:   (B,) bool, rows whose importances were NaN or inf: weight 1, never gated.
    pairs:       the encoded rows (text, offsets, segment labels), for the run store.
    seconds:     wall time of the whole computation.
    """

    weights: torch.Tensor
    importances: torch.Tensor
    scored: torch.Tensor
    span_found: torch.Tensor
    attributed: torch.Tensor
    nonfinite: torch.Tensor
    pairs: list[EncodedPair]
    seconds: float

    def __post_init__(self) -> None:
        shape = tuple(self.weights.shape)
        for name in ("importances", "scored"):
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"{name} must have the weights' shape {shape}")
        for name in ("span_found", "attributed", "nonfinite", "pairs"):
            if len(getattr(self, name)) != shape[0]:
                raise ValueError(f"{name} must have one entry per row ({shape[0]})")


def unpad_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
               completion_mask: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
    """Token id lists of each row: prompt (left-padded, P) and completion (right-padded, C).

    prompt_ids, prompt_mask: (B, P); completion_ids, completion_mask: (B, C). The completion is
    its first mask-sum tokens, so a completion TRL masked out (truncated) comes back empty.
    """
    prompts = [ids[m.bool()].tolist() for ids, m in zip(prompt_ids.cpu(), prompt_mask.cpu())]
    lengths = completion_mask.sum(dim=1).tolist()
    completions = [ids[:n].tolist() for ids, n in zip(completion_ids.cpu(), lengths)]
    return prompts, completions


def encode_row(tokenizer, prompt_ids: list[int], completion_ids: list[int], answer_format: str = "auto",
               answer_pattern: str | None = None) -> EncodedPair:
    """One row as an EncodedPair: the completion's offsets come from its ids, so the segments
    match the tokens that were sampled (no re-tokenization)."""
    return encode_rows(tokenizer, [prompt_ids], [completion_ids], answer_format, answer_pattern)[0]


def encode_rows(tokenizer, prompt_rows: Sequence[list[int]], completion_rows: Sequence[list[int]],
                answer_format: str = "auto", answer_pattern: str | None = None) -> list[EncodedPair]:
    """`encode_row` of every row, the completions decoded in one tokenizer call."""
    decoded = offsets_from_ids_batch(tokenizer, completion_rows)
    return [pair_from_offsets(prompt_ids, completion_ids, offsets, text, answer_format=answer_format,
                              answer_pattern=answer_pattern)
            for prompt_ids, completion_ids, (offsets, text) in zip(prompt_rows, completion_rows, decoded)]


def sample_seed(seed: int, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> int:
    """A 63-bit seed from the run seed and a row's token ids: equal rows, equal seeds, on
    every rank and in every batch."""
    digest = hashlib.sha256(f"{seed}|{list(prompt_ids)}|{list(completion_ids)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _chunks(rows: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Rows grouped in order so that each group's total length stays within `budget` (a row
    longer than the budget goes alone)."""
    groups, current, used = [], [], 0
    for row in rows:
        if current and used + lengths[row] > budget:
            groups.append(current)
            current, used = [], 0
        current.append(row)
        used += lengths[row]
    return groups + ([current] if current else [])


def batch_importances(model, batch: ScoringBatch, pairs: list[EncodedPair], settings: ReshapeSettings,
                      rows: list[int]) -> torch.Tensor:
    """(B, L) float32 importances on CPU of the given rows, 0 elsewhere and outside S.

    Rows repeating an earlier row (same prompt and completion, common in a sampled group) are
    scored once and copied: a row's importances depend on its ids alone.
    """
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    first: dict[tuple, int] = {}
    copies = {r: first.setdefault((tuple(pairs[r].prompt_ids), tuple(pairs[r].response_ids)), r)
              for r in rows}
    rows = [r for r in rows if copies[r] == r]
    if not rows:
        return out
    spec = method_spec(settings.method)
    lengths = [p.length for p in pairs]
    device = next(model.parameters()).device
    for group in _chunks(rows, lengths, settings.max_batch_tokens or CPU_BATCH_TOKENS):
        sub = batch.select(group).to(device)
        generators = [torch.Generator().manual_seed(sample_seed(settings.seed, pairs[r].prompt_ids,
                                                                pairs[r].response_ids)) for r in group]
        kwargs = spec.kwargs(settings, longest=max(lengths[r] for r in group), generators=generators)
        scores = spec.fn(model, sub, probe=settings.probe, **kwargs)
        out[group, : sub.input_ids.shape[1]] = scores.float().cpu()
    for row, source in copies.items():
        if row != source:
            out[row] = out[source]
    return out


def gate(importances: torch.Tensor, scored: torch.Tensor, settings: ReshapeSettings,
         step_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L) weights of (B, L) importances over the (B, L) bool scored mask, through the
    settings' weighting (default: the method's own); with granularity 'step', the weighting
    runs over the steps of `step_ids` and each step's weight goes to its tokens
    (`step_gating.step_weights`)."""
    fn = get_weighting(settings.weighting or method_spec(settings.method).weighting)
    params = WeightingParams(tau=settings.tau, beta=settings.beta, w_min=settings.w_min, rho=settings.rho)
    if settings.granularity == "step":
        return step_weights(importances, scored, step_ids, settings.step_pool,
                            lambda values, valid: fn(values, valid, params))
    return fn(importances, scored, params)


def _to_completion(values: torch.Tensor, pairs: list[EncodedPair], width: int, fill) -> torch.Tensor:
    """(B, L) row-layout values -> (B, width) completion-aligned, `fill` past each completion."""
    out = torch.full((len(pairs), width), fill, dtype=values.dtype)
    for b, p in enumerate(pairs):
        n = min(len(p.response_ids), width)
        out[b, :n] = values[b, p.response_start : p.response_start + n]
    return out


def token_weights(model, tokenizer, prompt_rows: list[list[int]], completion_rows: list[list[int]],
                  width: int, settings: ReshapeSettings, select: Sequence[bool] | None = None) -> TokenWeights:
    """Weights (B, width) of B completions for the current policy `model` (no parameter grads).

    prompt_rows, completion_rows: B unpadded token id lists. width: C, the completion width.
    select: (B,) which rows to attribute (default all); the others keep weight 1.
    With method 'none' the spans are still found (for metrics and the run store), weights are 1.
    """
    start = time.perf_counter()
    pairs = encode_rows(tokenizer, prompt_rows, completion_rows, settings.answer_format, settings.answer_pattern)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = pairs_to_batch(pairs, int(pad))
    scored = batch.scored_mask & batch.has_answer[:, None]
    importances = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    weights = torch.ones_like(importances)
    nonfinite = torch.zeros(len(pairs), dtype=torch.bool)
    attributed = scored.any(dim=1) & torch.as_tensor(
        [True] * len(pairs) if select is None else list(select), dtype=torch.bool)
    if settings.method == "none":
        attributed = torch.zeros_like(attributed)
    else:
        with eval_mode(model):
            importances = batch_importances(model, batch, pairs, settings,
                                            attributed.nonzero().flatten().tolist())
        # A diverged row must not stop the run: it keeps weight 1 and is counted in the logs.
        nonfinite = (scored & ~torch.isfinite(importances)).any(dim=1)
        importances[nonfinite] = 0.0
        weights = gate(importances, scored & (attributed & ~nonfinite)[:, None], settings,
                       batch.step_ids)
    return TokenWeights(
        weights=_to_completion(weights, pairs, width, 1.0),
        importances=_to_completion(importances, pairs, width, 0.0),
        scored=_to_completion(scored, pairs, width, False),
        span_found=torch.tensor([p.span_found for p in pairs], dtype=torch.bool),
        attributed=attributed,
        nonfinite=nonfinite,
        pairs=pairs,
        seconds=time.perf_counter() - start,
    )
