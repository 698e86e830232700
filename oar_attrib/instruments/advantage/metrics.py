"""What advantage recall measures of a trace and a group, and how it pools them
(`advantage_recall` runs the oracle; this module only computes).

The label. OAR multiplies a trace's advantage A_i by a positive weight w_t per token, so more
weight on a step helps training when the step moved the expected reward V *toward* the trace's
outcome: the target of a multiplicative reshaping is the signed advantage of the step,
sign(A_i) * dV_k (`signed`, primary). |dV_k| (`absolute`, secondary) says where the trace's
credit is concentrated, whichever way; it rewards weight on a harmful step of a right answer.

The score. A method's step score is the mean of its weights w_t over the step's tokens, what
training applies (`pooling: "mean"`). A max over the tokens grows with the step's length (the
max of n uniforms is n / (n + 1)), and |dV| follows length, so a max-pooled ranking is credited
for length; a mean is not.

Per trace, for each method and reference ranking (`earliest_first`: the step index, earlier
first; `longest_first`: the step's length):
- `signed`, `absolute`: the within-trace Spearman correlation of the scores with the label,
  and `signed_before_last`, `absolute_before_last` without the last step (whose V is the trace's
  own reward);
- `position`, `length`: the scores' Spearman correlation with earliness and with step length.
A trace whose scores or label are constant has no value there (undefined, counted apart).

Pooled over traces: `estimate` (mean, t-interval clipped to [-1, 1], t-test p, Holm across the
family; too few below `stats.MIN_UNITS`). `partial`: the within-trace rank regression of the
label on the score, step length and position (each as centred within-trace ranks,
`stats.within_ranks`), with standard errors clustered by trace (`stats.clustered_slope`): the
score's coefficient with length and position held fixed; for a reference, the control it
equals is left out. `label_ceiling`: the label's own within-trace split-half reliability (the
Spearman correlation, within each trace, of the label from the two halves of its continuations,
averaged over traces; Spearman-Brown to the full N) and the ceiling it sets on a method's
Spearman with the label, sqrt(reliability). Per group, `credit_metrics`: the correlation of
the reshaped token advantage A_i * w_t with its step's dV over the group's step tokens, minus
GRPO's own A_i's (`credit_agreement`).
"""
from __future__ import annotations

import math

import numpy as np

from ...records.record import json_safe
from ...weights.metrics import spearman
from ...analysis.stats import (CORRELATION, clustered_slope, count_undefined, holm, t_interval, t_test_p,
                               too_few, within_ranks)

TARGETS = ("signed", "absolute")
EARLIEST, LONGEST = "earliest_first", "longest_first"  # the reference rankings (module docstring)
REFERENCES = (EARLIEST, LONGEST)
TRACE_METRICS = ("signed", "absolute", "signed_before_last", "absolute_before_last", "position", "length")
GROUP_METRICS = ("credit_agreement", "credit_correlation")
GRPO = "grpo"  # the credit correlation of A_i itself
POOLING = "mean"


def label(dv: np.ndarray, advantage: float, target: str) -> np.ndarray:
    """(S,) the label of each step for `target`: sign(A_i) * dV_k or |dV_k|."""
    return np.sign(advantage) * dv if target == "signed" else np.abs(dv)


def _rho(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman of two (S,) arrays; NaN below 2 values, with a non-finite value, or constant."""
    if a.size < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()) or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return spearman(a, b)


def trace_metrics(scores: dict[str, np.ndarray], dv: np.ndarray, advantage: float,
                  lengths: np.ndarray) -> dict[str, dict]:
    """{name: {metric: value of TRACE_METRICS}} of one trace (module docstring): its (S,) step
    scores per method or reference, (S,) dV, its advantage A_i and (S,) step lengths."""
    earliness = -np.arange(len(dv), dtype=np.float64)
    out = {}
    for name, s in scores.items():
        s = np.asarray(s, dtype=np.float64)
        row = {}
        for target in TARGETS:
            y = label(dv, advantage, target)
            row[target] = _rho(s, y)
            row[f"{target}_before_last"] = _rho(s[:-1], y[:-1])
        row["position"], row["length"] = _rho(s, earliness), _rho(s, np.asarray(lengths, dtype=np.float64))
        out[name] = row
    return out


def estimate(columns: dict[str, list[float]], bounds: tuple[float, float] | None = CORRELATION) -> dict[str, dict]:
    """{name: {"mean", "low", "high" (95% t-interval clipped to `bounds`, `stats.t_interval`),
    "p" (two-sided one-sample t-test against 0), "p_holm" (Holm over the names with a p), "n"
    (finite values), "undefined" (NaN values), "too_few" (n below `stats.MIN_UNITS`)}}. The
    interval is the t-test's own, so it excludes 0 exactly when p < 0.05 (at a few units a
    percentile bootstrap is far too narrow: 2 groups gave [+0.202, +0.284] at p 0.11)."""
    out = {}
    for name, values in columns.items():
        x = np.asarray(values, dtype=np.float64)
        interval = t_interval(x, bounds=bounds)
        out[name] = {"mean": interval["mean"], "low": interval["low"], "high": interval["high"],
                     "p": t_test_p(x), "p_holm": None, "n": interval["n"], "undefined": count_undefined(x),
                     "too_few": too_few(interval["n"])}
    adjusted, _ = holm({name: row["p"] for name, row in out.items()})
    for name, value in adjusted.items():
        out[name]["p_holm"] = value
    return json_safe(out)


def controls_of(name: str) -> tuple[str, ...]:
    """The controls of `name`'s partial coefficient: step length and position, but the one a
    reference ranking is (its coefficient would not be separate from it)."""
    return tuple(c for c in ("length", "position") if (name, c) not in ((LONGEST, "length"), (EARLIEST, "position")))


def partial(rows: list[dict], name: str, target: str) -> dict:
    """The within-trace rank regression of `target`'s label on `name`'s step scores, step
    length and position over the traces `rows` (per-trace rows of `advantage_recall`: `dv`,
    `advantage`, `step_tokens`, `step_scores`), standard errors clustered by trace
    (`stats.clustered_slope`), a trace whose scores are not all finite left out: {"coef",
    "low", "high", "p", "se", "traces", "steps", "controls", "too_few"}."""
    y, columns, clusters = [], [[] for _ in range(3)], []
    for i, row in enumerate(rows):
        s = np.asarray(row["step_scores"][name], dtype=np.float64)
        if s.size < 2 or not np.isfinite(s).all():
            continue
        dv = np.asarray(row["dv"], dtype=np.float64)
        y.append(within_ranks(label(dv, row["advantage"], target)))
        named = {"score": s, "length": np.asarray(row["step_tokens"], dtype=np.float64),
                 "position": -np.arange(s.size, dtype=np.float64)}
        for column, key in zip(columns, ("score", *controls_of(name))):
            column.append(within_ranks(named[key]))
        clusters += [i] * s.size
    used = [np.concatenate(c) for c in columns if c]
    fit = clustered_slope(np.concatenate(y) if y else np.zeros(0), used or [np.zeros(0)], np.asarray(clusters))
    return {"coef": fit["coef"], "low": fit["low"], "high": fit["high"], "p": fit["p"], "se": fit["se"],
            "traces": fit["clusters"], "steps": fit["n"], "controls": list(controls_of(name)),
            "too_few": too_few(fit["clusters"])}


def partials(rows: list[dict], names: list[str], target: str) -> dict[str, dict]:
    """`partial` of every name, Holm across them ("p_holm")."""
    out = {name: partial(rows, name, target) for name in names}
    adjusted, _ = holm({name: r["p"] for name, r in out.items() if r["p"] is not None})
    for name, r in out.items():
        r["p_holm"] = adjusted.get(name)
    return json_safe(out)


def _reliability(values: list[float]) -> dict:
    r = [v for v in values if math.isfinite(v)]
    mean = float(np.mean(r)) if r else None
    brown = None if mean is None else (2 * mean / (1 + mean) if mean > 0 else mean)
    return {"r": mean, "spearman_brown": brown, "ceiling": None if brown is None else math.sqrt(max(brown, 0.0)),
            "traces": len(r), "undefined": len(values) - len(r), "too_few": too_few(len(r))}


def label_ceiling(rows: list[dict]) -> dict:
    """{target: {"all": ..., "before_last": ...}} each {"r" (mean within-trace split-half
    Spearman of the label), "spearman_brown", "ceiling" (sqrt of it, 0 when it is not
    positive: the highest Spearman a method can reach with the label), "traces", "undefined",
    "too_few"} over the rows holding their label's halves (`dv_halves`)."""
    out = {}
    for target in TARGETS:
        every, before = [], []
        for row in rows:
            if "dv_halves" not in row:
                continue
            a, b = (label(np.asarray(h, dtype=np.float64), row["advantage"], target) for h in row["dv_halves"])
            every.append(_rho(a, b))
            before.append(_rho(a[:-1], b[:-1]))
        out[target] = {"all": _reliability(every), "before_last": _reliability(before)}
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def credit_metrics(token_advantages: dict[str, list[np.ndarray]], advantages: list[float],
                   labels: list[np.ndarray]) -> dict[str, dict]:
    """One group's credit agreement per method (module docstring). token_advantages: {method:
    per trace its (n_i,) A_i * w_t over its step tokens}; advantages: the traces' A_i; labels:
    per trace the (n_i,) dV of each step token's step."""
    y = np.concatenate(labels) if labels else np.zeros(0)
    grpo = np.concatenate([np.full(len(l), a) for a, l in zip(advantages, labels)]) if labels else y
    base = _pearson(grpo, y)
    out = {GRPO: {"credit_correlation": base, "credit_agreement": 0.0 if np.isfinite(base) else base}}
    for method, rows in token_advantages.items():
        r = _pearson(np.concatenate(rows), y) if rows else float("nan")
        out[method] = {"credit_correlation": r, "credit_agreement": r - base}
    return out
