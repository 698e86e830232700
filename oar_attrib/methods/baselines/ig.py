"""Integrated Gradients baseline (METHOD.md section 7), with captum's
`LayerIntegratedGradients` on the input-embedding layer.

Target: phi, the AS-Joint log-likelihood of the answer span. Baseline: the same ids with every
scored position replaced by the pad token, so the path moves only the scored embeddings
toward the pad embedding. I_t = | sum over the embedding dim of the attribution |.
Memory: captum runs `internal_batch_size` path points per forward and backward; by default
the rows are grouped and the path points per forward chosen so that a forward holds at most a
token budget sized from the memory bound (`budget.backward_tokens`), never all B x n_steps
copies at once (13.7 GB for one 300-token trace of a 135M model in float32).
"""
from __future__ import annotations

import torch

from ...inputs.batch import ScoringBatch
from ...budget import backward_tokens, row_groups
from ...errors import InputError
from ...lm import (check_positions, check_token_budget, eval_mode, keep_scoreable, logits_at,
                  model_device, scoreable)
from ..registry import register_method
from ..probes import ProbeSites, check_probe, probe_sites, probe_values


@register_method("ig", token_budget=True)
def ig(model, batch: ScoringBatch, *, probe: str = "as_mean",
       generator: torch.Generator | None = None, n_steps: int = 32,
       internal_batch_size: int | None = None,
       max_batch_tokens: int | None = None) -> torch.Tensor:
    """Integrated-gradients importances of every row.

    batch:               B rows of width L.
    probe, generator:    unused: the target is always phi (`as_joint`) and IG is
                         deterministic (the probe name is still checked).
    n_steps:             points of the Riemann (Gauss-Legendre) path integral.
    internal_batch_size: path points (rows x steps) per forward inside captum, all rows in one
                         call. None: rows are grouped and each forward holds at most
                         `max_batch_tokens` tokens (path points x padded width).
    max_batch_tokens:    tokens of one forward with backward; None: sized from the device's
                         memory bound (`budget.backward_tokens`). Changes memory, not results.
    Returns (B, L) float32 on the batch's device: >= 0 on scored positions of rows with an
    answer span, exactly 0 elsewhere. Parameters' `.grad` are left untouched.
    """
    check_probe(probe)
    check_positions(model, batch)
    check_token_budget(max_batch_tokens)
    if not isinstance(n_steps, int) or n_steps < 1:
        raise InputError(f"n_steps must be an integer >= 1, got {n_steps!r}")
    if internal_batch_size is not None and (not isinstance(internal_batch_size, int)
                                            or internal_batch_size < 1):
        raise InputError(f"internal_batch_size must be an integer >= 1 or None, got "
                         f"{internal_batch_size!r}")
    work = batch.to(model_device(model))
    if internal_batch_size is not None:
        return keep_scoreable(_attributions(model, work, n_steps, internal_batch_size),
                              work).to(batch.input_ids.device)
    if max_batch_tokens is None:
        width = int(probe_sites(work).valid.sum(dim=1).max()) if work.input_ids.numel() else 1
        max_batch_tokens = backward_tokens(model, model_device(model), work.input_ids.shape[1], width)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    for rows in row_groups(list(range(work.input_ids.shape[0])), work.lengths.tolist(),
                           max_batch_tokens):
        sub = work.select(rows)
        # captum runs internal_batch_size // rows path steps per forward, at least one.
        steps = max(1, max_batch_tokens // (len(rows) * sub.input_ids.shape[1]))
        out[rows, :sub.input_ids.shape[1]] = _attributions(model, sub, n_steps, steps * len(rows))
    return keep_scoreable(out, work).to(batch.input_ids.device)


def _attributions(model, batch: ScoringBatch, n_steps: int, internal_batch_size: int) -> torch.Tensor:
    """(B, L) float32 |sum over the embedding dim| of captum's layer IG on every position."""
    from captum.attr import LayerIntegratedGradients  # imported here: only IG needs captum

    sites = probe_sites(batch)
    baseline = torch.where(scoreable(batch), batch.pad_token_id, batch.input_ids)  # (B, L)

    def answer_loglik(input_ids, attention_mask, positions, targets, valid):
        # Called by captum with every tensor tiled (path steps of this forward) along the rows.
        tiled = ProbeSites(positions, targets, valid)
        logits = logits_at(model, positions, input_ids=input_ids, attention_mask=attention_mask)
        return probe_values(logits, tiled, "as_joint")  # (rows * steps,)

    lig = LayerIntegratedGradients(answer_loglik, model.get_input_embeddings())
    with eval_mode(model), torch.enable_grad():
        attributions = lig.attribute(
            batch.input_ids, baselines=baseline, n_steps=n_steps,
            additional_forward_args=(batch.attention_mask, sites.positions, sites.targets,
                                     sites.valid),
            internal_batch_size=internal_batch_size,
        )  # (B, L, D)
    return attributions.float().sum(dim=-1).abs()
