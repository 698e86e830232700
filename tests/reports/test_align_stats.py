"""The statistics of `oar align` (reports/align.py) on stores made here from known vectors:
endpoints against numpy's cosines, Holm and power against hand-computed values, and the
bias-or-variance estimates against simulated methods whose bias and noise are known."""
import math

import numpy as np
import pytest

from oar_attrib.reports import align as stats
from align_data import cos, random_batches, write_store


def test_endpoints_are_the_cosines_of_the_vectors(tmp_path):
    rng = np.random.default_rng(0)
    star = rng.normal(size=40)
    batches = random_batches(rng, 6, 40)
    values = stats.per_batch(stats.load(write_store(tmp_path / "s", star, batches)))
    for i, batch in enumerate(batches):
        (gp, gn), (mp, mn) = batch["none"], batch["m"]
        g, m = gp + gn, mp + mn
        assert values["m"]["all"]["cos"][i] == pytest.approx(cos(m, star))
        assert values["m"]["all"]["delta_cos"][i] == pytest.approx(cos(m, star) - cos(g, star))
        assert values["m"]["pos"]["delta_cos"][i] == pytest.approx(cos(mp, star) - cos(gp, star))
        assert values["m"]["neg"]["cos_grpo"][i] == pytest.approx(cos(mn, gn))
        assert values["m"]["all"]["norm_ratio"][i] == pytest.approx(np.linalg.norm(m) / np.linalg.norm(g))
        assert values["m"]["all"]["sign_agreement"][i] == pytest.approx(np.sign(m) @ star / np.abs(star).sum())
    assert (values["none"]["all"]["delta_cos"] == 0).all()


def test_summary_of_a_method_equal_to_grpo_plus_a_shift(tmp_path):
    """A method whose gradient is GRPO's plus 0.5 g*/||g*|| on every batch is better on every
    batch: its interval is above 0 and it survives Holm; GRPO's delta is exactly 0."""
    rng = np.random.default_rng(1)
    star = rng.normal(size=60)
    unit = star / np.linalg.norm(star)
    batches = []
    for _ in range(40):
        pos, neg = rng.normal(size=60), rng.normal(size=60)
        batches.append({"none": (pos, neg), "better": (pos + 0.5 * unit, neg), "same": (pos * 1.0, neg * 1.0)})
    summary = stats.summarise(write_store(tmp_path / "s", star, batches), n_boot=2000)
    assert summary["methods"]["none"]["delta_cos"] == {"mean": 0.0, "low": 0.0, "high": 0.0, "level": None,
                                                       "p": 1.0, "p_holm": 1.0}
    better = summary["methods"]["better"]["delta_cos"]
    assert better["low"] > 0 and better["p_holm"] < 0.05 and better["low"] <= better["mean"] <= better["high"]
    assert summary["methods"]["same"]["delta_cos"]["mean"] == 0.0
    assert summary["methods"]["same"]["delta_cos"]["p_holm"] == 1.0
    assert summary["power"]["contrasts"]["better - none"]["sd"] > 0
    total = sum(b["better"][0] + b["better"][1] for b in batches)
    assert summary["methods"]["better"]["mean_gradient"]["mean_cos_star"] == pytest.approx(cos(total, star))
    assert summary["methods"]["none"]["mean_gradient"]["direction_grpo"] == pytest.approx(1.0)


def test_bias_and_variance_are_told_apart():
    """Simulated methods over 400 batches: 'biased' points 60 degrees from GRPO's expected
    gradient with GRPO's noise, 'quieter' points the same way with a quarter of the noise
    variance: direction_grpo and noise_to_signal recover each."""
    rng = np.random.default_rng(2)
    dim, n = 400, 400
    mu = rng.normal(size=dim)
    mu *= 3 / np.linalg.norm(mu)
    other = rng.normal(size=dim)
    other -= (other @ mu) / (mu @ mu) * mu
    other *= np.linalg.norm(mu) / np.linalg.norm(other)
    tilted = 0.5 * mu + math.sqrt(0.75) * other  # cos(tilted, mu) = 0.5
    batches = []
    for _ in range(n):
        noise = rng.normal(size=dim)
        batches.append({"none": (mu + noise, np.zeros(dim)), "biased": (tilted + rng.normal(size=dim), np.zeros(dim)),
                        "quieter": (mu + 0.5 * rng.normal(size=dim), np.zeros(dim))})
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        summary = stats.summarise(write_store(Path(tmp) / "s", mu, batches), n_boot=200)
    bias = {m: summary["methods"][m]["mean_gradient"] for m in ("none", "biased", "quieter")}
    assert bias["biased"]["direction_grpo"] == pytest.approx(0.5, abs=0.05)
    assert bias["quieter"]["direction_grpo"] == pytest.approx(1.0, abs=0.05)
    # noise / signal: dim / ||mu||^2 = 400 / 9 for GRPO, a quarter of that for 'quieter'
    assert bias["none"]["noise_to_signal"] == pytest.approx(dim / 9, rel=0.1)
    assert bias["quieter"]["noise_to_signal"] == pytest.approx(dim / 36, rel=0.1)
    assert bias["biased"]["noise_to_signal"] == pytest.approx(dim / 9, rel=0.1)


def test_a_folder_without_a_reference_is_refused(tmp_path):
    from oar_attrib.errors import InputError

    with pytest.raises(InputError, match="no finished reference"):
        stats.load(tmp_path)
