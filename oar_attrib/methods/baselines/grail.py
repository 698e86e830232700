"""GRAIL baseline scores (METHOD.md section 7): s_t = || dL/de_t * e_t ||_2 with
L = -sum_k log pi(a_k), the gradient-times-input norm of the answer's negative
log-likelihood (Pala, Toh and Poria 2026, "GRAIL: Gradient-Reweighted Advantages for
Reinforcement Learning with Verifiable Rewards", arXiv 2606.04889).

Three registrations of the same saliency, differing in where it is read and how it becomes
weights (`weightings`):
- `grail`, as published: scored on every response token (its z-score runs over the whole
  response), weighted on wrong rollouts only (A_i <= 0), answer tokens at the ceiling 5
  (`gating.grail_published_weights`);
- `grail_all`: the same on every rollout (the authors' 'both' symmetry);
- `grail_reasoning`: the earlier variant, scored and z-scored on the reasoning S only, every
  row, no ceiling on the answer (`gating.grail_weights`).
"""
from __future__ import annotations

import torch

from ...defaults import PROBE
from ...inputs.batch import ScoringBatch
from ...models.budget import row_groups
from ...models.lm import (check_positions, check_token_budget, eval_mode, input_embeddings,
                  keep_scoreable, logits_at, model_device)
from ..registry import register_method
from ..probes import backward_budget, check_probe, probe_sites, probe_values


@register_method("grail", weighting="grail", token_budget=True, scope="response", cost="cheap",
                 defaults=("alignment",), listed=5)
def grail(model, batch: ScoringBatch, *, probe: str = PROBE,
          generator: torch.Generator | None = None,
          max_batch_tokens: int | None = None) -> torch.Tensor:
    """GRAIL saliency s_t >= 0 of every response token of the rows with an answer span, one
    forward and one backward per group of rows.

    batch: B rows of width L, with `response_mask`. `probe` and `generator` are unused: the
    target is always the answer log-likelihood (the probe name is still checked). Only the
    embedding gradient is taken, so the parameters' `.grad` are never touched.
    max_batch_tokens: at most this many tokens (rows x their padded width) in one forward with
    backward; a longer row goes alone. None: sized from the device's memory bound
    (`budget.backward_tokens`). Changes memory, not results.
    Returns (B, L) float32 on the batch's device: s_t on the response positions of rows with
    an answer span, exactly 0 elsewhere.
    """
    keep = batch.responses() & batch.has_answer[:, None]
    values = _saliencies(model, batch, probe, max_batch_tokens)
    return torch.where(keep.to(values.device), values, torch.zeros((), device=values.device))


@register_method("grail_all", weighting="grail_all", token_budget=True, scope="response",
                 variant_of="grail")
def grail_all(model, batch: ScoringBatch, *, probe: str = PROBE,
              generator: torch.Generator | None = None,
              max_batch_tokens: int | None = None) -> torch.Tensor:
    """`grail`'s saliency; its weighting reweights every rollout, right ones too."""
    return grail(model, batch, probe=probe, generator=generator, max_batch_tokens=max_batch_tokens)


@register_method("grail_reasoning", weighting="grail_reasoning", token_budget=True,
                 variant_of="grail")
def grail_reasoning(model, batch: ScoringBatch, *, probe: str = PROBE,
                    generator: torch.Generator | None = None,
                    max_batch_tokens: int | None = None) -> torch.Tensor:
    """`grail`'s saliency on the scored reasoning positions only (the earlier variant).

    Returns (B, L) float32 on the batch's device: s_t on scored positions of rows with an
    answer span, exactly 0 elsewhere."""
    return keep_scoreable(_saliencies(model, batch, probe, max_batch_tokens), batch)


def _saliencies(model, batch: ScoringBatch, probe: str, max_batch_tokens: int | None) -> torch.Tensor:
    """(B, L) float32 s_t of every position (row groups within the budget), on the batch's
    device."""
    check_probe(probe)
    check_positions(model, batch)
    check_token_budget(max_batch_tokens)
    work = batch.to(model_device(model))
    max_batch_tokens = backward_budget(model, work, max_batch_tokens)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    for rows in row_groups(list(range(work.input_ids.shape[0])), work.lengths.tolist(),
                           max_batch_tokens):
        sub = work.select(rows)
        out[rows, :sub.input_ids.shape[1]] = _saliency(model, sub)
    return out.to(batch.input_ids.device)


def _saliency(model, batch: ScoringBatch) -> torch.Tensor:
    """(B, L) float32 ||dL/de_t * e_t||_2 of every position, one forward and backward."""
    sites = probe_sites(batch)
    with eval_mode(model), torch.enable_grad():
        embeds = input_embeddings(model, batch.input_ids).requires_grad_(True)  # (B, L, D)
        logits = logits_at(model, sites.positions, inputs_embeds=embeds,
                           attention_mask=batch.attention_mask)  # (B, K, V)
        # sum_k log pi(a_k) = K * phi, the AS-Joint mean times the span length.
        loglik = probe_values(logits, sites, "as_joint") * sites.valid.sum(dim=1)  # (B,)
        loss = -torch.where(sites.has_answer, loglik, torch.zeros_like(loglik)).sum()
        (grad,) = torch.autograd.grad(loss, embeds)
    return (grad.float() * embeds.detach().float()).norm(dim=-1)  # (B, L)
