"""What a reshaping does to GRPO's step, from an align store's per-batch sums.

OAR multiplies each token's advantage by a positive weight, so a method's gradient g can differ
from GRPO's g_0 on the same batch in two ways: by its length along the true gradient (a change
of learning rate, which a tuned learning rate undoes) and by its direction (what no learning
rate undoes). Against GRPO on the same batches, with g* the reference gradient (`step_stats`):

- signal ratio S = E[<g, g*>] / E[<g_0, g*>]: the expected progress along g* of one step at the
  same learning rate, relative to GRPO's (1.12: GRPO's step with a learning rate 1.12 times
  larger makes the same expected progress);
- second-moment ratio Q = E||g||^2 / E||g_0||^2: the step's size, noise included;
- optimal-step gain G = S^2 / Q = [(E<g, g*>)^2 / E||g||^2] / [the same of GRPO]: the
  first-order progress of a step at its best learning rate, under a curvature bound that is
  the same in every direction (E[J(theta + eta g)] >= J + eta E<g, grad J> - L eta^2 E||g||^2 / 2,
  largest at eta = E<g, grad J> / (L E||g||^2)), relative to GRPO's. A pure rescaling g = c g_0
  has S = c, Q = c^2 and G = 1: a learning-rate change, no gain in direction. G above 1 is a
  better direction; below 1 the reshaping adds more noise than signal.

The expectations are means over the batches of the stored sums (`dot_star`, `sq`); each ratio's
95% interval is the percentile bootstrap over batches (`stats.plug_in_interval`, the batches
resampled together for the numerator and the denominator). g* is itself noisy and enters S (and
G) through <g, g*>; S and G against each half pool's g* (`half_pools`, with intervals) show how
much. Every result line holds these sums: every committed store can be read this way.

By the sign of the advantage (`sign_stats`, the plan's secondary "positive- and negative-
advantage halves"): delta cos on the rows with A > 0 (credit: which tokens of a right answer
get the push) and on those with A <= 0 (blame), each a paired t-test over batches
(`stats.t_test_p`) with Holm's correction across methods x signs.
"""
from __future__ import annotations

import numpy as np

from ..defaults import NO_METHOD as BASELINE
from ..analysis.stats import holm, plug_in_interval, t_test_p

LEVEL = 0.95
SIGNS = {"pos": "A>0 rows (credit)", "neg": "A<=0 rows (blame)"}


def _ratio(num, den):
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def signal_ratio(dot, dot0):
    """S from the means of <g, g*> and <g_0, g*> (NaN where GRPO's is not positive: no signal
    to compare with)."""
    return _ratio(dot, dot0)


def second_moment_ratio(sq, sq0):
    return _ratio(sq, sq0)


def gain(dot, dot0, sq, sq0):
    """G = S^2 / Q."""
    return signal_ratio(dot, dot0) ** 2 / second_moment_ratio(sq, sq0)


def _column(results: list[dict], label: str, key: str, part: str = "all") -> np.ndarray:
    return np.array([r["methods"][label][part][key] for r in results], dtype=np.float64)


def _halves(results: list[dict], label: str, sq: np.ndarray, sq0: np.ndarray, index: np.ndarray,
            level: float) -> dict | None:
    """{"a", "b"} -> S and G against that half pool's g* with their intervals; None for lines
    without the half pools' dot products."""
    out = {}
    for h in ("a", "b"):
        key = f"dot_star_{h}"
        if not results or any(key not in r["methods"][name]["all"] for r in results for name in (label, BASELINE)):
            return None
        dot, dot0 = _column(results, label, key), _column(results, BASELINE, key)
        out[h] = {"signal_ratio": plug_in_interval(signal_ratio, [dot, dot0], index, level),
                  "gain": plug_in_interval(gain, [dot, dot0, sq, sq0], index, level)}
    return out


def _num(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def step_stats(results: list[dict], index: np.ndarray, level: float = LEVEL) -> dict:
    """label -> {"signal_ratio", "second_moment_ratio", "gain": {"value", "low", "high",
    "level"}, "half_pools"} of every method against GRPO (`BASELINE`, whose ratios are 1) over
    the result lines `results`, resampled by the bootstrap unit indices `index`; {} without
    lines or without GRPO."""
    if not results or BASELINE not in results[0]["methods"]:
        return {}
    dot0, sq0 = _column(results, BASELINE, "dot_star"), _column(results, BASELINE, "sq")
    out = {}
    for label in results[0]["methods"]:
        dot, sq = _column(results, label, "dot_star"), _column(results, label, "sq")
        out[label] = {
            "signal_ratio": plug_in_interval(signal_ratio, [dot, dot0], index, level),
            "second_moment_ratio": plug_in_interval(second_moment_ratio, [sq, sq0], index, level),
            "gain": plug_in_interval(gain, [dot, dot0, sq, sq0], index, level),
            "half_pools": _halves(results, label, sq, sq0, index, level),
        }
    return out


def sign_stats(values: dict, alpha: float) -> dict:
    """label -> part ("pos", "neg") -> {"p_t", "p_t_holm", "n"}: each method's delta cos on the
    rows of one sign of the advantage against 0, a paired t-test over the batches where both
    gradients of that part are non-zero, Holm-adjusted across methods x signs; GRPO has none.
    `values`: `align.per_batch`'s."""
    raw, counts = {}, {}
    for label, parts in values.items():
        if label == BASELINE:
            continue
        for part in SIGNS:
            d = parts[part]["delta_cos"]
            raw[(label, part)], counts[(label, part)] = t_test_p(d), int(np.isfinite(d).sum())
    adjusted, _ = holm(raw, alpha)
    out: dict = {}
    for (label, part), p in raw.items():
        out.setdefault(label, {})[part] = {"p_t": _num(p), "p_t_holm": adjusted.get((label, part)),
                                           "n": counts[(label, part)]}
    return out


# ------------------------------------------------------------------ text


def _r(c: dict | None) -> str:
    if not c or c.get("value") is None:
        return "n/a"
    bounds = "n/a" if c.get("low") is None else f"{c['low']:.3f}, {c['high']:.3f}"
    return f"x{c['value']:.3f} [{bounds}]"


def step_lines(summary: dict) -> list[str]:
    """The table of `step` per method: S, Q, G with their 95% intervals, and G against each half pool."""
    rows = [(label, m["step"]) for label, m in summary.get("methods", {}).items()
            if label != BASELINE and m.get("step")]
    if not rows:
        return []
    out = ["", "what the reshaping does to GRPO's step, on the same batches (ratios to GRPO's; 95% intervals "
               "over batches):",
           f"{'method':<20} {'signal E<g,g*>':<23} {'2nd moment E|g|^2':<23} {'optimal-step gain':<23} "
           f"{'gain vs half a':<23} {'gain vs half b':<23}"]
    for label, step in rows:
        halves = step.get("half_pools") or {}
        out.append(f"{label:<20} {_r(step['signal_ratio']):<23} {_r(step['second_moment_ratio']):<23} "
                   f"{_r(step['gain']):<23} {_r((halves.get('a') or {}).get('gain')):<23} "
                   f"{_r((halves.get('b') or {}).get('gain')):<23}".rstrip())
    return out


def _d(c: dict) -> str:
    def f(x):
        return "n/a" if x is None else f"{x:+.4f}"
    return f"{f(c.get('mean'))} [{f(c.get('low'))}, {f(c.get('high'))}]"


def _p(x) -> str:
    return "n/a" if x is None else ("<0.0001" if x < 1e-4 else f"{x:.4f}")


def sign_lines(summary: dict) -> list[str]:
    """The table of delta cos by the sign of the advantage, with the t-test p and Holm's."""
    rows = [(label, m) for label, m in summary.get("methods", {}).items()
            if label != BASELINE and "p_t" in (m.get("pos") or {}).get("delta_cos", {})]
    if not rows:
        return []
    family = (summary.get("by_sign") or {}).get("family")
    out = ["", f"delta cos by the sign of the advantage (planned secondary; 95% intervals, paired t-test "
               f"p, Holm over {family} = methods x signs):",
           f"{'method':<20} {'A>0 rows (credit)':<28} {'p':>7} {'p_holm':>7}   {'A<=0 rows (blame)':<28} "
           f"{'p':>7} {'p_holm':>7}"]
    for label, m in rows:
        pos, neg = m["pos"]["delta_cos"], m["neg"]["delta_cos"]
        out.append(f"{label:<20} {_d(pos):<28} {_p(pos.get('p_t')):>7} {_p(pos.get('p_t_holm')):>7}   "
                   f"{_d(neg):<28} {_p(neg.get('p_t')):>7} {_p(neg.get('p_t_holm')):>7}")
    return out
