"""The trace record: one response's attribution, the one shape `attribute`, the trainer's run
store hook and the store read and write (`TraceAttribution`, its dict `to_dict()`).

`build_trace` makes it from an `EncodedPair` and the row's (T,) tensors over the response
tokens, so every producer computes the scored set, the flags and the credit metrics the same
way: metrics over an empty scored set are None (undefined, and JSON-safe, unlike NaN).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import torch

from ..defaults import VIEW_STEP_POOL
from ..errors import InputError
from ..weights.gating import reshape_advantages
from ..inputs.encoding import EncodedPair
from ..weights.metrics import ess_ratio, split_half_reliability, top_mass
from ..inputs.segments import scored_set
from ..inputs.steps import STEP_POOLS, check_steps, pool_steps


@dataclass
class TraceAttribution:
    """Attribution of one response: every per-token list has one entry per response token.

    steps: (start, end) token ranges over the response tokens that cover its scored reasoning
    tokens in order, without overlap (`steps.response_steps`; empty when nothing is scored).
    `step_frame()` pools every method's scores per step.
    """

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
    # Seconds per method of the batch this trace was scored in, divided by its traces: traces
    # are scored together, so one trace's own time is not measured (batch_size=1 measures it).
    # Seconds per method of the batch this trace was scored in, divided by its traces: traces
    # are scored together, so one trace's own time is not measured (batch_size=1 measures it).
    timings: dict[str, float] = field(default_factory=dict)
    steps: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        self.steps = [(int(a), int(b)) for a, b in self.steps]
        if self.steps:
            check_steps(self.steps, self.steps[-1][1])
            if self.steps[-1][1] > n:
                raise InputError(f"steps reach token {self.steps[-1][1]} of {n} response tokens")
        lists = {"tokens": self.tokens, "offsets": self.offsets, "segments": self.segments}
        lists |= {f"scores[{m}]": v for m, v in self.scores.items()}
        lists |= {f"weights[{m}]": v for m, v in self.weights.items()}
        for name, values in lists.items():
            if len(values) != n:
                raise InputError(f"{name} has {len(values)} entries for {n} response tokens")

    @property
    def scored(self) -> list[bool]:
        """Whether each response token is in the scored set S."""
        return scored_set(self.segments, self.span_found)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TraceAttribution":
        data = dict(data)
        data["offsets"] = [tuple(o) for o in data["offsets"]]
        if data.get("answer_span") is not None:
            data["answer_span"] = tuple(data["answer_span"])
        data["steps"] = [tuple(r) for r in data.get("steps", [])]
        return cls(**data)

    def step_text(self, step: int) -> str:
        """The response text of step `step` (its first token's start to its last token's
        end), stripped of the whitespace a token carries across the cut."""
        a, b = self.steps[step]
        return self.response[self.offsets[a][0]:self.offsets[b - 1][1]].strip()

    def step_scores(self, method: str, how: str = VIEW_STEP_POOL) -> list[float]:
        """One score per step: `how` (`steps.STEP_POOLS`: sum, mean, max; default the view's,
        `defaults.VIEW_STEP_POOL`) of the method's token scores."""
        return pool_steps(self.scores[method], self.steps, how)

    def step_frame(self):
        """pandas DataFrame, one row per step: step, start, end (token range), text, and
        score_<method>_<sum|mean|max> for every method."""
        import pandas as pd

        frame = pd.DataFrame({
            "step": range(len(self.steps)),
            "start": [a for a, _ in self.steps],
            "end": [b for _, b in self.steps],
            "text": [self.step_text(k) for k in range(len(self.steps))],
        })
        for method in self.scores:
            for how in STEP_POOLS:
                frame[f"score_{method}_{how}"] = self.step_scores(method, how)
        return frame

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


def scored_positions(pair: EncodedPair) -> torch.Tensor:
    """(T,) bool over the response tokens: the scored reasoning set S (empty without a span)."""
    return torch.tensor(scored_set(pair.labels, pair.span_found), dtype=torch.bool)


def _metric(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def build_trace(pair: EncodedPair, prompt, *, probe: str, scores: dict[str, torch.Tensor],
                weights: dict[str, torch.Tensor], advantage: float | None = None,
                params: dict | None = None, timings: dict[str, float] | None = None,
                flags: list[str] | None = None, bonus: dict[str, torch.Tensor] | None = None,
                draws: dict[str, torch.Tensor] | None = None) -> TraceAttribution:
    """The trace record of one encoded pair.

    scores, weights: per method, (T,) float over the response tokens (T = len(response_ids));
        scores are the raw importances (non-finite ones on S flag the method), kept on S and
        0 elsewhere.
    advantage: the sequence advantage A_i; adds token advantages A_i * w_t (+ the method's
        `bonus`, (T,), an additive weighting's term: KTAE's) and the top-10% mass.
    flags: extra flags of the producer (e.g. the trainer's `not_attributed`).
    ess_ratio and top10_mass are None where undefined (empty S; all advantages 0).
    """
    scored = scored_positions(pair)
    has_s = bool(scored.any())
    out = list(flags or [])
    if pair.no_predicting_position:
        out.insert(0, "no_predicting_position")
    elif not pair.span_found:
        out.insert(0, "no_answer_span")
    elif pair.empty_reasoning:
        out.insert(0, "empty_reasoning")
    trace = TraceAttribution(
        prompt=prompt, response=pair.text, token_ids=list(pair.response_ids),
        tokens=[pair.text[a:b] for a, b in pair.offsets], offsets=[tuple(o) for o in pair.offsets],
        segments=list(pair.labels), span_found=pair.span_found,
        answer_span=None if pair.location is None else tuple(pair.location.span),
        answer_text=pair.answer_text, probe=probe, params=dict(params or {}), flags=out,
        advantage=None if advantage is None else float(advantage), steps=list(pair.steps),
    )
    for method, values in scores.items():
        values, w = values.float().cpu(), weights[method].float().cpu()
        flag = f"non_finite_scores:{method}"
        if not torch.isfinite(values[scored]).all() and flag not in trace.flags:
            trace.flags.append(flag)
        clean = torch.where(scored, values, torch.zeros_like(values))
        trace.scores[method] = [float(x) if math.isfinite(x) else float("nan") for x in clean.tolist()]
        trace.weights[method] = w.tolist()
        trace.metrics[method] = {"ess_ratio": _metric(ess_ratio(w, scored)) if has_s else None}
        if draws and method in draws:
            trace.metrics[method] |= draw_metrics(draws[method], scored)
        if timings and method in timings:
            trace.timings[method] = float(timings[method])
        if advantage is not None:
            extra = None if not bonus or method not in bonus else bonus[method].float().cpu()[None]
            adv = reshape_advantages(torch.tensor([float(advantage)]), w[None], extra)[0]
            trace.token_advantages[method] = adv.tolist()
            trace.metrics[method]["top10_mass"] = _metric(top_mass(adv, scored)) if has_s else None
    return trace


def draw_metrics(draws: torch.Tensor, scored: torch.Tensor) -> dict:
    """{"draws": n, "split_half": the ranking's split-half reliability or None} of (n, T)
    per-draw scores over the (T,) bool scored set."""
    reliability = split_half_reliability(draws.float().cpu(), scored) if bool(scored.any()) else math.nan
    return {"draws": int(draws.shape[0]), "split_half": _metric(reliability)}
