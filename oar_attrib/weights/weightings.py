"""Registry of weightings: how a method's importances become token weights (METHOD.md 6-7).

A weighting is a plain function

    fn(importance: (B, T) float, mask: (B, T) bool, params: WeightingParams,
       batch: ScoringBatch | None = None) -> (B, T) float32

with weight 1 off the mask. `batch` is the scored batch (on the CPU, the importances' layout),
for weightings that read more than the scores: the answer span and each row's outcome
(GRAIL's published transform); the others ignore it. An `additive` weighting returns a term
b_t added to the advantage instead (A_{i,t} = A_i + b_t: KTAE's), 0 off the mask; the weights
are then 1. It registers with `@register_weighting("name")` (in the style of verl's
`register_adv_est`); `get_weighting` raises an error that lists the known names. Each
importance method names its default weighting (`methods.register_method(weighting=...)`);
callers may pick another by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import InputError, unknown_name
from ..inputs.batch import ScoringBatch
from .gating import bilevel_weights, entropy_topk_mask, grail_published_weights, grail_weights
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


WeightingFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class WeightingSpec:
    """A registered weighting; `preserves_mass`: weights have mean 1 over each row's mask;
    `additive`: it gives a term added to the advantage, not a weight (module docstring);
    `needs_batch`: it reads the batch (segments, outcomes), so step granularity cannot pool it;
    `batch_level`: its cut-off is taken over every row of the batch at once (top_rho), so the
    rows a trainer would skip still count."""

    name: str
    fn: WeightingFn
    preserves_mass: bool
    additive: bool = False
    needs_batch: bool = False
    batch_level: bool = False


_WEIGHTINGS: dict[str, WeightingSpec] = {}


def register_weighting(name: str, *, preserves_mass: bool = False, additive: bool = False,
                       needs_batch: bool = False, batch_level: bool = False
                       ) -> Callable[[WeightingFn], WeightingFn]:
    """Decorator: register `fn` as weighting `name`."""

    def wrap(fn: WeightingFn) -> WeightingFn:
        if name in _WEIGHTINGS:
            raise ValueError(f"weighting {name!r} is registered twice; pick another name")
        _WEIGHTINGS[name] = WeightingSpec(name, fn, preserves_mass, additive, needs_batch, batch_level)
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
def bilevel(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
            batch: ScoringBatch | None = None) -> torch.Tensor:
    """OAR's bi-level gate with mass preservation (`gating.bilevel_weights`)."""
    return bilevel_weights(importance, mask, tau=params.tau, beta=params.beta, w_min=params.w_min)


def _grail(importance: torch.Tensor, mask: torch.Tensor, batch: ScoringBatch | None,
           wrong_only: bool) -> torch.Tensor:
    """GRAIL's published weights over the response positions `mask` (`gating.
    grail_published_weights`); with `wrong_only`, rows whose advantage is > 0 keep weight 1 on
    their reasoning (the authors' grail_rollout_symmetry 'wrong': a rollout with A_i <= 0 is
    reweighted; without advantages, in analysis, every row is, as in their code)."""
    if batch is None:
        raise InputError("GRAIL's published weighting reads the batch's answer span and outcomes; "
                         "call it through weights.score_and_weight (or use weighting='grail_reasoning')")
    outcomes = batch.outcomes
    fallback = ~batch.has_answer
    if wrong_only and outcomes is not None and outcomes.advantage is not None:
        fallback = fallback | (outcomes.advantage.to(fallback.device) > 0)
    return grail_published_weights(importance, mask, batch.answer_mask & mask, batch.scored_mask & mask,
                                   fallback)


@register_weighting("grail", needs_batch=True)
def grail(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
          batch: ScoringBatch | None = None) -> torch.Tensor:
    """GRAIL as published: its clipped z-score of log saliency on wrong rollouts' reasoning, the
    answer tokens at the ceiling (`_grail`); no knobs."""
    return _grail(importance, mask, batch, wrong_only=True)


@register_weighting("grail_all", needs_batch=True)
def grail_all(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
              batch: ScoringBatch | None = None) -> torch.Tensor:
    """`grail` on every rollout, right ones too (the authors' symmetry 'both')."""
    return _grail(importance, mask, batch, wrong_only=False)


@register_weighting("grail_reasoning")
def grail_reasoning(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
                    batch: ScoringBatch | None = None) -> torch.Tensor:
    """GRAIL's clipped z-score of log saliency over the scored positions only, every row, no
    answer ceiling (`gating.grail_weights`, the earlier variant); no knobs."""
    return grail_weights(importance, mask)


@register_weighting("top_rho", batch_level=True)
def top_rho(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
            batch: ScoringBatch | None = None) -> torch.Tensor:
    """1 on the top-rho fraction of the batch's masked tokens, 0 on the rest
    (`gating.entropy_topk_mask`, the high-entropy-minority reshaper)."""
    return entropy_topk_mask(importance, mask, params.rho)


@register_weighting("additive", additive=True)
def additive(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
             batch: ScoringBatch | None = None) -> torch.Tensor:
    """The signed scores themselves as a term added to the advantage on the mask, 0 off it
    (KTAE: A_{i,t} = A_i + value of token y_{i,t})."""
    return torch.where(mask, importance.float(), torch.zeros((), device=importance.device))


@register_weighting("uniform", preserves_mass=True)
def uniform(importance: torch.Tensor, mask: torch.Tensor, params: WeightingParams,
            batch: ScoringBatch | None = None) -> torch.Tensor:
    """Weight 1 everywhere (plain GRPO: the `none` method's weighting); reads no importance."""
    return torch.ones(importance.shape, dtype=torch.float32, device=importance.device)
