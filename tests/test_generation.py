"""Left-padded batched decoding against plain one-row greedy decoding on the bundled model."""
import pytest
import torch

from oar_attrib.instruments.data.oracle import _regenerate
from oar_attrib.models.generation import (continue_groups, continue_rows, cut_at_stop, generate, gumbel_sample,
                                         left_pad, sample_prefixes, stop_ids)
from oar_attrib.training.callbacks import _complete
from oar_attrib.world import generate_problems
from models import greedy_reference

N_NEW = 40


@pytest.fixture(scope="module")
def prompts():
    # Prompts of different token lengths, so that the batch really is padded.
    problems = generate_problems(6, "medium", seed=3) + generate_problems(2, "default", seed=4)
    return [p.prompt for p in problems]


def test_left_pad_layout():
    ids, attn = left_pad([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 0, 0]]
    assert attn.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]


def test_cut_at_stop():
    assert cut_at_stop([4, 1, 5, 1], [1]) == [4, 1]
    assert cut_at_stop([4, 1, 5, 1], [1], keep=False) == [4]
    assert cut_at_stop([4, 5], [1, 2]) == [4, 5]


@pytest.mark.slow
def test_every_caller_decodes_like_plain_greedy(bundled, prompts):
    model, tok = bundled
    eos = tok.eos_token_id
    assert stop_ids(model, tok) == [eos]
    rows = [tok(p, add_special_tokens=False).input_ids for p in prompts]
    assert len({len(r) for r in rows}) > 1, "the prompts must differ in length to test padding"
    want = [greedy_reference(model, r, N_NEW, eos) for r in rows]
    assert sum(w[-1] == eos for w in want) >= 2, "some references must stop at EOS"
    assert generate(model, tok, prompts, max_new_tokens=N_NEW, batch_size=3) == want
    # The counterfactual oracle's regeneration: the same tokens, cut before EOS.
    assert _regenerate(model, rows, tok.pad_token_id, [eos], N_NEW) == [cut_at_stop(w, [eos], keep=False)
                                                                       for w in want]
    # The training callback's completions (it tokenizes with special tokens: none here).
    assert tok(prompts[0]).input_ids == rows[0]
    texts = _complete(model, tok, prompts, N_NEW)
    assert texts == tok.batch_decode(want, skip_special_tokens=True)
    # The rollouts' groups: each prompt prefilled once, its greedy answer decoded beside 2 samples.
    torch.manual_seed(0)
    groups = continue_groups(model, rows, tok.pad_token_id, max_new_tokens=N_NEW, samples=2,
                             eos_token_id=[eos]).tolist()
    assert [cut_at_stop(groups[3 * b], [eos]) for b in range(len(rows))] == want


def test_sampling_is_seeded_and_grouped_by_row(bundled, prompts):
    model, tok = bundled
    rows = [tok(p, add_special_tokens=False).input_ids for p in prompts[:2]]
    torch.manual_seed(1)
    a = continue_rows(model, rows, tok.pad_token_id, max_new_tokens=8, do_sample=True, num_return_sequences=3)
    torch.manual_seed(1)
    b = continue_rows(model, rows, tok.pad_token_id, max_new_tokens=8, do_sample=True, num_return_sequences=3)
    assert a.shape[0] == 6 and torch.equal(a, b)
    assert not model.training


def test_seeded_streams_sample_greedily_when_cold_and_alone_or_together_alike(bundled, prompts):
    """`sample_prefixes`: near temperature 0 every row is the greedy continuation (padding and
    rows leaving the batch change nothing); warm, a prefix's continuations are the same decoded
    alone as beside others of other lengths and budgets, and its budget is kept."""
    model, tok = bundled
    stop = stop_ids(model, tok)
    rows = [tok(p, add_special_tokens=False).input_ids for p in prompts[:4]]
    budgets = [N_NEW, 7, 25, 1]
    cold = sample_prefixes(model, rows, [1, 2, 3, 4], budgets, samples=2, temperature=1e-4, pad_id=0, stop=stop)
    for row, budget, got in zip(rows, budgets, cold):
        want = greedy_reference(model, row, budget, stop[0])
        want = want[:want.index(stop[0])] if stop[0] in want else want
        assert got == [want, want]
    warm = sample_prefixes(model, rows, [1, 2, 3, 4], budgets, samples=3, temperature=1.0, pad_id=0, stop=stop)
    for i, (row, budget) in enumerate(zip(rows, budgets)):
        assert sample_prefixes(model, [row], [i + 1], [budget], samples=3, temperature=1.0, pad_id=0,
                               stop=stop)[0] == warm[i]
        assert all(len(t) <= budget and not set(t) & set(stop) for t in warm[i])
    assert len({tuple(t) for t in warm[0]}) > 1  # sampled: the rows are not one copy


def test_gumbel_max_samples_the_softmax():
    """The first token of 20000 rows from one prefix follows softmax(logits / T): total
    variation below 0.02 (its sampling error at 20000 draws over 5 tokens is ~0.01)."""
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    rows = 20000
    g = torch.Generator().manual_seed(0)
    drawn = gumbel_sample(logits.expand(rows, -1) / 0.7, torch.rand((rows, 5), generator=g))
    freq = torch.bincount(drawn, minlength=5).float() / rows
    assert (freq - torch.softmax(logits[0] / 0.7, -1)).abs().sum() / 2 < 0.02
