"""The oar-attrib web app (the `web` extra: pip install 'oar-attrib[web]'): runs, traces with
importance heatmaps, recall reports, live attribution. Build it with
`create_app(store_path, model=None)`; serve it with `oar web`.

Names load on first use (PEP 562, `lazy.lazy_exports`), so that `oar_attrib.webapp.cli`
(imported by every `oar` command to register `oar demo` and `oar web`) does not import the web
framework.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oar_attrib.lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .main import create_app
    from .settings import WebSettings

__all__ = ["WebSettings", "create_app"]

__getattr__, __dir__ = lazy_exports(__name__, __file__, extras={"oar_attrib.webapp.main": "web"})
