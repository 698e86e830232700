"""The `verl.plugins` entry point (pyproject.toml): verl imports this module in every process
that imports verl (`VERL_USE_EXTERNAL_PLUGINS`, on by default), which registers the `oar_grpo`
advantage estimator and the `oar_sync` trainer mode there.

verl records a plugin that fails to load at debug level only, so a trainer mode that cannot be
registered (verl installed without its core extra, which brings TransferQueue) says so in one
warning line; the estimator, which needs no more than verl, is registered first all the same.
"""
from __future__ import annotations

import warnings

from . import estimator  # noqa: F401  (registers oar_grpo)

try:
    from . import trainer  # noqa: F401  (registers oar_sync)
except ImportError as err:
    warnings.warn(f"oar-attrib: the oar_sync trainer mode is not registered ({err}); install "
                  "'oar-attrib[verl]', which brings verl's core extra", stacklevel=1)
