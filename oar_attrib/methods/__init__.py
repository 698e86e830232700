"""The importance methods: the registry (`methods.registry`) with every built-in method
registered (probes, OAR-P token, step and hierarchical, OAR-G, resampling, baselines), the one
module callers read names from.

Importing this module imports the built-in members, each of which registers itself with the
registry; the registry imports none of them, so the import graph has no cycle. `none` is
registered here: uniform weights without any model call (plain GRPO), so callers ask its spec
(`MethodSpec.uniform`) rather than compare the name.
"""
from __future__ import annotations

import torch

from . import oar_g, oar_p, oar_p_hier, oar_p_step, resample  # noqa: F401  (registration)
from .baselines import entropy, grail, ig, ktae, random  # noqa: F401  (registration)
from ..defaults import NO_METHOD, PROBE
from ..inputs.batch import ScoringBatch
from .registry import (ImportanceFn, MethodSpec, available_methods, get_method, method_spec,
                       ranking_scores, register_method, registered_methods, trainable_methods,
                       unregister_method)

__all__ = ["ImportanceFn", "MethodSpec", "available_methods", "get_method", "method_spec",
           "ranking_scores", "register_method", "registered_methods", "trainable_methods",
           "unregister_method"]


@register_method(NO_METHOD, weighting="uniform", uniform=True)
def none(model, batch: ScoringBatch, *, probe: str = PROBE, generator=None) -> torch.Tensor:
    """No importance: (B, L) float32 zeros on the batch's device; the model is not run (it may
    be None). Its weighting gives weight 1 everywhere, so advantages are GRPO's."""
    return torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=batch.input_ids.device)
