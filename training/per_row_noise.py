"""OAR-G with one noise generator per row, so that a batch gives every row the importances it
would get on its own (METHOD.md 5).

`oar_attrib.oar_g.oar_g` draws the noise of a whole batch from one generator, so a row's noise
depends on which rows share its batch and on the padded width. Training needs a row's weights
to depend on the row alone (equal on every rank), and running OAR-G one row at a time costs a
forward/backward per completion. This is the same computation, batched, with row b's noise
drawn as `oar_g` would draw it for row b alone: a (1, n_b, D) standard normal from
`generators[b]`, n_b the row's length. It reuses oar_g's own probe and gradient steps.
"""
from __future__ import annotations

from typing import Sequence

import torch

from oar_attrib.batch import ScoringBatch
from oar_attrib.errors import InputError
from oar_attrib.lm import (check_positions, draw_normal, eval_mode, input_embeddings, keep_scoreable,
                           model_device, scoreable)
from oar_attrib.oar_g import _gradient_times_input, _probe_logits
from oar_attrib.probes import check_probe, probe_sites, probe_values


def row_noise(shape: torch.Size, lengths: Sequence[int], generators: Sequence[torch.Generator],
              device, dtype) -> torch.Tensor:
    """(B, L, D) standard normal noise: row b's first lengths[b] positions from generators[b]
    (what a lone row of that length would draw), zero on its padding."""
    noise = torch.zeros(shape, device=device, dtype=dtype)
    for b, (n, gen) in enumerate(zip(lengths, generators)):
        noise[b, :n] = draw_normal((1, n, shape[-1]), gen, device, dtype)[0]
    return noise


def oar_g_per_row(model, batch: ScoringBatch, generators: Sequence[torch.Generator], *,
                  probe: str = "as_mean", noise_std: float = 1e-3) -> torch.Tensor:
    """OAR-G importances (B, L) float32 of `batch`, row b's noise from generators[b].

    Equal, up to float rounding of the batched forward, to `oar_g(model, batch.select([b]),
    probe=probe, noise_std=noise_std, generator=generators[b])` for every row b.
    """
    check_probe(probe)
    check_positions(model, batch)
    if len(generators) != batch.input_ids.shape[0]:
        raise InputError(f"{len(generators)} generators for {batch.input_ids.shape[0]} rows; pass one per row")
    if not noise_std >= 0:
        raise InputError(f"noise_std must be >= 0, got {noise_std!r}")
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    noisy = scoreable(work)[..., None]  # (B, L, 1)
    with eval_mode(model):
        embeds = input_embeddings(model, work.input_ids)  # (B, L, D)
        with torch.no_grad():
            clean = probe_values(_probe_logits(model, embeds, work, sites), sites, probe)
        noise = row_noise(embeds.shape, work.lengths.tolist(), generators, embeds.device, embeds.dtype)
        noise = torch.where(noisy, noise * noise_std, torch.zeros((), dtype=noise.dtype, device=noise.device))
        total = _gradient_times_input(model, embeds, noise, work, sites, clean, probe)  # (B, L)
    return keep_scoreable(total, work).to(batch.input_ids.device)
