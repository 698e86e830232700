"""Steps of a response: the units people read a reasoning trace in (lines, paragraphs,
sentences), as character spans of the text and as token ranges over its reasoning tokens.

`step_spans` cuts the text; `token_steps` maps the cuts onto tokens so that every reasoning
token lies in exactly one step, in order: the boundary of step k is the first token whose
characters reach past the start of step k's text, so the whitespace between two steps stays
with the earlier one and a token that straddles a cut goes to the later one.
"""
from __future__ import annotations

import re
from typing import Sequence

from ..errors import InputError, unknown_name
from .segments import n_scored

STEP_UNITS = ("line", "paragraph", "sentence")

# A sentence ends at . ! or ? followed by whitespace (so "72.5" and "e=11-3=8." + "e=..." split
# correctly), or at a line break. The arithmetic world's clauses `x=a+b=n.` are sentences.
_CUTS = {
    "line": re.compile(r"\n"),
    "paragraph": re.compile(r"\n[ \t]*\n\s*"),
    "sentence": re.compile(r"(?<=[.!?])\s+|\n"),
}


def _pieces(text: str, cut: re.Pattern, end: int) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in cut.finditer(text, 0, end):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, end))
    return spans


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def step_spans(text: str, unit: str | re.Pattern = "line", end: int | None = None) -> list[tuple[int, int]]:
    """Character spans [start, end) of the steps of text[:end], in order, without overlap.

    unit: "line" (non-empty lines), "paragraph" (blocks between blank lines), "sentence"
        (cut after . ! ? before whitespace, and at line breaks), or a compiled regex / pattern
        string whose matches are the cuts between steps.
    end: where the steps stop (e.g. the start of the answer marker); default the whole text.
    Each span is stripped of surrounding whitespace; empty steps are dropped.
    """
    end = len(text) if end is None else end
    if not 0 <= end <= len(text):
        raise InputError(f"end={end} lies outside the text of length {len(text)}")
    if isinstance(unit, str) and unit in _CUTS:
        cut = _CUTS[unit]
    elif isinstance(unit, re.Pattern):
        cut = unit
    elif isinstance(unit, str) and unit and not unit.isalpha():
        cut = re.compile(unit)
    else:
        raise unknown_name("step unit", unit, STEP_UNITS + ("<regex>",))
    if cut.search("") is not None:
        raise InputError(f"step regex {cut.pattern!r} matches the empty string; it must match the cuts")
    spans = [_strip(text, a, b) for a, b in _pieces(text, cut, end)]
    return [(a, b) for a, b in spans if b > a]


def token_steps(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                n_tokens: int) -> list[tuple[int, int]]:
    """Token ranges [a, b) of the steps over tokens 0..n_tokens (the reasoning tokens).

    offsets: (T,) character spans of the response tokens, T >= n_tokens.
    spans: character spans of the steps, in order (from `step_spans`).
    The ranges cover 0..n_tokens in order without gaps or overlap; a step that gets no token
    (it lies past the reasoning, or inside one token) is dropped.
    """
    if n_tokens == 0:
        return []
    bounds = [0]
    for start, _ in spans[1:]:
        # The first token (at or after the last boundary) whose text reaches past `start`.
        b = bounds[-1]
        while b < n_tokens and int(offsets[b][1]) <= start:
            b += 1
        bounds.append(b)
    bounds.append(n_tokens)
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


STEP_POOLS = ("sum", "mean", "max")


def pool_steps(scores, ranges: Sequence[tuple[int, int]], how: str) -> list[float]:
    """One score per step: the sum, mean or max of the (T,) token `scores` over each token
    range [a, b) of `ranges` (from `token_steps`). NaN scores propagate (a step with a NaN
    token is NaN), so a diverged method is never pooled into a plausible number."""
    import numpy as np

    if how not in STEP_POOLS:
        raise unknown_name("step pooling", how, STEP_POOLS)
    values = np.asarray(scores, dtype=np.float64)
    reduce = {"sum": np.sum, "mean": np.mean, "max": np.max}[how]
    return [float(reduce(values[a:b])) for a, b in ranges]


AUTO = "auto"


def resolve_unit(text: str, unit: str | re.Pattern = AUTO, end: int | None = None) -> str | re.Pattern:
    """The unit `auto` stands for on text[:end]: `line` when it has two or more non-empty
    lines (real solutions), else `sentence` (one-line traces such as the arithmetic world's,
    whose clauses `x=a+b=n.` then come out one step each). Other units pass through."""
    if isinstance(unit, str) and unit == AUTO:
        return "line" if len(step_spans(text, "line", end)) > 1 else "sentence"
    return unit


def response_steps(text: str, offsets: Sequence[tuple[int, int]], n_reasoning: int,
                   unit: str | re.Pattern = AUTO) -> list[tuple[int, int]]:
    """Token ranges [a, b) of the steps of a response whose first `n_reasoning` tokens are
    its reasoning: they cover 0..n_reasoning in order, without gaps or overlap.

    text: the response; offsets: (T,) character spans of its tokens, T >= n_reasoning.
    unit: a `step_spans` unit, or `auto` (see `resolve_unit`). Steps end where the
    reasoning ends (the last reasoning token's end), so the answer never joins a step.
    """
    if n_reasoning <= 0:
        return []
    if n_reasoning > len(offsets):
        raise InputError(f"n_reasoning={n_reasoning} exceeds the {len(offsets)} response tokens")
    end = max(int(offsets[n_reasoning - 1][1]), 0)
    end = min(end, len(text))
    unit = resolve_unit(text, unit, end)
    return token_steps(offsets, step_spans(text, unit, end), n_reasoning)


def reasoning_steps(text: str, offsets: Sequence[tuple[int, int]], labels: Sequence[str],
                    span_found: bool, unit: str | re.Pattern = AUTO) -> list[tuple[int, int]]:
    """Token ranges of the steps over a response's scored reasoning tokens, those labelled
    `reasoning` by `spans.segment_tokens` (`response_steps`); empty when no answer span was
    found, since then nothing is scored."""
    n_reasoning = n_scored(labels, span_found)
    return response_steps(text, offsets, n_reasoning, unit)


def check_steps(ranges: Sequence[tuple[int, int]], n_tokens: int) -> None:
    """Raise InputError unless `ranges` cover 0..n_tokens in order, without gaps or overlap."""
    edge = 0
    for a, b in ranges:
        if a != edge or b <= a:
            raise InputError(f"steps {list(ranges)[:6]}... must cover 0..{n_tokens} in order "
                             f"without gaps, overlap or empty steps (broke at {(a, b)})")
        edge = b
    if edge != n_tokens:
        raise InputError(f"steps end at token {edge}, but the reasoning has {n_tokens} tokens")
