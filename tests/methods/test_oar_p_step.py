"""Step-level OAR-P: the fast engine against the brute-force reference, and its contract."""
import pytest
import torch

import oar_attrib.methods.perturb as engine
from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.errors import InputError
from oar_attrib.methods import get_method
from oar_attrib.methods.oar_p import oar_p_reference
from oar_attrib.methods.oar_p_step import oar_p_step, oar_p_step_reference
from oar_attrib.methods.probes import PROBES
from models import PAD_ID, make_batch, tiny_llama, tiny_qwen2, with_steps

BUILDERS = {"qwen2": tiny_qwen2, "llama": tiny_llama}


@pytest.fixture(scope="module")
def models():
    return {name: build(seed=1) for name, build in BUILDERS.items()}


def _batch() -> ScoringBatch:
    """Mixed lengths 22, 15, 19, 9 (the last without an answer), mixed prompt lengths."""
    base = make_batch(lengths=(22, 15, 19, 9), answer_lens=(1, 2, 3), prompt_len=(4, 2, 5, 3),
                      no_answer_rows=(3,))
    return with_steps(base, seed=4, max_len=4)


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("probe", PROBES)
def test_fast_equals_reference(models, name, probe):
    model, batch = models[name], _batch()
    ref = oar_p_step_reference(model, batch, probe)
    assert ref.abs().max() > 0.1  # the comparison means something
    for budget, overhead in ((22, None), (4096, None), (60, 10**6)):
        fast = oar_p_step(model, batch, probe=probe, max_batch_tokens=budget, overhead_tokens=overhead)
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_reference_is_the_definition_by_hand(models):
    """Step k's value is KL(P || P^(k)) of one forward with the whole step padded, computed
    here without the library's probe code, and it sits on every token of the step."""
    model, batch = models["qwen2"], _batch()
    ref = oar_p_step_reference(model, batch, "lt")
    row = 0
    steps = batch.step_ranges(row)
    q = int(batch.answer_mask[row].nonzero()[0]) - 1
    ids, mask = batch.input_ids[row:row + 1], batch.attention_mask[row:row + 1]
    with torch.no_grad():
        clean = torch.log_softmax(model(ids, attention_mask=mask).logits[0, q], -1)
        for a, b in steps:
            perturbed = ids.clone()
            perturbed[0, a:b] = PAD_ID
            moved = torch.log_softmax(model(perturbed, attention_mask=mask).logits[0, q], -1)
            kl = float((clean.exp() * (clean - moved)).sum().clamp_min(0))
            assert torch.allclose(ref[row, a:b], torch.full((b - a,), kl), atol=1e-5)
    assert (ref[~batch.scored_mask] == 0).all() and (ref[3] == 0).all()


def test_one_token_steps_equal_token_oar_p(models):
    """With every step one token long, step-level OAR-P is token OAR-P."""
    model, base = models["llama"], make_batch(lengths=(22, 15, 19))
    single = with_steps(base, max_len=1)
    torch.testing.assert_close(oar_p_step(model, single, probe="as_mean"),
                               oar_p_reference(model, base, "as_mean"), atol=1e-4, rtol=1e-4)


def test_one_forward_per_step(models, monkeypatch):
    model, batch = models["qwen2"], _batch()
    seen = []
    real = engine.window_inputs

    def spy(clean, row, *args):
        seen.append(len(row))
        return real(clean, row, *args)

    monkeypatch.setattr(engine, "window_inputs", spy)
    oar_p_step(model, batch, probe="lt", max_batch_tokens=22)
    n_steps = sum(len(batch.step_ranges(r)) for r in range(3))
    assert sum(seen) == n_steps and len(seen) == n_steps  # budget of one row: one copy each


def test_registered_and_needs_steps(models):
    assert get_method("oar_p_step") is oar_p_step
    with pytest.raises(InputError, match="step_ids"):
        oar_p_step(models["qwen2"], make_batch())
    with pytest.raises(InputError, match="max_batch_tokens"):
        oar_p_step(models["qwen2"], _batch(), max_batch_tokens=5)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_packed_equals_reference(models, name):
    """Step copies packed without padding (the engine's packed path, masking a whole unit)."""
    model, batch = models[name], _batch()
    ref = oar_p_step_reference(model, batch, "as_mean")
    for budget in (22, 4096):
        fast = oar_p_step(model, batch, probe="as_mean", max_batch_tokens=budget, packing="packed")
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
