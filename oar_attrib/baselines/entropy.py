"""Entropy baseline (METHOD.md section 7): I_t = H(pi(. | y_<t)), the policy's entropy at the
step that chose y_t, read from the logits at t - 1 of one forward."""
from __future__ import annotations

import torch

from ..batch import ScoringBatch
from ..lm import check_positions, eval_mode, keep_scoreable, logits_at, model_device, scoreable
from ..method_registry import register_method
from ..probes import check_probe, padded_positions


@register_method("entropy")
def entropy(model, batch: ScoringBatch, *, probe: str = "as_mean",
            generator: torch.Generator | None = None) -> torch.Tensor:
    """Entropy of the next-token distribution that produced each scored token.

    batch: B rows of width L. `probe` and `generator` are unused (the entropy needs no probe
    and no randomness); the probe name is still checked so that a typo is not silent.
    Returns (B, L) float32 on the batch's device: H_t >= 0 on scored positions t >= 1 of rows
    with an answer span (position 0 has no preceding logits: 0), exactly 0 elsewhere.
    """
    check_probe(probe)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    target = scoreable(work)
    target[:, 0] = False
    positions, valid = padded_positions(target)  # (B, S) each
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=target.device)
    if not target.any():
        return out.to(batch.input_ids.device)
    with torch.no_grad(), eval_mode(model):
        logits = logits_at(model, positions - 1, input_ids=work.input_ids,
                           attention_mask=work.attention_mask)  # (B, S, V)
        values = torch.cat([token_entropy(part) for part in logits.split(256, dim=1)], dim=1)
    # Indexing by `valid`, not scatter: padding entries repeat a real position.
    rows = torch.arange(positions.shape[0], device=out.device)[:, None].expand_as(positions)
    out[rows[valid], positions[valid]] = values[valid]
    return keep_scoreable(out, work).to(batch.input_ids.device)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) over the last dim, float32: (..., V) -> (...)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # 0 * log 0 = 0; NaN logits still give NaN.
    terms = torch.where(p == 0, torch.zeros((), device=p.device), p * logp)
    return -terms.sum(dim=-1)
