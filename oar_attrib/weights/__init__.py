"""From importances to weights: gating settings (`ReshapeSettings`) and the one pipeline
(`score_and_weight`) that `attribute()`, the trainer and the live page call.

Names are imported lazily (PEP 562): the gating math reads `weights.gating` without loading
the pipeline.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ReshapeSettings": "settings",
    "Weighed": "pipeline",
    "score_and_weight": "pipeline",
    "row_seed": "pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
