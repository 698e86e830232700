"""The OAR-P mask knob: fast engines == references for every mask, and its invariants."""
import copy

import pytest
import torch

from oar_attrib.errors import InputError
from oar_attrib.models.lm import embedding_override
from oar_attrib.methods.masks import MASKS, mask_vector, resample_ids, resolve_token_name
from oar_attrib.methods.oar_p import oar_p, oar_p_reference
from oar_attrib.methods.oar_p_step import oar_p_step, oar_p_step_reference
from models import PAD_ID, VOCAB, make_batch, tiny_llama, tiny_qwen2, with_steps

BUILDERS = {"qwen2": tiny_qwen2, "llama": tiny_llama}
EVERY_MASK = ["pad", 5, "zero", "mean", "resample", "delete"]


@pytest.fixture(scope="module")
def models():
    return {name: build(seed=1) for name, build in BUILDERS.items()}


def _batch():
    """Rows of lengths 22, 15, 19, 9 (the last without an answer), mixed prompt lengths, random
    steps. Row 2 is scored from position 0 (no prefix: nothing to resample from, a deletion
    shifts the whole row), rows 0 and 2 up to q_1 (their bridge is scored: deleting it moves
    the first probe site before the deleted position)."""
    base = make_batch(lengths=(22, 15, 19, 9), answer_lens=(1, 2, 3), prompt_len=(4, 2, 0, 3),
                      no_answer_rows=(3,))
    for row, n, k in ((0, 22, 1), (2, 19, 3)):
        base.scored_mask[row, n - k - 2] = True
    return with_steps(base, seed=4, max_len=4)


def _gen(seed=7):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("mask", EVERY_MASK)
def test_token_fast_equals_reference_for_every_mask(models, name, mask):
    model, batch = models[name], _batch()
    ref = oar_p_reference(model, batch, "as_mean", mask=mask, generator=_gen())
    assert ref.abs().max() > 0.1  # the comparison means something
    for packing in ("padded", "packed"):
        for budget, overhead in ((22, None), (60, 10**6)):
            fast = oar_p(model, batch, probe="as_mean", max_batch_tokens=budget, packing=packing,
                         overhead_tokens=overhead, mask=mask, generator=_gen())
            torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
            assert (fast[3] == 0).all()


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("mask", EVERY_MASK)
def test_step_fast_equals_reference_for_every_mask(models, name, mask):
    model, batch = models[name], _batch()
    ref = oar_p_step_reference(model, batch, "as_mean", mask=mask, generator=_gen())
    assert ref.abs().max() > 0.1
    for budget, overhead in ((22, None), (60, 10**6)):
        fast = oar_p_step(model, batch, probe="as_mean", max_batch_tokens=budget,
                          overhead_tokens=overhead, mask=mask, generator=_gen())
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("probe", ["lt", "as_joint"])
@pytest.mark.parametrize("mask", ["zero", "resample", "delete"])
def test_other_probes_fast_equals_reference(models, probe, mask):
    model, batch = models["qwen2"], _batch()
    ref = oar_p_reference(model, batch, probe, mask=mask, generator=_gen())
    fast = oar_p(model, batch, probe=probe, max_batch_tokens=60, mask=mask, generator=_gen())
    torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_pad_is_the_default_and_the_pad_id_is_pad(models):
    model, batch = models["llama"], _batch()
    default = oar_p(model, batch, max_batch_tokens=60)
    assert torch.equal(oar_p(model, batch, max_batch_tokens=60, mask="pad"), default)
    assert torch.equal(oar_p(model, batch, max_batch_tokens=60, mask=PAD_ID), default)
    assert not torch.allclose(oar_p(model, batch, max_batch_tokens=60, mask=5), default)
    steps = oar_p_step(model, batch, max_batch_tokens=60)
    assert torch.equal(oar_p_step(model, batch, max_batch_tokens=60, mask=PAD_ID), steps)


def test_zero_is_pad_when_the_pad_embedding_is_zero(models):
    """On a model whose pad row embeds as zeros, "zero" and "pad" perturb alike; with another
    pad row they differ, so the check can fail."""
    batch = _batch()
    zeroed, other = copy.deepcopy(models["llama"]), copy.deepcopy(models["llama"])
    with torch.no_grad():
        zeroed.get_input_embeddings().weight[PAD_ID] = 0
        weight = other.get_input_embeddings().weight
        weight[PAD_ID] = weight[7]
    pad = oar_p(zeroed, batch, max_batch_tokens=60, mask="pad")
    torch.testing.assert_close(oar_p(zeroed, batch, max_batch_tokens=60, mask="zero"), pad,
                               atol=1e-5, rtol=1e-5)
    assert not torch.allclose(oar_p(other, batch, max_batch_tokens=60, mask="zero"),
                              oar_p(other, batch, max_batch_tokens=60, mask="pad"), atol=1e-3)


def test_mean_is_the_token_whose_row_is_the_mean(models):
    """Row 5 set to the mean of the other rows makes it the mean of all rows: "mean" then
    perturbs as the token id 5 does."""
    model = copy.deepcopy(models["llama"])
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        weight[5] = (weight.sum(dim=0) - weight[5]) / (weight.shape[0] - 1)
    torch.testing.assert_close(mask_vector(model, "mean"), weight[5].detach(), atol=1e-6, rtol=0)
    batch = _batch()
    torch.testing.assert_close(oar_p(model, batch, max_batch_tokens=60, mask="mean"),
                               oar_p(model, batch, max_batch_tokens=60, mask=5),
                               atol=1e-5, rtol=1e-5)


def test_resample_repeats_with_a_seed_and_moves_with_another(models):
    model, batch = models["qwen2"], _batch()
    first = oar_p(model, batch, max_batch_tokens=60, mask="resample", generator=_gen(1))
    again = oar_p(model, batch, max_batch_tokens=60, mask="resample", generator=_gen(1))
    other = oar_p(model, batch, max_batch_tokens=60, mask="resample", generator=_gen(2))
    assert torch.equal(first, again)
    assert not torch.allclose(first, other, atol=1e-3)


def test_resample_draws_from_the_clean_next_token_distribution(models):
    """A row's draws at its positions t are torch.multinomial of softmax(clean logits at
    t - 1), in order, from its generator (computed here by hand), and row b drawn with
    generators[b] in a batch equals row b alone."""
    model, batch = models["qwen2"], _batch()
    positions = batch.scored_mask & batch.has_answer[:, None]
    ts = positions[0].nonzero().flatten()
    with torch.no_grad():
        logits = model(batch.input_ids[:1], attention_mask=batch.attention_mask[:1]).logits[0]
    expected = torch.multinomial(torch.softmax(logits[ts - 1], -1), 1, generator=_gen(3))
    drawn = resample_ids(model, batch.select([0]), positions[:1], _gen(3))
    assert torch.equal(drawn[0, ts], expected.flatten())
    assert len(set(drawn[0, ts].tolist())) > 3  # draws, not one token everywhere
    gens = [_gen(10 + b) for b in range(4)]
    batched = resample_ids(model, batch, positions, gens)
    for b in range(4):
        alone = resample_ids(model, batch.select([b]), positions[b:b + 1], _gen(10 + b))
        assert torch.equal(batched[b, : alone.shape[1]], alone[0])
    assert (batched[~positions] == PAD_ID).all()


def test_delete_reference_by_hand(models):
    """"delete" at t is one forward of the row without t: the probe reads the logits one
    place earlier, KL of the lt probe computed here without the library's probe code."""
    model, batch = models["llama"], _batch()
    ref = oar_p_reference(model, batch, "lt", mask="delete")
    row, n = 1, 15
    t = int(batch.scored_mask[row].nonzero()[2])
    q = int(batch.answer_mask[row].nonzero()[0]) - 1
    ids = batch.input_ids[row, :n]
    kept = torch.cat([ids[:t], ids[t + 1:]])[None]
    with torch.no_grad():
        clean = torch.log_softmax(model(ids[None]).logits[0, q], -1)
        cut = torch.log_softmax(model(kept).logits[0, q - 1], -1)
    expected = (clean.exp() * (clean - cut)).sum()
    torch.testing.assert_close(ref[row, t], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bad", ["foo", "eos", -1, True, 1.5, None, VOCAB])
def test_bad_masks_are_one_line_input_errors(models, bad):
    model, batch = models["qwen2"], _batch()
    for fn in (oar_p, oar_p_step):
        with pytest.raises(InputError) as err:
            fn(model, batch, max_batch_tokens=60, mask=bad)
        assert "\n" not in str(err.value)
        if bad != VOCAB:
            assert all(name in str(err.value) for name in MASKS)
    with pytest.raises(InputError, match="zero"):
        oar_p_reference(model, batch, mask="foo")


def test_token_names_resolve_with_the_tokenizer():
    class Tok:
        eos_token_id, unk_token_id = 2, None

    assert resolve_token_name("eos", Tok()) == 2
    assert resolve_token_name("zero", Tok()) == "zero"
    with pytest.raises(InputError, match="no unk token"):
        resolve_token_name("unk", Tok())


def test_embedding_override_is_gone_after_the_block(models):
    model = models["qwen2"]
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        clean = model(ids).logits
        with embedding_override(model, VOCAB, torch.zeros(32)):
            hooked = model(torch.tensor([[3, VOCAB, 5, 6]])).logits
        embeds = model.get_input_embeddings()(ids).clone()
        embeds[0, 1] = 0
        torch.testing.assert_close(hooked, model(inputs_embeds=embeds).logits)
        assert torch.equal(model(ids).logits, clean)


def test_deleting_everything_before_the_answer_is_an_input_error(models):
    """One step covering every position before the answer: deleting it leaves no position to
    predict the answer, in the fast engine and the reference alike."""
    batch = make_batch(lengths=(8,), answer_lens=(1,), prompt_len=0)
    batch.scored_mask[0, :6] = True  # [0, a_1): the reasoning and the bridge
    batch.step_ids = torch.where(batch.scored_mask, 0, -1)
    for fn in (oar_p_step, oar_p_step_reference):
        with pytest.raises(InputError, match="every token before the answer"):
            fn(models["qwen2"], batch, mask="delete")
