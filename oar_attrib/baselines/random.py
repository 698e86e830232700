"""Random baseline (METHOD.md section 7): uniform importances, the floor every method must
beat."""
from __future__ import annotations

import torch

from ..batch import ScoringBatch
from ..lm import keep_scoreable
from ..methods import register_method
from ..probes import check_probe


@register_method("random")
def random(model, batch: ScoringBatch, *, probe: str = "as_mean",
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform [0, 1) importances; the model is not run.

    batch:     B rows of width L.
    generator: source of the numbers, one (B, L) draw; seed it to reproduce.
    Returns (B, L) float32 on the batch's device: U[0, 1) on scored positions of rows with an
    answer span, exactly 0 elsewhere.
    """
    check_probe(probe)
    device = generator.device if generator is not None else batch.input_ids.device
    values = torch.rand(batch.input_ids.shape, generator=generator, device=device)
    return keep_scoreable(values.to(batch.input_ids.device), batch)
