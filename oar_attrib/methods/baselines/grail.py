"""GRAIL baseline scores (METHOD.md section 7): s_t = || dL/de_t * e_t ||_2 with
L = -sum_k log pi(a_k), the gradient-times-input norm of the answer's negative
log-likelihood. The GRAIL weight transform (z-score of log s, clip) is `gating.grail_weights`."""
from __future__ import annotations

import torch

from ...defaults import PROBE
from ...inputs.batch import ScoringBatch
from ...budget import backward_tokens, row_groups
from ...lm import (check_positions, check_token_budget, eval_mode, input_embeddings,
                  keep_scoreable, logits_at, model_device)
from ..registry import register_method
from ..probes import check_probe, probe_sites, probe_values


@register_method("grail", weighting="grail", token_budget=True)
def grail(model, batch: ScoringBatch, *, probe: str = PROBE,
          generator: torch.Generator | None = None,
          max_batch_tokens: int | None = None) -> torch.Tensor:
    """GRAIL saliency s_t >= 0 of every row, one forward and one backward per group of rows.

    batch: B rows of width L. `probe` and `generator` are unused: the target is always the
    answer log-likelihood (the probe name is still checked). Only the embedding gradient is
    taken, so the parameters' `.grad` are never touched.
    max_batch_tokens: at most this many tokens (rows x their padded width) in one forward with
    backward; a longer row goes alone. None: sized from the device's memory bound
    (`budget.backward_tokens`). Changes memory, not results.
    Returns (B, L) float32 on the batch's device: s_t on scored positions of rows with an
    answer span, exactly 0 elsewhere.
    """
    check_probe(probe)
    check_positions(model, batch)
    check_token_budget(max_batch_tokens)
    work = batch.to(model_device(model))
    if max_batch_tokens is None:
        width = int(probe_sites(work).valid.sum(dim=1).max()) if work.input_ids.numel() else 1
        max_batch_tokens = backward_tokens(model, model_device(model), work.input_ids.shape[1], width)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    for rows in row_groups(list(range(work.input_ids.shape[0])), work.lengths.tolist(),
                           max_batch_tokens):
        sub = work.select(rows)
        out[rows, :sub.input_ids.shape[1]] = _saliency(model, sub)
    return keep_scoreable(out, work).to(batch.input_ids.device)


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
