"""View models: stored records turned into what templates and page scripts draw.

Pure functions of store records, so they are tested without a server. Text is never
marked safe here: templates escape every string, and page scripts read data from JSON
blocks and write it with textContent.
"""
from __future__ import annotations

import json

import numpy as np

from oar_attrib.records.step_view import display_levels, text_pieces as _pieces
from oar_attrib.store import TraceRecord
from oar_attrib.world import DEFAULT_SETS, SPAN_SETS
from oar_attrib.store.records import json_float, json_floats
# One heat scale and number format with the exported view; the page script (static/app.js,
# `heatColour`) draws the same colour from the same level.
from oar_attrib.records.export import fmt_number as _fmt, heat_style as heat_colour, plain_text

# The oracle sets a trace page can outline: those the store keeps as spans (`names` and
# `results` are parts of `direct`/`chain` and would only repeat them).
OUTLINE_SETS = SPAN_SETS


def importance_levels(scores: np.ndarray, scored: np.ndarray) -> list[float | None]:
    """(T,) display levels in [0, 1] over S (`step_view.display_levels`, the gate's I^);
    None outside S or where the score is not finite."""
    return display_levels([float(v) if m else None for v, m in zip(scores, scored)])


# The grader's reasons (`grading.WHYS`, stored as a trace's `graded` extra) in words, and
# "format": an answer was found, but not in the format the reward reads.
REASONS = {
    "correct": "right answer",
    "wrong": "wrong value",
    "no_answer": "no answer statement",
    "truncated": "cut off at the token limit",
    "unparsable": "answer not parsable",
    "lenient": "right value, found without an answer statement",
    "format": "answer not in the format graded",
    "format_right": "right value, other format: the grader reads only its own format",
}


def reward_reason(record: TraceRecord) -> str | None:
    """Why a trace got its reward, in a few words: the grader's own reason when the producer
    stored one (`extra["graded"]`, and `extra["answer_format"]` for a format), else what the
    stored row says (no answer span found, right, wrong). None without a reward."""
    row, why = record.row, record.extra.get("graded")
    if row.reward is None:
        return None
    if why == "truncated":
        n = record.extra.get("new_tokens")
        at = f" at {n} tokens" if isinstance(n, int) and not isinstance(n, bool) else ""
        return f"cut off{at} before an answer; generate with a larger --max-new-tokens"
    if why in REASONS:
        fmt = record.extra.get("answer_format")
        return REASONS[why] + (f" ({fmt})" if why in ("format", "format_right") and isinstance(fmt, str) else "")
    if not row.span_found:
        return "no answer found"
    if row.correct is not None:
        return REASONS["correct" if row.correct else "wrong"]
    return None


def earlier_answer(record: TraceRecord) -> str | None:
    """The last final-answer statement inside a trace's reasoning (`The answer is 63.` stated,
    then more text, then the final one), in at most 80 characters; None when there is none.
    The answer span is the last statement (METHOD.md 2), so an earlier one is reasoning: it is
    scored, and as it predicts the answer it often takes the top credit. Read in the trace's
    own answer format."""
    from oar_attrib.inputs.spans import locate_answer
    from oar_attrib.records.settings_record import lookup

    if not record.row.span_found:
        return None
    ends = [b for (_, b), label in zip(record.offsets, record.segments) if label == "reasoning"]
    reasoning = record.response[:max(ends, default=0)]
    fmt = lookup(record.params, "settings.answer_format") or "auto"
    found = locate_answer(reasoning, fmt if isinstance(fmt, str) and fmt != "regex" else "auto")
    if found is None:
        return None
    stated = reasoning[found.marker_start:found.end].strip()
    return stated if len(stated) <= 80 else stated[:79] + "…"


def token_title(token: str, score, weight, advantage) -> str:
    """Tooltip text of a token. The token is JSON-quoted so that spaces and newlines show;
    the page script (`tokenTitle`) writes the same fields when the method changes. A control
    character is named (`plain_text`), so that it cannot reorder the tooltip."""
    return (f"token {plain_text(json.dumps(token, ensure_ascii=False))} | score {_fmt(score, '.4g')} | "
            f"weight {_fmt(weight, '.3f')} | reshaped advantage {_fmt(advantage, '.4g')}")


# Split-half reliability of a ranking averaged over draws (`metrics.split_half_reliability`):
# from STABLE on, the ranking holds across draws; below NOISY much of the heatmap is the noise.
STABLE, NOISY = 0.9, 0.7


def reliability_view(record: TraceRecord) -> list[dict]:
    """One entry per method of the trace that averaged random draws (OAR-G): {"method",
    "draws", "split_half", "noisy", "text"}, the reading the trace page shows; none for a
    trace nothing was scored on (no answer span: there is no ranking to be reliable)."""
    out = []
    if not record.row.span_found or not record.row.n_scored:
        return out
    for method, a in record.attributions.items():
        if not a.draws:
            continue
        r = a.split_half
        if a.draws < 2:
            text = "undefined with 1 draw (it needs at least 2; attribute with more draws, e.g. 8)"
        elif r is None:
            text = f"undefined ({a.draws} draws: too few scored tokens, or draws without spread)"
        else:
            reading = ("stable" if r >= STABLE else
                       "the order of tokens shifts between draws" if r >= NOISY else
                       "noisy: much of this heatmap changes from draw to draw")
            text = f"{r:.2f} over {a.draws} draws, {reading}"
        out.append({"method": method, "draws": a.draws, "split_half": json_float(r),
                    "noisy": a.draws < 2 or r is None or r < NOISY, "text": text})
    return out


def trace_view(record: TraceRecord, method: str | None, oracle_set: str,
               tooltips: bool = True) -> dict:
    """Everything the trace page draws: text pieces with their initial colours, tooltips and
    classes for `method`, and the JSON payload the page script switches methods with.
    tooltips=False leaves colours and tooltips to the script (long traces)."""
    scored = record.scored
    methods = list(record.attributions)
    levels = {m: importance_levels(a.scores, scored) for m, a in record.attributions.items()}
    oracle = {name: record.oracle_mask(name).tolist() for name in record.oracle}
    a = record.attributions.get(method) if method else None
    outline = oracle.get(oracle_set) or [False] * len(scored)  # once, not once per token
    pieces = []
    for piece in _pieces(record.response, record.offsets):
        i = piece["index"]
        if i is None:
            pieces.append(piece)
            continue
        classes = ["tok", f"seg-{record.segments[i]}"]
        if outline[i]:
            classes.append("oracle")
        if not piece["text"]:
            classes.append("empty")
        if not tooltips:
            pieces.append({**piece, "classes": " ".join(classes)})
            continue
        adv = a.token_advantages[i] if a is not None and a.token_advantages is not None else None
        pieces.append({
            **piece,
            "classes": " ".join(classes),
            "style": heat_colour(levels[method][i]) if a is not None else "",
            "title": token_title(record.tokens[i], a.scores[i] if a else None,
                                 a.weights[i] if a else None, adv),
        })
    payload = {
        "trace_id": record.id,
        "methods": methods,
        "tokens": record.tokens,
        "segments": record.segments,
        "scored": scored.tolist(),
        "levels": levels,
        "scores": {m: json_floats(r.scores) for m, r in record.attributions.items()},
        "weights": {m: json_floats(r.weights) for m, r in record.attributions.items()},
        "token_advantages": {m: json_floats(r.token_advantages)
                             for m, r in record.attributions.items()
                             if r.token_advantages is not None},
        "advantage": json_float(record.row.advantage),
        "oracle": oracle,
    }
    return {"pieces": pieces, "payload": payload, "methods": methods,
            "oracle_sets": [s for s in OUTLINE_SETS if s in oracle],
            "reliability": reliability_view(record)}


def report_view(report: dict, subset: str, oracle_sets=None) -> dict:
    """Rows of the report page's tables for one subset (all | correct | wrong). The oracle sets
    are those the run's recall was computed on (default: the arithmetic world's first, then any
    other, e.g. the value oracle's `direct` alone); `no_oracle`: no trace of the run carries an
    oracle, so there is no recall to show. The step methods (`methods.step_methods`: every
    token of a step gets the step's score, so their token-level recall is constant within a
    step) are named for the page's note."""
    from ..methods import step_methods

    if oracle_sets is None:
        found = {r["oracle"] for r in report["recall"]}
        oracle_sets = [o for o in DEFAULT_SETS if o in found] + sorted(found - set(DEFAULT_SETS))
    rows = [r for r in report["recall"] if r["subset"] == subset]
    methods = sorted({r["method"] for r in rows})
    table = []
    for method in methods:
        cells = {r["oracle"]: r for r in rows if r["method"] == method}
        table.append({"method": method, "cells": [cells.get(s) for s in oracle_sets]})
    summary = report.get("summary") or {}
    no_oracle = bool(summary) and not summary.get("n_used") and (summary.get("skipped") or {}).get("no_oracle", 0) > 0
    return {"subset": subset, "oracle_sets": list(oracle_sets), "recall_table": table, "no_oracle": no_oracle,
            "step_methods": [m for m in methods if m in step_methods()],
            "payload": {"recall": rows, "agreement": report["agreement"],
                        "credit": report["credit"], "oracle_sets": list(oracle_sets)}}
