"""Registry of weightings: how a method's importances become token weights (METHOD.md 6-7).

A weighting is a plain function

    fn(importance: (B, T) float, mask: (B, T) bool, params: WeightingParams) -> (B, T) float32

with weight 1 off the mask. It registers with `@register_weighting("name")` (in the style of
verl's `register_adv_est`); `get_weighting` raises an error that lists the known names. Each
importance method names its default weighting (`methods.register_method(weighting=...)`);
callers may pick another by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import unknown_name
from .gating import bilevel_weights, entropy_topk_mask, grail_weights
from .. import defaults


@dataclass(frozen=True)
class WeightingParams:
    """Knobs of the registered weightings; each weighting reads the ones it needs.

    tau, beta, w_min: bi-level gating (quantile level, boost strength, floor), METHOD.md 6.
    rho: kept fraction of the top-rho weighting.
    """

    tau: float = defaults.TAU
    beta: float = defaults.BETA
    w_min: float = defaults.W_MIN
    rho: float = defaults.RHO


WeightingFn = Callable[[torch.Tensor, torch.Tensor, WeightingParams], torch.Tensor]


@dataclass(frozen=True)
class WeightingSpec:
    """A registered weighting; `preserves_mass`: weights have mean 1 over each row's mask."""

    name: str
    fn: WeightingFn
    preserves_mass: bool


_WEIGHTINGS: dict[str, WeightingSpec] = {}


def register_weighting(name: str, *, preserves_mass: bool = False) -> Callable[[WeightingFn], WeightingFn]:
    """Decorator: register `fn` as weighting `name`."""

    def wrap(fn: WeightingFn) -> WeightingFn:
        if name in _WEIGHTINGS:
            raise ValueError(f"weighting {name!r} is registered twice; pick another name")
        _WEIGHTINGS[name] = WeightingSpec(name, fn, preserves_mass)
        return fn

    return wrap


def weighting_spec(name: str) -> WeightingSpec:
    if name not in _WEIGHTINGS:
        raise unknown_name("weighting", name, _WEIGHTINGS)
    return _WEIGHTINGS[name]


def get_weighting(name: str) -> WeightingFn:
    return weighting_spec(name).fn


def available_weightings() -> list[str]:
    return sorted(_WEIGHTINGS)


@register_weighting("bilevel", preserves_mass=True)
def bilevel(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams) -> torch.Tensor:
    """OAR's bi-level gate with mass preservation (`gating.bilevel_weights`)."""
    return bilevel_weights(importance, mask, tau=params.tau, beta=params.beta, w_min=params.w_min)


@register_weighting("grail")
def grail(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams) -> torch.Tensor:
    """GRAIL's clipped z-score of log saliency (`gating.grail_weights`); no knobs."""
    return grail_weights(importance, mask)


@register_weighting("top_rho")
def top_rho(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams) -> torch.Tensor:
    """1 on the top-rho fraction of the batch's scored tokens, 0 on the rest
    (`gating.entropy_topk_mask`, the high-entropy-minority baseline)."""
    return entropy_topk_mask(importance, mask, params.rho)


@register_weighting("uniform", preserves_mass=True)
def uniform(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams) -> torch.Tensor:
    """Weight 1 everywhere (plain GRPO: the `none` method's weighting); reads no importance."""
    return torch.ones(importance.shape, dtype=torch.float32, device=importance.device)
