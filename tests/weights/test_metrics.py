"""Metrics of section 8: known values, tie handling and the random-ranking expectation."""
import itertools
import math

import numpy as np
import pytest
import torch

from oar_attrib.errors import InputError
from oar_attrib.weights.metrics import (
    average_precision,
    ess_ratio,
    partial_spearman,
    random_recall,
    recall_at_k,
    spearman,
    split_half_reliability,
    top_mass,
)


def brute_force(metric, scores, oracle):
    """Mean of `metric` over every order of the tied scores, each tie broken by position."""
    scores = np.asarray(scores, float)
    values = []
    for perm in itertools.permutations(range(len(scores))):
        # A tiny, distinct offset per permutation rank breaks every tie in that order.
        broken = scores + 1e-6 * np.argsort(perm) / len(scores)
        values.append(metric(broken, np.asarray(oracle)))
    return float(np.mean(values))


def test_ess_ratio():
    assert ess_ratio(torch.ones(5)) == pytest.approx(1.0)
    assert ess_ratio(torch.tensor([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    w = torch.tensor([[2.0, 2.0, 9.0], [1.0, 3.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert ess_ratio(w, mask) == pytest.approx([1.0, 16 / 20])
    assert math.isnan(ess_ratio(torch.ones(3), torch.zeros(3, dtype=torch.bool)))


def test_top_mass():
    assert top_mass(torch.full((20,), -0.7)) == pytest.approx(0.1)  # uniform: 2 of 20
    assert top_mass(np.ones(30)) == pytest.approx(0.1)  # 0.1 * 30 rounds to 3, not 4
    assert top_mass(np.ones(15)) == pytest.approx(2 / 15)  # ceil(1.5) = 2 tokens
    adv = np.array([[5.0, -1, 1, 1, 1, 1, 1, 1, 1, 1], [0.0] * 10])
    assert top_mass(adv)[0] == pytest.approx(5 / 14)
    assert math.isnan(top_mass(adv)[1])  # no advantage mass at all


def test_recall_perfect_reversed_and_tied():
    scores = np.array([9.0, 8, 7, 1, 2, 3])
    perfect = np.array([1, 1, 1, 0, 0, 0], bool)
    assert recall_at_k(scores, perfect) == 1.0
    assert recall_at_k(-scores, perfect) == 0.0
    assert recall_at_k(scores, perfect, k=2) == pytest.approx(2 / 3)
    # All scores equal: exactly the random expectation k / |S|.
    flat = np.zeros(6)
    assert recall_at_k(flat, perfect) == pytest.approx(3 / 6)
    assert recall_at_k(flat, perfect) == pytest.approx(random_recall(perfect))
    assert recall_at_k(flat, perfect, k=4) == pytest.approx(random_recall(perfect, k=4))


@pytest.mark.parametrize("seed", range(6))
def test_recall_ties_are_expected_credit(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, size=5).astype(float)  # many ties
    oracle = rng.random(5) < 0.4
    oracle[rng.integers(5)] = True
    for k in (1, 2, int(oracle.sum()), 4):
        want = brute_force(lambda s, o: recall_at_k(s, o, k=k), scores, oracle)
        assert recall_at_k(scores, oracle, k=k) == pytest.approx(want)


def test_average_precision_known_values():
    oracle = np.array([1, 0, 0, 0], bool)
    assert average_precision(np.array([4.0, 3, 2, 1]), oracle) == 1.0
    assert average_precision(np.array([1.0, 2, 3, 4]), oracle) == pytest.approx(0.25)
    # Relevant at ranks 1 and 3: (1/1 + 2/3) / 2.
    two = np.array([1, 0, 1, 0], bool)
    assert average_precision(np.array([4.0, 3, 2, 1]), two) == pytest.approx(5 / 6)
    # Two tied items, one relevant: 1 or 1/2 with equal chance.
    assert average_precision(np.zeros(2), np.array([True, False])) == pytest.approx(0.75)


@pytest.mark.parametrize("seed", range(6))
def test_average_precision_ties_are_expected(seed):
    rng = np.random.default_rng(100 + seed)
    scores = rng.integers(0, 3, size=5).astype(float)
    oracle = rng.random(5) < 0.5
    oracle[rng.integers(5)] = True
    want = brute_force(average_precision, scores, oracle)
    assert average_precision(scores, oracle) == pytest.approx(want)


def test_scored_mask_batches_and_undefined_rows():
    scores = torch.tensor([[0.9, 0.1, 0.8, 5.0], [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    oracle = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    scored = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    # Row 0: position 3 is not scored, so O = {0} and S = {0, 1, 2}. Rows 1, 2: O or S empty.
    rec = recall_at_k(scores, oracle, scored)
    assert rec[0] == 1.0 and np.isnan(rec[1:]).all()
    ap = average_precision(scores, oracle, scored)
    assert ap[0] == 1.0 and np.isnan(ap[1:]).all()
    rnd = random_recall(oracle, scored)
    assert rnd[0] == pytest.approx(1 / 3) and np.isnan(rnd[1:]).all()
    with pytest.raises(InputError, match="NaN"):
        recall_at_k(np.array([np.nan, 1.0]), np.array([True, False]))


def test_partial_spearman_is_the_correlation_of_rank_residuals():
    """The formula from the three Spearman coefficients equals its definition: the Pearson
    correlation of a's and b's ranks after each is regressed on z's ranks (ties averaged)."""
    from scipy.stats import rankdata

    rng = np.random.default_rng(0)
    for _ in range(25):
        z = rng.permutation(8).astype(float)
        a, b = z + rng.normal(0, 3, 8), np.round(-z + rng.normal(0, 3, 8))  # b with ties
        design = np.c_[np.ones(8), rankdata(z)]

        def residual(x):
            r = rankdata(x)
            return r - design @ np.linalg.lstsq(design, r, rcond=None)[0]

        want = np.corrcoef(residual(a), residual(b))[0, 1]
        assert partial_spearman(a, b, z) == pytest.approx(want, abs=1e-9)
    assert math.isnan(partial_spearman(a, b, 2 * a + 1))  # a is a monotone function of z
    assert math.isnan(partial_spearman(np.ones(8), b, z))  # a constant: undefined
    # b = z exactly up to a rank-preserving map: nothing left once z is held fixed
    assert math.isnan(partial_spearman(a, np.exp(z), z))


def test_split_half_reliability_by_hand():
    """Halves: the mean of draws 1..m against draws m+1..2m (m = n // 2), Spearman, then
    Spearman-Brown to the n draws, k rho / (1 + (k - 1) rho) with k = n / m."""
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    b = np.array([2.0, 1.0, 3.0, 5.0, 4.0])  # Spearman with a: 0.8
    rho = spearman(a, b)
    assert rho == pytest.approx(0.8)
    # n = 4, halves of 2: each half's mean keeps its ranking; k = 2.
    four = np.stack([a, a, b, b])
    assert split_half_reliability(four) == pytest.approx(2 * 0.8 / 1.8)
    # n = 3: halves of 1 (the third draw is in neither half), corrected to 3 draws (k = 3).
    three = np.stack([a, b, np.zeros(5)])
    assert split_half_reliability(three) == pytest.approx(3 * 0.8 / (1 + 2 * 0.8))
    # Identical halves: 1; reversed halves: -1, returned uncorrected.
    assert split_half_reliability(np.stack([a, a])) == pytest.approx(1.0)
    assert split_half_reliability(np.stack([a, -a])) == pytest.approx(-1.0)
    # Undefined: one draw, a constant half, fewer than 3 scored positions, NaN.
    assert math.isnan(split_half_reliability(a[None]))
    assert math.isnan(split_half_reliability(np.stack([a, np.ones(5)])))
    assert math.isnan(split_half_reliability(four, np.array([1, 1, 0, 0, 0], bool)))
    assert math.isnan(split_half_reliability(np.stack([a, np.full(5, np.nan)])))
    # Rows and the scored mask: (n, B, T); positions off the mask do not count.
    rows = np.stack([four, np.stack([a, b, a, b])], axis=1)  # (n=4, B=2, T=5)
    mask = np.ones((2, 5), bool)
    got = split_half_reliability(rows, mask)
    assert got[0] == pytest.approx(2 * 0.8 / 1.8) and got[1] == pytest.approx(1.0)
    mask[0, [0, 1]] = False  # row 0 over positions 2-4: a gives 3 4 5, b gives 3 5 4
    assert split_half_reliability(rows, mask)[0] == pytest.approx(2 * 0.5 / 1.5)
    with pytest.raises(InputError, match="draws"):
        split_half_reliability(a)
