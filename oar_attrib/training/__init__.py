"""Training for oar-attrib: SFT of the bundled arithmetic model and reshaped GRPO.

`OARConfig` and `OARGRPOTrainer` load on first use, so that `python -m oar_attrib.training.pretrain`
does not import TRL.
"""
_LAZY = {"OARConfig": "oar_attrib.training.config", "OARGRPOTrainer": "oar_attrib.training.trainer"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")


__all__ = list(_LAZY)
