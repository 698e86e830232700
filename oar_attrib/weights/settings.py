"""`ReshapeSettings`: every knob between importances and weights, with help text, checked on
construction; the one place their defaults are used from (the numbers are in `defaults`).

`OARConfig`'s generated fields (`config_fields`) and the `oar attribute` gating flags
(`commands.add_dataclass_args`) are generated from these fields, help text included, so a knob is written
once. Errors name the field and the allowed values.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import defaults
from ..defaults import FLOAT32_MAX, option
from ..errors import InputError, UnknownNameError
from ..inputs.spans import ANSWER_FORMATS
from ..inputs.steps import STEP_POOLS
from ..methods.knobs import NOISE_STD_MAX

if TYPE_CHECKING:
    from .weightings import WeightingParams


class SettingError(InputError):
    """A `ReshapeSettings` value that cannot work; `field` names the setting."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.field = name


class UnknownSettingError(SettingError, UnknownNameError):
    """A setting naming a method, probe, weighting or format that does not exist."""


# Each field is made by the one field helper (`commands.option`), with `config`: the OARConfig
# field it is read from, generated there from this field (`config_fields`) or, with `generated`
# false, GRPOConfig's own (`seed`).


@dataclass(frozen=True)
class ReshapeSettings:
    """How a batch's importances are computed and turned into weights (METHOD.md 3, 6-7)."""

    method: str = option("oar_g",
        "Importance method whose weights reshape the advantages: a registered method "
        "(oar_attrib.available_methods() lists them, those registered with "
        "oar_attrib.register_method included; an unknown name is refused with the list), or "
        "'none' for plain GRPO (uniform weights, no model call).", config="oar_method", generated=True)
    probe: str = option(defaults.PROBE,
        f"Outcome probe: one of {', '.join(defaults.PROBES)} (METHOD.md 3).", config="oar_probe", generated=True)
    tau: float = option(defaults.TAU,
        "Quantile level in [0, 1] that splits suppression from boosting.", config="oar_tau", generated=True)
    beta: float = option(defaults.BETA,
        "Boost strength (>= 0) above the tau-quantile.", config="oar_beta", generated=True)
    w_min: float = option(defaults.W_MIN,
        "w_min in [0, 1]: the floor of the suppression gate below the tau-quantile, applied BEFORE "
        "the mass-preserving rescale to mean 1 over the scored tokens, so final weights can be "
        "below it (METHOD.md 6).", config="oar_w_min", generated=True)
    rho: float = option(defaults.RHO,
        "Kept fraction in (0, 1] for weighting='top_rho'.", config="oar_entropy_rho", generated=True)
    weighting: str | None = option(None,
        "How importances become weights: a registered weighting ('bilevel' gates like OAR; 'grail' "
        "is GRAIL's transform; 'top_rho' keeps the top-rho tokens of the local batch at weight 1 "
        "and zeroes the rest). Default: the method's own.", config="oar_weighting", generated=True)
    granularity: str = option(defaults.GRANULARITY,
        "'token' gates each token's importance; 'step' pools the importances per step (lines, or "
        "sentences of a one-line reasoning), gates the steps and gives each step's weight to its "
        "tokens, mean 1 over the scored tokens.", config="oar_granularity", generated=True)
    step_pool: str = option(defaults.GATING_STEP_POOL,
        "granularity='step': how a step's token importances pool into one: mean, sum or max (oar_p_step's are constant"
        " per step: all three agree up to sum's length factor).", config="oar_step_pool", generated=True)
    noise_std: float | None = option(None,
        "OAR-G: std (>= 0) of the embedding noise on scored positions; None: 0.1 x the RMS of the "
        "row's scored embeddings (the same in bf16 and fp32).", config="oar_noise_std", generated=True)
    max_batch_tokens: int | None = option(None,
        "Token budget of one attribution forward: rows are grouped so that their total length "
        "stays under it, and every method that takes a budget (OAR-P, OAR-G, GRAIL, IG, entropy) "
        "sizes its passes by it. None: each sizes them from the memory bound and the model's shape "
        "(budget.memory_bound: the device's free memory; on CPU min(25% of RAM, 1 GiB)); the row "
        "grouping then uses 16384 tokens on CPU.", config="oar_max_batch_tokens", generated=True)
    answer_format: str = option(defaults.ANSWER_FORMAT,
        f"Answer format the span finder looks for: one of {', '.join(ANSWER_FORMATS)}.", config="answer_format", generated=True)
    answer_pattern: str | None = option(None,
        "Regex with one capturing group (the answer), for answer_format='regex'.", config="answer_pattern", generated=True)
    seed: int = option(0,
        "Seed of the random methods' numbers: each row draws from its own generator, seeded from "
        "this and the row's token ids (`weights.row_seed`).", config="seed", generated=False)

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
            ("beta", 0 <= self.beta <= FLOAT32_MAX, "finite, >= 0"),
            ("w_min", 0.0 <= self.w_min <= 1.0, "in [0, 1]"),
            ("rho", 0.0 < self.rho <= 1.0, "in (0, 1]"),
            ("noise_std", self.noise_std is None or 0 <= self.noise_std <= NOISE_STD_MAX,
             f"None or in [0, {NOISE_STD_MAX}]"),
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
    return [(f.metadata["config"], hints[f.name], option(f.default, f.metadata["help"]))
            for f in generated_fields()]


def config_name(setting: str) -> str:
    """The OARConfig field a setting is read from."""
    return {f.name: f.metadata["config"] for f in dataclasses.fields(ReshapeSettings)}[setting]
