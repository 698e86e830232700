"""Probe sites, probe values against hand computations, and the probe importance."""
import math

import pytest
import torch

from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.errors import UnknownNameError
from oar_attrib.methods import available_methods, get_method
from oar_attrib.methods.probes import (PROBES, ProbeSites, check_probe, padded_positions,
                               probe_divergence, probe_importance, probe_sites, probe_values)


def _batch() -> ScoringBatch:
    # Row 0: answer at 3, 4 (K=2). Row 1: answer at 2 (K=1). Row 2: no answer.
    ids = torch.tensor([[5, 6, 7, 8, 9, 1], [4, 3, 2, 1, 0, 0], [7, 7, 7, 0, 0, 0]])
    attn = (torch.arange(6) < torch.tensor([[6], [4], [3]])).long()
    answer = torch.zeros(3, 6, dtype=torch.bool)
    answer[0, 3:5] = True
    answer[1, 2] = True
    return ScoringBatch(ids, attn, torch.zeros_like(answer), answer, pad_token_id=0)


def test_probe_sites_are_padded_per_row():
    sites = probe_sites(_batch())
    assert sites.positions.tolist() == [[2, 3], [1, 1], [0, 0]]
    assert sites.targets.tolist() == [[8, 9], [2, 0], [0, 0]]
    assert sites.valid.tolist() == [[True, True], [True, False], [False, False]]
    assert sites.has_answer.tolist() == [True, True, False]
    assert sites.last.tolist() == [3, 1, 0]


def test_padded_positions_of_empty_and_full_rows():
    mask = torch.tensor([[False, True, False, True], [False] * 4])
    positions, valid = padded_positions(mask)
    assert positions.tolist() == [[1, 3], [0, 0]]
    assert valid.tolist() == [[True, True], [False, False]]


def _sites_two_rows() -> tuple[torch.Tensor, ProbeSites]:
    logits = torch.tensor([
        [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]],  # row 0: K = 2, answer ids 1 then 2
        [[2.0, 0.0, 0.0], [float("nan"), float("inf"), 0.0]],  # row 1: K = 1, column 1 is padding
    ])
    sites = ProbeSites(positions=torch.zeros(2, 2, dtype=torch.long),
                       targets=torch.tensor([[1, 2], [0, 0]]),
                       valid=torch.tensor([[True, True], [True, False]]))
    return logits, sites


def _log_softmax(values):
    norm = math.log(sum(math.exp(v) for v in values))
    return [v - norm for v in values]


def test_probe_values_match_hand_computation():
    logits, sites = _sites_two_rows()
    lt = probe_values(logits, sites, "lt")
    assert torch.allclose(lt[0], torch.tensor(_log_softmax([1.0, 2.0, 0.5])), atol=1e-6)
    assert torch.allclose(lt[1], torch.tensor(_log_softmax([2.0, 0.0, 0.0])), atol=1e-6)

    as_mean = probe_values(logits, sites, "as_mean")
    assert torch.allclose(as_mean[0], torch.tensor(_log_softmax([0.5, 0.5, 1.75])), atol=1e-6)
    # The NaN / inf of row 1's padding column must not leak into its mean.
    assert torch.allclose(as_mean[1], torch.tensor(_log_softmax([2.0, 0.0, 0.0])), atol=1e-6)

    phi = probe_values(logits, sites, "as_joint")
    expected0 = (_log_softmax([1.0, 2.0, 0.5])[1] + _log_softmax([0.0, -1.0, 3.0])[2]) / 2
    assert phi.shape == (2,)
    assert phi[0].item() == pytest.approx(expected0, abs=1e-6)
    assert phi[1].item() == pytest.approx(_log_softmax([2.0, 0.0, 0.0])[0], abs=1e-6)


@pytest.mark.parametrize("probe", PROBES)
def test_probe_values_are_float32_for_bf16_logits(probe):
    logits, sites = _sites_two_rows()
    logits = logits.clone()
    logits[1, 1] = 0.0
    out = probe_values(logits.bfloat16(), sites, probe)
    assert out.dtype == torch.float32
    ref = probe_values(logits.bfloat16().float(), sites, probe)
    assert torch.equal(out, ref)


def test_kl_matches_hand_computation_and_is_zero_for_identical():
    p, q = [0.7, 0.2, 0.1], [0.5, 0.25, 0.25]
    clean, pert = torch.tensor([p]).log(), torch.tensor([q]).log()
    expected = sum(a * math.log(a / b) for a, b in zip(p, q))
    assert probe_importance(clean, pert, "as_mean").item() == pytest.approx(expected, rel=1e-5)
    assert probe_importance(clean, clean.clone(), "lt").item() == 0.0


def test_kl_is_nonnegative_on_random_distributions():
    gen = torch.Generator().manual_seed(0)
    clean = torch.log_softmax(torch.randn(64, 50, generator=gen) * 3, dim=-1)
    pert = torch.log_softmax(torch.randn(64, 50, generator=gen) * 3, dim=-1)
    kl = probe_importance(clean, pert, "as_mean")
    assert kl.shape == (64,) and (kl >= 0).all() and (kl > 0).all()
    # A clean (1, V) row broadcasts against N perturbed rows.
    assert torch.allclose(probe_importance(clean[:1], pert, "lt"),
                          probe_importance(clean[:1].expand(64, -1), pert, "lt"))


def test_kl_handles_impossible_tokens_and_propagates_nan():
    clean = torch.tensor([[0.0, -float("inf")]])
    assert probe_importance(clean, clean.clone(), "as_mean").item() == 0.0
    nan = torch.full((1, 2), float("nan"))
    assert probe_importance(nan, clean, "as_mean").isnan().all()
    assert probe_importance(clean, nan, "as_mean").isnan().all()


def test_as_joint_importance_is_the_clamped_drop():
    clean, pert = torch.tensor([-1.0, -1.0, float("nan")]), torch.tensor([-3.0, 0.5, -1.0])
    out = probe_importance(clean, pert, "as_joint")
    assert out[:2].tolist() == [2.0, 0.0] and out[2].isnan()
    assert probe_divergence(clean, pert, "as_joint")[:2].tolist() == [2.0, -1.5]


def test_unknown_probe_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as info:
        check_probe("as_max")
    for name in PROBES:
        assert name in str(info.value)
    with pytest.raises(UnknownNameError):
        probe_values(torch.zeros(1, 1, 3), probe_sites(_batch()).select(torch.tensor([0])), "x")


def test_unknown_method_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as info:
        get_method("oar_x")
    known = available_methods()
    assert {"oar_p", "oar_g", "entropy", "ig", "grail", "random"} <= set(known)
    for name in known:
        assert name in str(info.value)
