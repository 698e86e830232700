"""The `oar` block of a verl run (`+oar.method=oar_p_step +oar.tau=0.4 ...`): `VerlOARSettings`.

Its keys are generated from `ReshapeSettings` (names, defaults, help text and checks written
once there), so `OARConfig`'s `oar_*` fields and this block cannot drift apart; two defaults
differ (`defaults.VERL_METHOD`, `VERL_PROBE`: what runs where verl's policy is) and one key is
verl's own, `rows_per_call`. A wrong key or value is one `TrainingConfigError` line naming the
key as it is written on verl's command line (`oar.tau`). This module imports neither verl nor
torch, so the block is checked before anything starts.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, make_dataclass
from typing import Any, Mapping

from oar_attrib import defaults
from oar_attrib.weights.settings import ReshapeSettings, SettingError

from ..errors import TrainingConfigError

BLOCK = "oar"  # the block's name in verl's config: +oar.method=...
# What each method that runs on verl reads: no model call, the entropies verl's actor already
# computed for its old log-probabilities, or one `compute_log_prob` row per step of a row.
VERL_METHODS = {
    "none": "plain GRPO: no model call",
    "entropy": "the entropies verl's actor computes with the old log-probabilities (no extra pass)",
    "entropy_reasoning": "the same entropies, on the reasoning positions only",
    "oar_p_step": "one perturbed copy per step through the actor's compute_log_prob, probe as_joint",
}
# Settings of the methods that need the policy module inside the worker (OAR-G's noise, an
# in-process forward's token budget); they come with the worker method (`verl.worker`).
WORKER_ONLY = ("noise_std", "max_batch_tokens")
_VERL_DEFAULTS = {"method": defaults.VERL_METHOD, "probe": defaults.VERL_PROBE}


def _generated() -> list[tuple[str, Any, dataclasses.Field]]:
    hints = typing.get_type_hints(ReshapeSettings)
    return [(f.name, hints[f.name], defaults.option(_VERL_DEFAULTS.get(f.name, f.default), f.metadata["help"]))
            for f in dataclasses.fields(ReshapeSettings) if f.name not in WORKER_ONLY]


VerlReshapeFields = make_dataclass("VerlReshapeFields", _generated(), frozen=True)


@dataclass(frozen=True)
class VerlOARSettings(VerlReshapeFields):
    """The reshaping of an `oar_sync` run: `ReshapeSettings`' keys but WORKER_ONLY, and
    `rows_per_call`."""

    rows_per_call: int = defaults.option(512, "Most perturbed copies (prompt and response rows) in one call of the "
                                              "actor's compute_log_prob (step OAR-P); each call is padded to a "
                                              "multiple of the actor's data-parallel size.")

    def __post_init__(self) -> None:
        if isinstance(self.rows_per_call, bool) or not isinstance(self.rows_per_call, int) \
                or self.rows_per_call < 1:
            raise TrainingConfigError(f"{BLOCK}.rows_per_call={self.rows_per_call!r} must be an integer >= 1")
        settings = self.reshape_settings()
        if settings.method not in VERL_METHODS:
            raise TrainingConfigError(
                f"{BLOCK}.method={settings.method!r} does not run on verl yet: it needs the policy "
                "module inside verl's actor worker (the compute_oar_weights worker method, designed, "
                f"not yet run on a GPU); on verl: {', '.join(VERL_METHODS)} (step OAR-P with "
                f"{BLOCK}.probe={defaults.VERL_PROBE})")
        if settings.method == "oar_p_step" and settings.probe != defaults.VERL_PROBE:
            raise TrainingConfigError(
                f"{BLOCK}.probe={settings.probe!r} reads whole next-token distributions, which verl's "
                f"actor does not return; step OAR-P on verl takes {BLOCK}.probe={defaults.VERL_PROBE}")

    def reshape_settings(self) -> ReshapeSettings:
        """The `ReshapeSettings` of this block (checked there; an error names `oar.<key>`)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(VerlReshapeFields)}
        try:
            return ReshapeSettings(**values)
        except SettingError as err:
            raise TrainingConfigError(str(err).replace(f"{err.field}=", f"{BLOCK}.{err.field}=", 1)) from None

    @classmethod
    def from_block(cls, block: Mapping | None) -> "VerlOARSettings":
        """The settings of verl's `oar` block (None or empty: the defaults); an unknown key or a
        value of the wrong type is one line naming it."""
        given = dict(block.items()) if block else {}
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise TrainingConfigError(
                f"{BLOCK}.{unknown[0]} is not a key of the {BLOCK} block; known: {', '.join(known)}"
                + (f" ({', '.join(WORKER_ONLY)} come with the worker methods)" if unknown[0] in WORKER_ONLY else ""))
        hints = typing.get_type_hints(cls)
        for key, value in given.items():
            _check_type(key, value, hints[key])
        return cls(**given)

    @classmethod
    def from_config(cls, config) -> "VerlOARSettings":
        """The settings of a verl run's whole config (its `oar` block, when there is one)."""
        return cls.from_block(config.get(BLOCK) if hasattr(config, "get") else None)


def _check_type(key: str, value, hint) -> None:
    """TrainingConfigError unless `value` fits `hint` (float takes an int; a bool is no number)."""
    allowed = typing.get_args(hint) or (hint,)
    kinds = {type(None) if a is type(None) else a for a in allowed}
    ok = (value is None and type(None) in kinds) or (
        not isinstance(value, bool) and (isinstance(value, tuple(k for k in kinds if k is not type(None)))
                                         or (float in kinds and isinstance(value, int))))
    if not ok:
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise TrainingConfigError(f"{BLOCK}.{key}={value!r} must be {names}")


def block_keys() -> list[tuple[str, Any, str]]:
    """(key, default, help) of every key of the `oar` block, in order (the guide lists them)."""
    return [(f.name, f.default, f.metadata["help"]) for f in dataclasses.fields(VerlOARSettings)]
