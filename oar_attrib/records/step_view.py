"""A trace read by steps: its steps, each method's step scores, display levels, top tokens,
oracle steps and the methods' rank agreement, as the trace page's step view, the step x
method table and the exports show them.

Steps are the trace's stored reasoning steps (`TraceRecord.steps`, token ranges over the
scored reasoning tokens) followed by one last step holding the rest of the response (the
answer marker, the answer and any tail: the answer step). A step's score is its tokens'
scores pooled by `steps.pool_steps` (`max` by default, as step recall: a step-level method's
score is constant per step, and `sum` would rank long steps first whatever the method); the
answer step has none, it is not scored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..weights.normalise import log1p_minmax
from ..inputs.segments import REASONING
from ..inputs.steps import STEP_POOLS, pool_steps
from ..defaults import VIEW_STEP_POOL

TOP_TOKENS = 3  # tokens emphasised per step


@dataclass(frozen=True)
class Step:
    """Step `index`: response tokens [start, end) and characters [char_start, char_end)."""

    index: int
    start: int
    end: int
    char_start: int
    char_end: int
    answer: bool

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def trace_steps(record) -> list[Step]:
    """The stored reasoning steps, then one step of the tokens after them (if any): the
    answer step when it starts outside the reasoning (a trace without an answer span has no
    stored steps, and shows as one unscored step)."""
    ranges = [(int(a), int(b)) for a, b in record.steps]
    n_tokens = len(record.offsets)
    after = ranges[-1][1] if ranges else 0
    if after < n_tokens:
        ranges.append((after, n_tokens))
    out = []
    for i, (a, b) in enumerate(ranges):
        answer = bool(record.row.span_found) and record.segments[a] != REASONING
        out.append(Step(i, a, b, int(record.offsets[a][0]), int(record.offsets[b - 1][1]), answer))
    return out


def display_levels(values) -> list[float | None]:
    """Display levels in [0, 1] of step (or token) scores: the gate's I^ over the finite ones
    (`normalise.log1p_minmax`); None where a score is missing or NaN."""
    x = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    levels = log1p_minmax(x, np.isfinite(x))
    return [None if math.isnan(v) else float(v) for v in levels.tolist()]


def text_pieces(response: str, offsets) -> list[dict]:
    """The response cut into untokenised gaps and tokens, in order. A token's text is the
    part of its span not already shown (byte-level tokens can share a character)."""
    pieces, cursor = [], 0
    for i, (start, end) in enumerate(offsets):
        if start > cursor:
            pieces.append({"index": None, "text": response[cursor:start]})
        shown_from = max(start, cursor)
        pieces.append({"index": i, "text": response[shown_from:end] if end > shown_from else ""})
        cursor = max(cursor, end)
    if cursor < len(response):
        pieces.append({"index": None, "text": response[cursor:]})
    return pieces


def step_pieces(record, steps) -> list[list[dict]]:
    """`text_pieces` of the response grouped by step (dicts with start/end token ranges):
    an untokenised gap goes with the token after it, a trailing gap with the last step."""
    groups: list[list[dict]] = [[] for _ in steps]
    if not steps:
        return groups
    owner = [0] * len(record.offsets)
    for k, s in enumerate(steps):
        owner[s["start"]:s["end"]] = [k] * (s["end"] - s["start"])
    pending: list[dict] = []
    for piece in text_pieces(record.response, record.offsets):
        if piece["index"] is None:
            pending.append(piece)
            continue
        groups[owner[piece["index"]]] += pending + [piece]
        pending = []
    groups[-1] += pending
    return groups


def _top_tokens(scores: np.ndarray, steps: list[Step], k: int) -> list[list[int]]:
    """Per step, its (at most k) highest-scoring tokens that score above the step's lowest,
    in text order: none for the answer step, nor where the method gives every token of the
    step the same score (a step-level method), since then no token stands out."""
    scores = np.nan_to_num(scores, nan=-np.inf)
    out = []
    for s in steps:
        if s.answer:
            out.append([])
            continue
        part = scores[s.start:s.end]
        order = np.argsort(-part, kind="stable")[:k]
        low = part.min()
        out.append(sorted(int(s.start + i) for i in order if np.isfinite(part[i]) and part[i] > low))
    return out


def _agreement(scores: dict[str, list], n_reasoning_steps: int) -> dict:
    """Spearman rank correlation of every two methods' reasoning-step scores."""
    from ..weights.metrics import spearman

    methods = list(scores)
    matrix = [[None] * len(methods) for _ in methods]
    for i, a in enumerate(methods):
        for j, b in enumerate(methods):
            x = np.array(scores[a][:n_reasoning_steps], dtype=np.float64)
            y = np.array(scores[b][:n_reasoning_steps], dtype=np.float64)
            ok = np.isfinite(x) & np.isfinite(y)
            rho = spearman(x[ok], y[ok]) if ok.sum() >= 3 else math.nan
            matrix[i][j] = None if not math.isfinite(rho) else round(float(rho), 4)
    return {"methods": methods, "spearman": matrix, "n_steps": n_reasoning_steps}


def step_table(record, pool: str = VIEW_STEP_POOL, top: int = TOP_TOKENS) -> dict:
    """The steps of a TraceRecord with every method's step scores pooled by `pool` (None for
    the answer step and where a score is NaN), levels, top tokens, oracle steps, agreement."""
    from ..errors import unknown_name

    if pool not in STEP_POOLS:
        raise unknown_name("step pooling", pool, STEP_POOLS)
    steps = trace_steps(record)
    reasoning = [s for s in steps if not s.answer]
    ranges = [(s.start, s.end) for s in reasoning]
    scored = np.asarray(record.scored, dtype=bool)
    scores, levels, tops = {}, {}, {}
    for method, a in record.attributions.items():
        # Tokens outside S (none when no answer span was found) carry no score.
        values = np.where(scored, np.asarray(a.scores, dtype=np.float64), np.nan)
        pooled = pool_steps(values, ranges, pool) if scored.any() else [math.nan] * len(ranges)
        column = [v if math.isfinite(v) else None for v in pooled] + [None] * (len(steps) - len(ranges))
        scores[method], levels[method] = column, display_levels(column)
        tops[method] = _top_tokens(values, steps, top)
    oracle = {}
    for name in getattr(record, "oracle", {}) or {}:
        mask = record.oracle_mask(name)
        oracle[name] = [bool(mask[s.start:s.end].any()) for s in steps]
    texts = [record.response[s.char_start:s.char_end] for s in steps]
    return {"pool": pool, "steps": [s.to_dict() for s in steps], "texts": texts,
            "scores": scores, "levels": levels, "top": tops, "oracle": oracle,
            "agreement": _agreement(scores, len(reasoning))}
