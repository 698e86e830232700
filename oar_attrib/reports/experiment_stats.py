"""Statistics that fit a method x seed grid: one pooled error, not one interval per method.

In a grid every method runs on the same seeds, and a seed changes every method's result the
same way in part (the sampled completions, the problems it happens to learn). The model of
the final accuracy y of method m and seed s is the two-way additive one,

    y_ms = mu + alpha_m + beta_s + e_ms,   e ~ N(0, sigma^2),

fit by ordinary least squares (statsmodels): its ANOVA gives the F test of the method effect
and of the seed effect, and its residual mean square (df = (M - 1)(S - 1)) is the one error
every comparison shares. The difference of method m from GRPO ('none') is
mean_s y_ms - mean_s y_none,s with standard error sqrt(2 MSE / S) and a t-distribution on the
residual df; the M - 1 comparisons are corrected by Holm's step-down method (the adjusted
p-values; the interval of the comparison of rank j among them is at level 1 - alpha / (M - j),
the level Holm tests it at). With 3 seeds this pools 10 residual degrees of freedom where
separate paired t-intervals had 2 each.

`bootstrap_difference` resamples seeds and, when the grid stored each held-out problem's
outcome (`eval/problem/<preset>/<i>` points), problems too: the paired difference of mean
accuracy from GRPO over both sources of variation. `seeds_for_power` turns the pooled error
into the number of seeds a difference needs. The t quantiles, Holm, the bootstrap and the
power are `analysis.stats`'s.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..defaults import (
    NO_METHOD as BASELINE,  # GRPO, the method every other is compared with
)
from ..analysis.stats import holm, nested_bootstrap_means, t_quantile, units_needed


def grid_frame(finals: dict[str, dict[int, float]]) -> pd.DataFrame:
    """Long frame (method, seed, y) of the cells present in every method's seeds: the
    complete block the additive model needs (a seed some method lacks is left out)."""
    seeds = set.intersection(*(set(v) for v in finals.values())) if finals else set()
    rows = [(m, s, float(v[s])) for m, v in finals.items() for s in sorted(seeds)]
    return pd.DataFrame(rows, columns=["method", "seed", "y"])


def two_way_anova(frame: pd.DataFrame) -> dict | None:
    """The additive method + seed model's ANOVA: per effect df, F, p; the residual df, mean
    square and SD. None when the grid has fewer than 2 methods or 2 seeds."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    if frame.method.nunique() < 2 or frame.seed.nunique() < 2:
        return None
    fit = smf.ols("y ~ C(method) + C(seed)", data=frame).fit()
    table = anova_lm(fit)
    out = {"residual": {"df": int(fit.df_resid), "mean_square": float(fit.mse_resid),
                        "sd": float(math.sqrt(fit.mse_resid))}}
    for effect, name in (("C(method)", "method"), ("C(seed)", "seed")):
        row = table.loc[effect]
        out[name] = {"df": int(row["df"]), "F": _number(row["F"]), "p": _number(row["PR(>F)"])}
    return out


def _number(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def pooled_differences(frame: pd.DataFrame, anova: dict, alpha: float = 0.05) -> dict[str, dict]:
    """Per method but GRPO: {mean, se, df, t, p, p_holm, lo, hi, level, lo95, hi95}: its
    difference from GRPO with the pooled error, the interval at Holm's level for its rank
    (module docstring) and the unadjusted 95% one."""
    from scipy import stats

    means = frame.groupby("method").y.mean()
    n_seeds = frame.seed.nunique()
    df, mse = anova["residual"]["df"], anova["residual"]["mean_square"]
    se = math.sqrt(2 * mse / n_seeds)
    methods = [m for m in means.index if m != BASELINE]
    out = {}
    for m in methods:
        diff = float(means[m] - means[BASELINE])
        t = diff / se if se > 0 else math.inf * np.sign(diff)
        half95 = t_quantile(1 - alpha / 2, df) * se
        out[m] = {"mean": diff, "se": se, "df": df, "t": float(t),
                  "p": float(2 * stats.t.sf(abs(t), df)) if se > 0 else float(diff == 0),
                  "lo95": diff - half95, "hi95": diff + half95}
    adjusted, rank = holm({m: out[m]["p"] for m in methods}, alpha)
    for m in methods:
        level = 1 - alpha / (len(methods) - rank[m] + 1)
        half = t_quantile(0.5 + level / 2, df) * se
        out[m].update(p_holm=adjusted[m], level=level, lo=out[m]["mean"] - half, hi=out[m]["mean"] + half)
    return out


def bootstrap_difference(outcomes: dict[tuple[str, int], np.ndarray], method: str, n_boot: int = 2000,
                         seed: int = 0) -> dict | None:
    """Percentile 95% interval of mean accuracy(method) - mean accuracy(GRPO), resampling the
    seeds both have and, within the replicate, the held-out problems (the same problems for
    both: the comparison stays paired).

    outcomes: {(method, seed): (P,) 0/1 per held-out problem, the same P problems in order}."""
    seeds = sorted(s for (m, s) in outcomes if m == method and (BASELINE, s) in outcomes)
    if len(seeds) < 2:
        return None
    ours = np.stack([outcomes[(method, s)] for s in seeds]).astype(np.float64)  # (S, P)
    base = np.stack([outcomes[(BASELINE, s)] for s in seeds]).astype(np.float64)
    diff = ours - base  # (S, P)
    lo, hi = np.quantile(nested_bootstrap_means(diff, n_boot, seed), [0.025, 0.975])
    return {"mean": float(diff.mean()), "lo": float(lo), "hi": float(hi), "seeds": len(seeds),
            "problems": int(ours.shape[1]), "n_boot": n_boot}


def seeds_for_power(residual_sd: float, effect: float = 0.03, alpha: float = 0.05, power: float = 0.8) -> int:
    """Seeds per method for a paired difference of `effect` to be found at `power` (two-sided
    `alpha`), the paired difference's SD being sqrt(2) x the residual SD (normal approximation,
    `stats.units_needed`)."""
    return units_needed(math.sqrt(2) * residual_sd, effect, alpha, power, family=1, minimum=1)
