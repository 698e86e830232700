"""Registry of importance methods, found by name.

An importance method is a plain function

    fn(model, batch: ScoringBatch, *, probe: str = "as_mean", generator=None, **params)
        -> torch.Tensor  # (B, L) float32, >= 0 on batch.scored_mask, exactly 0 elsewhere

Rows with no answer span (batch.has_answer False) get all zeros. Methods register with
`@register_method("name")`; `get_method` raises an error that lists the known names.
"""
from __future__ import annotations

from typing import Callable

from .errors import unknown_name

ImportanceFn = Callable[..., "torch.Tensor"]  # noqa: F821

_METHODS: dict[str, ImportanceFn] = {}


def register_method(name: str) -> Callable[[ImportanceFn], ImportanceFn]:
    def wrap(fn: ImportanceFn) -> ImportanceFn:
        if name in _METHODS:
            raise ValueError(f"importance method {name!r} is registered twice")
        _METHODS[name] = fn
        return fn

    return wrap


def _load_builtin() -> None:
    # Imported for their registration side effect; kept lazy so that importing this module
    # stays cheap and free of cycles.
    from . import oar_p, oar_g, oar_p_step  # noqa: F401
    from .baselines import entropy, grail, ig, random  # noqa: F401


def get_method(name: str) -> ImportanceFn:
    _load_builtin()
    if name not in _METHODS:
        raise unknown_name("importance method", name, _METHODS)
    return _METHODS[name]


def available_methods() -> list[str]:
    _load_builtin()
    return sorted(_METHODS)
