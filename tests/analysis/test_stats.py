"""analysis.stats, the one owner of the statistics: known values, equivalence with scipy and
statsmodels, determinism by seed, and the undefined cases."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from oar_attrib.analysis import stats
from oar_attrib.errors import InputError


def test_holm_matches_a_hand_computed_example():
    # p sorted: 0.01 (x3 -> 0.03), 0.02 (x2 -> 0.04), 0.04 (x1 -> 0.04, kept monotone)
    adjusted, rank = stats.holm({"a": 0.04, "b": 0.01, "c": 0.02})
    assert adjusted == pytest.approx({"a": 0.04, "b": 0.03, "c": 0.04})
    assert rank == {"b": 1, "c": 2, "a": 3}
    adjusted, _ = stats.holm({"a": 0.5, "b": 0.4})
    assert adjusted == pytest.approx({"a": 0.8, "b": 0.8})  # 2 x 0.4, then max(0.8, 0.5)


def test_holm_equals_statsmodels_on_random_families_and_keeps_its_invariants():
    rng = np.random.default_rng(3)
    for _ in range(20):  # statsmodels' multipletests takes ~80 ms a call here
        k = int(rng.integers(1, 9))
        p = rng.uniform(0, 1, k) ** 3
        raw = {f"m{i}": float(v) for i, v in enumerate(p)}
        adjusted, rank = stats.holm(raw)
        expected = multipletests(p, method="holm")[1]
        assert [adjusted[f"m{i}"] for i in range(k)] == pytest.approx(list(expected))
        order = sorted(raw, key=rank.get)
        assert [raw[m] for m in order] == sorted(raw.values())
        assert all(adjusted[a] <= adjusted[b] for a, b in itertools.pairwise(order))  # monotone in rank
        assert all(raw[m] <= adjusted[m] <= 1.0 for m in raw)
        assert all(adjusted[m] <= min(1.0, k * raw[m]) + 1e-12 for m in raw)  # never above Bonferroni


def test_holm_leaves_nan_out_and_breaks_ties_by_name():
    adjusted, rank = stats.holm({"b": 0.01, "a": 0.01, "c": math.nan})
    assert set(adjusted) == {"a", "b"} and rank == {"a": 1, "b": 2}
    assert adjusted["a"] == adjusted["b"] == pytest.approx(0.02)
    assert stats.holm({}) == ({}, {})


def test_t_quantile_and_interval_match_scipy():
    assert stats.t_quantile(0.975, 4) == pytest.approx(2.776445105, abs=1e-8)
    x = np.array([0.3, -0.1, 0.5, 0.2, 0.4, np.nan])
    got = stats.t_interval(x, 0.9)
    lo, hi = sps.t.interval(0.9, 4, loc=np.nanmean(x), scale=sps.sem(x[:5]))
    assert (got["low"], got["high"], got["n"]) == (pytest.approx(lo), pytest.approx(hi), 5)
    assert stats.t_interval([1.0])["low"] is None
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_t_test_p_matches_scipy_and_handles_no_spread():
    x = np.array([0.2, 0.1, -0.05, 0.3, 0.15])
    assert stats.t_test_p(x) == pytest.approx(sps.ttest_1samp(x, 0).pvalue)
    assert stats.t_test_p([0.0, 0.0, 0.0]) == 1.0 and math.isnan(stats.t_test_p([0.2, 0.2]))  # no test, not p 0
    assert math.isnan(stats.t_test_p([0.3]))


def test_bootstrap_is_deterministic_by_seed_and_paired():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.3, 1, 30), rng.normal(0, 1, 30)
    one = stats.paired_bootstrap(a, b, n_boot=2000, seed=5)
    assert one == stats.paired_bootstrap(a, b, n_boot=2000, seed=5)
    assert one != stats.paired_bootstrap(a, b, n_boot=2000, seed=6)
    assert one["mean"] == pytest.approx((a - b).mean()) and one["low"] < one["mean"] < one["high"]
    assert stats.paired_bootstrap(a - b, n_boot=2000, seed=5) == one  # against 0 == paired
    assert stats.bootstrap_ci(a, seed=1) == stats.bootstrap_ci(a, seed=1)


def test_bootstrap_p_is_a_bound_when_no_resample_crosses_and_never_prints_0():
    p = stats.paired_bootstrap(np.linspace(1, 2, 20), n_boot=1000)["p"]
    assert p.bound and float(p) == pytest.approx(1e-3)
    assert stats.format_p(p) == "p < 0.001" and "0.0000" not in stats.format_p(p)
    crossing = stats.bootstrap_p(np.array([-1.0, 1.0, 2.0, 3.0]))
    assert not crossing.bound and float(crossing) == 0.5
    assert stats.format_p(0.0) == "p < 0.0001" and stats.format_p(0.0123) == "p 0.0123"
    assert stats.format_p(None) == "p n/a" and stats.format_p(math.nan) == "p n/a"


def test_bootstrap_ci_checks_its_arguments():
    with pytest.raises(InputError):
        stats.bootstrap_ci([1.0, 2.0], alpha=1.5)
    with pytest.raises(InputError):
        stats.bootstrap_ci([1.0, 2.0], n_boot=0)
    assert all(math.isnan(v) for v in stats.bootstrap_ci([math.nan]))


def _t_power(n: int, d: float, alpha: float) -> float:
    """The power of a two-sided one-sample t-test of n units at standardized effect d, from
    scipy's noncentral t (independent of statsmodels' solver)."""
    q = sps.t.ppf(1 - alpha / 2, n - 1)
    nc = d * math.sqrt(n)
    return sps.nct.sf(q, n - 1, nc) + sps.nct.cdf(-q, n - 1, nc)


def test_power_is_the_t_test_s_and_inverts_itself():
    sd, alpha, power, family = 0.02, 0.05, 0.8, 3
    n = stats.units_needed(sd, 0.01, alpha, power, family)
    assert _t_power(n, 0.5, alpha / family) >= power > _t_power(n - 1, 0.5, alpha / family)
    z = sps.norm.ppf(1 - alpha / (2 * family)) + sps.norm.ppf(power)
    assert n > math.ceil((z * sd / 0.01) ** 2)  # the normal approximation is optimistic
    assert stats.min_detectable_effect(sd, n, alpha, power, family) <= 0.01
    assert stats.min_detectable_effect(sd, n - 1, alpha, power, family) > 0.01
    assert stats.units_needed(math.nan, 0.01) is None and stats.min_detectable_effect(0.1, 1) is None


def test_units_needed_for_an_effect_of_many_sds():
    """Where statsmodels' solver returns NaN (the answer is a few units) and scipy's lower tail
    is NaN: the fewest units whose power reaches 0.8, by the upper tail alone (the lower one is
    below Phi(-nc), 1e-12 here), and never a crash."""
    level = 0.05 / 4
    upper = lambda n, d: sps.nct.sf(sps.t.ppf(1 - level / 2, n - 1), n - 1, d * math.sqrt(n))  # noqa: E731
    for sd, effect in ((0.002, 0.05), (0.01, 0.05), (0.001, 0.005), (0.0149, 0.05)):
        n = stats.units_needed(sd, effect, 0.05, 0.8, 4)
        assert upper(n, effect / sd) >= 0.8 > (upper(n - 1, effect / sd) if n > 2 else 0.0)
    assert stats.units_needed(1e-4, 0.05, 0.05, 0.8, 4) == 2  # the minimum already has the power
    assert stats.units_needed(1e-17, 0.05) is None  # no power computable: no figure, no crash
    assert stats.t_power(25.0, 4, level) == pytest.approx(1.0)  # statsmodels' own is NaN there


def test_plug_in_interval_of_a_ratio_of_means():
    rng = np.random.default_rng(0)
    num, den = rng.normal(2.0, 1.0, 30), rng.normal(1.0, 0.5, 30)
    index = stats.bootstrap_index(30, 500, 1)
    got = stats.plug_in_interval(lambda a, b: a / b, [num, den], index, 0.9)
    assert got["value"] == pytest.approx(num.mean() / den.mean(), rel=1e-12) and got["level"] == 0.9
    ratios = [num[rows].mean() / den[rows].mean() for rows in index]
    assert (got["low"], got["high"]) == tuple(pytest.approx(q, rel=1e-12) for q in np.quantile(ratios, [0.05, 0.95]))
    # a denominator near 0 on many resamples: undefined there, so no interval (value kept)
    odd = stats.plug_in_interval(lambda a, b: np.where(b > 0, a / np.where(b > 0, b, 1), np.nan),
                                 [num, rng.normal(0.0, 1.0, 30)], index, 0.95)
    assert odd["low"] is None and odd["high"] is None


def test_constant_scores_have_no_spearman_or_auc():
    flips = np.array([0.0, 0.25, 0.5, 1.0])
    assert stats.spearman_or_none([1, 1, 1, 1], flips) is None
    assert stats.auc_or_none([2.0, 2.0, 2.0, 2.0], flips > 0.5, flips < 0.5) is None
    assert stats.spearman_or_none([1, 2, 3, 4], flips) == pytest.approx(1.0)
    assert stats.auc_or_none([1.0, 2.0, 3.0, 4.0], flips > 0.5, flips < 0.5) == 1.0
    assert stats.auc_or_none([1.0, 3.0, 3.0, 1.0], flips > 0.5, flips < 0.5) == 0.25  # ties count half
    assert stats.count_undefined([None, math.nan, 0.5, 0.0]) == 2


def test_holm_and_power_against_hand_computed_values():
    """Moved from test_align_stats (align's power table and contrasts use these)."""
    adjusted, rank = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06}) and rank == {"a": 1, "c": 2, "b": 3}
    # d = 0.5, alpha 0.05, power 0.8, two-sided one-sample t: 33.37 units (G*Power's table: 34)
    assert stats.units_needed(1.0, 0.5, 0.05, 0.8, family=1) == 34
    # Bonferroni at the first Holm step (alpha / 4): power at n reaches 0.8, at n - 1 not
    n = stats.units_needed(1.0, 0.5, 0.05, 0.8, family=4)
    assert _t_power(n, 0.5, 0.0125) >= 0.8 > _t_power(n - 1, 0.5, 0.0125)
    assert _t_power(34, stats.min_detectable_effect(1.0, 34, 0.05, 0.8, 1), 0.05) == pytest.approx(0.8, abs=1e-4)
    assert float(stats.bootstrap_p(np.full(1000, 0.3))) == pytest.approx(1 / 1000)
    assert float(stats.bootstrap_p(np.linspace(-1, 1, 1001))) == pytest.approx(1.0)


# Two-sided 95% t quantiles from a printed t table (moved from tests/training/test_experiment.py).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262}


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_the_t_table(df):
    assert stats.t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=1e-3)


def test_nested_bootstrap_is_the_former_two_stage_draw():
    """Rows and columns drawn in that order from one generator, as experiment_stats did."""
    values = np.random.default_rng(1).normal(size=(4, 7))
    rng = np.random.default_rng(9)
    rows, cols = rng.integers(0, 4, size=(50, 4)), rng.integers(0, 7, size=(50, 7))
    expected = [values[r][:, c].mean() for r, c in zip(rows, cols)]
    assert stats.nested_bootstrap_means(values, 50, 9) == pytest.approx(expected)


def test_bootstrap_ci():
    """Moved from tests/weights/test_metrics.py with the function."""
    values = np.random.default_rng(0).normal(2.0, 1.0, size=400)
    lo, hi = stats.bootstrap_ci(values, n_boot=1000)
    assert lo < values.mean() < hi
    assert hi - lo == pytest.approx(2 * 1.96 / 20, rel=0.2)  # ~ 2 z sigma / sqrt(n)
    assert stats.bootstrap_ci(values, n_boot=1000) == (lo, hi)  # seeded
    assert stats.bootstrap_ci([3.0, np.nan, 3.0]) == (3.0, 3.0)  # NaN rows are dropped
    assert all(math.isnan(v) for v in stats.bootstrap_ci([np.nan]))
    with pytest.raises(InputError):
        stats.bootstrap_ci(values, alpha=1.5)


def test_mean_ci_drops_undefined_values():
    got = stats.mean_ci([1.0, None, 3.0, float("inf"), np.nan], seed=1, key="recall")
    assert got == {"recall": 2.0, "ci95": list(stats.bootstrap_ci([1.0, 3.0], seed=1)), "n": 2}
    assert got["ci95"][0] >= 1.0 and got["ci95"][1] <= 3.0
    assert stats.mean_ci([None, np.nan]) == {"mean": None, "ci95": [None, None], "n": 0}
