"""The experiment report's statistics: the two-way ANOVA against its sums of squares computed
by hand, the pooled differences against the paired t-test they reduce to with two methods,
Holm's adjustment by hand, the bootstrap and the power figure; and the committed SmolLM2 grid
re-analysed as issue 34 did (method F(5,10) = 0.45, p = 0.80; seed F(2,10) = 5.0, p = 0.03)."""
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from oar_attrib.reports.experiment import compare_to_grpo, format_report, load_report
from oar_attrib.reports.experiment_stats import (bootstrap_difference, grid_frame, pooled_differences,
                                                  seeds_for_power, two_way_anova)

ROOT = Path(__file__).resolve().parents[2]
FINALS = {"none": {0: 0.50, 1: 0.70, 2: 0.40},
          "a": {0: 0.55, 1: 0.80, 2: 0.45},
          "b": {0: 0.35, 1: 0.75, 2: 0.30}}


def test_anova_equals_the_sums_of_squares_by_hand():
    y = np.array([[FINALS[m][s] for s in range(3)] for m in FINALS])  # (M, S)
    grand, rows, cols = y.mean(), y.mean(1, keepdims=True), y.mean(0, keepdims=True)
    ss_method = 3 * ((rows - grand) ** 2).sum()
    ss_seed = 3 * ((cols - grand) ** 2).sum()
    ss_res = ((y - rows - cols + grand) ** 2).sum()
    ms_res = ss_res / 4
    got = two_way_anova(grid_frame(FINALS))
    assert got["residual"]["df"] == 4 and got["residual"]["mean_square"] == pytest.approx(ms_res)
    assert got["method"]["F"] == pytest.approx(ss_method / 2 / ms_res)
    assert got["seed"]["F"] == pytest.approx(ss_seed / 2 / ms_res)
    assert got["method"]["p"] == pytest.approx(stats.f.sf(ss_method / 2 / ms_res, 2, 4))


def test_two_methods_reduce_to_the_paired_t_test():
    two = {"none": FINALS["none"], "a": {0: 0.55, 1: 0.70, 2: 0.49}}
    frame = grid_frame(two)
    got = pooled_differences(frame, two_way_anova(frame))["a"]
    diffs = [two["a"][s] - two["none"][s] for s in range(3)]
    assert got["p"] == pytest.approx(stats.ttest_rel(list(two["a"].values()), list(two["none"].values())).pvalue)
    half = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert (got["lo"], got["hi"]) == pytest.approx((np.mean(diffs) - half, np.mean(diffs) + half))
    assert got["p_holm"] == got["p"]  # one comparison: nothing to correct


def test_holm_adjustment_and_levels_by_hand():
    frame = grid_frame(FINALS)
    got = pooled_differences(frame, two_way_anova(frame))
    ordered = sorted(got, key=lambda m: got[m]["p"])
    expected = np.maximum.accumulate([min(1.0, got[m]["p"] * (2 - i)) for i, m in enumerate(ordered)])
    assert [got[m]["p_holm"] for m in ordered] == pytest.approx(list(expected))
    assert [got[m]["level"] for m in ordered] == pytest.approx([1 - 0.05 / 2, 1 - 0.05 / 1])
    for m in got:  # the rank-1 interval is wider than its unadjusted 95% one
        assert got[m]["lo"] <= got[m]["lo95"] <= got[m]["mean"] <= got[m]["hi95"] <= got[m]["hi"]


def test_compare_to_grpo_keeps_the_seed_pairs_and_takes_the_pooled_interval():
    anova, paired = compare_to_grpo(FINALS)
    assert paired["a"]["diffs"] == pytest.approx([0.05, 0.10, 0.05]) and paired["a"]["wins"] == 3
    assert paired["a"]["lo"] == paired["a"]["pooled"]["lo"] and anova["residual"]["df"] == 4
    alone, small = compare_to_grpo({"none": {0: 0.5}, "a": {0: 0.6}})  # one seed: nothing to pool
    assert alone is None and small["a"]["lo"] is None and small["a"]["mean"] == pytest.approx(0.1)


def test_bootstrap_over_seeds_and_problems():
    rng = np.random.default_rng(0)
    base = {("none", s): rng.integers(0, 2, 40) for s in range(4)}
    same = {**base, **{("a", s): base[("none", s)].copy() for s in range(4)}}
    flat = bootstrap_difference(same, "a")
    assert (flat["mean"], flat["lo"], flat["hi"]) == (0.0, 0.0, 0.0) and flat["problems"] == 40
    better = {**base, **{("a", s): np.maximum(base[("none", s)], (np.arange(40) % 4 == 0)) for s in range(4)}}
    got = bootstrap_difference(better, "a")
    assert 0 < got["lo"] <= got["mean"] <= got["hi"] and got == bootstrap_difference(better, "a")
    assert bootstrap_difference({("a", 0): base[("none", 0)], ("none", 0): base[("none", 0)]}, "a") is None


def test_seeds_for_power_of_the_smollm2_grid():
    """The issue's figure: a paired SD of 0.225 (residual SD 0.159) needs ~440 seeds per arm
    to find 3 points at 80% power (the normal approximation's 2 (1.96 + 0.84)^2 0.159^2 / 0.03^2
    = 443; the t-test's own, from the noncentral t, 2 more)."""
    from scipy import stats as sps

    n, d = seeds_for_power(0.15936), 0.03 / (2 ** 0.5 * 0.15936)

    def power(k):
        q = sps.t.ppf(0.975, k - 1)
        return sps.nct.sf(q, k - 1, d * k ** 0.5) + sps.nct.cdf(-q, k - 1, d * k ** 0.5)

    assert power(n) >= 0.8 > power(n - 1)
    assert 443 < n <= 450


def test_the_committed_smollm2_grid_reanalysed():
    report = load_report(ROOT / "docs" / "experiments" / "smollm2-words-grid.db", "smollm2-words-grid")
    anova = report.anova[report.metric]
    assert (anova["method"]["df"], anova["residual"]["df"]) == (5, 10)
    assert anova["method"]["F"] == pytest.approx(0.45, abs=0.005) and anova["method"]["p"] == pytest.approx(0.80, abs=0.005)
    assert anova["seed"]["F"] == pytest.approx(5.0, abs=0.05) and anova["seed"]["p"] == pytest.approx(0.03, abs=0.002)
    oar_g = report.paired[report.metric]["oar_g"]["pooled"]
    assert (oar_g["mean"], oar_g["lo95"], oar_g["hi95"]) == pytest.approx((-0.141, -0.43, 0.15), abs=0.005)
    text = format_report(report)
    assert "F(5,10) = 0.45, p = 0.804" in text and "Holm" in text
