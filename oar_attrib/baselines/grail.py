"""GRAIL baseline scores (METHOD.md section 7): s_t = || dL/de_t * e_t ||_2 with
L = -sum_k log pi(a_k), the gradient-times-input norm of the answer's negative
log-likelihood. The GRAIL weight transform (z-score of log s, clip) is `gating.grail_weights`."""
from __future__ import annotations

import torch

from ..batch import ScoringBatch
from ..lm import (check_positions, eval_mode, input_embeddings, keep_scoreable, logits_at,
                  model_device)
from ..method_registry import register_method
from ..probes import check_probe, probe_sites, probe_values


@register_method("grail", weighting="grail")
def grail(model, batch: ScoringBatch, *, probe: str = "as_mean",
          generator: torch.Generator | None = None) -> torch.Tensor:
    """GRAIL saliency s_t >= 0 of every row, one forward and one backward for the batch.

    batch: B rows of width L. `probe` and `generator` are unused: the target is always the
    answer log-likelihood (the probe name is still checked). Only the embedding gradient is
    taken, so the parameters' `.grad` are never touched.
    Returns (B, L) float32 on the batch's device: s_t on scored positions of rows with an
    answer span, exactly 0 elsewhere.
    """
    check_probe(probe)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    with eval_mode(model), torch.enable_grad():
        embeds = input_embeddings(model, work.input_ids).requires_grad_(True)  # (B, L, D)
        logits = logits_at(model, sites.positions, inputs_embeds=embeds,
                           attention_mask=work.attention_mask)  # (B, K, V)
        # sum_k log pi(a_k) = K * phi, the AS-Joint mean times the span length.
        loglik = probe_values(logits, sites, "as_joint") * sites.valid.sum(dim=1)  # (B,)
        loss = -torch.where(sites.has_answer, loglik, torch.zeros_like(loglik)).sum()
        (grad,) = torch.autograd.grad(loss, embeds)
    saliency = (grad.float() * embeds.detach().float()).norm(dim=-1)  # (B, L)
    return keep_scoreable(saliency, work).to(batch.input_ids.device)
