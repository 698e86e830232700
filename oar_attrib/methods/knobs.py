"""The knobs of the built-in importance methods: one frozen dataclass per method that has any,
each field a keyword of the method's function with its default, help text, parser and, where
analysis reads another value, its analysis default (`registry.knob`).

This is the one place each is written. The method's function takes its default from the field
(`n_noise: int = OarGKnobs.n_noise`: a dataclass field's default is also the class attribute),
the method registers the class (`register_method(..., knobs=OarGKnobs)`, which checks that
every knob is a keyword with that default) and its `analysis_params` are the analysis defaults;
the command line's flags (`--oar-g-n-noise`, `cli.choices.add_method_knobs`) and `oar align`'s
`oar_g:n_noise=8` are made from the same fields.

The classes sit here, not beside each method, because the command line builds its flags from
them when it starts, without loading the methods (and torch with them): this module imports
only the registry, and the masks when a mask is parsed.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from .registry import knob

# The largest OAR-G noise scale: the noise is added to embeddings whose RMS is about 1 or less;
# past this every score saturates to 0 or 1 in float32 (1e30 gave all-0 or all-1 scores).
NOISE_STD_MAX = 100.0


def mask_choice(text: str) -> str | int:
    """An OAR-P mask (`methods.masks`): a mask name, "eos" / "unk" (the tokenizer's token,
    resolved by `attribute`), or a token id."""
    from .masks import MASKS, TOKEN_NAMES

    if text.isdigit():
        return int(text)
    if text in MASKS or text in TOKEN_NAMES:
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(MASKS + TOKEN_NAMES)} "
                                     "or a token id")


def _mask(help_text: str):
    """The mask knob of a perturbation method: the paper's pad token unless told."""
    return knob("pad", help_text, mask_choice)


@dataclass(frozen=True)
class IgKnobs:
    """Integrated gradients (`baselines.ig`)."""

    n_steps: int = knob(32, "integrated gradients: points on the path from the baseline", int)
    internal_batch_size: int | None = knob(None, "integrated gradients: path points per forward (memory)", int)


@dataclass(frozen=True)
class OarGKnobs:
    """OAR-G (`oar_g`). Analysis reads with 8 draws (one draw's ranking is mostly noise on a
    real model: seed-to-seed Spearman -0.08 to 0.77 on SmolLM2, 8 draws 0.93-0.96); training
    keeps the paper's 1."""

    n_noise: int = knob(1, "OAR-G: noise draws averaged", int, analysis=8)
    noise_std: float | None = knob(None, "OAR-G: noise scale (default: 0.1 x the RMS of the row's embeddings)",
                                   float, bounds=(None, NOISE_STD_MAX), setting="noise_std")


@dataclass(frozen=True)
class ResampleKnobs:
    """Resampling (`resample`)."""

    n_samples: int = knob(8, "resample: continuations per side and step", int)


@dataclass(frozen=True)
class OarPKnobs:
    """Token-level OAR-P (`oar_p`)."""

    mask: str | int = _mask("OAR-P: what a perturbed token becomes: pad (the paper's), eos or unk (the "
                            "tokenizer's), a token id, zero or mean (embedding), resample, delete")


@dataclass(frozen=True)
class OarPStepKnobs:
    """Step-level OAR-P (`oar_p_step`)."""

    mask: str | int = _mask("step-level OAR-P: what a step's tokens become (as --oar-p-mask)")


@dataclass(frozen=True)
class OarPHierKnobs:
    """Hierarchical OAR-P (`oar_p_hier`)."""

    top_steps: int = knob(3, "hierarchical OAR-P: steps per trace whose tokens are scored exactly (by count)",
                          int)
    top_mass: float | None = knob(None, "hierarchical OAR-P: choose steps by mass instead, the fewest largest "
                                  "carrying this share (0-1] of the trace's step importance", float,
                                  bounds=(None, 1.0))
    mask: str | int = _mask("hierarchical OAR-P: what a perturbed step or token becomes (as --oar-p-mask)")


# The built-in methods' knobs by method name, in the order the command line lists their flags:
# what it reads before any method is loaded. Each method registers the same class
# (tests/methods/test_registry_knobs.py holds the two to agree).
KNOBS: dict[str, type] = {"ig": IgKnobs, "oar_g": OarGKnobs, "resample": ResampleKnobs, "oar_p": OarPKnobs,
                          "oar_p_step": OarPStepKnobs, "oar_p_hier": OarPHierKnobs}
