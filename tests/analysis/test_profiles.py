"""Credit profiles (analysis.profiles): a hand-computed profile, the vectorised bins against a
token-by-token loop, and the CSV rows."""
from types import SimpleNamespace

import numpy as np
import pytest

from oar_attrib.analysis.profiles import credit_profile, position_bins, profile_rows


def record(weights, scored, correct=None, step=None, ess=None, top10=None, method="m"):
    attribution = SimpleNamespace(weights=np.asarray(weights, float), ess_ratio=ess, top10_mass=top10)
    return SimpleNamespace(attributions={method: attribution}, scored=np.asarray(scored, bool),
                           row=SimpleNamespace(correct=correct, step=step))


def test_profile_by_hand():
    # Trace a: 4 scored tokens (the 1st token is not scored) -> bins 0, 0, 1, 1 of 2.
    a = record([1, 2.0, 0.0, 1.0, 3.0], [False, True, True, True, True], correct=True, step=1,
               ess=0.5, top10=0.2)
    # Trace b: 2 scored tokens -> bins 0, 1.
    b = record([4.0, 0.5], [True, True], correct=False, step=1, ess=0.7, top10=0.4)
    c = record([9.0, 9.0], [False, False], correct=True, step=2)  # nothing scored: left out
    d = SimpleNamespace(attributions={}, scored=np.ones(2, bool), row=a.row)  # no method
    p = credit_profile([a, b, c, d], "m", bins=2)
    assert p["n_traces"] == 2 and p["centres"] == [0.25, 0.75]
    assert p["subsets"]["all"]["mean"] == [pytest.approx((1.0 + 4.0) / 2), pytest.approx((2.0 + 0.5) / 2)]
    assert p["subsets"]["correct"] == {"mean": [1.0, 2.0], "n": [1, 1]}
    assert p["subsets"]["wrong"] == {"mean": [4.0, 0.5], "n": [1, 1]}
    assert p["steps"] == [1] and p["by_step"] == [p["subsets"]["all"]["mean"]]
    assert p["ess_ratio"] == [pytest.approx(0.6)] and p["top10_mass"] == [pytest.approx(0.3)]


def test_bins_equal_a_token_loop():
    rng = np.random.default_rng(0)
    records = []
    for i in range(30):
        n = int(rng.integers(1, 40))
        scored = rng.random(n) < 0.8
        records.append(record(rng.random(n) * 3, scored, correct=bool(i % 2), step=i % 3))
    bins = 7
    p = credit_profile(records, "m", bins=bins)
    sums, counts = np.zeros(bins), np.zeros(bins)
    for r in records:
        w = r.attributions["m"].weights[r.scored]
        if not len(w):
            continue
        per = [[] for _ in range(bins)]
        for k, value in enumerate(w):
            per[min(int((k + 0.5) / len(w) * bins), bins - 1)].append(value)
        for b in range(bins):
            if per[b]:
                sums[b] += np.mean(per[b])
                counts[b] += 1
    want = [s / c if c else None for s, c in zip(sums, counts)]
    assert p["subsets"]["all"]["mean"] == pytest.approx(want)
    assert p["subsets"]["all"]["n"] == counts.tolist()
    assert position_bins(3, 20).tolist() == [3, 10, 16]


def test_rows_have_one_shape():
    p = credit_profile([record([1.0, 2.0], [True, True], correct=True, step=4, ess=0.9, top10=0.1)],
                       "m", bins=2)
    rows = profile_rows(p)
    assert all(list(r) == list(rows[0]) for r in rows)
    assert len(rows) == 3 * 2 + 2 + 1  # subsets x bins, one step x bins, one step summary
    assert rows[-1]["part"] == "step 4" and rows[-1]["ess_ratio"] == 0.9
    with pytest.raises(ValueError, match="bins"):
        credit_profile([], "m", bins=0)
