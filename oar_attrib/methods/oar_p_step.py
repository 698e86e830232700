"""Step-level OAR-P: one perturbation per step instead of one per token.

For each step k of a row (`ScoringBatch.step_ids`), every scored token of the step is masked
at once (the pad token by default, `masks` for the others) and I_k is how far the outcome
probe moves, with the probes and the importance of OAR-P (`probes.probe_importance`). Every
token of step k gets I_k (0 outside the steps), so heatmaps, gating and recall read it as a
token method. A row of T reasoning tokens in S steps costs S perturbed forwards instead of T.

`oar_p_step_reference` is the definition: one full forward per step. `oar_p_step` is the
token engine of `oar_p` run on one copy per step: the copy of step k is planned as the copy
of its first scored position t_k (clean-prefix reuse from min(t_k, q_1), the window ends at
q_K + 1, the token budget and the packing of `oar_p`), and its window gets the mask on
the step's other positions too, which all lie after t_k and so inside the window.
"""
from __future__ import annotations

import torch

from . import oar_p as engine
from ..inputs.batch import ScoringBatch
from ..errors import InputError
from ..lm import check_positions, eval_mode, logits_at, model_device, with_cache
from .masks import check_mask, substitute
from .registry import register_method
from .probes import check_probe, probe_importance, probe_sites, probe_values


def _step_masks(batch: ScoringBatch, reachable: torch.Tensor) -> torch.Tensor:
    """(B, L) long: the step id of every reachable scored position, -1 elsewhere."""
    if batch.step_ids is None:
        raise InputError("oar_p_step needs the batch's steps: build the batch with encode_pairs "
                         "(it sets step_ids) or pass ScoringBatch(step_ids=...)")
    return torch.where(reachable, batch.step_ids, torch.full_like(batch.step_ids, -1))


def oar_p_step_reference(model, batch: ScoringBatch, probe: str = "as_mean", *, mask="pad",
                         generator=None) -> torch.Tensor:
    """Step-level OAR-P by brute force: for each row and step, one full forward with every
    scored position of the step masked (`mask`, `generator`: as for `oar_p_reference`; each
    position of a step gets its own "resample" draw, and "delete" drops the whole step).

    batch: B rows of width L with step_ids. Returns (B, L) float32 on the batch's device:
    the step's importance on each of its tokens, 0 elsewhere and on rows without a span.
    """
    check_probe(probe)
    steps = _step_masks(batch, engine.reachable_positions(batch, probe_sites(batch)))
    return engine.masked_reference(model, batch, steps, probe, mask=mask, generator=generator)


# random: mask="resample" draws; overhead_tokens groups the same copies differently
@register_method("oar_p_step", token_budget=True, random=True, speed_params=("overhead_tokens",))
def oar_p_step(model, batch: ScoringBatch, *, probe: str = "as_mean", max_batch_tokens: int | None = None,
               generator: torch.Generator | None = None, progress: bool = False,
               overhead_tokens: int | None = None, mask="pad") -> torch.Tensor:
    """Step-level OAR-P, equal to `oar_p_step_reference` up to float rounding.

    batch: B rows of width L with step_ids (`encode_pairs` sets them).
    max_batch_tokens, overhead_tokens, progress: as for `oar_p` (the budget bounds every
    forward's cached plus new tokens, None sizes it from the device's memory; the overhead
    steers packing, not results). Copies go through the padded path.
    generator: the draws of mask="resample" (one torch.Generator, or B of them); unused by
    the other masks.
    mask: what the step's positions hold (`masks`): "pad" (the paper's), a token id, "zero",
    "mean", "resample" or "delete" (the whole step left out, the rest closing up).
    Returns (B, L) float32 on the batch's device: each step's importance (>= 0, or NaN) on
    every scored token of the step, 0 elsewhere.
    """
    check_probe(probe)
    check_mask(mask)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    reachable = engine.reachable_positions(work, sites)  # (B, L)
    steps = _step_masks(work, reachable)
    # The copy of a step is planned as the copy of its first reachable position.
    first = reachable.clone()
    first[:, 1:] &= steps[:, 1:] != steps[:, :-1]
    ends = (sites.last + 1).tolist()
    rows = sorted(first.any(dim=1).nonzero().flatten().tolist(), key=lambda r: -ends[r])
    max_batch_tokens = engine.batch_budget(model, sites, [ends[row] for row in rows], max_batch_tokens)
    if overhead_tokens is None:
        on_cpu = work.input_ids.device.type == "cpu"
        overhead_tokens = engine.OVERHEAD_TOKENS_CPU if on_cpu else engine.OVERHEAD_TOKENS_ACCELERATOR
    mixed = engine.cache_slots_may_shift(model)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    bar = engine.progress_bar(progress, int(first.sum()))
    with torch.no_grad(), eval_mode(model):
        sub = substitute(model, work, mask, generator)
        for group in engine.row_groups(rows, ends, max_batch_tokens):
            clean = engine.clean_pass(model, work, sites, group, probe, sub.ids, sub.delete)
            chunks = [chunk for index, row in enumerate(group)
                      for chunk in engine.plan_row(index, first[row], sites, row, max_batch_tokens,
                                                   overhead_tokens, int(sub.delete))]
            group_rows = torch.tensor(group, device=out.device)
            group_steps = steps[group_rows]  # (G, L)
            with sub.override(model):
                for forward in engine.pack_chunks(chunks, max_batch_tokens, overhead_tokens, mixed):
                    index, step, importance = _score_steps(model, clean, forward, probe,
                                                           work.pad_token_id, group_steps)
                    out[group_rows] += _scatter(group_steps, index, step, importance)
                    bar.update(len(index))
    bar.close()
    return out.to(batch.input_ids.device)


def _score_steps(model, clean, chunks, probe: str, pad_token_id: int,
                 group_steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched forward of R step copies, each planned at its step's first position, with
    clean.replace (the mask) on every position of the step, or the step left out when
    clean.delete.

    group_steps: (G, L) step ids of the group's rows. Returns (index, step, importance),
    (R,) each: the copy's row within the group, its step id and I_k."""
    device = clean.input_ids.device
    spec = [(c.row, c.start, c.end, t) for c in chunks for t in c.positions]
    row, start, end, pos = torch.tensor(spec, device=device).unbind(dim=1)  # (R,) each
    step = group_steps[row, pos]  # (R,)
    in_step = group_steps[row, :clean.input_ids.shape[1]] == step[:, None]  # (R, W), all >= pos
    inputs, slots, copy_sites = engine.window_inputs(clean, row, start, end, in_step,
                                                     int(start.max()), pad_token_id)
    logits = logits_at(model, copy_sites.positions, **with_cache(model, slots), use_cache=True, **inputs)
    value = probe_values(logits, copy_sites, probe)
    importance = probe_importance(clean.value[row], value, probe)
    return row, step, importance


def _scatter(group_steps: torch.Tensor, index: torch.Tensor, step: torch.Tensor,
             importance: torch.Tensor) -> torch.Tensor:
    """(G, L) float32: copy r's importance on every position of its row index[r] and step
    step[r] (index, step, importance: (R,) each), 0 elsewhere."""
    hit = (group_steps[index] == step[:, None]) & (step[:, None] >= 0)  # (R, L)
    out = torch.zeros(group_steps.shape, dtype=torch.float32, device=group_steps.device)
    out.index_put_((index[:, None].expand_as(hit)[hit], hit.nonzero()[:, 1]),
                   importance[:, None].expand_as(hit)[hit].float())
    return out
