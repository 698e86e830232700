"""KTAE, key-token advantage estimation (METHOD.md section 7): token statistics across a
group's rollouts, right against wrong, no model call.

Sun et al. 2025, "KTAE: A Model-Free Algorithm to Key-Tokens Advantage Estimation in
Mathematical Reasoning" (arXiv 2505.16826, section 3), as its authors' code computes it
(`compute_key_tokens.py` and `compute_ktae_outcome_advantage_and_keytokens` in their verl fork,
with the constants their trainer passes: alpha = beta = gamma = top = 1). For one prompt's G
rollouts, n_c right and n_w wrong (right: reward > 0), and every token id v in them:

- the 2x2 table of rollouts: a = right ones containing v, b = wrong ones containing v,
  c = n_c - a, d = n_w - b;
- F(v) = exp(-2 p) with p the two-sided p-value of Fisher's exact test of the table (the sum
  of the hypergeometric probabilities no larger than the observed one), and F = 0 when p = 1;
- IG(v) = H(Y) - H(Y | v present), the information gain in bits of v's presence about the
  outcome;
- the direction x(v) = asin(sqrt(a / (a + c))) - asin(sqrt(b / (b + d)))
  + tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5), with BM25 term frequencies
  tf = f (k1 + 1) / (f + k1 (1 - b + b n / avg)), f the share of v among the right (wrong)
  rollouts' tokens, n their token count, avg the mean of the two counts, k1 = 2, b = 0.5;
- the key-token value k(v) = 2 (sigmoid((alpha F + beta IG) x / (alpha + beta)) - 1/2) in
  (-1, 1), 0 for the pad token and for every token of a group whose rollouts are all right or
  all wrong.

The token advantage is A_{i,t} = A_i + k(y_{i,t}) on every response token (the weighting
`additive`): the value is added to GRPO's, not multiplied. Counts run over each rollout's
response tokens (`batch.response_mask`: EOS included, padding not).

Fisher's test is computed in float64 with scipy's relative tolerance for ties (1 + 1e-7), where
the authors' float32 code compares exactly; the two differ only on tables whose probabilities
tie up to rounding.
"""
from __future__ import annotations

import math

import torch

from ...defaults import PROBE
from ...errors import InputError
from ...inputs.batch import ScoringBatch
from ..probes import check_probe
from ..registry import register_method

KTAE_ALPHA, KTAE_BETA, KTAE_TOP = 1.0, 1.0, 1.0  # the authors' trainer
BM25_K1, BM25_B = 2.0, 0.5
FISHER_TIES = 1.0 + 1e-7  # scipy.stats.fisher_exact's relative tolerance


@register_method("ktae", weighting="additive", scope="response", grouped=True, signed=True, cost="cheap",
                 defaults=("alignment",), listed=8)
def ktae(model, batch: ScoringBatch, *, probe: str = PROBE,
         generator: torch.Generator | None = None) -> torch.Tensor:
    """Key-token values k(y_t) of every response token (module docstring).

    batch: B rows of width L with `response_mask` and `outcomes` (each row's group and
    correctness; rows of a group are compared with each other). `model` is not used (it may be
    None); `probe` and `generator` are unused (the probe name is still checked).
    Returns (B, L) float32 on the batch's device: k in (-1, 1) on response positions, exactly
    0 elsewhere.
    """
    check_probe(probe)
    if batch.outcomes is None:
        raise InputError("ktae compares the rollouts of a prompt's group: the batch needs outcomes "
                         "(each row's group and whether it is right); train with it, or give "
                         "attribute() groups of sampled answers with their outcomes")
    responses = batch.responses().cpu()
    ids = batch.input_ids.cpu()
    group = batch.outcomes.group.cpu()
    correct = batch.outcomes.correct.cpu().bool()
    out = torch.zeros(ids.shape, dtype=torch.float32)
    for g in group.unique().tolist():
        rows = (group == g).nonzero().flatten()
        tokens = [ids[r][responses[r]] for r in rows.tolist()]
        values = key_token_values(tokens, correct[rows], batch.pad_token_id)
        for r, row_tokens in zip(rows.tolist(), tokens):
            out[r, responses[r]] = torch.tensor([values.get(int(t), 0.0) for t in row_tokens],
                                                dtype=torch.float32)
    return out.to(batch.input_ids.device)


def key_token_values(rollouts: list[torch.Tensor], correct: torch.Tensor,
                     pad_token_id: int | None = None) -> dict[int, float]:
    """{token id: k(v)} of one group (module docstring).

    rollouts: G 1-D long tensors, each rollout's response token ids; correct: (G,) bool.
    A group without both right and wrong rollouts gives every token 0.
    """
    correct = torch.as_tensor(correct, dtype=torch.bool)
    if len(rollouts) != len(correct):
        raise InputError(f"{len(rollouts)} rollouts but {len(correct)} outcomes; give one per rollout")
    vocab = torch.unique(torch.cat([r.long() for r in rollouts])) if rollouts else torch.zeros(0, dtype=torch.long)
    n_right, n_wrong = int(correct.sum()), int((~correct).sum())
    if n_right == 0 or n_wrong == 0 or vocab.numel() == 0:
        return {int(v): 0.0 for v in vocab.tolist()}
    index = {int(v): i for i, v in enumerate(vocab.tolist())}
    counts = torch.zeros((len(rollouts), len(index)), dtype=torch.float64)  # (G, U) occurrences
    for g, row in enumerate(rollouts):
        for v, n in zip(*torch.unique(row.long(), return_counts=True)):
            counts[g, index[int(v)]] = float(n)
    present = counts > 0
    a, b = present[correct].sum(0).double(), present[~correct].sum(0).double()  # (U,)
    c, d = n_right - a, n_wrong - b
    strength = (KTAE_ALPHA * fisher_score(a, b, c, d) + KTAE_BETA * information_gain(a, b, c, d))
    direction = _direction(a, b, c, d, counts[correct].sum(0), counts[~correct].sum(0))
    key = strength * direction / (KTAE_ALPHA + KTAE_BETA)
    values = (torch.sigmoid(key) - 0.5) * 2 * KTAE_TOP
    out = {int(v): float(x) for v, x in zip(vocab.tolist(), values.tolist())}
    if pad_token_id is not None and int(pad_token_id) in out:
        out[int(pad_token_id)] = 0.0  # the authors zero their pad token's value
    return out


def fisher_score(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """(U,) float64 F = exp(-2 p) of each 2x2 table [[a, b], [c, d]] (rows: token present /
    absent; columns: right / wrong), p the two-sided Fisher exact p-value; 0 where p = 1 (every
    table with these margins is at least as likely as the observed one)."""
    a, b, c, d = (torch.as_tensor(x, dtype=torch.float64) for x in (a, b, c, d))
    row1, col1 = a + b, a + c
    n = a + b + c + d
    k_lo = torch.clamp(row1 + col1 - n, min=0)
    k_hi = torch.minimum(row1, col1)
    k = torch.arange(int(k_hi.max()) + 1 if k_hi.numel() else 1, dtype=torch.float64)[None]  # (1, K)
    valid = (k >= k_lo[:, None]) & (k <= k_hi[:, None])  # (U, K)

    def log_pmf(x):  # log P(X = x) of the hypergeometric with the tables' margins
        return (_log_comb(col1[:, None], x) + _log_comb((n - col1)[:, None], row1[:, None] - x)
                - _log_comb(n[:, None], row1[:, None]))

    pmf = torch.where(valid, torch.exp(log_pmf(k.expand(len(a), -1).clamp_min(0))), torch.zeros(()))
    observed = torch.exp(log_pmf(a[:, None]))[:, 0]  # (U,)
    as_likely = valid & (pmf <= observed[:, None] * FISHER_TIES)
    p = torch.where(as_likely, pmf, torch.zeros(())).sum(dim=1).clamp(max=1.0)
    every_table = (as_likely == valid).all(dim=1)
    return torch.where(every_table, torch.zeros_like(p), torch.exp(-2 * p))


def _log_comb(n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log C(n, k) for 0 <= k <= n (arguments outside are masked by the caller)."""
    k = torch.minimum(torch.clamp(k, min=0), n)
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def information_gain(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """(U,) float64 IG = H(Y) - H(Y | X) in bits of the outcome Y (right / wrong) given X
    (token present / absent), from the tables' counts; 0 for an empty table."""
    a, b, c, d = (torch.as_tensor(x, dtype=torch.float64) for x in (a, b, c, d))
    n = a + b + c + d

    def h(x, y):  # entropy in bits of the split (x, y); 0 for an empty one
        total = x + y
        p = torch.where(total > 0, x / torch.where(total > 0, total, torch.ones(())), torch.zeros(()))
        return _bits(p) + _bits(1 - p)

    safe = torch.where(n > 0, n, torch.ones(()))
    gain = h(a + c, b + d) - ((a + b) / safe * h(a, b) + (c + d) / safe * h(c, d))
    return torch.where(n > 0, gain, torch.zeros(()))


def _bits(p: torch.Tensor) -> torch.Tensor:
    """-p log2 p, 0 at p = 0."""
    return -torch.special.xlogy(p, p) / math.log(2)


def _direction(a, b, c, d, right_counts: torch.Tensor, wrong_counts: torch.Tensor) -> torch.Tensor:
    """(U,) x(v): the difference of arcsine-root presence rates (Cohen's h without its factor 2,
    as the authors compute it) plus the BM25 term-frequency ratio term."""
    h = (torch.asin(torch.sqrt(torch.clamp(a / (a + c + 1e-10), 0, 1)))
         - torch.asin(torch.sqrt(torch.clamp(b / (b + d + 1e-10), 0, 1))))
    n_right, n_wrong = float(right_counts.sum()), float(wrong_counts.sum())
    average = (n_right + n_wrong) / 2

    def tf(counts, total):
        f = counts / total
        return f * (BM25_K1 + 1) / (f + BM25_K1 * (1 - BM25_B + BM25_B * total / average))

    tf_right, tf_wrong = tf(right_counts, n_right), tf(wrong_counts, n_wrong)
    return h + tf_right / (tf_wrong + 1e-5) - tf_wrong / (tf_right + 1e-5)
