"""Bi-level gating, the baselines' reshapers and advantage reshaping (METHOD.md 6-7)."""
import math

import numpy as np

import pytest
import torch

from oar_attrib.errors import InputError
from oar_attrib.weights.gating import (
    bilevel_weights,
    entropy_topk_mask,
    gate,
    grail_weights,
    normalise_importance,
    reshape_advantages,
)


def reference_row(imp, tau=0.4, beta=2.0, w_min=0.1):
    """Steps 1-5 on one row of scored importances, written as plainly as possible."""
    x = [math.log1p(float(v)) for v in imp]
    lo, hi = min(x), max(x)
    if hi == lo:
        return torch.ones(len(x))
    ihat = [(v - lo) / (hi - lo) for v in x]
    tq = float(torch.quantile(torch.tensor(ihat, dtype=torch.float64), tau))
    w = []
    for v in ihat:
        if v < tq:
            w.append(max(v / tq, w_min))
        else:
            w.append(1 + beta * ((v - tq) / (1 - tq) if tq < 1 else 0.0))
    return torch.tensor([wi * len(w) / sum(w) for wi in w], dtype=torch.float32)


def random_batch(seed, b=6, t=17):
    gen = torch.Generator().manual_seed(seed)
    imp = torch.rand(b, t, generator=gen) ** 3 * 4
    mask = torch.rand(b, t, generator=gen) < 0.7
    mask[0] = False  # an empty row
    mask[1] = False
    mask[1, 3] = True  # a single scored position
    imp[2][mask[2]] = 0.5  # a constant row
    imp[~mask] = float("nan")  # off the mask anything goes
    return imp, mask


def test_hand_computed_example():
    # I = e^[0, 1, 2, 3, 4] - 1: log1p gives 0..4, I^ = [0, .25, .5, .75, 1], tau_q(0.4) = 0.4.
    imp = torch.expm1(torch.arange(5.0))
    raw = [max(0 / 0.4, 0.1), 0.25 / 0.4, 1 + 2 * 0.1 / 0.6, 1 + 2 * 0.35 / 0.6, 3.0]
    expected = torch.tensor(raw) * 5 / sum(raw)
    got = bilevel_weights(imp)
    assert torch.allclose(got, expected, atol=1e-6, rtol=0)
    assert got.dtype == torch.float32


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("tau, beta, w_min", [(0.4, 2.0, 0.1), (0.0, 2.0, 0.1), (1.0, 2.0, 0.1),
                                              (0.7, 0.5, 0.0), (0.25, 3.0, 1.0)])
def test_vectorised_equals_reference_loop(seed, tau, beta, w_min):
    imp, mask = random_batch(seed)
    got = bilevel_weights(imp, mask, tau, beta, w_min)
    assert (got[~mask] == 1).all()
    for b in range(imp.shape[0]):
        if mask[b].any():
            want = reference_row(imp[b][mask[b]], tau, beta, w_min)
            assert torch.allclose(got[b][mask[b]], want, atol=1e-5), b
            # The same row as an unmasked 1-D input gives the same weights.
            one_d = bilevel_weights(imp[b][mask[b]], None, tau, beta, w_min)
            assert torch.allclose(one_d, got[b][mask[b]], atol=1e-6)


@pytest.mark.parametrize("tau", [0.0, 0.2, 0.4, 0.9, 1.0])
def test_mean_one_and_monotone(tau):
    imp, mask = random_batch(11, b=8, t=40)
    w = bilevel_weights(imp, mask, tau=tau)
    for b in range(8):
        if mask[b].any():
            assert torch.isclose(w[b][mask[b]].mean(), torch.tensor(1.0), atol=1e-5)
            order = imp[b][mask[b]].argsort()
            assert (w[b][mask[b]][order].diff() >= -1e-6).all()  # non-decreasing in I


def test_tau_zero_never_suppresses_and_tau_one_never_boosts():
    imp = torch.rand(50, generator=torch.Generator().manual_seed(3))
    ihat, flat = normalise_importance(imp.unsqueeze(0), torch.ones(1, 50, dtype=torch.bool))
    assert not flat.any() and ihat.min() == 0 and ihat.max() == 1
    # tau = 0: tau_q = min I^ = 0, so every pre-normalisation weight is >= 1.
    assert (gate(ihat, torch.quantile(ihat, 0.0)) >= 1).all()
    # tau = 1: tau_q = 1, so every pre-normalisation weight is <= 1 (the top one is 1).
    assert (gate(ihat, torch.quantile(ihat, 1.0)) <= 1).all()
    assert gate(ihat, torch.tensor(1.0)).max() == 1


def test_constant_importance_and_masked_positions():
    assert torch.equal(bilevel_weights(torch.full((7,), 0.3)), torch.ones(7))
    assert torch.equal(bilevel_weights(torch.zeros(2, 5)), torch.ones(2, 5))
    imp = torch.tensor([[5.0, 0.0, 1.0, 9.0, float("nan")]])
    mask = torch.tensor([[False, True, True, True, False]])
    w = bilevel_weights(imp, mask)
    assert w[0, 0] == 1 and w[0, 4] == 1
    assert torch.isclose(w[mask].mean(), torch.tensor(1.0))


def test_gating_errors():
    imp = torch.rand(3, 4)
    imp[1, 2] = float("nan")
    with pytest.raises(InputError, match=r"row\(s\) \[1\]"):
        bilevel_weights(imp)
    with pytest.raises(InputError, match="row 0"):
        bilevel_weights(torch.tensor([[0.5, -0.1]]))
    for kwargs in ({"tau": 1.5}, {"beta": -1.0}, {"w_min": 2.0}):
        with pytest.raises(InputError):
            bilevel_weights(torch.rand(4), **kwargs)
    with pytest.raises(InputError, match="shape"):
        bilevel_weights(torch.rand(2, 4), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(InputError, match="bool"):
        bilevel_weights(torch.rand(4), torch.ones(4))


def test_entropy_topk_mask():
    ent = torch.tensor([[0.1, 0.9, 0.5, 7.0], [0.3, 0.8, 0.2, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    # 7 masked tokens, k = ceil(0.3 * 7) = 3: 0.9, 0.8, 0.5 (7.0 is off the mask: weight 1).
    w = entropy_topk_mask(ent, mask, rho=0.3)
    assert w.tolist() == [[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
    assert entropy_topk_mask(ent, mask, rho=0.0)[mask].sum() == 0
    assert (entropy_topk_mask(ent, mask, rho=1.0) == 1).all()
    flat = entropy_topk_mask(torch.ones(10), rho=0.2)  # ties at the cut are all kept
    assert (flat == 1).all()
    many = torch.arange(30.0)  # 0.2 * 30 = 6 exactly, despite float rounding
    assert entropy_topk_mask(many, rho=0.2).sum() == 6
    assert entropy_topk_mask(many, rho=0.1).sum() == 3


def test_grail_weights():
    sal = torch.tensor([[1.0, math.e, math.e**2, 9.0], [2.0, 2.0, 2.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, False],
                         [True, False, False, False]])
    w = grail_weights(sal, mask)
    # log s = 0, 1, 2 (+1e-8 is negligible): z = -1.2247, 0, 1.2247 (population std), and
    # 1 - 0.5 * 1.2247 = 0.39 is clipped up to 0.5.
    z = math.sqrt(1.5)
    assert torch.allclose(w[0, :3], torch.tensor([0.5, 1.0, 1 + 0.5 * z]), atol=1e-5)
    assert w[0, 3] == 1
    assert (w[1] == 1).all() and (w[2] == 1).all()  # equal saliencies, a single position
    big = grail_weights(torch.tensor([1e-8] * 99 + [1e8]))  # the outlier has z = sqrt(99)
    assert big.max() == 5.0 and big.min() >= 0.5


def test_reshape_advantages():
    adv = torch.tensor([2.0, -1.0])
    w = torch.tensor([[1.0, 0.5, 2.0], [1.0, 3.0, 1.0]])
    assert reshape_advantages(adv, w).tolist() == [[2.0, 1.0, 4.0], [-1.0, -3.0, -1.0]]
    with pytest.raises(InputError, match="B = 3"):
        reshape_advantages(torch.ones(3), w)
    with pytest.raises(InputError, match=r"\(B,\)"):
        reshape_advantages(torch.ones(2, 1), w)


def test_display_normalisation_equals_the_gates_on_random_rows():
    from oar_attrib.weights.normalise import log1p_minmax

    gen = torch.Generator().manual_seed(7)
    imp = torch.rand(6, 12, generator=gen) * 10
    mask = torch.rand(6, 12, generator=gen) > 0.3
    imp[1] = 2.0  # a flat row: I^ = 0 on S
    mask[2] = False  # an empty row
    ihat, flat = normalise_importance(imp, mask)
    assert flat[1] and flat[2]
    for b in range(6):
        expected = torch.where(mask[b], ihat[b], torch.nan).double().numpy()
        np.testing.assert_allclose(log1p_minmax(imp[b].numpy(), mask[b].numpy()), expected, atol=1e-6)
    # Hand-computed: log1p of 0, e-1, e^2-1 is 0, 1, 2 -> I^ 0, 0.5, 1.
    e = np.e
    np.testing.assert_allclose(log1p_minmax([0.0, e - 1, e * e - 1, 5.0], [True, True, True, False]),
                               [0.0, 0.5, 1.0, np.nan])
