"""Records of attributed traces: the result type (`TraceAttribution`), the record that is
drawn, exported and stored (`TraceRecord`), the exports and the step view.

Names load on first use (PEP 562, `lazy.lazy_exports`): the store reads `records.record`
without loading the renderers or torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .export import render_html, write_html
    from .record import TraceRecord
    from .traces import AttributionBatch, TraceAttribution

__all__ = ["AttributionBatch", "TraceAttribution", "TraceRecord", "render_html", "write_html"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
