"""The importance methods: the registry (`methods.registry`) with every built-in method
registered (`methods.members`: OAR-P token, step and hierarchical, OAR-G, resampling, the
baselines, `none`), the one module callers read names from, and the methods' knobs
(`methods.knobs`).

Names load on first use (PEP 562, `lazy.lazy_exports`), and the first one used imports the
built-in methods, each of which registers itself, so every lookup sees them. Until then nothing
heavy is loaded: the command line builds its method flags from `methods.knobs` (plain
dataclasses) without loading a method, or torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use, after the built-in methods register
    from .registry import (ImportanceFn, MethodSpec, available_methods, cheap_methods, default_methods,
                           get_method, method_spec, ranking_scores, register_method, registered_methods,
                           step_methods, trainable_methods, unregister_method)

__all__ = ["ImportanceFn", "MethodSpec", "available_methods", "cheap_methods", "default_methods", "get_method",
           "method_spec", "ranking_scores", "register_method", "registered_methods", "step_methods",
           "trainable_methods", "unregister_method"]

_export, __dir__ = lazy_exports(__name__, __file__)


def __getattr__(name: str):
    """An export of the registry, once the built-in methods have registered (`members`)."""
    if name in __all__:
        from . import members  # noqa: F401  (registration)
    return _export(name)
