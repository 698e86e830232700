"""Token weights of a generation batch, in the layout TRL trains on (METHOD.md 2, 6).

TRL hands over left-padded prompts and right-padded completions. Each row is unpadded, its
completion decoded with character offsets (`offsets_from_ids`), split into segments, and the
rows laid out as a right-padded `ScoringBatch`. The one weights pipeline
(`weights.score_and_weight`, the same `attribute()` runs) scores and gates it under the
trainer's `ReshapeSettings`, and the weights are mapped back to the (B, C) completion
positions. Everything outside the scored reasoning positions S, and every row without an
answer span, gets weight 1.

Weights depend only on the sample, never on which rank or batch it lands in: a random method
draws each row's numbers from a generator seeded from the run seed and the row's token ids
(`weights.row_seed`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import torch

from oar_attrib.defaults import ANSWER_FORMAT
from oar_attrib.inputs.batch import GroupOutcomes
from oar_attrib.inputs.encoding import EncodedPair, pair_from_offsets, pairs_to_batch
from oar_attrib.inputs.spans import ANSWER_FORMATS, MARKER_FORMATS, offsets_from_ids_batch
from oar_attrib.weights import pipeline
from oar_attrib.methods import method_spec
from oar_attrib.weights.gating import reshape_advantages
from oar_attrib.weights.metrics import ess_ratio, top_mass
from oar_attrib.weights.settings import ReshapeSettings
from oar_attrib.weights.weightings import weighting_spec

__all__ = ["LOW_SPAN_RATE", "ReshapeSettings", "TokenWeights", "encode_row", "encode_rows", "formats_tried",
           "low_span_rate_message", "metric_sums", "nonzero_rows", "oar_metrics", "token_advantages", "token_weights",
           "unpad_rows"]


@dataclass
class TokenWeights:
    """Weights of B completions, aligned with TRL's right-padded completion tensor (B, C).

    weights:     (B, C) float32, 1 outside S and on padding.
    importances: (B, C) float32, the method's scores on S (NaN or inf as computed), 0 elsewhere.
    scored:      (B, C) bool, the scored reasoning positions S.
    span_found:  (B,) bool, rows whose answer span was found.
    attributed:  (B,) bool, rows the importance method scored (found span, scored positions,
                 and selected: the trainer skips completions whose advantage is 0).
    nonfinite:   (B,) bool, rows whose importances were NaN or inf: weight 1, never gated.
    pairs:       the encoded rows (text, offsets, segment labels), for the run store.
    seconds:     wall time of the whole computation.
    bonus:       (B, C) float32, the term an additive weighting (KTAE) adds to the advantage:
                 A_{i,t} = A_i * w_t + bonus; 0 for every other weighting.
    """

    weights: torch.Tensor
    importances: torch.Tensor
    scored: torch.Tensor
    span_found: torch.Tensor
    attributed: torch.Tensor
    nonfinite: torch.Tensor
    pairs: list[EncodedPair]
    seconds: float
    bonus: torch.Tensor = field(default=None)

    def __post_init__(self) -> None:
        shape = tuple(self.weights.shape)
        if self.bonus is None:
            self.bonus = torch.zeros(shape, dtype=torch.float32)
        for name in ("importances", "scored", "bonus"):
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


def encode_row(tokenizer, prompt_ids: list[int], completion_ids: list[int], answer_format: str = ANSWER_FORMAT,
               answer_pattern: str | None = None) -> EncodedPair:
    """One row as an EncodedPair: the completion's offsets come from its ids, so the segments
    match the tokens that were sampled (no re-tokenization)."""
    return encode_rows(tokenizer, [prompt_ids], [completion_ids], answer_format, answer_pattern)[0]


def encode_rows(tokenizer, prompt_rows: Sequence[list[int]], completion_rows: Sequence[list[int]],
                answer_format: str = ANSWER_FORMAT, answer_pattern: str | None = None) -> list[EncodedPair]:
    """`encode_row` of every row, the completions decoded in one tokenizer call."""
    decoded = offsets_from_ids_batch(tokenizer, completion_rows)
    return [pair_from_offsets(prompt_ids, completion_ids, offsets, text, answer_format=answer_format,
                              answer_pattern=answer_pattern)
            for prompt_ids, completion_ids, (offsets, text) in zip(prompt_rows, completion_rows, decoded)]


def _to_completion(values: torch.Tensor, pairs: list[EncodedPair], width: int, fill) -> torch.Tensor:
    """(B, L) row-layout values -> (B, width) completion-aligned, `fill` past each completion."""
    out = torch.full((len(pairs), width), fill, dtype=values.dtype)
    for b, p in enumerate(pairs):
        n = min(len(p.response_ids), width)
        out[b, :n] = values[b, p.response_start : p.response_start + n]
    return out


def token_weights(model, tokenizer, prompt_rows: list[list[int]], completion_rows: list[list[int]],
                  width: int, settings: ReshapeSettings, select: Sequence[bool] | None = None,
                  outcomes: GroupOutcomes | None = None, params: dict | None = None,
                  scorer: pipeline.Scorer | None = None) -> TokenWeights:
    """Weights (B, width) of B completions for the current policy `model` (no parameter grads).

    prompt_rows, completion_rows: B unpadded token id lists. width: C, the completion width.
    select: (B,) which rows to attribute (default all); the others keep weight 1.
    outcomes: each row's group, correctness and advantage (what KTAE and GRAIL's rollout filter
    read).
    params: extra keyword arguments of the method (e.g. {"n_noise": 8}).
    scorer: the importances computed outside this process (`pipeline.score_and_weight`);
    `model` is then None (verl's trainer, `training.verl`).
    With a uniform method ('none') the spans are still found (for metrics and the run store),
    weights are 1 and `model` may be None.
    """
    pairs = encode_rows(tokenizer, prompt_rows, completion_rows, settings.answer_format, settings.answer_pattern)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = dataclasses.replace(pairs_to_batch(pairs, int(pad)), outcomes=outcomes)
    weighed = pipeline.score_and_weight(model, batch, settings, rows=select, params=params, tokenizer=tokenizer,
                                        scorer=scorer)
    return TokenWeights(
        weights=_to_completion(weighed.weights, pairs, width, 1.0),
        importances=_to_completion(weighed.importances, pairs, width, 0.0),
        scored=_to_completion(weighed.scored, pairs, width, False),
        span_found=torch.tensor([p.span_found for p in pairs], dtype=torch.bool),
        attributed=weighed.attributed,
        nonfinite=weighed.nonfinite,
        pairs=pairs,
        seconds=weighed.seconds,
        bonus=_to_completion(weighed.bonus, pairs, width, 0.0),
    )


def token_advantages(advantages: torch.Tensor, weights: TokenWeights, uniform: bool) -> torch.Tensor:
    """The advantages TRL's loss takes: the (B,) sequence advantages as they are under a uniform
    method (plain GRPO), else the (B, C) token advantages A_i * w_t (+ an additive weighting's
    bonus, KTAE's; on the advantages' device)."""
    if uniform:
        return advantages
    return reshape_advantages(advantages, weights.weights.to(advantages.device),
                              weights.bonus.to(advantages.device))


def nonzero_rows(advantages: torch.Tensor, settings: ReshapeSettings) -> list[bool] | None:
    """(B,) the rows worth attributing: those with a non-zero advantage (A_i * w_t = 0
    otherwise); None, all rows, when the weighting's cut-off is over the whole batch's response
    tokens, which rows with A_i = 0 take part in (the 80/20 entropy)."""
    spec = method_spec(settings.method)
    if weighting_spec(settings.weighting or spec.weighting).batch_level and spec.scope == "response":
        return None
    return (advantages.detach().cpu() != 0).tolist()


def metric_sums(weights: TokenWeights, advantages: torch.Tensor, uniform: bool) -> tuple[dict, dict]:
    """The oar/* metrics of a generation batch as (sums, peaks): numbers that pool over ranks by
    adding and by taking the largest (`oar_metrics` turns the pooled ones into the logged values).

    advantages: (B,) the sequence advantages A_i. Over the rows that were attributed (a uniform
    method: every row with S, weights 1)."""
    tw, adv = weights, advantages.detach().float().cpu()
    token_adv = reshape_advantages(adv, tw.weights, tw.bonus)
    rows = tw.scored.any(dim=1) if uniform else tw.attributed
    scored = tw.scored & rows[:, None]
    has_s = scored.any(dim=1)
    ess = torch.as_tensor(ess_ratio(tw.weights, scored), dtype=torch.float32)  # (B,), NaN: no S
    top = torch.as_tensor(top_mass(token_adv, scored, 0.1), dtype=torch.float32)  # NaN: A_i = 0
    ess_ok, top_ok = has_s & ~torch.isnan(ess), has_s & ~torch.isnan(top)
    sums = {"ess": ess[ess_ok].sum(), "ess_rows": ess_ok.sum(), "top": top[top_ok].sum(),
            "top_rows": top_ok.sum(), "span_found": tw.span_found.sum(), "rows": len(adv),
            "nonfinite": tw.nonfinite.sum(), "attributed": tw.attributed.sum()}
    peaks = {"weight": tw.weights.max() if tw.weights.numel() else 1.0, "seconds": tw.seconds}
    return ({k: float(v) for k, v in sums.items()}, {k: float(v) for k, v in peaks.items()})


def oar_metrics(sums: dict, peaks: dict) -> dict[str, float]:
    """The logged oar/* values of pooled `metric_sums`: ESS ratio and top-10% mass (when a row
    has them), span-found and attributed rates, non-finite rows, the largest weight and the
    slowest rank's seconds."""
    rows = max(sums["rows"], 1.0)
    out = {}
    if sums["ess_rows"] > 0:
        out["oar/ess_ratio"] = sums["ess"] / sums["ess_rows"]
    if sums["top_rows"] > 0:
        out["oar/top10_mass"] = sums["top"] / sums["top_rows"]
    return {**out, "oar/span_found_rate": sums["span_found"] / rows, "oar/nonfinite_rows": sums["nonfinite"],
            "oar/attributed_rate": sums["attributed"] / rows, "oar/weight_max": peaks["weight"],
            "oar/time_s": peaks["seconds"]}


# Below this share of completions with an answer span, the warning fires: at 0.8 one in five
# completions already trains as plain GRPO (weight 1 everywhere), which a user should know.
LOW_SPAN_RATE = 0.8


def formats_tried(answer_format: str, pattern: str | None = None) -> str:
    """The answer formats the span finder looks for under `answer_format`, in words."""
    if answer_format == "regex" or (answer_format == "auto" and pattern):
        return f"regex {pattern!r}"
    if answer_format == "auto":
        return "auto: " + ", then ".join(MARKER_FORMATS)
    return answer_format


def low_span_rate_message(rate: float, n: int, answer_format: str, pattern: str | None = None) -> str:
    """The one-time warning of a generation batch whose span-found rate is below LOW_SPAN_RATE."""
    others = ", ".join(f for f in ANSWER_FORMATS if f != answer_format)
    found = round(rate * n)
    head = "OAR is mostly off" if rate < 0.5 else "OAR is partly off"
    return (f"{head}: the answer span was found in {found} of {n} completions ({rate:.0%}) of this "
            f"generation batch (formats tried: {formats_tried(answer_format, pattern)}). The other "
            f"{n - found} keep weight 1 on every token, as in plain GRPO. Fix: set answer_format "
            f"to the format the model writes ({others}; regex needs answer_pattern), or ask for that "
            "format in the prompt. oar/span_found_rate logs the rate every step.")
