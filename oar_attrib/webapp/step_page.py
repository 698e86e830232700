"""View model of the trace page's step view: one block per step (its text; the page script
cuts it into tokens from the `token_pieces` JSON), the step x method table, and the compact
JSON the page script repaints from.

Text is never marked safe: templates escape every string and the script writes text with
textContent. Numbers in the page payload are rounded (to what the page shows) so that a
4000-token trace with six methods stays well under the page budget; the JSON API and the
exports keep full precision.
"""
from __future__ import annotations

import math

import numpy as np

from oar_attrib.defaults import VIEW_STEP_POOL
from oar_attrib.records.step_view import step_table
from oar_attrib.store import TraceRecord

from .views import heat_colour

LONG_TRACE = 200  # tokens: longer traces open in the step view


def rounded(values, digits: int = 4) -> list | None:
    """Floats to `digits` significant digits (None, NaN and infinities become None)."""
    if values is None:
        return None
    x = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    ok = np.isfinite(x) & (x != 0)
    magnitude = np.floor(np.log10(np.abs(np.where(ok, x, 1.0))))
    scale = 10.0 ** (digits - 1 - magnitude)
    x = np.where(ok, np.round(x * scale) / scale, x)
    return [v if math.isfinite(v) else None for v in x.tolist()]


def step_blocks(table: dict, method: str | None, oracle_set: str) -> list[dict]:
    """One block per step: its text, its initial colour for `method`, and whether it is the
    answer step or an oracle step (the page script then cuts the text into its tokens)."""
    oracle = table["oracle"].get(oracle_set)
    blocks = []
    for k, step in enumerate(table["steps"]):
        classes = ["step"] + (["answer"] if step["answer"] else [])
        if oracle and oracle[k]:
            classes.append("oracle")
        style = title = ""
        if method in table["levels"]:
            style = heat_colour(table["levels"][method][k])
            score = table["scores"][method][k]
            shown = "n/a" if score is None else format(score, ".4g")
            title = (f"step {k + 1}: answer" if step["answer"] else
                     f"step {k + 1} | {method} step score {shown}")
        blocks.append({**step, "text": table["texts"][k].strip(), "classes": " ".join(classes),
                       "style": style, "title": title})
    return blocks


def step_payload(table: dict) -> dict:
    """What the page script needs to repaint steps and draw the step charts."""
    return {
        "pool": table["pool"],
        "steps": [[s["start"], s["end"]] for s in table["steps"]],
        "answer_step": next((s["index"] for s in table["steps"] if s["answer"]), None),
        "scores": {m: rounded(v) for m, v in table["scores"].items()},
        "levels": {m: rounded(v, 3) for m, v in table["levels"].items()},
        "top": table["top"],
        "oracle": table["oracle"],
        "agreement": table["agreement"],
    }


def matrix_rows(table: dict, methods: list[str]) -> list[dict]:
    """Rows of the step x method table: a preview of each step's text and, per method, the
    step's level (each column normalised over the steps) and raw score."""
    rows = []
    for k, step in enumerate(table["steps"]):
        text = table["texts"][k]
        cells = [{"method": m, "score": table["scores"][m][k], "level": table["levels"][m][k],
                  "style": heat_colour(table["levels"][m][k])} for m in methods]
        rows.append({"index": k, "answer": step["answer"],
                     "preview": text if len(text) <= 90 else text[:87] + "...", "cells": cells})
    return rows


def token_pieces(pieces: list[dict]) -> list[list]:
    """[index, text, classes] of each piece of views.trace_view (index and classes None for
    an untokenised gap): the token view and the step blocks are built from it in the page."""
    return [[p["index"], p["text"], p.get("classes")] for p in pieces]


def step_view(record: TraceRecord, method: str | None, oracle_set: str, pool: str = VIEW_STEP_POOL) -> dict:
    """Context of the step view: blocks, the step x method rows, and the payload."""
    table = step_table(record, pool)
    methods = list(record.attributions)
    return {"step_blocks": step_blocks(table, method, oracle_set),
            "step_rows": matrix_rows(table, methods), "step_payload": step_payload(table),
            "agreement": table["agreement"], "pool": pool, "default_view": "steps"
            if len(record.tokens) > LONG_TRACE else "tokens"}


def compact_payload(payload: dict) -> dict:
    """The trace page's payload (views.trace_view) with its per-token numbers rounded:
    scores, weights and advantages to 4 significant digits, levels to 3."""
    out = dict(payload)
    for key in ("scores", "weights", "token_advantages"):
        out[key] = {m: rounded(v) for m, v in payload[key].items()}
    out["levels"] = {m: rounded(v, 3) for m, v in payload["levels"].items()}
    return out
