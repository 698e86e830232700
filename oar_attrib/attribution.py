"""The public entry point: `attribute(model, tokenizer, prompts, responses, methods=...)`.

Text -> segments -> importances (one registered method each) -> weights -> optional reshaped
advantages and credit metrics, per response. Importances are computed in sub-batches so that
progress shows and memory stays bounded; every method sees the same batch.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .batch import ScoringBatch
from .errors import InputError
from .gating import bilevel_weights, grail_weights, reshape_advantages
from .inputs import EncodedPair, encode_pairs
from .lm import eval_mode, model_device
from .methods import get_method
from .metrics import ess_ratio, top_mass
from .probes import check_probe

# Methods whose weights are not the bi-level gate of their importances (METHOD.md section 7).
_OWN_WEIGHTS = {"grail": grail_weights}


@dataclass
class TraceAttribution:
    """Attribution of one response: every list has one entry per response token."""

    prompt: str | list
    response: str
    token_ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    segments: list[str]
    span_found: bool
    answer_span: tuple[int, int] | None
    answer_text: str | None
    probe: str
    params: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    scores: dict[str, list[float]] = field(default_factory=dict)
    weights: dict[str, list[float]] = field(default_factory=dict)
    advantage: float | None = None
    token_advantages: dict[str, list[float]] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        lists = {"tokens": self.tokens, "offsets": self.offsets, "segments": self.segments}
        lists |= {f"scores[{m}]": v for m, v in self.scores.items()}
        lists |= {f"weights[{m}]": v for m, v in self.weights.items()}
        for name, values in lists.items():
            if len(values) != n:
                raise InputError(f"{name} has {len(values)} entries for {n} response tokens")

    @property
    def scored(self) -> list[bool]:
        """Whether each response token is in the scored set S."""
        return [self.span_found and s == "reasoning" for s in self.segments]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TraceAttribution":
        data = dict(data)
        data["offsets"] = [tuple(o) for o in data["offsets"]]
        if data.get("answer_span") is not None:
            data["answer_span"] = tuple(data["answer_span"])
        return cls(**data)

    def to_frame(self):
        """pandas DataFrame, one row per response token."""
        import pandas as pd

        frame = pd.DataFrame(
            {
                "position": range(len(self.token_ids)),
                "token_id": self.token_ids,
                "token": self.tokens,
                "start": [o[0] for o in self.offsets],
                "end": [o[1] for o in self.offsets],
                "segment": self.segments,
                "scored": self.scored,
            }
        )
        for method, values in self.scores.items():
            frame[f"score_{method}"] = values
            frame[f"weight_{method}"] = self.weights[method]
            if method in self.token_advantages:
                frame[f"advantage_{method}"] = self.token_advantages[method]
        return frame


class AttributionBatch(list):
    """A list of TraceAttribution with table and JSON helpers."""

    def to_frame(self):
        import pandas as pd

        frames = [t.to_frame().assign(trace=i) for i, t in enumerate(self)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def to_json(self) -> str:
        return json.dumps([t.to_dict() for t in self])

    @classmethod
    def from_json(cls, text: str) -> "AttributionBatch":
        return cls(TraceAttribution.from_dict(d) for d in json.loads(text))


def compute_weights(method: str, importance: torch.Tensor, mask: torch.Tensor,
                    tau: float = 0.4, beta: float = 2.0, w_min: float = 0.1) -> torch.Tensor:
    """(B, L) weights from (B, L) importances over the (B, L) bool scored mask."""
    if method in _OWN_WEIGHTS:
        return _OWN_WEIGHTS[method](importance, mask)
    return bilevel_weights(importance, mask, tau=tau, beta=beta, w_min=w_min)


def _score(model, batch: ScoringBatch, methods, probe, params, seed) -> tuple[dict, dict]:
    """Importances (B, L) float32 on CPU and seconds, per method."""
    scores, seconds = {}, {}
    for method in methods:
        fn = get_method(method)
        generator = torch.Generator(device=model_device(model)).manual_seed(seed)
        start = time.perf_counter()
        scores[method] = fn(model, batch, probe=probe, generator=generator,
                            **params.get(method, {})).float().cpu()
        seconds[method] = time.perf_counter() - start
    return scores, seconds


def _flags(pair: EncodedPair, row_scores: dict[str, torch.Tensor], scored: torch.Tensor) -> list[str]:
    flags = []
    if not pair.span_found:
        flags.append("no_answer_span")
    elif pair.empty_reasoning:
        flags.append("empty_reasoning")
    for method, values in row_scores.items():
        if not torch.isfinite(values[scored]).all():
            flags.append(f"non_finite_scores:{method}")
    return flags


def _trace(tokenizer, pair, prompt, scores, seconds, row, probe, params, gating, advantage):
    """One TraceAttribution from the batch's row `row`."""
    s, e = pair.response_start, pair.length
    scored = torch.zeros(e - s, dtype=torch.bool)
    if pair.span_found:
        scored = torch.tensor([lab == "reasoning" for lab in pair.labels], dtype=torch.bool)
    row_scores = {m: v[row, s:e] for m, v in scores.items()}
    flags = _flags(pair, row_scores, scored)
    trace = TraceAttribution(
        prompt=prompt, response=pair.text, token_ids=list(pair.response_ids),
        tokens=[pair.text[a:b] for a, b in pair.offsets], offsets=list(pair.offsets),
        segments=list(pair.labels), span_found=pair.span_found,
        answer_span=None if pair.location is None else pair.location.span,
        answer_text=pair.answer_text, probe=probe, params={**gating, "methods": params},
        flags=flags, advantage=advantage,
    )
    for method, values in row_scores.items():
        ok = f"non_finite_scores:{method}" not in flags
        clean = torch.where(scored, values, torch.zeros_like(values))
        w = compute_weights(method, clean, scored, **gating) if ok else torch.ones_like(values)
        trace.scores[method] = [float(x) if math.isfinite(x) else float("nan") for x in clean.tolist()]
        trace.weights[method] = w.tolist()
        trace.timings[method] = seconds[method]
        # Metrics over an empty S are undefined: None, which survives JSON (NaN would not).
        trace.metrics[method] = {"ess_ratio": float(ess_ratio(w, scored)) if scored.any() else None}
        if advantage is not None:
            adv = reshape_advantages(torch.tensor([advantage]), w[None])[0]
            trace.token_advantages[method] = adv.tolist()
            trace.metrics[method]["top10_mass"] = float(top_mass(adv, scored)) if scored.any() else None
    return trace


def attribute(
    model,
    tokenizer,
    prompts: str | Sequence,
    responses: str | Sequence[str],
    methods: Sequence[str] = ("oar_p",),
    *,
    probe: str = "as_mean",
    fmt: str = "auto",
    pattern=None,
    chat: bool | None = None,
    advantages: Sequence[float] | None = None,
    tau: float = 0.4,
    beta: float = 2.0,
    w_min: float = 0.1,
    method_params: dict[str, dict] | None = None,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = False,
    max_batch_tokens: int | None = None,
) -> AttributionBatch:
    """Token importances, weights and credit metrics of each response.

    prompts, responses: one or B of each (a prompt is a string or a chat message list).
    methods: registered importance methods (`methods.available_methods()`).
    probe: outcome probe, `lt`, `as_mean` or `as_joint` (METHOD.md section 3).
    advantages: optional B sequence advantages A_i; adds token advantages A_i * w_t and the
        top-10% advantage mass per method.
    tau, beta, w_min: bi-level gating (METHOD.md section 6).
    method_params: extra keyword arguments per method, e.g. {"oar_g": {"n_noise": 4}}.
    max_batch_tokens: OAR-P's token budget per forward; None sizes it from the device's free
        memory (`budget.auto_batch_tokens`). `method_params["oar_p"]` wins over it.
    Responses whose answer span is not found get weight 1 everywhere and the flag
    `no_answer_span`; non-finite importances are flagged, never silently gated.
    """
    if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], dict)):
        prompts = [prompts]
    if isinstance(responses, str):
        responses = [responses]
    if len(prompts) != len(responses):
        raise InputError(f"{len(prompts)} prompts but {len(responses)} responses; pass one per response")
    if advantages is not None and len(advantages) != len(responses):
        raise InputError(f"{len(advantages)} advantages for {len(responses)} responses")
    check_probe(probe)
    for method in methods:
        get_method(method)
    params, gating = method_params or {}, {"tau": tau, "beta": beta, "w_min": w_min}
    if max_batch_tokens is not None and "oar_p" in methods:
        params = {**params, "oar_p": {"max_batch_tokens": max_batch_tokens, **params.get("oar_p", {})}}
    out = AttributionBatch()
    starts = range(0, len(prompts), batch_size)
    with eval_mode(model):
        for start in tqdm(starts, desc="attribute", disable=not progress):
            stop = start + batch_size
            batch, pairs = encode_pairs(tokenizer, prompts[start:stop], responses[start:stop],
                                        fmt=fmt, pattern=pattern, chat=chat)
            scores, seconds = _score(model, batch, methods, probe, params, seed + start)
            for row, pair in enumerate(pairs):
                adv = None if advantages is None else float(advantages[start + row])
                out.append(_trace(tokenizer, pair, prompts[start + row], scores,
                                  {m: t / len(pairs) for m, t in seconds.items()},
                                  row, probe, params, gating, adv))
    return out
