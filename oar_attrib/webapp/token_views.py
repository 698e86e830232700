"""The trace page's views beside importance: the policy's per-token log-probability and
entropy (stored by `oar attribute --store`, `analysis.token_stats`), the entropy top-20% mask
TRL's entropy reshaper keeps (`gating.entropy_topk_mask`), each method's rank agreement with
the entropy, and rank colour levels (a scale on which a few huge scores, often the last line
of OAR-P, do not leave the rest of the trace white).

Pure functions of a stored record, so they are tested without a server; the page script
(static/token_views.js) only picks among the levels computed here.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from oar_attrib.weights.gating import entropy_topk_mask
from oar_attrib.weights.metrics import spearman
from oar_attrib.store import TraceRecord
from oar_attrib.store.records import json_float

ENTROPY_RHO = 0.2  # TRL's top_entropy_quantile default: the top 20% of tokens train


def rank_levels(values, mask) -> list[float | None]:
    """(T,) percentile ranks in [0, 1] of the finite values on `mask` (ties share their mean
    rank; one value alone is 1), None elsewhere: every colour step holds as many tokens."""
    x = np.asarray(values, dtype=np.float64)
    ok = np.asarray(mask, dtype=bool) & np.isfinite(x)
    out: list[float | None] = [None] * len(x)
    n = int(ok.sum())
    if n == 0:
        return out
    ranks = pd.Series(x[ok]).rank(method="average").to_numpy()  # 1 .. n
    levels = (ranks - 1) / (n - 1) if n > 1 else np.ones(1)
    for i, v in zip(np.flatnonzero(ok), levels):
        out[int(i)] = round(float(v), 3)
    return out


def minmax_levels(values, mask) -> list[float | None]:
    """(T,) values min-max scaled to [0, 1] on `mask` (0 when all equal), None elsewhere."""
    x = np.asarray(values, dtype=np.float64)
    ok = np.asarray(mask, dtype=bool) & np.isfinite(x)
    out: list[float | None] = [None] * len(x)
    if not ok.any():
        return out
    lo, hi = x[ok].min(), x[ok].max()
    for i in np.flatnonzero(ok):
        out[int(i)] = round(float((x[i] - lo) / (hi - lo)) if hi > lo else 0.0, 3)
    return out


def _rounded(values) -> list[float | None]:
    return [None if v is None else float(f"{v:.4g}") for v in map(json_float, values)]


def token_views(record: TraceRecord) -> dict:
    """The trace page's payload part `views`: rank levels of every method's importance, and,
    when the trace's token statistics are stored, log-probability and entropy with their
    levels (value: surprisal -log p and entropy min-max over the response; rank), the entropy
    top-20% mask over the scored tokens and each method's Spearman agreement with the entropy
    over the scored tokens (None when undefined)."""
    scored = np.asarray(record.scored, dtype=bool)
    out = {"rank": {m: rank_levels(a.scores, scored) for m, a in record.attributions.items()},
           "stats": None}
    stats = record.token_stats
    if not stats:
        return out
    logprob, entropy = np.asarray(stats["logprob"]), np.asarray(stats["entropy"])
    every = np.ones(len(logprob), dtype=bool)
    mask = entropy_topk_mask(torch.as_tensor(entropy, dtype=torch.float32), torch.as_tensor(scored),
                             rho=ENTROPY_RHO) if scored.any() else torch.ones(len(entropy))
    keep = (mask.numpy() > 0) & scored
    agreement = {}
    for method, a in record.attributions.items():
        ok = scored & np.isfinite(a.scores)
        agreement[method] = json_float(spearman(a.scores[ok], entropy[ok])) if ok.sum() > 1 else None
    out["stats"] = {
        "logprob": _rounded(logprob), "entropy": _rounded(entropy),
        "levels": {"logprob": minmax_levels(-logprob, every), "entropy": minmax_levels(entropy, every)},
        "rank": {"logprob": rank_levels(-logprob, every), "entropy": rank_levels(entropy, every)},
        "entropy_top": [bool(k) for k in keep], "rho": ENTROPY_RHO,
        "agreement": agreement,
    }
    return out
