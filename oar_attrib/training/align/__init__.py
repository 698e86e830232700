"""Gradient alignment on shared batches (`oar align`): does a credit method give the trainer a
gradient closer to the policy gradient than GRPO's, on the same rollouts?

    from oar_attrib.training.align import AlignSettings, align
    from oar_attrib.analysis.align import summarise
    folder = align(AlignSettings(preset="arith-tiny", batches=3, pool_batches=2), "runs/align/x")
    summary = summarise(folder)     # summary["methods"]["oar_g"]["delta_cos"] -> mean, low, high

`align` and the trainer load on first use, so the command line's parser imports no torch.
"""
_LAZY = {"align": "oar_attrib.training.align.run", "AlignSettings": "oar_attrib.training.align.settings",
         "MethodChoice": "oar_attrib.training.align.settings"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'training.align' has no attribute {name!r}")


__all__ = list(_LAZY)
