"""From importances to weights: gating settings (`ReshapeSettings`) and the one pipeline
(`score_and_weight`) that `attribute()`, the trainer and the live page call.

Names load on first use (PEP 562, `lazy.lazy_exports`): the command line reads the settings
and the gating math reads `weights.gating` without loading the pipeline (and torch with it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .pipeline import Weighed, row_seed, score_and_weight
    from .settings import ReshapeSettings

__all__ = ["ReshapeSettings", "Weighed", "row_seed", "score_and_weight"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
