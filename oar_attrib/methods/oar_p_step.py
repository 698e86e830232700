"""Step-level OAR-P: one perturbation per step instead of one per token.

For each step k of a row (`ScoringBatch.step_ids`), every scored token of the step is masked
at once (the pad token by default, `masks` for the others) and I_k is how far the outcome
probe moves, with the probes and the importance of OAR-P (`probes.probe_importance`). Every
token of step k gets I_k (0 outside the steps), so heatmaps, gating and recall read it as a
token method. A row of T reasoning tokens in S steps costs S perturbed forwards instead of T.

`oar_p_step_reference` is the definition: one full forward per step. `oar_p_step` is the
perturbation engine (`perturb`) with one unit per step: the copy of step k is planned at its
first reachable position t_k (clean-prefix reuse from min(t_k, q_1), the window ends at
q_K + 1, the token budget and the packing of `oar_p`), and masks the step's other positions
too, which all lie after t_k and so inside the window.
"""
from __future__ import annotations

import torch

from ..defaults import PROBE
from ..errors import InputError
from ..inputs.batch import ScoringBatch
from .perturb import masked_reference, perturb, reachable_positions
from .probes import check_probe, probe_sites
from .knobs import OarPStepKnobs
from .registry import register_method


def step_units(batch: ScoringBatch, reachable: torch.Tensor) -> torch.Tensor:
    """(B, L) long: the step id of every reachable scored position, -1 elsewhere."""
    if batch.step_ids is None:
        raise InputError("step-level OAR-P needs the batch's steps: build the batch with "
                         "encode_pairs (it sets step_ids) or pass ScoringBatch(step_ids=...)")
    return torch.where(reachable, batch.step_ids, torch.full_like(batch.step_ids, -1))


def oar_p_step_reference(model, batch: ScoringBatch, probe: str = PROBE, *, mask=OarPStepKnobs.mask,
                         generator=None) -> torch.Tensor:
    """Step-level OAR-P by brute force: for each row and step, one full forward with every
    scored position of the step masked (`mask`, `generator`: as for `oar_p_reference`; each
    position of a step gets its own "resample" draw, and "delete" drops the whole step).

    batch: B rows of width L with step_ids. Returns (B, L) float32 on the batch's device:
    the step's importance on each of its tokens, 0 elsewhere and on rows without a span.
    """
    check_probe(probe)
    steps = step_units(batch, reachable_positions(batch, probe_sites(batch)))
    return masked_reference(model, batch, steps, probe, mask=mask, generator=generator)


# random: mask="resample" draws; overhead_tokens and packing group the same copies differently
@register_method("oar_p_step", token_budget=True, random=True, speed_params=("overhead_tokens", "packing"),
                 knobs=OarPStepKnobs, unit="step", cost="cheap", defaults=("alignment",), listed=3)
def oar_p_step(model, batch: ScoringBatch, *, probe: str = PROBE, max_batch_tokens: int | None = None,
               generator: torch.Generator | None = None, progress: bool = False,
               overhead_tokens: int | None = None, packing: str = "auto",
               mask=OarPStepKnobs.mask) -> torch.Tensor:
    """Step-level OAR-P, equal to `oar_p_step_reference` up to float rounding.

    batch: B rows of width L with step_ids (`encode_pairs` sets them).
    max_batch_tokens, overhead_tokens, packing, progress: as for `oar_p` (the budget bounds
    every forward's cached plus new tokens, None sizes it from the device's memory; the
    overhead and the packing steer speed, not results).
    generator: the draws of mask="resample" (one torch.Generator, or B of them); unused by
    the other masks.
    mask: what the step's positions hold (`masks`): "pad" (the paper's), a token id, "zero",
    "mean", "resample" or "delete" (the whole step left out, the rest closing up).
    Returns (B, L) float32 on the batch's device: each step's importance (>= 0, or NaN) on
    every scored token of the step, 0 elsewhere.
    """
    step_units(batch, batch.scored_mask)  # no steps: refused before any model call
    return perturb(model, batch, step_units, probe=probe, max_batch_tokens=max_batch_tokens,
                   generator=generator, progress=progress, overhead_tokens=overhead_tokens,
                   packing=packing, mask=mask)
