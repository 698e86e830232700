"""The project's statistics, in one place: every summary (align, the graded oracle, the
experiment report, recall, the notebooks) calls these.

- Bootstrap over units (traces, batches, seeds): `bootstrap_index` draws the resampled units
  once so that several quantities resampled with it stay paired; `bootstrap_means` gives the
  means over it (NaN units left out), `percentile_interval` their percentile interval,
  `bootstrap_ci` / `mean_ci` the whole road for one column, `paired_bootstrap` for the paired
  difference of two columns (or one against 0) with its bootstrap p-value;
  `plug_in_interval` for a function of several columns' means (a ratio of means), each
  resample's means put through the function.
- `bootstrap_p`: two-sided, twice the smaller share of bootstrap means on either side of 0.
  Where no resample crosses 0 the p-value is below the bootstrap's resolution: it is returned
  as the bound 1 / n_resamples (`PValue.bound`) and printed "p < 0.0001" (`format_p`), never
  "p 0".
- `holm`: Holm's step-down adjustment (statsmodels' `multipletests(method="holm")`), with each
  member's rank, which sets the level of its interval (1 - alpha / (K - rank + 1)).
- `t_quantile`, `t_interval`, `t_test_p`: Student's t from scipy (`scipy.stats.t`). At 20-40
  traces a percentile bootstrap's p-value is slightly anti-conservative; the t-test's is not,
  so the per-trace tests of the graded summary report the t-test's p.
- Power of a paired two-sided t-test at alpha / family (statsmodels' `TTestPower`, the
  noncentral t: the normal approximation is optimistic at 20-40 units): `t_power`,
  `units_needed` and `min_detectable_effect` (the smallest effect n units resolve).
- `MIN_UNITS`: a figure over fewer units (traces, groups, batches) is too few to read:
  `too_few` says so, a report prints it as such and a verdict never calls it resolved.
  `t_interval(bounds=...)` keeps an interval inside the values' own range (a correlation's in
  [-1, 1]): the interval clipped to where the mean can lie keeps its coverage, and no figure
  is impossible.
- `clustered_slope`: the coefficient of one regressor in a least-squares fit with standard
  errors clustered by unit (statsmodels' OLS, `cov_type="cluster"`, t on units - 1 degrees of
  freedom); `within_ranks` turns a unit's values into centred ranks scaled to [-1/2, 1/2], the
  within-unit rank regression's columns.
- `spearman_or_none`, `auc_or_none`: None (undefined) when a ranking's scores are constant,
  instead of 0 or 0.5 (a constant ranking says nothing); `count_undefined` counts them apart.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
import numpy as np

from ..errors import InputError

MIN_UNITS = 10  # fewer units than this: a figure is too few to read, never resolved (module docstring)
CORRELATION = (-1.0, 1.0)  # the range of a correlation, and of a mean of correlations


def too_few(n) -> bool:
    """Whether `n` units are too few to read a figure over (`MIN_UNITS`)."""
    return n is None or n < MIN_UNITS

# ------------------------------------------------------------------ p-values


@dataclass(frozen=True)
class PValue:
    """A p-value; `bound`: the true value is below `value` (the resolution of the resamples
    that estimated it), so it is printed "< value"."""

    value: float
    bound: bool = False

    def __float__(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        return format_p(self)


def format_p(p, digits: int = 4, label: str = "p") -> str:
    """`p` as printed: "p 0.0123", "p < 0.0005" for a bound (`PValue.bound`: below the
    resolution of its resamples), "p < 0.0001" for a value that rounds to 0 at `digits`, "p n/a"
    for None or NaN; never "p 0". `label` "" leaves the "p " out ("< 0.0005")."""
    bound = isinstance(p, PValue) and p.bound
    value = None if p is None else float(p)
    head = f"{label} " if label else ""
    if value is None or not math.isfinite(value):
        return f"{head}n/a"
    floor = 10.0 ** -digits
    if bound:
        return f"{head}< {max(value, floor):.{digits}g}"
    if value < floor:
        return f"{head}< {floor:.{digits}f}"
    return f"{head}{value:.{digits}f}"


def bootstrap_p(boot: np.ndarray) -> PValue:
    """Two-sided bootstrap p-value of a mean of 0 from the bootstrap means `boot` (NaN left
    out): twice the smaller share on either side of 0; a bound 1 / n when no mean crosses."""
    boot = np.asarray(boot, dtype=np.float64)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return PValue(1.0)
    side = min((boot <= 0).mean(), (boot >= 0).mean())
    if side == 0:
        return PValue(1 / boot.size, bound=True)
    return PValue(float(min(1.0, 2 * side)))


def holm(pvalues: dict, alpha: float = 0.05) -> tuple[dict, dict]:
    """(Holm-adjusted p-values, rank 1..K by raw p, ties by key) of a family {name: p}
    (statsmodels' `multipletests(method="holm")`); a NaN p is left out of the family."""
    from statsmodels.stats.multitest import multipletests

    order = sorted((k for k in pvalues if math.isfinite(float(pvalues[k]))), key=lambda k: (float(pvalues[k]), k))
    if not order:
        return {}, {}
    adjusted = multipletests([float(pvalues[k]) for k in order], alpha=alpha, method="holm")[1]
    return ({k: float(a) for k, a in zip(order, adjusted)},
            {k: rank for rank, k in enumerate(order, start=1)})


# ------------------------------------------------------------------ bootstrap


def bootstrap_index(n: int, n_boot: int, seed) -> np.ndarray:
    """(n_boot, max(n, 1)) indices of n units drawn with replacement; `seed`: an int or a
    numpy Generator (drawn from, so successive calls continue its stream)."""
    return np.random.default_rng(seed).integers(0, max(n, 1), size=(n_boot, max(n, 1)))


def bootstrap_means(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """(n_boot,) means of `values` (n,) over the resampled unit indices `index` (n_boot, n),
    NaN entries left out of each mean (NaN where a resample holds none)."""
    picked = values[index]
    if not np.isnan(values).any():
        return picked.mean(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample of NaNs only: its mean is NaN
        return np.nanmean(picked, axis=1)


def nested_bootstrap_means(values: np.ndarray, n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """(n_boot,) means of `values` (S, P) with both its rows (seeds) and its columns (the same
    problems in every row) resampled: the bootstrap over both sources of variation."""
    rng = np.random.default_rng(seed)
    rows, cols = bootstrap_index(values.shape[0], n_boot, rng), bootstrap_index(values.shape[1], n_boot, rng)
    return np.array([values[r][:, c].mean() for r, c in zip(rows, cols)])


def percentile_interval(values: np.ndarray, boot: np.ndarray, level: float) -> dict:
    """{"mean", "low", "high"}: the mean of the finite `values` and the percentile interval of
    the bootstrap means `boot` at `level` (None when there is nothing to resample)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"mean": None, "low": None, "high": None}
    boot = boot[np.isfinite(boot)]
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2]) if boot.size else (np.nan, np.nan)
    return {"mean": float(finite.mean()), "low": _num(low), "high": _num(high)}


def _num(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def plug_in_interval(fn, columns, index: np.ndarray, level: float) -> dict:
    """{"value", "low", "high", "level"}: `fn` of the means of the `columns` (each (n,), the
    same n units) and the percentile interval of `fn` over the resamples' means, every column
    resampled by the same unit indices `index` (n_boot, n), so a ratio of two columns' means
    stays paired. `fn` takes the means as arrays, one argument per column, and returns NaN
    where it is undefined (a zero denominator); None for what cannot be computed, and no
    interval when more resamples than one tail holds are undefined (where they would fall is
    unknown)."""
    columns = [np.asarray(c, dtype=np.float64) for c in columns]
    with np.errstate(divide="ignore", invalid="ignore"):
        value = fn(*[np.array([np.nanmean(c) if np.isfinite(c).any() else np.nan]) for c in columns])[0]
        boot = np.asarray(fn(*[bootstrap_means(c, index) for c in columns]), dtype=np.float64)
    finite = boot[np.isfinite(boot)]
    low = high = np.nan
    if finite.size and boot.size - finite.size <= (1 - level) / 2 * boot.size:
        low, high = np.quantile(finite, [(1 - level) / 2, (1 + level) / 2])
    return {"value": _num(value), "low": _num(low), "high": _num(high), "level": level}


def bootstrap_ci(values, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0):
    """Percentile bootstrap interval (lo, hi) of the mean of `values` (1-D).

    NaN values (undefined rows) are dropped first; no value left gives (nan, nan).
    """
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha}")
    if n_boot < 1:
        raise InputError(f"n_boot must be >= 1, got {n_boot}")
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    step = max(1, 5_000_000 // len(x))  # bounds the index matrix at ~40 MB
    for lo in range(0, n_boot, step):
        hi = min(n_boot, lo + step)
        means[lo:hi] = x[rng.integers(0, len(x), size=(hi - lo, len(x)))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return (float(low), float(high))


def mean_ci(values, seed: int = 0, key: str = "mean") -> dict:
    """{key: mean of the finite `values`, "ci95": [lo, hi] (`bootstrap_ci`), "n": their count};
    None for the mean and the interval when no value is finite. JSON-ready floats."""
    arr = np.asarray([np.nan if v is None else v for v in np.ravel(values)], dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {key: None, "ci95": [None, None], "n": 0}
    lo, hi = bootstrap_ci(arr, seed=seed)
    return {key: float(arr.mean()), "ci95": [float(lo), float(hi)], "n": int(arr.size)}


def paired_bootstrap(a, b=None, *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0) -> dict:
    """The mean of a - b over paired units (of a alone against 0 when b is None), a unit
    counted once and a NaN on either side left out: {"mean", "low", "high" (percentile interval
    at `level`), "p" (`bootstrap_p`, a PValue), "n" (units used), "n_boot"}."""
    d = np.asarray(a, dtype=np.float64) - (0.0 if b is None else np.asarray(b, dtype=np.float64))
    d = d[np.isfinite(d)]
    boot = bootstrap_means(d, bootstrap_index(d.size, n_boot, seed)) if d.size else np.zeros(0)
    return {**percentile_interval(d, boot, level), "p": bootstrap_p(boot), "n": int(d.size), "n_boot": n_boot}


# ------------------------------------------------------------------ Student's t


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (scipy.stats.t.ppf)."""
    from scipy import stats

    if not 0 < p < 1 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    return float(stats.t.ppf(p, df))


def t_interval(values, level: float = 0.95, bounds: tuple[float, float] | None = None) -> dict:
    """The mean of the finite `values` with its t-interval at `level`: {"mean", "low", "high",
    "sd", "n"}; low, high and sd None below 2 values. `bounds` (low, high): the range the values
    (so their mean) lie in, the interval clipped to it (`CORRELATION` for correlations)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    out = {"mean": float(x.mean()) if x.size else None, "low": None, "high": None, "sd": None, "n": int(x.size)}
    if x.size >= 2:
        sd = float(x.std(ddof=1))
        half = t_quantile(0.5 + level / 2, x.size - 1) * sd / math.sqrt(x.size)
        out.update(sd=sd, low=out["mean"] - half, high=out["mean"] + half)
        if bounds is not None:
            out.update(low=max(out["low"], bounds[0]), high=min(out["high"], bounds[1]))
    return out


def t_bounds(mean: float, se: float, df: float, level: float) -> tuple[float, float, float]:
    """(low, high, two-sided p of 0) of an estimate `mean` with standard error `se` on `df`
    degrees of freedom (Student's t, e.g. Welch-Satterthwaite's); NaNs where se or df is not
    positive."""
    from scipy import stats

    if not (np.isfinite(se) and se > 0 and df > 0):
        return (math.nan, math.nan, math.nan)
    q = t_quantile((1 + level) / 2, df)
    return mean - q * se, mean + q * se, float(2 * stats.t.sf(abs(mean) / se, df))


def t_test_p(values) -> float:
    """Two-sided one-sample t-test p-value of a mean of 0 over the finite `values` (a paired
    test when they are differences; scipy.stats.ttest_1samp); NaN below 2 values, and NaN when
    they do not vary (the t statistic is 0/0 or infinite: no test, never a p of 0), except 1.0
    when every value is 0."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size < 2:
        return math.nan
    if np.ptp(x) == 0:
        return 1.0 if x[0] == 0 else math.nan
    return float(stats.ttest_1samp(x, 0.0).pvalue)


# ------------------------------------------------------------------ power


def t_power(size: float, n: int, level: float) -> float:
    """The power of a two-sided one-sample (paired) t-test of `n` units at standardized effect
    `size` and level `level`: statsmodels' `TTestPower.power` (the noncentral t). Where that is
    NaN (scipy's noncentral t fails far in its lower tail, P(T < -q), which is below
    Phi(-size sqrt(n)) for a positive effect), the upper tail P(T > q) alone, off by less than
    that bound; NaN where the upper tail fails too."""
    from scipy import stats
    from statsmodels.stats.power import TTestPower

    if n < 2:
        return math.nan  # no t-test of one unit
    p = float(TTestPower().power(effect_size=size, nobs=n, alpha=level, alternative="two-sided"))
    if math.isfinite(p) or size <= 0:
        return p
    return float(stats.nct.sf(t_quantile(1 - level / 2, n - 1), n - 1, size * math.sqrt(n)))


def units_needed(sd: float, effect: float, alpha: float = 0.05, power: float = 0.8, family: int = 1,
                 minimum: int = 2) -> int | None:
    """Paired units (batches, seeds, traces) a two-sided t-test at alpha / family needs to
    detect `effect` with `power`, the paired differences' SD being `sd`: the fewest units, at
    least `minimum` and 2, whose `t_power` reaches it, found by doubling and bisection over whole
    units (statsmodels' `solve_power` returns NaN where the answer is a few units, an effect of
    many SDs). None without spread or effect, or where the power cannot be computed."""
    if not (np.isfinite(sd) and sd > 0) or effect <= 0:
        return None
    size, level = effect / sd, alpha / family

    def reached(n: int) -> bool | None:
        p = t_power(size, n, level)
        return p >= power if math.isfinite(p) else None

    low = high = max(minimum, 2)  # a t-test needs two units
    while not (found := reached(high)):
        if found is None or high > 1 << 40:
            return None
        low, high = high, 2 * high
    if high == low:
        return high
    while high - low > 1:  # low: not reached, high: reached
        middle = (low + high) // 2
        found = reached(middle)
        if found is None:
            return None
        low, high = (low, middle) if found else (middle, high)
    return high


def min_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8,
                          family: int = 1) -> float | None:
    """The smallest effect n paired units detect at alpha / family with `power` (statsmodels'
    `TTestPower.solve_power` for the standardized effect, times `sd`)."""
    from statsmodels.stats.power import TTestPower

    if not np.isfinite(sd) or n < 2:
        return None
    if sd == 0:
        return 0.0
    d = TTestPower().solve_power(nobs=n, alpha=alpha / family, power=power, alternative="two-sided")
    return float(np.ravel(d)[0]) * float(sd)


# ------------------------------------------------------------------ regression


def within_ranks(values) -> np.ndarray:
    """(n,) the average ranks of `values` within their unit, centred and scaled to [-1/2, 1/2]
    ((rank - 1) / (n - 1) - 1/2); zeros for one value, and a constant unit's all 0 (ties)."""
    from scipy.stats import rankdata

    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return np.zeros(x.size)
    return (rankdata(x) - 1) / (x.size - 1) - 0.5


def clustered_slope(y, columns: list, clusters, level: float = 0.95) -> dict:
    """The least-squares coefficient of columns[0] in y ~ columns (no intercept: the columns are
    within-cluster centred), its standard error clustered by `clusters` (statsmodels' OLS with
    cov_type="cluster", t on clusters - 1 degrees of freedom): {"coef", "low", "high", "p",
    "se", "clusters", "n"}; None values below 3 clusters or when columns[0] is collinear with
    the others (no separate coefficient)."""
    import statsmodels.api as sm

    X = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns])
    y, groups = np.asarray(y, dtype=np.float64), np.asarray(clusters)
    out = {"coef": None, "low": None, "high": None, "p": None, "se": None,
           "clusters": int(len(set(groups.tolist()))), "n": int(y.size)}
    if out["clusters"] < 3 or np.linalg.matrix_rank(X) < X.shape[1] or not np.any(X[:, 0]):
        return out
    fit = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    low, high = fit.conf_int(alpha=1 - level)[0]
    out.update(coef=float(fit.params[0]), low=float(low), high=float(high), p=float(fit.pvalues[0]),
               se=float(fit.bse[0]))
    return out


# ------------------------------------------------------------------ rankings


def _constant(x: np.ndarray) -> bool:
    return x.size == 0 or bool(np.ptp(x) == 0)


def spearman_or_none(a, b) -> float | None:
    """Spearman's rank correlation of two 1-D arrays; None (undefined) when either is constant
    or not finite, or has fewer than 2 values."""
    from ..weights.metrics import spearman

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()) or _constant(a) or _constant(b):
        return None
    return spearman(a, b)


def auc_or_none(scores, positive, negative) -> float | None:
    """The probability that a `positive` unit outscores a `negative` one (ties half) over the
    units' `scores` (1-D; positive, negative: boolean masks); None (undefined) when the
    ranking's scores are constant over all the units (it ranks nothing: not 0.5) or a class
    is empty."""
    s = np.asarray(scores, dtype=np.float64)
    positive, negative = np.asarray(positive, dtype=bool), np.asarray(negative, dtype=bool)
    if _constant(s) or not positive.any() or not negative.any():
        return None
    diff = s[positive][:, None] - s[negative][None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def count_undefined(values) -> int:
    """How many of `values` are undefined (None or NaN)."""
    return sum(1 for v in values if v is None or not math.isfinite(float(v)))
