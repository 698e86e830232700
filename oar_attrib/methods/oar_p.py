"""OAR-P: counterfactual perturbation importance of each token (METHOD.md section 4).

For each scored position t, y_t is replaced by the pad token (the attention mask is left as it
is; `mask` picks another substitute, see `masks`) and I_t measures how far the outcome probe
moves: KL(P || P^(t)) for `lt` / `as_mean`, max(phi - phi^(t), 0) for `as_joint`.

`oar_p_reference` is the definition run literally: one full forward per scored token. `oar_p`
is the perturbation engine (`perturb`) with one unit per reachable scored token; the engine's
module docstring lists the exact facts that make it fast.
"""
from __future__ import annotations

import torch

from ..defaults import PROBE
from ..inputs.batch import ScoringBatch
from .perturb import masked_reference, perturb
from .knobs import OarPKnobs
from .registry import register_method


def token_units(batch: ScoringBatch, reachable: torch.Tensor) -> torch.Tensor:
    """(B, L) long: each reachable position its own unit (its index), -1 elsewhere."""
    positions = torch.arange(batch.input_ids.shape[1], device=reachable.device).expand_as(reachable)
    return torch.where(reachable, positions, -1)


def oar_p_reference(model, batch: ScoringBatch, probe: str = PROBE, *, mask=OarPKnobs.mask,
                    generator=None) -> torch.Tensor:
    """OAR-P by brute force: for each row and scored t, a full forward with t masked.

    batch: a ScoringBatch of B rows of width L.
    mask, generator: what a perturbed position holds (`masks`: "pad", a token id, "zero",
    "mean", "resample" drawn with `generator`, "delete").
    Returns (B, L) float32 importances on the batch's device: >= 0 (or NaN) on scored
    positions of rows with an answer span, exactly 0 elsewhere.
    """
    return masked_reference(model, batch, token_units(batch, batch.scored_mask), probe,
                            mask=mask, generator=generator)


# random: mask="resample" draws; overhead_tokens and packing group the same copies differently
@register_method("oar_p", token_budget=True, random=True, speed_params=("overhead_tokens", "packing"),
                 knobs=OarPKnobs, defaults=("alignment", "demo", "api", "live"), listed=2)
def oar_p(model, batch: ScoringBatch, *, probe: str = PROBE,
          max_batch_tokens: int | None = None, generator: torch.Generator | None = None,
          progress: bool = False, overhead_tokens: int | None = None,
          packing: str = "auto", mask=OarPKnobs.mask) -> torch.Tensor:
    """OAR-P importances, equal to `oar_p_reference` up to float rounding.

    batch:            B rows of width L (right-padded).
    max_batch_tokens: at most this many tokens (reused cache + new tokens, summed over rows)
                      in one forward; must be at least the longest row up to its answer.
                      None: sized from the device's free memory and the model's shape
                      (`budget.auto_batch_tokens`: on CPU within `budget.cpu_memory_bound()`).
    generator:        the draws of mask="resample": one torch.Generator, or B of them (row
                      b draws as it would alone); unused by the other masks.
    progress:         show a progress bar over the perturbed copies.
    overhead_tokens:  fixed cost of one forward in tokens, for grouping copies into forwards
                      (default: 16 on CPU, 256 on accelerators). Changes speed, not results.
    packing:          "packed": copies' windows concatenated without padding under a block
                      mask (`oar_p_packed`); "padded": a padded row per copy; "auto": packed
                      on the device types of `perturb.AUTO_PACKED_DEVICES` where the model
                      takes it, padded otherwise. Changes speed, not results.
    mask:             what a perturbed position holds (`masks`): "pad" (the paper's), a token
                      id, "zero", "mean", "resample" or "delete" (the copy's window leaves t
                      out and starts one position earlier, where the first probe site may
                      move).
    Returns (B, L) float32 on the batch's device: >= 0 (or NaN if the model produced NaN) on
    scored positions of rows with an answer span, exactly 0 elsewhere.
    """
    return perturb(model, batch, token_units, probe=probe, max_batch_tokens=max_batch_tokens,
                   generator=generator, progress=progress, overhead_tokens=overhead_tokens,
                   packing=packing, mask=mask)
