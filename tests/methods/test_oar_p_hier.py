"""Hierarchical OAR-P: the fast engine against the brute-force reference, exact token OAR-P
inside the chosen steps, the choice and the fill by hand, and one clean pass for both stages."""
import pytest
import torch

import oar_attrib.methods.perturb as engine
from oar_attrib import load_model
from oar_attrib.errors import InputError
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import get_method, method_spec
from oar_attrib.methods.oar_p import oar_p
from oar_attrib.methods.oar_p_hier import (choose_steps, fill_steps, oar_p_hier,
                                           oar_p_hier_reference)
from oar_attrib.methods.oar_p_step import oar_p_step
from oar_attrib.methods.probes import PROBES
from oar_attrib.defaults import TAU
from oar_attrib.weights.gating import bilevel_weights, masked_quantile, normalise_importance
from oar_attrib.world import generate_problems
from models import make_batch, tiny_llama, tiny_qwen2, with_steps

BUILDERS = {"qwen2": tiny_qwen2, "llama": tiny_llama}


@pytest.fixture(scope="module")
def models():
    return {name: build(seed=1) for name, build in BUILDERS.items()}


def _batch():
    """Mixed lengths 24, 17, 20, 9 (the last without an answer), mixed prompts, steps of 1-5."""
    base = make_batch(lengths=(24, 17, 20, 9), answer_lens=(2, 1, 3), prompt_len=(3, 5, 2, 4),
                      seed=2, no_answer_rows=(3,))
    return with_steps(base, seed=7, max_len=5)


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("probe", PROBES)
def test_fast_equals_reference(models, name, probe):
    model, batch = models[name], _batch()
    for choice in (dict(top_steps=2), dict(top_mass=0.5)):
        ref = oar_p_hier_reference(model, batch, probe, **choice)
        assert ref.abs().max() > 0.1  # the comparison means something
        for budget, overhead, packing in ((22, None, "padded"), (4096, None, "padded"),
                                          (60, 10**6, "padded"), (60, None, "packed")):
            fast = oar_p_hier(model, batch, probe=probe, max_batch_tokens=budget,
                              overhead_tokens=overhead, packing=packing, **choice)
            torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def _token_scores_inside_chosen_steps_equal_oar_p(model, batch, top_steps):
    steps = oar_p_step(model, batch, probe="as_mean")
    step_ids = torch.where(batch.scored_mask, batch.step_ids, -1)
    chosen = choose_steps(steps, step_ids, top_steps)
    hier = oar_p_hier(model, batch, probe="as_mean", top_steps=top_steps)
    token = oar_p(model, batch, probe="as_mean")
    assert chosen.any() and (~chosen & batch.scored_mask).any()  # both kinds of token present
    assert token[chosen].abs().max() > 1e-3
    torch.testing.assert_close(hier[chosen], token[chosen], atol=1e-5, rtol=1e-5)
    return hier, token, chosen


def test_token_scores_inside_chosen_steps_equal_token_oar_p_on_a_random_qwen2():
    model = tiny_qwen2(seed=1, layers=3, hidden=64)
    batch = with_steps(make_batch(lengths=(40, 31, 36), prompt_len=(4, 2, 5), seed=3), seed=2,
                       max_len=5)
    _token_scores_inside_chosen_steps_equal_oar_p(model, batch, top_steps=3)


def test_token_scores_inside_chosen_steps_equal_token_oar_p_on_the_bundled_model():
    model, tokenizer = load_model("arith-tiny")
    problems = generate_problems(3, "hard", seed=5, split="test")
    batch, _ = encode_pairs(tokenizer, [p.prompt for p in problems], [p.solution for p in problems])
    assert int(batch.step_ids.max()) >= 3  # rows of several steps
    _token_scores_inside_chosen_steps_equal_oar_p(model, batch, top_steps=2)


def test_every_step_chosen_is_token_oar_p(models):
    model, batch = models["llama"], _batch()
    hier = oar_p_hier(model, batch, probe="lt", top_steps=100)
    torch.testing.assert_close(hier, oar_p(model, batch, probe="lt"), atol=1e-5, rtol=1e-5)
    hier = oar_p_hier(model, batch, probe="lt", top_mass=1.0)
    chosen = choose_steps(oar_p_step(model, batch, probe="lt"), batch.step_ids, top_mass=1.0)
    torch.testing.assert_close(hier[chosen], oar_p(model, batch, probe="lt")[chosen])


def test_choose_steps_by_count_and_by_mass_by_hand():
    # One row, steps 0..3 of 2, 1, 3 and 2 positions, importances 0.2, 0.5, 0.1, 0.2.
    steps = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, 3, 3, -1]])
    values = torch.tensor([0.2, 0.5, 0.1, 0.2])
    scores = torch.where(steps >= 0, values[steps.clamp_min(0)], 0.0)
    picked = lambda chosen: sorted(set(steps[chosen].tolist()))  # noqa: E731
    assert picked(choose_steps(scores, steps, top_steps=1)) == [1]
    assert picked(choose_steps(scores, steps, top_steps=2)) == [0, 1]  # tie 0.2: earlier step
    assert picked(choose_steps(scores, steps, top_steps=9)) == [0, 1, 2, 3]
    assert picked(choose_steps(scores, steps, top_mass=0.5)) == [1]  # 0.5 of 1.0
    assert picked(choose_steps(scores, steps, top_mass=0.6)) == [0, 1]  # 0.7 >= 0.6
    assert picked(choose_steps(scores, steps, top_mass=0.95)) == [0, 1, 2, 3]
    assert not choose_steps(torch.zeros_like(scores), steps, top_mass=0.5).any()
    assert choose_steps(scores, steps, top_steps=1)[0].tolist() == [False] * 3 + [True] + [False] * 6


def test_fill_steps_by_hand():
    steps = torch.tensor([[-1, 0, 0, 1, 1, 2]])
    step_scores = torch.tensor([[0.0, 2.0, 2.0, 4.0, 4.0, 1.0]])
    token_scores = torch.tensor([[0.0, 0.0, 0.0, 0.3, 0.5, 0.0]])
    chosen = torch.tensor([[False, False, False, True, True, False]])
    # c = (0.3 + 0.5) / (4 + 4) = 0.1: step 0's tokens 0.2, step 2's 0.1.
    out = fill_steps(step_scores, token_scores, chosen, steps)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.2, 0.2, 0.3, 0.5, 0.1]]))
    assert (fill_steps(step_scores, token_scores, torch.zeros_like(chosen), steps) == 0).all()


def test_step_level_fill_keeps_the_gate_two_sided():
    """Three chosen steps of 20, measured per token; 17 other steps. With zeros for the other
    steps the tau = 0.4 quantile of I^ is 0 (boost-only gating, every other step alike); with
    the step-level fill it lies inside the distribution and the other steps keep their order."""
    gen = torch.Generator().manual_seed(0)
    n_steps, size = 20, 10
    steps = torch.arange(n_steps).repeat_interleave(size)[None]  # (1, 200)
    step_values = torch.rand(n_steps, generator=gen) + 0.05
    step_values[:3] += 2.0  # steps 0-2 are the top three
    token_scores = torch.rand(steps.shape, generator=gen) * 0.2
    chosen = steps < 3
    filled = fill_steps(step_values[steps], token_scores, chosen, steps)
    zeros = torch.where(chosen, token_scores, 0.0)
    scored = torch.ones_like(chosen)

    def tau_q(values):
        ihat, _ = normalise_importance(values, scored)
        return float(masked_quantile(ihat, scored, TAU))

    assert tau_q(zeros) == 0 and tau_q(filled) > 0
    w_fill, w_zero = bilevel_weights(filled), bilevel_weights(zeros)
    assert torch.unique(w_zero[~chosen]).numel() == 1
    by_step = torch.stack([w_fill[0, steps[0] == k].mean() for k in range(3, n_steps)])
    assert (by_step[step_values[3:].argsort()].diff() >= -1e-6).all()  # heavier, larger
    assert by_step.min() < 0.5 * by_step.max()


def test_one_clean_pass_serves_both_stages(models, monkeypatch):
    model, batch = models["qwen2"], _batch()
    steps = oar_p_step(model, batch, probe="as_mean")
    chosen = choose_steps(steps, torch.where(batch.scored_mask, batch.step_ids, -1), 2)
    passes, copies = [], []
    real_clean, real_forward = engine.clean_pass, engine._score_forward

    def count_clean(*args, **kwargs):
        passes.append(1)
        return real_clean(*args, **kwargs)

    def count_forward(model, clean, chunks, *args):
        copies.append(sum(len(c.positions) for c in chunks))
        return real_forward(model, clean, chunks, *args)

    monkeypatch.setattr(engine, "clean_pass", count_clean)
    monkeypatch.setattr(engine, "_score_forward", count_forward)
    out = oar_p_hier(model, batch, probe="as_mean", top_steps=2, max_batch_tokens=4096)
    n_steps = sum(len(batch.step_ranges(r)) for r in range(3))
    assert len(passes) == 1  # one row group: one clean pass for steps and tokens
    assert sum(copies) == n_steps + int(chosen.sum())
    assert out.shape == batch.input_ids.shape


def test_registered_and_checked(models):
    assert get_method("oar_p_hier") is oar_p_hier
    spec = method_spec("oar_p_hier")
    assert spec.token_budget and spec.random and not spec.analysis_only
    with pytest.raises(InputError, match="step_ids"):
        oar_p_hier(models["qwen2"], make_batch())
    with pytest.raises(InputError, match="top_steps"):
        oar_p_hier(models["qwen2"], _batch(), top_steps=0)
    with pytest.raises(InputError, match="top_mass"):
        oar_p_hier(models["qwen2"], _batch(), top_mass=1.5)


@pytest.mark.parametrize("mask", ["resample", "delete", "mean"])
def test_fast_equals_reference_with_other_masks(models, mask):
    """Both stages draw the same "resample" tokens (one draw, as the engine's one clean pass),
    "delete" drops a whole step then single tokens, "mean" goes through the embedding hook."""
    model, batch = models["qwen2"], _batch()
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    ref = oar_p_hier_reference(model, batch, "as_mean", top_steps=2, mask=mask, generator=gen())
    assert ref.abs().max() > 0.05
    for packing in ("padded", "packed"):
        fast = oar_p_hier(model, batch, probe="as_mean", top_steps=2, mask=mask, generator=gen(),
                          max_batch_tokens=60, packing=packing)
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
