"""Token weights of a generation batch in TRL's layout (oar_attrib/training/reshaping.py), without TRL."""
import dataclasses

import pytest
import torch

from oar_attrib.methods import MethodSpec
from oar_attrib.world import generate_problems
from oar_attrib.training.reshaping import ReshapeSettings, encode_row, encode_rows, token_weights, unpad_rows
from oar_attrib.weights import pipeline
from oar_attrib.weights.pipeline import _chunks, row_seed
from oar_attrib.training.toy import ScriptedRollout, tiny_policy


@pytest.fixture(scope="module")
def rows(tok):
    """Six (prompt ids, completion ids) rows: right, wrong and no-answer completions."""
    problems = generate_problems(2, "default", seed=3)
    rollout = ScriptedRollout(problems, tok, variants=("right", "wrong", "no_answer"))
    prompts = [p.prompt for p in problems for _ in range(3)]
    return [(tok(p)["input_ids"], rollout.completion_ids(p, i)) for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def model(tok):
    return tiny_policy(tok).eval()


def weights_of(model, tok, rows, order, settings, width=64):
    picked = [rows[i] for i in order]
    return token_weights(model, tok, [p for p, _ in picked], [c for _, c in picked], width, settings)


def test_unpad_rows_undoes_left_and_right_padding():
    prompt_ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 4]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    completion_ids = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0], [9, 9, 9, 9]])[:2]
    completion_mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])  # row 1 masked out (truncated)
    prompts, completions = unpad_rows(prompt_ids, prompt_mask, completion_ids, completion_mask)
    assert prompts == [[5, 6], [7, 8, 9, 4]]
    assert completions == [[1, 2, 3], []]


def test_encode_row_segments_sampled_ids(tok, rows):
    prompt, completion = rows[0]
    pair = encode_row(tok, prompt, completion, "gsm8k")
    assert pair.span_found and pair.labels[-1] == "tail"  # EOS
    assert pair.answer_text == pair.text.split("#### ")[-1]
    assert encode_row(tok, prompt, rows[2][1]).span_found is False  # no answer line
    assert encode_row(tok, prompt, []).span_found is False
    # The batch path (one decode for all rows) gives each row what it gets alone.
    prompts, completions = [r[0] for r in rows] + [prompt], [r[1] for r in rows] + [[]]
    assert encode_rows(tok, prompts, completions, "gsm8k") == [
        encode_row(tok, p, c, "gsm8k") for p, c in zip(prompts, completions)]


def test_answer_first_after_an_empty_prompt_trains_with_weight_one(tok, rows, model):
    # A sampled row whose completion starts with its answer after an empty prompt: no position
    # predicts the answer, so it is not attributed (the same pair `encode_pairs` builds).
    answer_first = tok("5 so", add_special_tokens=False)["input_ids"]
    settings = ReshapeSettings(method="oar_p", answer_format="regex", answer_pattern=r"(\d+)")
    (pair,) = encode_rows(tok, [[]], [answer_first], "regex", r"(\d+)")
    assert pair.labels[0] == "answer" and not pair.span_found and pair.no_predicting_position
    prompt, completion = rows[0]
    tw = token_weights(model, tok, [[], prompt], [answer_first, completion], 64, settings)
    assert tw.span_found.tolist() == [False, True] and tw.attributed.tolist() == [False, True]
    assert torch.equal(tw.weights[0], torch.ones(64)) and not tw.scored[0].any()


def test_row_seed_depends_only_on_the_seed_and_the_row():
    assert row_seed(0, [1, 2, 3]) == row_seed(0, [1, 2, 3]) == row_seed(0, torch.tensor([1, 2, 3]))
    assert len({row_seed(0, [1, 2, 3]), row_seed(1, [1, 2, 3]), row_seed(0, [1, 2]), row_seed(0, [3, 2, 1])}) == 4


def test_chunks_keep_the_token_budget():
    lengths = [5, 5, 5, 12, 3]
    assert _chunks([0, 1, 2, 3, 4], lengths, 10) == [[0, 1], [2], [3], [4]]
    assert _chunks([0, 2], lengths, 100) == [[0, 2]]


@pytest.mark.parametrize("method", ["oar_g", "random", "oar_p", "oar_p_hier", "entropy", "grail"])
def test_weights_do_not_depend_on_batch_composition(model, tok, rows, method):
    # What makes weights equal on every rank: a row's weights are the same in any batch.
    settings = ReshapeSettings(method=method, seed=7)
    full = weights_of(model, tok, rows, range(len(rows)), settings)
    order = [4, 1, 0]
    part = weights_of(model, tok, rows, order, settings)
    exact = method in ("random", "entropy")
    if exact:
        assert torch.equal(full.weights[order], part.weights)
    else:
        torch.testing.assert_close(full.weights[order], part.weights, atol=1e-4, rtol=1e-4)
    other_seed = weights_of(model, tok, rows, order, ReshapeSettings(method=method, seed=8))
    if method in ("oar_g", "random"):
        assert not torch.equal(other_seed.weights, part.weights)


def test_weights_layout_and_mass(model, tok, rows):
    tw = weights_of(model, tok, rows, range(len(rows)), ReshapeSettings(method="oar_g"), width=60)
    assert tw.weights.shape == (len(rows), 60)
    assert tw.span_found.tolist() == [True, True, False] * 2
    for b, (_, completion) in enumerate(rows):
        n = len(completion)
        assert (tw.weights[b, n:] == 1).all() and not tw.scored[b, n:].any()
        if tw.span_found[b]:
            assert tw.weights[b][tw.scored[b]].mean().item() == pytest.approx(1.0, abs=1e-5)
        else:
            assert (tw.weights[b] == 1).all() and (tw.importances[b] == 0).all()


def test_none_finds_spans_but_keeps_weight_one(model, tok, rows):
    tw = weights_of(model, tok, rows, range(len(rows)), ReshapeSettings(method="none"))
    assert (tw.weights == 1).all() and tw.scored.any() and tw.span_found.sum() == 4


def test_nonfinite_importances_give_weight_one_and_are_flagged(model, tok, rows, monkeypatch):
    def broken(model, batch, **kwargs):
        out = torch.rand(batch.input_ids.shape)
        out[0] = float("nan")
        return torch.where(batch.scored_mask, out, torch.zeros(()))

    monkeypatch.setattr(pipeline, "method_spec", lambda name: MethodSpec(name, broken))
    tw = weights_of(model, tok, rows, [0, 1], ReshapeSettings(method="entropy", max_batch_tokens=10**6))
    assert tw.nonfinite.tolist() == [True, False]
    assert (tw.weights[0] == 1).all() and (tw.weights[1][tw.scored[1]] != 1).any()


def test_gating_follows_the_method(model, tok, rows):
    grail = weights_of(model, tok, rows, [0, 1], ReshapeSettings(method="grail"))
    s = grail.scored
    assert grail.weights[s].min() >= 0.5 and grail.weights[s].max() <= 5.0
    top = weights_of(model, tok, rows, [0, 1], ReshapeSettings(method="entropy", weighting="top_rho", rho=0.2))
    kept = top.weights[top.scored]
    assert set(kept.unique().tolist()) <= {0.0, 1.0} and 0 < kept.mean() <= 0.35


@pytest.mark.parametrize("method", ["oar_g", "random"])
def test_random_methods_batched_with_one_generator_per_row_match_each_row_alone(model, tok, rows, method):
    from oar_attrib.inputs.encoding import pairs_to_batch
    from oar_attrib.methods import method_spec

    fn = method_spec(method).fn
    assert method_spec(method).random
    pairs = [encode_row(tok, p, c) for p, c in rows]
    batch = pairs_to_batch(pairs, tok.pad_token_id)
    seeds = [row_seed(0, p.prompt_ids + p.response_ids) for p in pairs]
    batched = fn(model, batch, probe="lt", generator=[torch.Generator().manual_seed(s) for s in seeds])
    for b, seed in enumerate(seeds):
        alone = fn(model, batch.select([b]), probe="lt", generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(batched[b, : alone.shape[1]], alone[0], rtol=1e-4, atol=1e-6)
    assert batched[batch.scored_mask & batch.has_answer[:, None]].gt(0).all()


def test_rows_longer_than_the_token_budget_are_scored_alone(model, tok, rows):
    small = weights_of(model, tok, rows, [0, 1], ReshapeSettings(method="oar_p", max_batch_tokens=8))
    large = weights_of(model, tok, rows, [0, 1], ReshapeSettings(method="oar_p"))
    torch.testing.assert_close(small.weights, large.weights, atol=1e-3, rtol=1e-3)  # float batching


@pytest.mark.parametrize("method", ["oar_g", "grail"])
def test_attribution_leaves_parameter_gradients_alone(tok, rows, method):
    model = tiny_policy(tok).train()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.25)
    weights_of(model, tok, rows, [0, 1, 3], ReshapeSettings(method=method))
    assert all(torch.equal(p.grad, torch.full_like(p, 0.25)) for p in model.parameters())
    assert model.training  # eval mode only during attribution


def test_repeated_rows_are_scored_once(model, tok, rows, monkeypatch):
    calls = []
    spec = pipeline.method_spec("oar_g")
    def counting(m, sub, **kwargs):
        calls.append(sub.input_ids.shape[0])
        return spec.fn(m, sub, **kwargs)

    monkeypatch.setattr(pipeline, "method_spec", lambda name: dataclasses.replace(spec, fn=counting))
    tw = weights_of(model, tok, rows, [0, 1, 0, 3, 1], ReshapeSettings(method="oar_g"))
    assert calls == [3]  # rows 0, 1 and 3, each once
    assert torch.equal(tw.weights[0], tw.weights[2]) and torch.equal(tw.importances[1], tw.importances[4])
