"""Methods that average random draws (`MethodSpec.draws`, e.g. OAR-G's noise draws).

Such a method takes `return_draws`: with True it returns its n per-draw importances (n, B, L)
instead of their mean. Its own mean and the weights pipeline's are both `mean_of_draws`, so a
caller that asks for the draws (to judge how stable the ranking is, `weights.metrics.
split_half_reliability`) gets bit for bit the importances the method returns without them.
"""
from __future__ import annotations

import torch


def mean_of_draws(draws: torch.Tensor) -> torch.Tensor:
    """(B, L) float32 mean of (n, B, L) per-draw importances, summed in draw order (the order
    a method that accumulates its draws one by one sums them in)."""
    total = torch.zeros(draws.shape[1:], dtype=torch.float32, device=draws.device)
    for draw in draws:
        total += draw
    return total / draws.shape[0]
