"""Records of attributed traces: the result type (`TraceAttribution`), the record that is
drawn, exported and stored (`TraceRecord`), the exports and the step view.

Names are imported lazily (PEP 562): the store reads `records.record` without loading the
renderers.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "TraceAttribution": "traces",
    "AttributionBatch": "traces",
    "TraceRecord": "record",
    "write_html": "export",
    "render_html": "export",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
