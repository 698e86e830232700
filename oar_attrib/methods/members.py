"""The built-in importance methods, imported so that each registers itself: OAR-P token, step
and hierarchical, OAR-G, resampling, the baselines, and `none` (registered here).

`methods` imports this module when one of its registry names is first used, so every lookup
sees the built-in methods; the registry imports none of them, so the import graph has no
cycle. `none` is uniform weights without any model call (plain GRPO), so callers ask its spec
(`MethodSpec.uniform`) rather than compare the name.
"""
from __future__ import annotations

import torch

from . import oar_g, oar_p, oar_p_hier, oar_p_step, resample  # noqa: F401  (registration)
from .baselines import entropy, grail, ig, ktae, random  # noqa: F401  (registration)
from ..defaults import NO_METHOD, PROBE
from ..inputs.batch import ScoringBatch
from .registry import register_method


@register_method(NO_METHOD, weighting="uniform", uniform=True, cost="cheap", defaults=("alignment",), listed=0)
def none(model, batch: ScoringBatch, *, probe: str = PROBE, generator=None) -> torch.Tensor:
    """No importance: (B, L) float32 zeros on the batch's device; the model is not run (it may
    be None). Its weighting gives weight 1 everywhere, so advantages are GRPO's."""
    return torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
