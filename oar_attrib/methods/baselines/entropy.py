"""Entropy baseline (METHOD.md section 7): I_t = H(pi(. | y_<t)), the policy's entropy at the
step that chose y_t, read from the logits at t - 1.

Two registrations of the same entropies:
- `entropy`, as the high-entropy-minority paper defines its reshaper (Wang et al. 2025,
  "Beyond the 80/20 Rule", arXiv 2506.01939): every response token of every row is scored
  (answer span or not), and its weighting `top_rho` keeps the gradient on the top rho (0.2)
  of the batch's response tokens by entropy, zero on the rest;
- `entropy_reasoning`, the earlier variant: the scored reasoning S of rows with an answer
  span only, gated like OAR (bi-level) unless a weighting is named.

Only the entropies are kept, never the (B, L, V) logits: rows run in groups and, where a
group's logits would pass the token budget (a long row, a large vocabulary), its columns run in
chunks on the key/value cache of the chunks before (the same forward, in pieces), each chunk's
logits reduced to entropies before the next.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from ...defaults import PROBE
from ...inputs.batch import ScoringBatch
from ...models.budget import logit_tokens, row_groups
from ...compat.transformers import with_cache
from ...models.lm import (check_positions, check_token_budget, eval_mode, keep_scoreable, logits_at,
                          model_device, scoreable)
from ..registry import register_method
from ..probes import check_probe, padded_positions

ENTROPY_SLICE = 1 << 21  # logits per float32 temporary of token_entropy (8 MB)


@register_method("entropy", weighting="top_rho", token_budget=True, scope="response", cost="cheap",
                 defaults=("reading", "alignment", "demo", "live"), listed=6)
def entropy(model, batch: ScoringBatch, *, probe: str = PROBE,
            generator: torch.Generator | None = None,
            max_batch_tokens: int | None = None) -> torch.Tensor:
    """Entropy of the next-token distribution that produced each response token (the 80/20
    paper's H_t, every response token of every row).

    batch: B rows of width L, with `response_mask`. `probe` and `generator` are unused (the
    entropy needs no probe and no randomness); the probe name is still checked so that a typo
    is not silent.
    max_batch_tokens: at most this many tokens' logits (rows x columns) in one forward; None:
    sized from the device's memory bound and the vocabulary (`budget.logit_tokens`). Changes
    memory, not results.
    Returns (B, L) float32 on the batch's device: H_t >= 0 on response positions t >= 1
    (position 0 has no preceding logits: 0), exactly 0 elsewhere.
    """
    responses = batch.responses()
    values = _entropy_at(model, batch, probe, max_batch_tokens, lambda work: work.responses().clone())
    return torch.where(responses.to(values.device), values, torch.zeros((), device=values.device))


@register_method("entropy_reasoning", token_budget=True, variant_of="entropy")
def entropy_reasoning(model, batch: ScoringBatch, *, probe: str = PROBE,
                      generator: torch.Generator | None = None,
                      max_batch_tokens: int | None = None) -> torch.Tensor:
    """`entropy` on the scored reasoning positions only (the earlier variant).

    batch: B rows of width L; probe, generator and max_batch_tokens as `entropy`'s.
    Returns (B, L) float32 on the batch's device: H_t >= 0 on scored positions t >= 1 of rows
    with an answer span, exactly 0 elsewhere.
    """
    return keep_scoreable(_entropy_at(model, batch, probe, max_batch_tokens, scoreable), batch)


def _entropy_at(model, batch: ScoringBatch, probe: str, max_batch_tokens: int | None,
                positions) -> torch.Tensor:
    """(B, L) float32 H_t on the batch's device at `positions(work)` (a (B, L) bool of the
    batch on the model's device), 0 elsewhere."""
    check_probe(probe)
    check_positions(model, batch)
    check_token_budget(max_batch_tokens)
    work = batch.to(model_device(model))
    target = positions(work)
    target[:, 0] = False
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=target.device)
    if not target.any():
        return out.to(batch.input_ids.device)
    if max_batch_tokens is None:
        max_batch_tokens = logit_tokens(model, model_device(model), work.input_ids.shape[1])
    with torch.no_grad(), eval_mode(model):
        for rows in row_groups(list(range(work.input_ids.shape[0])), work.lengths.tolist(),
                               max_batch_tokens):
            sub = work.select(rows)
            columns = max(1, max_batch_tokens // len(rows))
            out[rows, :sub.input_ids.shape[1]] = _entropies(model, sub, target[rows, :sub.input_ids.shape[1]],
                                                            columns)
    return out.to(batch.input_ids.device)


def _entropies(model, batch: ScoringBatch, target: torch.Tensor, columns: int) -> torch.Tensor:
    """(G, W) float32 entropies H_t at the True positions of `target` (G, W), 0 elsewhere; the
    forward runs `columns` columns at a time on the cache of the columns before."""
    n_rows, width = target.shape
    wanted = torch.zeros_like(target)
    wanted[:, :-1] = target[:, 1:]  # the logits at t - 1 give H_t
    out = torch.zeros(target.shape, dtype=torch.float32, device=target.device)
    if not wanted.any():
        return out
    stop = int(wanted.any(dim=0).nonzero().max()) + 1  # later columns are never read
    cache = DynamicCache()  # without the config: every layer keeps all its keys
    rows = torch.arange(n_rows, device=target.device)[:, None]
    for start in range(0, stop, columns):
        end = min(start + columns, stop)
        positions, valid = padded_positions(wanted[:, start:end])  # (G, S) each, in the chunk
        position_ids = torch.arange(start, end, device=target.device).expand(n_rows, -1)
        logits = logits_at(model, positions, input_ids=batch.input_ids[:, start:end],
                           attention_mask=batch.attention_mask[:, :end], position_ids=position_ids,
                           **with_cache(model, cache), use_cache=True)  # (G, S, V)
        values = token_entropy(logits)  # (G, S)
        # Indexing by `valid`, not scatter: padding entries repeat a real position.
        hit = rows.expand_as(positions)[valid], positions[valid] + start + 1
        out[hit] = values[valid]
        del logits, values  # before the next chunk's logits, not after them
    return out


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) over the last dim, float32: (..., V) -> (...).

    The float32 temporaries (the softmax and its p log p) are made for ENTROPY_SLICE logits at
    a time, not for the whole tensor: their size then does not depend on how many positions
    the caller passes, whatever the CPU kernels allocate inside softmax (on AVX2 kernels a
    whole-tensor softmax took a third more than on AVX-512 ones). xlogy gives 0 log 0 = 0;
    NaN logits still give NaN."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    rows = max(1, ENTROPY_SLICE // max(flat.shape[1], 1))
    for start in range(0, flat.shape[0], rows):
        p = torch.softmax(flat[start:start + rows].float(), dim=-1)
        out[start:start + rows] = -torch.special.xlogy(p, p).sum(dim=-1)
        del p
    return out.reshape(logits.shape[:-1])
