"""The fast OAR-P engine against the brute-force reference, and its contract."""
import contextlib

import pytest
import torch

import oar_attrib.methods.perturb as oar_p_module
from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.errors import InputError
from oar_attrib.models.lm import logits_at
from oar_attrib.methods.oar_p import oar_p, oar_p_reference
from oar_attrib.methods.probes import PROBES, probe_sites
from models import PAD_ID, make_batch, tiny_llama, tiny_qwen2

BUILDERS = {"qwen2": tiny_qwen2, "llama": tiny_llama}


@pytest.fixture(scope="module")
def models():
    return {name: build(seed=1) for name, build in BUILDERS.items()}


def _batch_with_tail_scored() -> ScoringBatch:
    """Rows of lengths 22, 15, 19, 9 (the last without an answer), plus a scored position
    after row 0's answer, which cannot move the probe."""
    batch = make_batch(lengths=(22, 15, 19, 9), answer_lens=(1, 2, 3), no_answer_rows=(3,))
    batch.scored_mask[0, 21] = True
    batch.scored_mask[3, 4:8] = True  # row 3's response (its prompt is [0, 4))
    return batch


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("probe", PROBES)
def test_fast_equals_reference(models, name, probe):
    model, batch = models[name], _batch_with_tail_scored()
    ref = oar_p_reference(model, batch, probe)
    assert ref.abs().max() > 0.1  # the comparison means something
    # 22 tokens: one copy per forward, many forwards; 4096: few forwards of many copies;
    # overhead 10**6 packs copies of different rows and starts into shared forwards.
    for budget, overhead in ((22, None), (4096, None), (60, 10**6)):
        fast = oar_p(model, batch, probe=probe, max_batch_tokens=budget,
                     overhead_tokens=overhead, packing="padded")
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
        assert fast[0, 21] == 0 and (fast[3] == 0).all()


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("probe", PROBES)
def test_packed_equals_reference(models, name, probe, monkeypatch):
    """Copies packed without padding, from one row per forward up to every row's copies in
    one forward (a key limit of 10**6 and a budget that holds them all)."""
    model, batch = models[name], _batch_with_tail_scored()
    ref = oar_p_reference(model, batch, probe)
    shapes = _packed_shapes(monkeypatch)
    for limit, budget in ((None, 22), (None, 4096), (10**6, 4096)):
        if limit is not None:
            monkeypatch.setattr(oar_p_module, "packed_key_limit", lambda *args: limit)
        shapes.clear()
        fast = oar_p(model, batch, probe=probe, max_batch_tokens=budget, packing="packed")
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)
        assert fast[0, 21] == 0 and (fast[3] == 0).all()
        assert sum(copies for copies, _ in shapes) == int(_reachable_count(batch))
    assert max(rows for _, rows in shapes) > 1, "no forward packed copies of several rows"


def _reachable_count(batch):
    sites = probe_sites(batch)
    return oar_p_module.reachable_positions(batch, sites).sum()


def _packed_shapes(monkeypatch):
    """Record (copies, distinct rows) of every packed forward."""
    seen = []
    real = oar_p_module.score_packed

    def spy(model, clean, copies, *args):
        seen.append((len(copies), len({c.row for c in copies})))
        return real(model, clean, copies, *args)

    monkeypatch.setattr(oar_p_module, "score_packed", spy)
    return seen


def test_packed_with_eager_attention_and_left_padding_free_windows(monkeypatch):
    """Eager attention takes the additive form of the block mask; rows of mixed lengths and
    prompts (so copies of one forward start at different places)."""
    model = tiny_llama(seed=2, attn="eager")
    batch = make_batch(lengths=(26, 13, 20), prompt_len=(2, 5, 0))
    monkeypatch.setattr(oar_p_module, "packed_key_limit", lambda *args: 10**6)
    for probe in PROBES:
        ref = oar_p_reference(model, batch, probe)
        fast = oar_p(model, batch, probe=probe, packing="packed", max_batch_tokens=200)
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_packing_falls_back_where_the_model_cannot_take_it(monkeypatch):
    sliding = tiny_qwen2(seed=3, tie=False, use_sliding_window=True, sliding_window=5,
                         max_window_layers=1)
    assert oar_p_module.mask_kind(sliding) is None
    with pytest.raises(InputError, match="packing='padded'"):
        oar_p(sliding, make_batch(), packing="packed")
    with pytest.raises(InputError, match="packing='zip'"):
        oar_p(tiny_qwen2(), make_batch(), packing="zip")
    # auto: packed on the device types listed, where the model takes it; padded elsewhere.
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(oar_p_module, "AUTO_PACKED_DEVICES", frozenset({"cuda"}))
    assert oar_p_module._packing_kind(sliding, "auto", cuda) is None
    assert oar_p_module._packing_kind(tiny_qwen2(), "auto", cuda) == "bool"
    assert oar_p_module._packing_kind(tiny_qwen2(), "auto", cpu) is None
    assert oar_p_module._packing_kind(tiny_llama(attn="eager"), "packed", cpu) == "additive"


@pytest.mark.parametrize("packing", ["padded", "packed"])
def test_bf16_fast_equals_reference_within_bf16_rounding(packing):
    """bf16 weights: the fast paths and the reference differ by bf16 rounding of the logits
    (relative 2**-8 = 0.4%), not more: measured against the importances' own scale."""
    model = tiny_qwen2(seed=1, dtype=torch.bfloat16)
    batch = make_batch(lengths=(22, 15, 19))
    ref = oar_p_reference(model, batch, "as_mean")
    fast = oar_p(model, batch, probe="as_mean", max_batch_tokens=60, packing=packing)
    exact = oar_p_reference(tiny_qwen2(seed=1).to(torch.bfloat16).float(), batch, "as_mean")
    scored = batch.scored_mask
    scale = exact[scored].abs().max()
    # The bf16 reference's own distance to float32 arithmetic bounds what rounding can do.
    assert (fast - ref)[scored].abs().max() <= 2 * (ref - exact)[scored].abs().max() + 1e-3 * scale
    assert (fast - ref)[scored].abs().max() < 0.05 * scale


def _forward_shapes(monkeypatch):
    """Record (rows, starts) of every perturbed forward and (rows, cache + new tokens) of
    every model call."""
    chunks_seen, tokens_seen = [], []
    real = oar_p_module._score_forward

    def spy(model, clean, chunks, probe, pad_token_id):
        chunks_seen.append(chunks)
        return real(model, clean, chunks, probe, pad_token_id)

    monkeypatch.setattr(oar_p_module, "_score_forward", spy)
    return chunks_seen, tokens_seen


@contextlib.contextmanager
def _forward_tokens(model):
    """A list that gets, for every forward of `model` in the block, the tokens it attends over:
    rows x (new tokens + cached tokens)."""
    tokens = []

    def count(module, args, kwargs):
        ids = kwargs["input_ids"]
        cache = kwargs["cache"] if "cache" in kwargs else kwargs.get("past_key_values")
        cached = cache.get_seq_length() if cache is not None else 0
        tokens.append(ids.shape[0] * (ids.shape[1] + cached))

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        yield tokens
    finally:
        handle.remove()


def test_budget_bounds_every_forward_and_packing_happens(models, monkeypatch):
    model, batch = models["qwen2"], make_batch(lengths=(30, 26, 21, 17))
    # Two positions per row, at different places: chunks small enough to share forwards.
    sparse = torch.zeros_like(batch.scored_mask)
    for row in range(4):
        sparse[row, 4 + 3 * row:6 + 3 * row] = True
    chunks_seen, _ = _forward_shapes(monkeypatch)
    with _forward_tokens(model) as tokens:
        for budget in (29, 200):
            for scored in (batch.scored_mask, sparse):
                tokens.clear()
                oar_p(model, ScoringBatch(batch.input_ids, batch.attention_mask, scored,
                                          batch.answer_mask, PAD_ID),
                      probe="lt", max_batch_tokens=budget, overhead_tokens=10**6)
                assert max(tokens) <= budget
        assert any(len({c.start for c in chunks}) > 1 and len({c.row for c in chunks}) > 1
                   for chunks in chunks_seen), "no forward mixed rows and window starts"
        chunks_seen.clear()
        oar_p(model, batch, probe="lt", max_batch_tokens=29)
        n_scored = int(batch.scored_mask.sum())
        assert sum(len(c.positions) for chunks in chunks_seen for c in chunks) == n_scored
        assert len(chunks_seen) == n_scored  # a budget of one row: one copy per forward


def test_logits_at_equals_full_logits_with_and_without_logits_to_keep(models):
    model, batch = models["llama"], make_batch()
    sites = probe_sites(batch)
    with torch.no_grad():
        full = model(batch.input_ids, attention_mask=batch.attention_mask).logits
        kept = logits_at(model, sites.positions, input_ids=batch.input_ids,
                         attention_mask=batch.attention_mask)

        class NoKeep(torch.nn.Module):  # a model whose forward has no logits_to_keep
            def forward(self, input_ids, attention_mask):
                return model(input_ids, attention_mask=attention_mask)

        fallback = logits_at(NoKeep(), sites.positions, input_ids=batch.input_ids,
                             attention_mask=batch.attention_mask)
    expected = full.gather(1, sites.positions[..., None].expand(-1, -1, full.shape[-1]))
    torch.testing.assert_close(kept, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(fallback, expected)


def test_sliding_window_model_equals_reference():
    model = tiny_qwen2(seed=3, tie=False, use_sliding_window=True, sliding_window=5,
                       max_window_layers=1)
    batch = make_batch()
    ref = oar_p_reference(model, batch, "as_mean")
    for overhead in (0, 10**6):
        fast = oar_p(model, batch, probe="as_mean", max_batch_tokens=60, overhead_tokens=overhead)
        torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_first_position_scored_and_eager_attention():
    model = tiny_llama(seed=2, attn="eager")
    batch = make_batch(prompt_len=0)
    ref = oar_p_reference(model, batch, "lt")
    fast = oar_p(model, batch, probe="lt", max_batch_tokens=60, overhead_tokens=10**6)
    assert ref[:, 0].abs().max() > 0
    torch.testing.assert_close(fast, ref, atol=1e-4, rtol=1e-4)


def test_perturbing_with_the_same_token_gives_zero(models):
    base = make_batch()
    scored = torch.zeros_like(base.scored_mask)
    scored[:, 5:8] = True
    model = models["qwen2"]
    batch = ScoringBatch(base.input_ids, base.attention_mask, scored, base.answer_mask, PAD_ID)
    batch.input_ids[0, 6] = PAD_ID  # the "perturbation" at t = 6 changes nothing
    for probe in PROBES:
        assert oar_p_reference(model, batch, probe)[0, 6] == 0
        assert oar_p(model, batch, probe=probe)[0, 6].abs() < 1e-5


def test_contract_shape_zeros_and_restored_model(models):
    model, batch = models["qwen2"], _batch_with_tail_scored()
    params = {name: p.clone() for name, p in model.named_parameters()}
    model.train()
    try:
        out = oar_p(model, batch, probe="as_mean")
        assert model.training and all(m.training for m in model.modules())
    finally:
        model.eval()
    assert out.shape == batch.input_ids.shape and out.dtype == torch.float32
    outside = ~(batch.scored_mask & batch.has_answer[:, None])
    assert (out[outside] == 0).all() and (out >= 0).all()
    assert all(torch.equal(p, params[name]) for name, p in model.named_parameters())
    # Dropout is off while scoring: train mode gives the eval-mode numbers.
    torch.testing.assert_close(out, oar_p(model, batch, probe="as_mean"))


def test_bf16_model_runs_with_float32_probes():
    model = tiny_qwen2(seed=1, dtype=torch.bfloat16)
    batch = make_batch(lengths=(16, 12))
    fast = oar_p(model, batch, probe="as_mean", max_batch_tokens=40)
    ref = oar_p_reference(model, batch, "as_mean")
    assert fast.dtype == torch.float32 and fast.isfinite().all()
    scored = batch.scored_mask
    # bf16 rounding differs between the two schedules; the rankings must still agree.
    corr = torch.corrcoef(torch.stack([fast[scored], ref[scored]]))[0, 1]
    assert corr > 0.99


def test_nan_logits_give_nan_importances_without_crashing():
    model = tiny_qwen2(seed=1)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))  # tied: the embeddings are NaN too
    batch = make_batch()
    for fn in (lambda: oar_p(model, batch, probe="as_mean"),
               lambda: oar_p_reference(model, batch, "as_joint")):
        out = fn()
        assert out[batch.scored_mask].isnan().all()
        assert (out[~batch.scored_mask] == 0).all()


def test_rows_longer_than_the_positions_and_tiny_budgets_are_refused():
    model = tiny_qwen2(seed=1, max_pos=16)
    batch = make_batch()
    with pytest.raises(InputError, match="max_position_embeddings=16"):
        oar_p(model, batch)
    with pytest.raises(InputError, match="max_position_embeddings=16"):
        oar_p_reference(model, batch)
    with pytest.raises(InputError, match="max_batch_tokens"):
        oar_p(tiny_qwen2(seed=1), batch, max_batch_tokens=10)


def test_auto_budget_obeys_a_stated_free_memory(models, monkeypatch):
    """With 240 000 bytes free (stated, in place of the device's query), the auto budget is
    FRACTION * free / (bytes per token), counted here by hand for tiny_qwen2 in float32, and
    every forward of the engine holds at most that many tokens."""
    import oar_attrib.models.budget as budget

    model, batch = models["qwen2"], make_batch()  # rows 22, 15, 19; answers of 1, 2, 3 tokens
    free = 240_000
    monkeypatch.setattr(budget, "free_memory", lambda device: free)
    cache = 2 * 2 * 2 * 8 * 4  # layers * (k, v) * kv_heads * head_dim * 4 bytes
    # hidden 32, intermediate 64; attention scores and softmax: 2 * 4 heads * 20 keys (longest row)
    activations = (4 * 32 + 3 * 64 + 2 * 4 * 20) * 4
    logits = 3 * 128 * (4 + 12) / 13  # K = 3 sites, vocab 128; shortest row: 13 tokens to q_K
    expected = int(0.5 * free / (cache + activations + logits))
    sites = probe_sites(batch)
    ends = (sites.last + 1).tolist()
    assert oar_p_module.batch_budget(model, sites, ends, None) == expected == 45
    with _forward_tokens(model) as tokens:
        fast = oar_p(model, batch, probe="as_mean", packing="padded")
    assert max(tokens) <= expected and len(tokens) > 1
    torch.testing.assert_close(fast, oar_p_reference(model, batch, "as_mean"), atol=1e-4, rtol=1e-4)
    # Less memory than one copy of the longest row needs: the budget is that row, not less.
    monkeypatch.setattr(budget, "free_memory", lambda device: 1000)
    assert oar_p_module.batch_budget(model, sites, ends, None) == max(ends)
    # No free-memory figure (CPU): the same rule against the CPU bound, a share of the RAM
    # capped at CPU_MEMORY_CAP, with the attention scores over the longest row counted.
    monkeypatch.setattr(budget, "free_memory", lambda device: None)
    monkeypatch.setattr(budget, "available_ram", lambda: 10 * budget.CPU_MEMORY_CAP)
    assert budget.cpu_memory_bound() == budget.CPU_MEMORY_CAP
    monkeypatch.setattr(budget, "available_ram", lambda: 2_000_000)
    assert budget.cpu_memory_bound() == 500_000
    per_token = cache + activations + logits
    assert oar_p_module.batch_budget(model, sites, ends, None) == int(500_000 / per_token)


def test_logits_at_per_row_positions_without_native_support(models, monkeypatch):
    """Transformers before `slice_logits_to_keep` index every row with all positions; the
    fallback gathers the head's input per row instead, with the same logits."""
    import oar_attrib.models.lm as lm

    model, batch = models["qwen2"], make_batch()
    sites = probe_sites(batch)
    with torch.no_grad():
        native = logits_at(model, sites.positions, input_ids=batch.input_ids,
                           attention_mask=batch.attention_mask)
        monkeypatch.setattr(lm, "keeps_row_indices", lambda: False)
        hooked = logits_at(model, sites.positions, input_ids=batch.input_ids,
                           attention_mask=batch.attention_mask)
    assert hooked.shape == native.shape == (3, 3, 128)
    torch.testing.assert_close(hooked, native, atol=1e-5, rtol=1e-5)
    assert not model.lm_head._forward_pre_hooks  # the hook is gone
