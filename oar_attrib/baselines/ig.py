"""Integrated Gradients baseline (METHOD.md section 7), with captum's
`LayerIntegratedGradients` on the input-embedding layer.

Target: phi, the AS-Joint log-likelihood of the answer span. Baseline: the same ids with every
scored position replaced by the pad token, so the path moves only the scored embeddings
toward the pad embedding. I_t = | sum over the embedding dim of the attribution |.
"""
from __future__ import annotations

import torch

from ..batch import ScoringBatch
from ..lm import check_positions, eval_mode, keep_scoreable, logits_at, model_device, scoreable
from ..method_registry import register_method
from ..probes import ProbeSites, check_probe, probe_sites, probe_values


@register_method("ig")
def ig(model, batch: ScoringBatch, *, probe: str = "as_mean",
       generator: torch.Generator | None = None, n_steps: int = 32,
       internal_batch_size: int | None = None) -> torch.Tensor:
    """Integrated-gradients importances of every row.

    batch:               B rows of width L.
    probe, generator:    unused: the target is always phi (`as_joint`) and IG is
                         deterministic (the probe name is still checked).
    n_steps:             points of the Riemann (Gauss-Legendre) path integral.
    internal_batch_size: rows per forward inside captum (default: all B * n_steps at once);
                         lower it for long traces.
    Returns (B, L) float32 on the batch's device: >= 0 on scored positions of rows with an
    answer span, exactly 0 elsewhere. Parameters' `.grad` are left untouched.
    """
    from captum.attr import LayerIntegratedGradients  # imported here: only IG needs captum

    check_probe(probe)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    baseline = torch.where(scoreable(work), work.pad_token_id, work.input_ids)  # (B, L)

    def answer_loglik(input_ids, attention_mask, positions, targets, valid):
        # Called by captum with every tensor tiled n_steps times along the rows.
        tiled = ProbeSites(positions, targets, valid)
        logits = logits_at(model, positions, input_ids=input_ids, attention_mask=attention_mask)
        return probe_values(logits, tiled, "as_joint")  # (B * n_steps,)

    lig = LayerIntegratedGradients(answer_loglik, model.get_input_embeddings())
    with eval_mode(model), torch.enable_grad():
        attributions = lig.attribute(
            work.input_ids, baselines=baseline, n_steps=n_steps,
            additional_forward_args=(work.attention_mask, sites.positions, sites.targets,
                                     sites.valid),
            internal_batch_size=internal_batch_size,
        )  # (B, L, D)
    values = attributions.float().sum(dim=-1).abs()
    return keep_scoreable(values, work).to(batch.input_ids.device)
