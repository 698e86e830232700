"""OAR-G with one noise generator per row, so that a batch gives every row the importances it
would get on its own (METHOD.md 5).

`oar_attrib.oar_g.oar_g` draws the noise of a whole batch from one generator, so a row's noise
depends on which rows share its batch and on the padded width. Training needs a row's weights
to depend on the row alone (equal on every rank), and running OAR-G one row at a time costs a
forward/backward per completion. This is the same computation, batched, with row b's noise
drawn as `oar_g` would draw it for row b alone: `oar_g` given one generator per row.
"""
from __future__ import annotations

from typing import Sequence

import torch

from oar_attrib.batch import ScoringBatch
from oar_attrib.oar_g import oar_g


def oar_g_per_row(model, batch: ScoringBatch, generators: Sequence[torch.Generator], *,
                  probe: str = "as_mean", noise_std: float | None = None) -> torch.Tensor:
    """OAR-G importances (B, L) float32 of `batch`, row b's noise from generators[b].

    Equal, up to float rounding of the batched forward, to `oar_g(model, batch.select([b]),
    probe=probe, noise_std=noise_std, generator=generators[b])` for every row b.
    """
    return oar_g(model, batch, probe=probe, noise_std=noise_std, generator=list(generators))
