"""The record of an attributed trace as it is drawn, exported and stored: plain dataclasses
with a JSON-ready `to_dict`. The store reads and writes these; they import nothing of it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
import numpy as np

from ..inputs.segments import n_scored, scored_set, span_mask


def json_float(x) -> float | None:
    """A float for JSON: NaN and infinities (undefined metrics) become None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def json_safe(value):
    """`value` with every non-finite float (at any depth) replaced by None, so that it
    serialises as strict JSON (NaN is not JSON; browsers' JSON.parse rejects it)."""
    if isinstance(value, np.generic):  # numpy scalars from metrics or configs
        value = value.item()
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def json_floats(values) -> list[float | None] | None:
    if values is None:
        return None
    return [json_float(v) for v in np.asarray(values, dtype=np.float64).tolist()]


@dataclass(frozen=True)
class TraceRow:
    """A trace as listed in a run's table (no per-token data)."""

    id: int
    run_id: int
    step: int | None
    group: int | None
    reward: float | None
    advantage: float | None
    correct: bool | None
    answer_text: str | None
    span_found: bool
    n_tokens: int
    n_scored: int
    flags: list[str]
    preview: str

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["reward"], out["advantage"] = json_float(self.reward), json_float(self.advantage)
        return out


@dataclass
class AttributionRecord:
    """One method's result on one trace; arrays are (T,) float32 over the response tokens."""

    method: str
    probe: str
    scores: np.ndarray
    weights: np.ndarray
    token_advantages: np.ndarray | None
    ess_ratio: float | None
    top10_mass: float | None
    seconds: float | None
    draws: int | None = None  # random draws averaged (OAR-G's noise draws), else None
    split_half: float | None = None  # the ranking's split-half reliability, None if undefined

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "probe": self.probe,
            "scores": json_floats(self.scores),
            "weights": json_floats(self.weights),
            "token_advantages": json_floats(self.token_advantages),
            "ess_ratio": json_float(self.ess_ratio),
            "top10_mass": json_float(self.top10_mass),
            "seconds": json_float(self.seconds),
            "draws": self.draws,
            "split_half": json_float(self.split_half),
        }


def record_steps(steps, response: str, offsets, segments, span_found: bool) -> list[tuple[int, int]]:
    """A trace's step ranges: the given ones, or (records written without steps) derived from
    its text and segments with the default unit, as `attribute` does."""
    if steps:
        return [(int(a), int(b)) for a, b in steps]
    from ..inputs.steps import reasoning_steps

    return reasoning_steps(response, offsets, segments, span_found)


@dataclass
class TraceRecord:
    """Everything stored about one trace. Per-token lists have one entry per response token;
    `oracle` maps an oracle set name to its character spans in the response."""

    row: TraceRow
    prompt: str
    response: str
    token_ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    segments: list[str]
    answer_span: tuple[int, int] | None
    probe: str
    params: dict
    extra: dict
    oracle_complete: bool | None
    attributions: dict[str, AttributionRecord] = field(default_factory=dict)
    oracle: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # Token ranges of the steps over the scored reasoning tokens (`oar_attrib.inputs.steps`).
    steps: list[tuple[int, int]] = field(default_factory=list)
    # The policy's (T,) float32 "logprob" and "entropy" of each response token, when stored.
    token_stats: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_attribution(cls, attribution, trace_id: int = 0) -> "TraceRecord":
        """An unsaved record of a `TraceAttribution` (or its dict), e.g. to draw it."""
        d = attribution.to_dict() if hasattr(attribution, "to_dict") else dict(attribution)
        span_found = bool(d["span_found"])
        scored = n_scored(d["segments"], span_found)
        adv, metrics = d.get("token_advantages") or {}, d.get("metrics") or {}
        timings = d.get("timings") or {}
        row = TraceRow(id=trace_id, run_id=0, step=None, group=None, reward=None,
                       advantage=d.get("advantage"), correct=None, answer_text=d.get("answer_text"),
                       span_found=span_found, n_tokens=len(d["token_ids"]), n_scored=scored,
                       flags=list(d.get("flags") or []), preview=d["response"][:120])
        record = cls(row=row, prompt=str(d["prompt"]), response=d["response"],
                     token_ids=list(d["token_ids"]), tokens=list(d["tokens"]),
                     offsets=[tuple(o) for o in d["offsets"]], segments=list(d["segments"]),
                     answer_span=None if d.get("answer_span") is None else tuple(d["answer_span"]),
                     probe=d["probe"], params=dict(d.get("params") or {}), extra={},
                     oracle_complete=None,
                     steps=record_steps(d.get("steps"), d["response"], d["offsets"],
                                        d["segments"], span_found))
        for m in d["scores"]:
            # Through float32, so that a drawn record shows exactly what a stored one would.
            f32 = lambda v: np.asarray(v, dtype=np.float32).reshape(-1)  # noqa: E731
            record.attributions[m] = AttributionRecord(
                m, d["probe"], f32(d["scores"][m]), f32(d["weights"][m]),
                f32(adv[m]) if m in adv else None, (metrics.get(m) or {}).get("ess_ratio"),
                (metrics.get(m) or {}).get("top10_mass"), timings.get(m),
                (metrics.get(m) or {}).get("draws"), (metrics.get(m) or {}).get("split_half"))
        return record

    @property
    def id(self) -> int:
        return self.row.id

    @property
    def conversation(self) -> list[dict] | None:
        """The prompt's chat messages ({"role", "content"} dicts, as given) when it is a chat,
        else None (the prompt is text). A chat prompt is stored as its JSON text."""
        return json.loads(self.prompt) if self.extra.get("chat_prompt") else None

    @property
    def scored(self) -> np.ndarray:
        """(T,) bool: the scored reasoning positions S."""
        return np.array(scored_set(self.segments, self.row.span_found), dtype=bool)

    def oracle_mask(self, name: str) -> np.ndarray:
        """(T,) bool: tokens overlapping the oracle set `name` (all False when absent)."""
        return span_mask(self.offsets, self.oracle.get(name, ()))

    def to_attribution(self):
        """The stored trace as a `TraceAttribution` (the result type of `attribute`)."""
        from .traces import TraceAttribution

        a = self.attributions
        return TraceAttribution(
            prompt=self.conversation or self.prompt, response=self.response,
            token_ids=list(self.token_ids),
            tokens=list(self.tokens), offsets=list(self.offsets), segments=list(self.segments),
            span_found=self.row.span_found, answer_span=self.answer_span,
            answer_text=self.row.answer_text, probe=self.probe, params=dict(self.params),
            flags=list(self.row.flags), advantage=self.row.advantage,
            scores={m: r.scores.tolist() for m, r in a.items()},
            weights={m: r.weights.tolist() for m, r in a.items()},
            token_advantages={m: r.token_advantages.tolist() for m, r in a.items()
                              if r.token_advantages is not None},
            metrics={m: {"ess_ratio": r.ess_ratio, "top10_mass": r.top10_mass,
                         **({"draws": r.draws, "split_half": r.split_half} if r.draws else {})}
                     for m, r in a.items()},
            timings={m: r.seconds for m, r in a.items() if r.seconds is not None},
            steps=list(self.steps),
        )

    def to_dict(self) -> dict:
        return {
            **self.row.to_dict(),
            "prompt": self.prompt,
            "conversation": self.conversation,
            "response": self.response,
            "token_ids": list(self.token_ids),
            "tokens": list(self.tokens),
            "offsets": [list(o) for o in self.offsets],
            "segments": list(self.segments),
            "answer_span": None if self.answer_span is None else list(self.answer_span),
            "probe": self.probe,
            "params": self.params,
            "extra": self.extra,
            "oracle_complete": self.oracle_complete,
            "oracle": {k: [list(s) for s in v] for k, v in self.oracle.items()},
            "steps": [list(r) for r in self.steps],
            "attributions": {m: r.to_dict() for m, r in self.attributions.items()},
            "token_stats": {k: json_floats(v) for k, v in self.token_stats.items()},
        }

