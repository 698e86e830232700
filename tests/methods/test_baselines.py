"""Baselines: the importance contract, hand computations, seeding, untouched gradients."""
import pytest
import torch

from oar_attrib.errors import InputError
from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.methods import get_method, method_spec
from oar_attrib.methods.baselines import ig as ig_module
from oar_attrib.methods.probes import probe_sites, probe_values
from models import PAD_ID, make_batch, tiny_llama, tiny_qwen2

BASELINES = ("entropy", "ig", "grail", "random", "entropy_reasoning", "grail_all", "grail_reasoning")


@pytest.fixture(scope="module")
def model():
    return tiny_qwen2(seed=6)


@pytest.fixture(scope="module")
def batch():
    return make_batch(lengths=(18, 12, 15), no_answer_rows=(1,))


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


def _positions(name, batch):
    """The positions method `name` fills (its scope): S of rows with a span, every response
    token of every row (entropy), or every response token of rows with a span (grail)."""
    spec = method_spec(name)
    if spec.scope == "reasoning":
        return batch.scored_mask & batch.has_answer[:, None]
    if name.startswith("grail"):
        return batch.response_mask & batch.has_answer[:, None]
    return batch.response_mask.clone()


@pytest.mark.parametrize("name", BASELINES)
def test_contract(model, batch, name):
    out = get_method(name)(model, batch, probe="as_mean", generator=_seeded(0))
    assert out.shape == batch.input_ids.shape and out.dtype == torch.float32
    where = _positions(name, batch)
    assert (out[~where] == 0).all() and (out[where] >= 0).all()
    assert (out[1] == 0).all() == (not where[1].any())  # row 1 has no answer span
    if name in ("grail", "grail_all"):  # the answer's last token and the tail come after the loss
        last = batch.answer_mask.float().cumsum(1) == batch.answer_mask.sum(1, keepdim=True)
        after = where & last & ~batch.probe_mask
        assert (out[after] == 0).all()
        where = where & ~after
    assert (out[where] > 0).float().mean() > 0.9


@pytest.mark.parametrize("name, variant", [("entropy", "entropy_reasoning"), ("grail", "grail_all"),
                                           ("grail", "grail_reasoning")])
def test_variants_have_the_methods_scores_on_the_scored_positions(model, batch, name, variant):
    """A variant differs only in where it reads and how it weighs: on S both give one number."""
    assert method_spec(variant).variant_of == name
    scored = batch.scored_mask & batch.has_answer[:, None]
    torch.testing.assert_close(get_method(variant)(model, batch)[scored], get_method(name)(model, batch)[scored])


def test_response_scoped_methods_refuse_a_batch_without_a_response_mask(model, batch):
    bare = ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask, batch.answer_mask, PAD_ID)
    for name in ("entropy", "grail"):
        with pytest.raises(InputError, match="response_mask"):
            get_method(name)(model, bare)


@pytest.mark.parametrize("name", ["ig", "grail"])
def test_gradient_baselines_leave_parameter_grads_alone(batch, name):
    model = tiny_llama(seed=6)
    params = dict(model.named_parameters())
    with_grad = list(params)[1::2]
    for key in with_grad:
        params[key].grad = torch.randn_like(params[key])
    before = {key: params[key].grad.clone() for key in with_grad}
    get_method(name)(model, batch)
    for key, p in params.items():
        assert torch.equal(p.grad, before[key]) if key in with_grad else p.grad is None, key


def test_entropy_matches_hand_computation(model, batch):
    """H_t of every response token, rows without an answer span included (the 80/20 paper's)."""
    out = get_method("entropy")(model, batch)
    with torch.no_grad():
        logits = model(batch.input_ids, attention_mask=batch.attention_mask).logits.double()
    for row, t in zip(*batch.response_mask.nonzero(as_tuple=True)):
        p = torch.softmax(logits[row, t - 1], dim=-1)
        expected = -(p * p.log()).sum().item()
        assert out[row, t].item() == pytest.approx(expected, rel=1e-5)


def test_token_entropy_in_slices_equals_whole_tensor(monkeypatch):
    """Slicing the float32 temporaries (memory only) changes no value: a slice of 2 rows and
    one of every row give the float64 entropies, NaN rows and 0 log 0 included."""
    from oar_attrib.methods.baselines import entropy as entropy_module

    logits = torch.randn(3, 5, 40, generator=_seeded(1)) * 4
    logits[0, 1, 3:] = -float("inf")  # p = 0 on most of the vocabulary
    logits[2, 4, 7] = float("nan")
    p = torch.softmax(logits.double(), dim=-1)
    expected = -torch.special.xlogy(p, p).sum(dim=-1)
    for slice_logits in (80, 10 ** 9):
        monkeypatch.setattr(entropy_module, "ENTROPY_SLICE", slice_logits)
        got = entropy_module.token_entropy(logits)
        assert got.shape == (3, 5) and got.dtype == torch.float32
        assert torch.isnan(got[2, 4]) and torch.isnan(expected[2, 4])
        keep = ~torch.isnan(expected)
        torch.testing.assert_close(got[keep].double(), expected[keep], rtol=1e-5, atol=1e-6)


def test_random_is_seeded_and_uniform(model, batch):
    random = get_method("random")
    first = random(model, batch, generator=_seeded(3))
    assert torch.equal(first, random(model, batch, generator=_seeded(3)))
    assert not torch.equal(first, random(model, batch, generator=_seeded(4)))
    scored = batch.scored_mask & batch.has_answer[:, None]
    assert (first[scored] < 1).all()


def test_ig_is_complete_for_a_single_scored_position():
    # With one scored position only its embedding moves along the path, so by completeness
    # its attribution is phi(input) - phi(baseline), up to the path integral's error (a
    # milder init than the other tests' keeps the path smooth enough for 64 steps).
    model = tiny_qwen2(seed=6, init=0.1)
    base = make_batch(lengths=(18,), answer_lens=(2,))
    scored = torch.zeros_like(base.scored_mask)
    scored[0, 7] = True
    batch = ScoringBatch(base.input_ids, base.attention_mask, scored, base.answer_mask, PAD_ID)
    baseline_ids = batch.input_ids.clone()
    baseline_ids[0, 7] = PAD_ID
    sites = probe_sites(batch)
    with torch.no_grad():
        phi = [probe_values(model(ids, attention_mask=batch.attention_mask).logits[
            :, sites.positions[0]], sites, "as_joint").item() for ids in (batch.input_ids,
                                                                           baseline_ids)]
    out = get_method("ig")(model, batch, n_steps=64)
    assert abs(phi[0] - phi[1]) > 1e-2
    assert out[0, 7].item() == pytest.approx(abs(phi[0] - phi[1]), rel=1e-3)


@pytest.mark.parametrize("build", [
    lambda: tiny_qwen2(seed=6),
    lambda: tiny_llama(seed=6),
    # keys beyond the window are masked by position, so the prefix's cache still serves
    lambda: tiny_qwen2(seed=3, tie=False, use_sliding_window=True, sliding_window=5,
                       max_window_layers=1),
], ids=["qwen2", "llama", "sliding"])
def test_ig_on_the_prompt_cache_equals_ig_on_whole_rows(build):
    """The path runs only the columns after the shared prefix (here the 4-token prompt and
    what precedes the first scored token) on its cache; the result is IG on whole rows."""
    model, batch = build(), make_batch(lengths=(18, 12, 15), prompt_len=(6, 4, 5))
    sites = probe_sites(batch)
    assert ig_module.shared_prefix(batch, sites) == 4
    assert ig_module._prefix_kv(model, batch, 4) is not None  # the cache is reused here
    fast = ig_module._attributions(model, batch, 16, 2 * 3)
    slow = ig_module._attributions(model, batch, 16, 2 * 3, reuse_prefix=False)
    assert (fast[:, :4] == 0).all() and (fast > 0).any()
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-4)


def test_ig_shared_prefix_stops_at_the_first_probe_site():
    """A row whose answer starts right after the prompt (no reasoning scored before it) bounds
    the prefix by its first probe position, so that the probe still reads a new column."""
    batch = make_batch(lengths=(18, 12), prompt_len=(6, 4))
    scored = batch.scored_mask.clone()
    scored[:, :8] = False
    moved = ScoringBatch(batch.input_ids, batch.attention_mask, scored, batch.answer_mask, PAD_ID)
    sites = probe_sites(moved)
    expected = min(8, int(sites.positions[sites.valid].min()))
    assert ig_module.shared_prefix(moved, sites) == expected
    nothing = ScoringBatch(batch.input_ids, batch.attention_mask,
                           torch.zeros_like(scored), batch.answer_mask, PAD_ID)
    assert ig_module.shared_prefix(nothing, sites) == 0


def test_grail_matches_hand_computation(model, batch):
    out = get_method("grail")(model, batch)
    embeds = model.get_input_embeddings()(batch.input_ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits.float(), dim=-1)
    answer = batch.answer_mask[:, 1:]
    loss = -logp[:, :-1].gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)[answer].sum()
    (grad,) = torch.autograd.grad(loss, embeds)
    expected = (grad * embeds.detach()).norm(dim=-1)
    where = batch.response_mask & batch.has_answer[:, None]  # the whole response, as GRAIL z-scores it
    torch.testing.assert_close(out[where], expected[where], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["entropy", "grail", "entropy_reasoning", "grail_reasoning"])
def test_nan_logits_give_nan_without_crashing(batch, name):
    model = tiny_llama(seed=6)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    out = get_method(name)(model, batch)
    where = _positions(name, batch)
    assert out[where].isnan().all() and (out[~where] == 0).all()


@pytest.mark.parametrize("name, small", [("entropy", 5), ("grail", 1), ("ig", 1)])
def test_token_budgets_change_memory_not_results(model, batch, name, small):
    """A budget too small for two rows (grail, ig: one row per backward, one IG path point
    per forward; entropy: 5 logits per forward, its columns in chunks on the cache) gives the
    numbers of one pass over everything."""
    fn = get_method(name)
    whole = fn(model, batch, max_batch_tokens=10**6)
    torch.testing.assert_close(fn(model, batch, max_batch_tokens=small), whole, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fn(model, batch), whole, atol=1e-5, rtol=1e-4)  # auto budget
    if name == "ig":  # the explicit captum knob: all rows and path points in one forward
        torch.testing.assert_close(fn(model, batch, internal_batch_size=3 * 32), whole,
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["entropy", "grail", "ig"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, "many"])
def test_bad_token_budgets_are_refused(model, batch, name, bad):
    from oar_attrib.errors import InputError

    with pytest.raises(InputError, match="max_batch_tokens"):
        get_method(name)(model, batch, max_batch_tokens=bad)
