"""Credit profiles of a run (GRAIL's diagnostics, for any method): where in the response the
weight goes, for right and wrong traces and as training goes on.

- Positional profile: each trace's scored tokens S (in order, n of them) are put in `bins`
  relative-position bins, token k of n in bin floor((k + 0.5) / n * bins); a trace's value in
  a bin is the mean weight w_t of its tokens there, and the profile is the mean over the
  traces that have tokens in the bin (each trace counts once, however long). A uniform
  weighting is 1 everywhere.
- By training step: the same profile per step (a step x position heatmap), and the mean ESS
  ratio and top-10% advantage mass of the traces of each step.

`profile_rows` flattens a profile into the rows of its CSV export.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .sets import SUBSETS

DEFAULT_BINS = 20


def position_bins(n: int, bins: int) -> np.ndarray:
    """(n,) bin of each of n ordered tokens: floor((k + 0.5) / n * bins)."""
    return np.minimum(((np.arange(n) + 0.5) / n * bins).astype(np.int64), bins - 1)


@dataclass
class _Sums:
    """Per-bin sums of per-trace bin means, and how many traces have tokens in each bin."""

    bins: int
    total: np.ndarray = field(init=False)
    count: np.ndarray = field(init=False)

    def __post_init__(self):
        self.total = np.zeros(self.bins)
        self.count = np.zeros(self.bins, dtype=np.int64)

    def add(self, weights: np.ndarray) -> None:
        which = position_bins(len(weights), self.bins)
        per_bin = np.bincount(which, weights=weights, minlength=self.bins)
        n = np.bincount(which, minlength=self.bins)
        has = n > 0
        self.total[has] += per_bin[has] / n[has]
        self.count += has

    def mean(self) -> list[float | None]:
        return [None if c == 0 else float(t / c) for t, c in zip(self.total, self.count)]


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(values)) if values else None


def credit_profile(records, method: str, bins: int = DEFAULT_BINS) -> dict:
    """The credit profile of `method` over stored traces (`TraceRecord`s, read once, one at
    a time): {"method", "bins", "centres", "n_traces", "subsets": {all|correct|wrong: {"mean",
    "n"}}, "steps": [...], "by_step": [[mean per bin] per step], "by_step_n", "ess_ratio": [per step],
    "top10_mass": [per step]}. Traces without the method or without scored tokens are left
    out; traces without a step are in the subsets, not in the by-step parts."""
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    subsets = {name: _Sums(bins) for name in SUBSETS}
    steps: dict[int, _Sums] = {}
    ess: dict[int, list] = {}
    top10: dict[int, list] = {}
    used = 0
    for record in records:
        a = record.attributions.get(method)
        scored = record.scored
        if a is None or not scored.any():
            continue
        weights = np.asarray(a.weights, dtype=np.float64)[scored]
        used += 1
        subsets["all"].add(weights)
        if record.row.correct is not None:
            subsets["correct" if record.row.correct else "wrong"].add(weights)
        step = record.row.step
        if step is not None:
            steps.setdefault(step, _Sums(bins)).add(weights)
            ess.setdefault(step, []).append(a.ess_ratio)
            top10.setdefault(step, []).append(a.top10_mass)
    order = sorted(steps)
    return {
        "method": method, "bins": bins,
        "centres": [(b + 0.5) / bins for b in range(bins)], "n_traces": used,
        "subsets": {name: {"mean": s.mean(), "n": s.count.tolist()} for name, s in subsets.items()},
        "steps": order, "by_step": [steps[s].mean() for s in order],
        "by_step_n": [steps[s].count.tolist() for s in order],
        "ess_ratio": [_mean(ess[s]) for s in order], "top10_mass": [_mean(top10[s]) for s in order],
    }


def profile_rows(profile: dict) -> list[dict]:
    """The CSV rows of a profile, all with the same columns: one per (part, bin), part = a
    subset or `step N`, with the bin's relative position range, the mean weight and the number
    of traces with tokens in it; then one `step N` row per step (no bin) with the mean ESS
    ratio and top-10% mass of its traces."""
    bins, rows = profile["bins"], []
    parts = [(name, p["mean"], p["n"]) for name, p in profile["subsets"].items()]
    parts += [(f"step {s}", m, n) for s, m, n in zip(profile["steps"], profile["by_step"],
                                                     profile["by_step_n"])]
    for name, means, counts in parts:
        for b, (mean, n) in enumerate(zip(means, counts)):
            rows.append({"method": profile["method"], "part": name, "bin": b, "from": b / bins,
                         "to": (b + 1) / bins, "mean_weight": mean, "n_traces": n,
                         "ess_ratio": None, "top10_mass": None})
    for step, e, t in zip(profile["steps"], profile["ess_ratio"], profile["top10_mass"]):
        rows.append({"method": profile["method"], "part": f"step {step}", "bin": None, "from": None,
                     "to": None, "mean_weight": None, "n_traces": None, "ess_ratio": e, "top10_mass": t})
    return rows
