"""What a reshaping does to GRPO's step (reports/align_step.py) and g*'s noise when the half pools
cannot estimate it: the ratios recomputed from the vectors of a store made here by the direct
formula, their intervals by an independent loop over the same resamples, the by-sign t-tests
against scipy and statsmodels, and the words on hand-made summaries."""
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from oar_attrib.reports import align as stats
from oar_attrib.reports.align_reading import sign_sentence, step_sentence
from oar_attrib.analysis.stats import bootstrap_index
from align_data import cos, write_store

N, DIM = 24, 50


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """GRPO, a method that is GRPO scaled by 1.3 (a pure learning-rate change), and one that
    adds noise of its own; half pools that differ."""
    rng = np.random.default_rng(7)
    star = rng.normal(size=DIM)
    a, b = star + 0.5 * rng.normal(size=DIM), star - 0.5 * rng.normal(size=DIM)
    batches = []
    for _ in range(N):
        pos, neg = rng.normal(size=DIM) + 0.4 * star, rng.normal(size=DIM) - 0.1 * star
        batches.append({"none": (pos, neg), "scaled": (1.3 * pos, 1.3 * neg),
                        "noisy": (pos + rng.normal(size=DIM), neg + 0.5 * rng.normal(size=DIM))})
    folder = write_store(tmp_path_factory.mktemp("step") / "s", star, batches, pool_halves=(a, b))
    return folder, star, (a, b), batches


def test_the_ratios_are_the_direct_formula_of_the_vectors(store):
    folder, star, (a, b), batches = store
    summary = stats.summarise(folder, n_boot=500)
    g = [sum(x["none"]) for x in batches]
    for label in ("none", "scaled", "noisy"):
        m = [sum(x[label]) for x in batches]
        s = sum(v @ star for v in m) / sum(v @ star for v in g)
        q = sum(v @ v for v in m) / sum(v @ v for v in g)
        step = summary["methods"][label]["step"]
        assert step["signal_ratio"]["value"] == pytest.approx(s, rel=1e-12)
        assert step["second_moment_ratio"]["value"] == pytest.approx(q, rel=1e-12)
        assert step["gain"]["value"] == pytest.approx(s * s / q, rel=1e-12)
        s_a = sum(v @ a for v in m) / sum(v @ a for v in g)
        assert step["half_pools"]["a"]["signal_ratio"]["value"] == pytest.approx(s_a, rel=1e-12)
        assert step["half_pools"]["a"]["gain"]["value"] == pytest.approx(s_a * s_a / q, rel=1e-12)
        for key in ("signal_ratio", "second_moment_ratio", "gain"):
            c = step[key]
            assert c["low"] <= c["value"] <= c["high"] and c["level"] == 0.95
    scaled = summary["methods"]["scaled"]["step"]  # a pure rescaling: S = c, Q = c^2, no gain, on every resample
    assert (scaled["signal_ratio"]["low"], scaled["signal_ratio"]["high"]) == (pytest.approx(1.3), pytest.approx(1.3))
    assert scaled["second_moment_ratio"]["value"] == pytest.approx(1.69)
    assert (scaled["gain"]["low"], scaled["gain"]["high"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert summary["methods"]["none"]["step"]["gain"]["value"] == 1.0
    assert summary["methods"]["noisy"]["step"]["gain"]["value"] < 1  # its own noise: a loss in direction


def test_the_intervals_are_the_percentiles_of_the_same_resamples(store):
    """An independent loop: each resample of batches (the summary's own indices, its seed 0),
    the ratio of the summed dot products, then numpy's percentiles."""
    folder, star, _, batches = store
    summary = stats.summarise(folder, n_boot=400)
    index = bootstrap_index(N, 400, 0)
    dot = {k: np.array([sum(x[k]) @ star for x in batches]) for k in ("none", "noisy")}
    sq = {k: np.array([sum(x[k]) @ sum(x[k]) for x in batches]) for k in ("none", "noisy")}
    gains = []
    for rows in index:
        s = dot["noisy"][rows].sum() / dot["none"][rows].sum()
        gains.append(s * s / (sq["noisy"][rows].sum() / sq["none"][rows].sum()))
    low, high = np.quantile(gains, [0.025, 0.975])
    got = summary["methods"]["noisy"]["step"]["gain"]
    assert (got["low"], got["high"]) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_delta_cos_by_sign_is_a_paired_t_test_with_holm(store):
    folder, star, _, batches = store
    summary = stats.summarise(folder, n_boot=200)
    raw = {}
    for label in ("scaled", "noisy"):
        for k, part in enumerate(("pos", "neg")):
            d = [cos(x[label][k], star) - cos(x["none"][k], star) for x in batches]
            got = summary["methods"][label][part]["delta_cos"]
            assert got["mean"] == pytest.approx(np.mean(d), abs=1e-12) and got["n"] == N
            if label == "scaled":  # the same direction on every row: no difference but rounding
                assert abs(got["mean"]) < 1e-12
            else:
                assert got["p_t"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue, rel=1e-9)
            raw[(label, part)] = got["p_t"]
    adjusted = multipletests(list(raw.values()), method="holm")[1]
    for (label, part), want in zip(raw, adjusted):
        assert summary["methods"][label][part]["delta_cos"]["p_t_holm"] == pytest.approx(want)
    assert summary["by_sign"]["family"] == 4
    assert "p_t" not in summary["methods"]["none"]["pos"]["delta_cos"]


def test_gstar_noise_is_never_silently_zero():
    # the moment estimate (split^2 - var) / 4 where it is positive
    var, source, moment = stats.gstar_variance(0.04, 0.0004)
    assert (var, source, moment) == (pytest.approx(0.0003), "estimate", pytest.approx(0.0003))
    # not positive: the half pools' whole spread (split^2 + var) / 4 stands in, and says so
    var, source, moment = stats.gstar_variance(0.01, 0.0004)
    assert (var, source) == (pytest.approx(0.000125), "spread") and moment == pytest.approx(-0.000075)


def test_a_contrast_whose_halves_agree_gets_the_spread_in_its_interval():
    """The half pools' contrasts differ by less than the batches' noise of that difference: no
    positive estimate, so the interval holds the spread's variance and says where it came from."""
    rng = np.random.default_rng(4)
    n = 40
    grpo = {k: rng.normal(0.2, 0.02, n) for k in ("cos", "cos_a", "cos_b")}
    base, jitter = rng.normal(0.01, 0.01, n), rng.normal(0.0, 0.004, n)
    method = {"cos": grpo["cos"] + base, "cos_a": grpo["cos_a"] + base + jitter, "cos_b": grpo["cos_b"] + base - jitter}
    values = {"m": {"all": method}, "none": {"all": grpo}}
    index = rng.integers(0, n, size=(4000, n))
    got = stats.with_gstar_noise(values, ("m", "none"), index, 0.95)
    split = float(np.mean(2 * jitter))
    split_var = float(np.var(np.mean((2 * jitter)[index], axis=1), ddof=1))
    assert split ** 2 < split_var and got["gstar_from"] == "spread"
    assert got["gstar_sd"] == pytest.approx(math.sqrt((split ** 2 + split_var) / 4), rel=1e-9)
    assert got["gstar_moment"] == pytest.approx((split ** 2 - split_var) / 4, rel=1e-9)
    assert got["se"] ** 2 == pytest.approx(got["batch_se"] ** 2 + got["gstar_sd"] ** 2)


def _ratio(value, low, high):
    return {"value": value, "low": low, "high": high, "level": 0.95}


def test_the_words_read_a_rescaling_a_loss_and_opposite_signs():
    lr = {"signal_ratio": _ratio(1.124, 1.023, 1.240), "second_moment_ratio": _ratio(1.262, 1.22, 1.30),
          "gain": _ratio(1.00, 0.83, 1.22), "half_pools": None}
    text = step_sentence("oar_g", lr)
    assert "a learning-rate change of about x1.124 [1.023, 1.240]" in text and "no gain in direction" in text
    assert "a pure rescaling by x1.124 gives x1.263" in text
    noise = {**lr, "signal_ratio": _ratio(1.00, 0.85, 1.15), "gain": _ratio(0.74, 0.52, 0.98)}
    text = step_sentence("oar_p_step", noise)
    assert "no learning-rate change resolved" in text and "a loss in direction, it adds noise" in text
    halves = {"a": {"signal_ratio": _ratio(0.93, 0.8, 1.1), "gain": _ratio(0.64, 0.4, 0.9)},
              "b": {"signal_ratio": _ratio(1.10, 0.9, 1.2), "gain": _ratio(0.89, 0.6, 1.2)}}
    assert "tentative" in step_sentence("oar_p_step", {**noise, "half_pools": halves})
    halves["b"]["gain"] = _ratio(0.89, None, None)  # no interval against half b: said, no crash
    assert "x0.890 [no interval]" in step_sentence("oar_p_step", {**noise, "half_pools": halves})
    assert step_sentence("none", None) is None
    m = {"delta_cos": {"mean": -0.008, "low": -0.019, "high": 0.003},
         "pos": {"delta_cos": {"mean": -0.018, "low": -0.028, "high": -0.008, "p_t_holm": 0.006}},
         "neg": {"delta_cos": {"mean": 0.011, "low": 0.005, "high": 0.016, "p_t_holm": 0.006}}}
    text = sign_sentence("oar_p_step", m, 0.05)
    assert "helps blame" in text and "hurts credit" in text and "the two cancel" in text
    m["neg"]["delta_cos"]["p_t_holm"] = 0.2
    text = sign_sentence("oar_p_step", m, 0.05)
    assert "worse than GRPO on credit" in text and "not resolved on blame" in text
    m["pos"]["delta_cos"]["p_t_holm"] = 0.2
    assert sign_sentence("oar_p_step", m, 0.05) is None
