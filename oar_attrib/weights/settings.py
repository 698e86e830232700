"""`ReshapeSettings`: every knob between importances and weights, with help text, checked on
construction; the one place their defaults are used from (the numbers are in `defaults`).

`OARConfig`'s generated fields (`config_fields`) and the `oar attribute` gating flags
(`commands.add_dataclass_args`) are generated from these fields, help text included, so a knob is written
once. Errors name the field and the allowed values.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import defaults
from ..errors import InputError, UnknownNameError
from ..inputs.spans import ANSWER_FORMATS
from ..inputs.steps import STEP_POOLS

if TYPE_CHECKING:
    from .weightings import WeightingParams


class SettingError(InputError):
    """A `ReshapeSettings` value that cannot work; `field` names the setting."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.field = name


class UnknownSettingError(SettingError, UnknownNameError):
    """A setting naming a method, probe, weighting or format that does not exist."""


def _help(text: str, config: str, generated: bool = True) -> dict:
    """Field metadata: help text, and the OARConfig field it is read from: generated there from
    this field (`config_fields`), or, with `generated` false, GRPOConfig's own (`seed`)."""
    return {"help": text, "config": config, "generated": generated}


@dataclass(frozen=True)
class ReshapeSettings:
    """How a batch's importances are computed and turned into weights (METHOD.md 3, 6-7)."""

    method: str = field(default="oar_g", metadata=_help(
        "Importance method whose weights reshape the advantages: a registered method "
        "(oar_attrib.available_methods() lists them, those registered with "
        "oar_attrib.register_method included; an unknown name is refused with the list), or "
        "'none' for plain GRPO (uniform weights, no model call).", "oar_method"))
    probe: str = field(default=defaults.PROBE, metadata=_help(
        f"Outcome probe: one of {', '.join(defaults.PROBES)} (METHOD.md 3).", "oar_probe"))
    tau: float = field(default=defaults.TAU, metadata=_help(
        "Quantile level in [0, 1] that splits suppression from boosting.", "oar_tau"))
    beta: float = field(default=defaults.BETA, metadata=_help(
        "Boost strength (>= 0) above the tau-quantile.", "oar_beta"))
    w_min: float = field(default=defaults.W_MIN, metadata=_help(
        "w_min in [0, 1]: the floor of the suppression gate below the tau-quantile, applied BEFORE "
        "the mass-preserving rescale to mean 1 over the scored tokens, so final weights can be "
        "below it (METHOD.md 6).", "oar_w_min"))
    rho: float = field(default=defaults.RHO, metadata=_help(
        "Kept fraction in (0, 1] for weighting='top_rho'.", "oar_entropy_rho"))
    weighting: str | None = field(default=None, metadata=_help(
        "How importances become weights: a registered weighting ('bilevel' gates like OAR; 'grail' "
        "is GRAIL's transform; 'top_rho' keeps the top-rho tokens of the local batch at weight 1 "
        "and zeroes the rest). Default: the method's own.", "oar_weighting"))
    granularity: str = field(default=defaults.GRANULARITY, metadata=_help(
        "'token' gates each token's importance; 'step' pools the importances per step (lines, or "
        "sentences of a one-line reasoning), gates the steps and gives each step's weight to its "
        "tokens, mean 1 over the scored tokens.", "oar_granularity"))
    step_pool: str = field(default=defaults.GATING_STEP_POOL, metadata=_help(
        "granularity='step': how a step's token importances pool into one: mean, sum or max "
        "(oar_p_step's are constant per step: all three agree up to sum's length factor).",
        "oar_step_pool"))
    noise_std: float | None = field(default=None, metadata=_help(
        "OAR-G: std (>= 0) of the embedding noise on scored positions; None: 0.1 x the RMS of the "
        "row's scored embeddings (the same in bf16 and fp32).", "oar_noise_std"))
    max_batch_tokens: int | None = field(default=None, metadata=_help(
        "Token budget of one attribution forward: rows are grouped so that their total length "
        "stays under it, and every method that takes a budget (OAR-P, OAR-G, GRAIL, IG, entropy) "
        "sizes its passes by it. None: each sizes them from the memory bound and the model's shape "
        "(budget.memory_bound: the device's free memory; on CPU min(25% of RAM, 1 GiB)); the row "
        "grouping then uses 16384 tokens on CPU.",
        "oar_max_batch_tokens"))
    answer_format: str = field(default=defaults.ANSWER_FORMAT, metadata=_help(
        f"Answer format the span finder looks for: one of {', '.join(ANSWER_FORMATS)}.", "answer_format"))
    answer_pattern: str | None = field(default=None, metadata=_help(
        "Regex with one capturing group (the answer), for answer_format='regex'.", "answer_pattern"))
    seed: int = field(default=0, metadata=_help(
        "Seed of the random methods' numbers: each row draws from its own generator, seeded from "
        "this and the row's token ids (`weights.row_seed`).", "seed", generated=False))

    def __post_init__(self) -> None:
        # The registries load here, not with the module: the command line builds its flags from
        # these fields without loading torch.
        from ..methods import registered_methods
        from .weightings import available_weightings

        _choice("method", self.method, registered_methods())
        _choice("probe", self.probe, defaults.PROBES)
        if self.weighting is not None:
            _choice("weighting", self.weighting, available_weightings())
        _choice("granularity", self.granularity, defaults.GRANULARITIES)
        _choice("step_pool", self.step_pool, STEP_POOLS)
        _choice("answer_format", self.answer_format, ANSWER_FORMATS)
        if self.answer_format == "regex" and not self.answer_pattern:
            raise SettingError("answer_pattern", "answer_format='regex' needs answer_pattern, a regex with one group")
        for name, ok, rule in self._ranges():
            if not ok:
                raise SettingError(name, f"{name}={getattr(self, name)!r} must be {rule}")

    def _ranges(self) -> list[tuple[str, bool, str]]:
        return [
            ("tau", 0.0 <= self.tau <= 1.0, "in [0, 1]"),
            ("beta", self.beta >= 0 and math.isfinite(self.beta), "finite, >= 0"),
            ("w_min", 0.0 <= self.w_min <= 1.0, "in [0, 1]"),
            ("rho", 0.0 < self.rho <= 1.0, "in (0, 1]"),
            ("noise_std", self.noise_std is None or self.noise_std >= 0, "None or >= 0"),
            ("max_batch_tokens", self.max_batch_tokens is None or self.max_batch_tokens >= 1, "None or >= 1"),
        ]

    def weighting_params(self) -> WeightingParams:
        from .weightings import WeightingParams

        return WeightingParams(tau=self.tau, beta=self.beta, w_min=self.w_min, rho=self.rho)

    @classmethod
    def from_config(cls, args, probe: str | None = None) -> "ReshapeSettings":
        """The settings of an `OARConfig` (its fields named in each field's metadata); `probe`
        overrides the configured one (the warm-up's)."""
        values = {f.name: getattr(args, f.metadata["config"]) for f in dataclasses.fields(cls)}
        return cls(**{**values, **({"probe": probe} if probe else {})})


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise UnknownSettingError(name, f"{name}={value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


def generated_fields() -> list[dataclasses.Field]:
    """The settings fields OARConfig takes as generated fields (`oar_*`, `answer_format`,
    `answer_pattern`): every one but those GRPOConfig already has."""
    return [f for f in dataclasses.fields(ReshapeSettings) if f.metadata["generated"]]


def config_fields() -> list[tuple[str, object, dataclasses.Field]]:
    """(name, type, field) of OARConfig's generated fields, for `dataclasses.make_dataclass`:
    the settings' defaults and help text under their config names."""
    hints = typing.get_type_hints(ReshapeSettings)
    return [(f.metadata["config"], hints[f.name], field(default=f.default, metadata={"help": f.metadata["help"]}))
            for f in generated_fields()]


def config_name(setting: str) -> str:
    """The OARConfig field a setting is read from."""
    return {f.name: f.metadata["config"] for f in dataclasses.fields(ReshapeSettings)}[setting]
