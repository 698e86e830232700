"""Weights at step granularity: gate the steps' importances, give each step's weight to its
tokens, keep the mass over the scored tokens.

Token importances (B, L) are pooled per step (`pool_step_tensor`: sum, mean or max over the
step's tokens, the tensor form of `steps.pool_steps`), a weighting (default the bi-level gate
of METHOD.md section 6) turns each row's step importances into step weights, every token of a
step gets its step's weight, and each row is rescaled so that its weights have mean 1 over its
scored tokens (the sequence's advantage mass is unchanged, as with token gating). Tokens
outside the steps get weight 1. With `oar_p_step` importances are already constant per step.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import InputError, unknown_name
from .gating import bilevel_weights
from ..inputs.steps import STEP_POOLS
from ..defaults import GATING_STEP_POOL

Weighting = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pool_step_tensor(importance: torch.Tensor, step_ids: torch.Tensor,
                     how: str = GATING_STEP_POOL) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step pooled importances.

    importance: (B, L) float; step_ids: (B, L) long, -1 outside steps (`ScoringBatch`).
    Returns (pooled, valid): (B, S) float32 with S the most steps of a row, and (B, S) bool,
    True on the steps a row has. NaN in a step makes that step NaN.
    """
    if how not in STEP_POOLS:
        raise unknown_name("step pooling", how, STEP_POOLS)
    if importance.shape != step_ids.shape:
        raise InputError(f"importance {tuple(importance.shape)} and step_ids "
                         f"{tuple(step_ids.shape)} must have one shape")
    in_step = step_ids >= 0
    n_steps = int(step_ids.max()) + 1 if in_step.any() else 0
    index = step_ids.clamp_min(0)
    values = torch.where(in_step, importance.float(), torch.zeros((), device=importance.device))
    zeros = torch.zeros((importance.shape[0], n_steps), dtype=torch.float32, device=importance.device)
    count = zeros.scatter_add(1, index, in_step.float())
    if how == "max":
        low = torch.where(in_step, values, torch.full_like(values, -float("inf")))
        pooled = zeros.fill_(-float("inf")).scatter_reduce(1, index, low, "amax")
        # NaN must win, as in pool_steps: amax may drop it.
        nan = zeros.scatter_add(1, index, torch.isnan(values).float()) > 0
        pooled = torch.where(nan, float("nan"), pooled)
    else:
        pooled = zeros.scatter_add(1, index, values)
        if how == "mean":
            pooled = pooled / count.clamp_min(1)
    valid = count > 0
    return torch.where(valid, pooled, torch.zeros_like(pooled)), valid


def step_weights(importance: torch.Tensor, scored: torch.Tensor, step_ids: torch.Tensor,
                 how: str = GATING_STEP_POOL, weighting: Weighting | None = None) -> torch.Tensor:
    """(B, L) float32 weights at step granularity (module docstring).

    importance: (B, L) >= 0 on `scored`; scored: (B, L) bool, the rows' gated positions (a
    row with none keeps weight 1); step_ids: (B, L) long, -1 outside steps.
    weighting: (B, S) step importances, (B, S) bool valid -> (B, S) weights; default the
    bi-level gate with its default settings.
    Returns weights constant inside each step, mean 1 over each row's scored step tokens,
    1 elsewhere.
    """
    weighting = weighting or bilevel_weights
    gated = scored & (step_ids >= 0)
    ids = torch.where(gated, step_ids, torch.full_like(step_ids, -1))
    pooled, valid = pool_step_tensor(importance, ids, how)
    if pooled.shape[1] == 0:
        return torch.ones(importance.shape, dtype=torch.float32, device=importance.device)
    per_step = weighting(pooled, valid).float()  # (B, S)
    tokens = per_step.gather(1, ids.clamp_min(0))  # (B, L)
    tokens = torch.where(gated, tokens, torch.zeros_like(tokens))
    n = gated.sum(dim=1, keepdim=True).float()
    mass = tokens.sum(dim=1, keepdim=True)
    scale = torch.where(mass > 0, n / mass.clamp_min(1e-12), torch.ones_like(mass))
    return torch.where(gated, tokens * scale, torch.ones_like(tokens))
