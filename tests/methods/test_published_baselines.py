"""The baselines as their papers define them, on hand-built cases whose numbers are worked out
here from each paper's formula (METHOD.md section 7):

- entropy: the 80/20 paper keeps the top 20% of ALL response tokens of the batch by entropy
  (every row, answer tokens included), zero elsewhere;
- GRAIL: z-score of log saliency over the whole response, clip(1 + 0.5 z, 0.5, 5) on the
  reasoning of wrong rollouts only, the answer at 5, the rest 1;
- KTAE: per token id, Fisher's exact test, information gain, a direction, squashed to (-1, 1)
  and ADDED to the rollout's advantage.
"""
import math

import pytest
import torch
from scipy.stats import fisher_exact

from oar_attrib.errors import InputError
from oar_attrib.inputs.batch import GroupOutcomes, ScoringBatch
from oar_attrib.methods import get_method, method_spec
from oar_attrib.methods.baselines.ktae import fisher_score, information_gain, key_token_values
from oar_attrib.weights.gating import grail_published_weights, reshape_advantages
from oar_attrib.weights.pipeline import score_and_weight, token_credit
from oar_attrib.weights.settings import ReshapeSettings
from models import PAD_ID, make_batch, tiny_qwen2


def _layout(rows, width=8, spans=True):
    """A batch from per-row segment strings over `width` columns: p prompt, r reasoning,
    b bridge, a answer, t tail, . padding; `spans`: False drops every row's answer."""
    n = len(rows)
    fields = {k: torch.zeros((n, width), dtype=torch.bool) for k in "prbat"}
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, row in enumerate(rows):
        for j, c in enumerate(row):
            if c != ".":
                fields[c][i, j] = True
                attention[i, j] = 1
    ids = torch.arange(1, n * width + 1).reshape(n, width) * attention
    response = fields["r"] | fields["b"] | fields["a"] | fields["t"]
    return ScoringBatch(ids, attention, fields["r"], fields["a"], PAD_ID, response_mask=response)


# ------------------------------------------------------------------ entropy (80/20)


def test_entropy_keeps_the_top_fifth_of_every_response_token_of_the_batch():
    """Two rows, the second without an answer span: 6 + 4 = 10 response tokens, so
    k = ceil(0.2 * 10) = 2 are kept, the batch's two highest entropies (0.9 in row 0, 0.8 in
    row 1); every other response token, the answer (0.5) included, gets 0; the prompt keeps 1."""
    batch = _layout(["pprrrbat", "pppprrrr"])
    batch = ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask & torch.tensor([[True], [False]]),
                         batch.answer_mask, PAD_ID, response_mask=batch.response_mask)
    entropy = torch.tensor([[0.0, 0.0, 0.1, 0.9, 0.3, 0.2, 0.5, 0.2],
                            [0.0, 0.0, 0.0, 0.0, 0.8, 0.05, 0.7, 0.4]])
    weights, bonus = token_credit(entropy, batch.response_mask, ReshapeSettings(method="entropy"), batch=batch)
    expected = torch.tensor([[1, 1, 0, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]], dtype=torch.float32)
    assert torch.equal(weights, expected) and not bonus.any()


def test_entropy_through_the_pipeline_weighs_the_batchs_top_response_entropies():
    model = tiny_qwen2(seed=6)
    batch = make_batch(lengths=(18, 12, 15), no_answer_rows=(1,))
    got = score_and_weight(model, batch, ReshapeSettings(method="entropy"))
    entropy = get_method("entropy")(model, batch)
    response = batch.response_mask
    assert torch.equal(got.scored, response) and got.attributed.all()  # the row without a span too
    values = entropy[response & (torch.arange(response.shape[1]) > 0)]
    k = math.ceil(0.2 * int(response.sum()))
    cut = values.topk(k).values[-1]
    assert torch.equal(got.weights[response], (entropy[response] >= cut).float())
    assert (got.weights[~response] == 1).all() and int(got.weights[response].sum()) == k


# ------------------------------------------------------------------ GRAIL


def _grail_case():
    """One row: 3 reasoning tokens, the marker, 1 answer token, 1 tail token, with
    log(s + 1e-8) = 0, 1, ..., 5 over the response."""
    saliency = torch.exp(torch.arange(6, dtype=torch.float32)) - 1e-8
    response = torch.ones(6, dtype=torch.bool)
    reasoning = torch.tensor([True, True, True, False, False, False])
    answer = torch.tensor([False, False, False, False, True, False])
    return saliency, response, reasoning, answer


def test_grail_weights_by_hand():
    """mean log s = 2.5, population variance 17.5 / 6, z_k = (k - 2.5) / sqrt(17.5/6 + 1e-8);
    w = clip(1 + z / 2, 0.5, 5) on the reasoning, 5 on the answer, 1 on the marker and tail."""
    saliency, response, reasoning, answer = _grail_case()
    std = math.sqrt(17.5 / 6 + 1e-8)
    expected_reasoning = [min(max(1 + 0.5 * (k - 2.5) / std, 0.5), 5.0) for k in range(3)]
    assert expected_reasoning[0] == 0.5 and expected_reasoning[2] == pytest.approx(0.853624, abs=1e-5)
    got = grail_published_weights(saliency[None], response[None], answer[None], reasoning[None],
                                  torch.tensor([False]))[0]
    torch.testing.assert_close(got[:3], torch.tensor(expected_reasoning), atol=1e-5, rtol=0)
    assert got[3:].tolist() == [1.0, 5.0, 1.0]
    fallen = grail_published_weights(saliency[None], response[None], answer[None], reasoning[None],
                                     torch.tensor([True]))[0]
    assert fallen.tolist() == [1.0, 1.0, 1.0, 1.0, 5.0, 1.0]  # the answer keeps its ceiling


def test_grail_reweights_wrong_rollouts_only_and_all_rows_without_advantages():
    saliency, response, reasoning, answer = _grail_case()
    batch = _layout(["prrrbat", "prrrbat", "prrrrrr"], width=7)
    no_span = torch.tensor([[True], [True], [False]])
    batch = ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask & no_span,
                         batch.answer_mask & no_span, PAD_ID, response_mask=batch.response_mask)
    importance = torch.zeros((3, 7))
    importance[:, 1:] = saliency
    hand = grail_published_weights(saliency[None], response[None], answer[None], reasoning[None],
                                   torch.tensor([False]))[0]
    for advantage, reweighted in (([-1.0, 1.0, -1.0], [True, False]), (None, [True, True])):
        outcomes = None if advantage is None else GroupOutcomes(torch.zeros(3, dtype=torch.long),
                                                                torch.tensor([False, True, False]),
                                                                torch.tensor(advantage))
        this = ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask, batch.answer_mask,
                            PAD_ID, response_mask=batch.response_mask, outcomes=outcomes)
        weights, _ = token_credit(importance, batch.response_mask, ReshapeSettings(method="grail"), batch=this)
        for row, on in enumerate(reweighted):
            want = hand if on else torch.tensor([1.0, 1.0, 1.0, 1.0, 5.0, 1.0])
            torch.testing.assert_close(weights[row, 1:], want)
        assert (weights[2] == 1).all() and (weights[:, 0] == 1).all()  # no span; the prompt
    all_rows, _ = token_credit(importance, batch.response_mask, ReshapeSettings(method="grail_all"), batch=this)
    torch.testing.assert_close(all_rows[1, 1:], hand)  # the 'both' variant reweights right ones too


# ------------------------------------------------------------------ KTAE

# One prompt's group of 5 rollouts: 2 right, 3 wrong (token ids; 0 is the pad token).
RIGHT = [[5, 6, 7, 0], [5, 6, 6]]
WRONG = [[8, 6, 9], [8, 9], [5, 9, 9]]


def _hand_value(a, b, c, d, right_count, wrong_count, n_right_tokens=7, n_wrong_tokens=8):
    """KTAE's key-token value of one token from its table and counts, the paper's formula in
    scalar arithmetic (two-sided Fisher p by enumeration, IG in bits, arcsine and BM25 terms)."""
    n, row1, col1 = a + b + c + d, a + b, a + c
    pmf = {k: math.comb(col1, k) * math.comb(n - col1, row1 - k) / math.comb(n, row1)
           for k in range(max(0, row1 + col1 - n), min(row1, col1) + 1)}
    p = sum(v for v in pmf.values() if v <= pmf[a] * (1 + 1e-7))
    fisher = 0.0 if all(v <= pmf[a] * (1 + 1e-7) for v in pmf.values()) else math.exp(-2 * p)

    def h(x, y):
        return -sum(q * math.log2(q) for q in (x / (x + y), y / (x + y)) if q > 0) if x + y else 0.0

    ig = h(a + c, b + d) - ((a + b) / n * h(a, b) + (c + d) / n * h(c, d))
    avg = (n_right_tokens + n_wrong_tokens) / 2

    def tf(count, total):
        f = count / total
        return f * 3 / (f + 2 * (0.5 + 0.5 * total / avg))

    tr, tw = tf(right_count, n_right_tokens), tf(wrong_count, n_wrong_tokens)
    # The authors' 1e-10 in the rates moves asin near 1 by about 1e-5: it is part of the formula.
    x = (math.asin(math.sqrt(a / (a + c + 1e-10))) - math.asin(math.sqrt(b / (b + d + 1e-10)))
         + tr / (tw + 1e-5) - tw / (tr + 1e-5))
    key = (fisher + ig) * x / 2
    return math.tanh(key / 2)  # = 2 (sigmoid(key) - 1/2), without exp's overflow


def test_ktae_values_by_hand():
    """Token 5 is in both right rollouts and one wrong one: table [[2, 1], [0, 2]], Fisher's
    p = P(0) + P(2) = 0.1 + 0.3 = 0.4, IG = H(0.4) - 3/5 H(2/3) = 0.41997 bits, arcsine
    difference pi/2 - asin(sqrt(1/3)), BM25 frequencies 2/7 and 1/8 (the pad token counts
    among the right rollouts' 7 tokens)."""
    values = key_token_values([torch.tensor(r) for r in RIGHT + WRONG],
                              torch.tensor([True, True, False, False, False]), pad_token_id=0)
    assert values[5] == pytest.approx(_hand_value(2, 1, 0, 2, 2, 1), rel=1e-6)
    assert values[5] == pytest.approx(0.5384, abs=1e-4)
    assert values[6] == pytest.approx(_hand_value(2, 1, 0, 2, 3, 1), rel=1e-6)  # same table, more often
    assert values[6] > values[5] > 0
    assert values[7] == pytest.approx(_hand_value(1, 0, 1, 3, 1, 0), rel=1e-6)
    assert values[9] == pytest.approx(_hand_value(0, 3, 2, 0, 0, 4), rel=1e-6) and values[9] < -0.99
    assert values[0] == 0.0  # the pad token
    uniform = key_token_values([torch.tensor(r) for r in RIGHT], torch.tensor([True, True]))
    assert set(uniform.values()) == {0.0}  # no wrong rollout: nothing to compare


def test_fisher_score_matches_scipys_exact_test():
    gen = torch.Generator().manual_seed(0)
    tables = torch.randint(0, 6, (200, 4), generator=gen).double()
    got = fisher_score(*tables.T)
    for (a, b, c, d), score in zip(tables.long().tolist(), got.tolist()):
        p = fisher_exact([[a, b], [c, d]]).pvalue
        assert score == pytest.approx(0.0 if p >= 1 - 1e-12 else math.exp(-2 * p), abs=1e-9), (a, b, c, d)


def test_information_gain_is_the_mutual_information_in_bits():
    # A token present in exactly the right rollouts carries H(Y) bits; independence carries 0.
    assert float(information_gain(2, 0, 0, 2)) == pytest.approx(1.0)
    assert float(information_gain(1, 1, 1, 1)) == pytest.approx(0.0, abs=1e-12)


def test_ktae_method_adds_its_values_to_the_advantage_per_group():
    """Two groups in one batch: each row's response tokens get their group's values, the
    prompt nothing; the pipeline gives weight 1 and the values as the additive term."""
    rows = RIGHT + WRONG + [[5, 6], [5, 7]]
    right = [True, True, False, False, False, True, False]
    group = torch.tensor([0, 0, 0, 0, 0, 1, 1])
    width = 2 + max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    attention = torch.zeros_like(ids)
    response = torch.zeros(ids.shape, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, :2 + len(r)] = torch.tensor([3, 4] + r)
        attention[i, :2 + len(r)] = 1
        response[i, 2:2 + len(r)] = True
    advantage = torch.tensor([1.2, 1.2, -0.8, -0.8, -0.8, 0.7, -0.7])
    batch = ScoringBatch(ids, attention, torch.zeros_like(response), torch.zeros_like(response), PAD_ID,
                         response_mask=response, outcomes=GroupOutcomes(group, torch.tensor(right), advantage))
    spec = method_spec("ktae")
    assert spec.grouped and spec.signed and spec.scope == "response"
    got = score_and_weight(None, batch, ReshapeSettings(method="ktae"))  # no model is needed
    first = key_token_values([torch.tensor(r) for r in rows[:5]], torch.tensor(right[:5]), PAD_ID)
    second = key_token_values([torch.tensor(r) for r in rows[5:]], torch.tensor(right[5:]), PAD_ID)
    for i, r in enumerate(rows):
        table = first if i < 5 else second
        assert got.bonus[i, 2:2 + len(r)].tolist() == pytest.approx([table[t] for t in r])
    assert (got.bonus[~response] == 0).all() and (got.weights == 1).all()
    token_adv = reshape_advantages(advantage, got.weights, got.bonus)
    torch.testing.assert_close(token_adv[response], (advantage[:, None] + got.bonus)[response])
    with pytest.raises(InputError, match="outcomes"):
        get_method("ktae")(None, ScoringBatch(ids, attention, torch.zeros_like(response),
                                              torch.zeros_like(response), PAD_ID, response_mask=response))
