"""View model of the trace page's step view: the response cut into step blocks of token
pieces, the step x method table, and the compact JSON the page script repaints from.

Text is never marked safe: templates escape every string and the script writes text with
textContent. Numbers in the page payload are rounded (to what the page shows) so that a
4000-token trace with six methods stays well under the page budget; the JSON API and the
exports keep full precision.
"""
from __future__ import annotations

import math

import numpy as np

from oar_attrib.step_view import STEP_POOL, step_pieces, step_table
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


def step_blocks(record: TraceRecord, table: dict, method: str | None, oracle_set: str) -> list[dict]:
    """One block per step: its pieces (untokenised gaps go with the next token), its initial
    colour for `method`, and whether it is the answer step or an oracle step."""
    steps = table["steps"]
    blocks = [{**s, "pieces": pieces, "style": "", "title": "", "classes": "step"}
              for s, pieces in zip(steps, step_pieces(record, steps))]
    for block in blocks:
        _trim_whitespace(block["pieces"])
    oracle = table["oracle"].get(oracle_set)
    for k, block in enumerate(blocks):
        classes = ["step"] + (["answer"] if block["answer"] else [])
        if oracle and oracle[k]:
            classes.append("oracle")
        block["classes"] = " ".join(classes)
        if method in table["levels"]:
            block["style"] = heat_colour(table["levels"][method][k])
            score = table["scores"][method][k]
            block["title"] = (f"step {k + 1}: answer" if block["answer"] else
                              f"step {k + 1} | {method} step score {'n/a' if score is None else format(score, '.4g')}")
    return blocks


def _trim_whitespace(pieces: list[dict]) -> None:
    """Blank out the whitespace at the ends of a step block (the line breaks between steps,
    which the blocks already show); the tokens stay, so every token keeps its element."""
    n = len(pieces)
    for indices, strip in ((range(n), str.lstrip), (range(n - 1, -1, -1), str.rstrip)):
        for k in indices:
            text = strip(pieces[k]["text"])
            if text != pieces[k]["text"]:
                pieces[k] = {**pieces[k], "text": text}
            if text:
                break


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


def step_view(record: TraceRecord, method: str | None, oracle_set: str, pool: str = STEP_POOL) -> dict:
    """Context of the step view: blocks, the step x method rows, and the payload."""
    table = step_table(record, pool)
    methods = list(record.attributions)
    return {"step_blocks": step_blocks(record, table, method, oracle_set),
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
