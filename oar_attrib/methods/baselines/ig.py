"""Integrated Gradients baseline (METHOD.md section 7), with captum's
`LayerIntegratedGradients` on the input-embedding layer.

Target: phi, the AS-Joint log-likelihood of the answer span. Baseline: the same ids with every
scored position replaced by the pad token, so the path moves only the scored embeddings
toward the pad embedding. I_t = | sum over the embedding dim of the attribution |.
Memory: captum runs `internal_batch_size` path points per forward and backward; by default
the rows are grouped and the path points per forward chosen so that a forward holds at most a
token budget sized from the memory bound (`budget.backward_tokens`), never all B x n_steps
copies at once (13.7 GB for one 300-token trace of a 135M model in float32).
Speed: the columns before a row group's first scored position (the prompt, with its chat
template) are the same at every point of the path, so their key/value cache is computed once
and every path point runs only the columns after them (a prompt of P tokens and a response of
R cost P + n_steps * R token-forwards instead of n_steps * (P + R)); models whose cache is not
a plain key/value cache run whole rows.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from ...defaults import PROBE
from ...inputs.batch import ScoringBatch
from ...models.budget import row_groups
from ...errors import InputError
from ...compat.transformers import plain_kv, with_cache
from ...models.lm import (check_positions, check_token_budget, eval_mode, keep_scoreable, logits_at,
                          model_device, scoreable)
from ..knobs import IgKnobs
from ..registry import register_method
from ..probes import backward_budget, ProbeSites, check_probe, probe_sites, probe_values


# internal_batch_size splits the same path points; reuse_prefix reads the prompt from a cache
@register_method("ig", token_budget=True, speed_params=("internal_batch_size", "reuse_prefix"), knobs=IgKnobs)
def ig(model, batch: ScoringBatch, *, probe: str = PROBE,
       generator: torch.Generator | None = None, n_steps: int = IgKnobs.n_steps,
       internal_batch_size: int | None = IgKnobs.internal_batch_size,
       max_batch_tokens: int | None = None, reuse_prefix: bool = True) -> torch.Tensor:
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
    reuse_prefix:        run the path on the cache of the columns before the first scored
                         position (True) or on whole rows. Changes speed, not results.
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
        return keep_scoreable(_attributions(model, work, n_steps, internal_batch_size,
                                            reuse_prefix), work).to(batch.input_ids.device)
    max_batch_tokens = backward_budget(model, work, max_batch_tokens)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    for rows in row_groups(list(range(work.input_ids.shape[0])), work.lengths.tolist(),
                           max_batch_tokens):
        sub = work.select(rows)
        # captum runs internal_batch_size // rows path steps per forward, at least one.
        steps = max(1, max_batch_tokens // (len(rows) * sub.input_ids.shape[1]))
        out[rows, :sub.input_ids.shape[1]] = _attributions(model, sub, n_steps, steps * len(rows),
                                                           reuse_prefix)
    return keep_scoreable(out, work).to(batch.input_ids.device)


def shared_prefix(batch: ScoringBatch, sites: ProbeSites) -> int:
    """S: the columns [0, S) that no row scores and no probe reads, the same at every point of
    the path in every row (rows are right-padded, so they are real tokens of every row)."""
    scored = scoreable(batch)  # (B, L)
    if not bool(scored.any()):
        return 0
    first_scored = int(scored.float().argmax(dim=1)[scored.any(dim=1)].min())
    first_site = int(sites.positions[sites.valid].min()) if bool(sites.valid.any()) else first_scored
    return max(0, min(first_scored, first_site, int(batch.lengths.min())))


def _prefix_kv(model, batch: ScoringBatch, split: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Per layer the (B, H, S, D) keys and values of the columns [0, S), without autograd;
    None when S is 0 or the model's cache is not a plain key/value cache."""
    if split < 1:
        return None
    cache = DynamicCache()  # without the config: every layer keeps all its keys
    with torch.no_grad():
        model(input_ids=batch.input_ids[:, :split], attention_mask=batch.attention_mask[:, :split],
              **with_cache(model, cache), use_cache=True)
    return plain_kv(cache, split)


def _attributions(model, batch: ScoringBatch, n_steps: int, internal_batch_size: int,
                  reuse_prefix: bool = True) -> torch.Tensor:
    """(B, L) float32 |sum over the embedding dim| of captum's layer IG on every position;
    with `reuse_prefix` the path runs on the cache of the shared prefix (the same values up
    to float rounding, 0 on the prefix)."""
    from captum.attr import LayerIntegratedGradients  # imported here: only IG needs captum

    sites = probe_sites(batch)
    width = batch.input_ids.shape[1]
    with eval_mode(model):
        kv = _prefix_kv(model, batch, shared_prefix(batch, sites)) if reuse_prefix else None
    split = kv[0][0].shape[-2] if kv else 0
    ids = batch.input_ids[:, split:]  # (B, L - S)
    baseline = torch.where(scoreable(batch), batch.pad_token_id, batch.input_ids)[:, split:]
    columns = torch.arange(split, width, device=ids.device)[None]  # (1, L - S)

    def answer_loglik(input_ids, attention_mask, positions, targets, valid, *prefix):
        # Called by captum with every tensor tiled (path steps of this forward) along the rows;
        # `prefix` holds each layer's keys then values, tiled the same way.
        tiled = ProbeSites(positions - split, targets, valid)
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
        if prefix:
            half = len(prefix) // 2
            cache = DynamicCache(ddp_cache_data=list(zip(prefix[:half], prefix[half:])))
            inputs.update(position_ids=columns.expand(input_ids.shape[0], -1), use_cache=True,
                          **with_cache(model, cache))
        logits = logits_at(model, tiled.positions, **inputs)
        return probe_values(logits, tiled, "as_joint")  # (rows * steps,)

    prefix = tuple(keys for keys, _ in kv) + tuple(values for _, values in kv) if kv else ()
    lig = LayerIntegratedGradients(answer_loglik, model.get_input_embeddings())
    with eval_mode(model), torch.enable_grad():
        attributions = lig.attribute(
            ids, baselines=baseline, n_steps=n_steps,
            additional_forward_args=(batch.attention_mask, sites.positions, sites.targets,
                                     sites.valid, *prefix),
            internal_batch_size=internal_batch_size,
        )  # (B, L - S, D)
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=ids.device)
    out[:, split:] = attributions.float().sum(dim=-1).abs()
    return out
