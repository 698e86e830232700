"""Random baseline (METHOD.md section 7): uniform importances, the floor every method must
beat."""
from __future__ import annotations

import torch

from ...defaults import PROBE
from ...inputs.batch import ScoringBatch
from ...errors import InputError
from ...models.lm import keep_scoreable
from ..registry import register_method
from ..probes import check_probe


@register_method("random", random=True, cost="cheap", defaults=("alignment", "demo"), listed=7)
def random(model, batch: ScoringBatch, *, probe: str = PROBE,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform [0, 1) importances; the model is not run.

    batch:     B rows of width L.
    generator: source of the numbers, one (B, L) draw; seed it to reproduce. A sequence of B
               generators gives row b the (1, n_b) draw it would get alone from generators[b]
               (n_b its length), so a row's scores do not depend on its batch.
    Returns (B, L) float32 on the batch's device: U[0, 1) on scored positions of rows with an
    answer span, exactly 0 elsewhere.
    """
    check_probe(probe)
    if isinstance(generator, (list, tuple)):
        if len(generator) != batch.input_ids.shape[0]:
            raise InputError(f"{len(generator)} generators for {batch.input_ids.shape[0]} rows; "
                             "pass one generator, or one per row")
        values = torch.zeros(batch.input_ids.shape)
        for b, (n, gen) in enumerate(zip(batch.lengths.tolist(), generator)):
            values[b, :n] = _uniform((1, n), gen, batch.input_ids.device)[0].cpu()
    else:
        values = _uniform(batch.input_ids.shape, generator, batch.input_ids.device)
    return keep_scoreable(values.to(batch.input_ids.device), batch)


def _uniform(shape, generator: torch.Generator | None, device) -> torch.Tensor:
    """U[0, 1) of `shape` drawn on the generator's device (a CPU generator gives the same
    numbers for a CUDA model)."""
    source = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=source)
