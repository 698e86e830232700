"""Gradient alignment on shared batches (`oar align`): does a credit method give the trainer a
gradient closer to the policy gradient than GRPO's, on the same rollouts?

    from oar_attrib.training.align import AlignSettings, align
    from oar_attrib.reports.align import summarise
    folder = align(AlignSettings(preset="arith-tiny", batches=3, pool_batches=2), "runs/align/x")
    summary = summarise(folder)     # summary["methods"]["oar_g"]["delta_cos"] -> mean, low, high

`align` and the trainer load on first use (`lazy.lazy_exports`), so the command line's parser
imports no torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oar_attrib.lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .run import align
    from .settings import AlignSettings, MethodChoice

__all__ = ["AlignSettings", "MethodChoice", "align"]

__getattr__, __dir__ = lazy_exports(__name__, __file__, extras={"oar_attrib.training.align.run": "train"})
