"""Training for oar-attrib: SFT of the bundled arithmetic model and reshaped GRPO (the `train`
extra: pip install 'oar-attrib[train]').

`OARConfig` and `OARGRPOTrainer` load on first use (PEP 562, `lazy.lazy_exports`), so that
`python -m oar_attrib.training.pretrain` and the `oar` command line do not import TRL.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oar_attrib.lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .config import OARConfig
    from .trainer import OARGRPOTrainer

__all__ = ["OARConfig", "OARGRPOTrainer"]

__getattr__, __dir__ = lazy_exports(__name__, __file__, extras={
    "oar_attrib.training.config": "train", "oar_attrib.training.trainer": "train"})
