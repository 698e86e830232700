"""`OARConfig`: TRL's `GRPOConfig` plus the settings of advantage reshaping (METHOD.md 3, 6).

Every new field has help text and is checked on construction; errors name the allowed values.
The trainer hooks into TRL internals (`_generate_and_score_completions`, `_compute_loss`), so
the TRL version is pinned to the range those hooks were tested against.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields

from packaging.version import Version
from trl import GRPOConfig

from oar_attrib.probes import PROBES
from oar_attrib.spans import ANSWER_FORMATS

from .errors import TrainingConfigError, UnsupportedTRLError

# Tested: 1.16.0. The hooks rely on `_generate_and_score_completions` returning a dict with
# per-sequence "advantages" and on `_compute_loss` accepting (B, T) advantages.
TRL_MIN, TRL_MAX = Version("1.16.0"), Version("1.17.0")
TRL_OVERRIDE_ENV = "OAR_ALLOW_UNTESTED_TRL"

OAR_METHODS = ("none", "oar_p", "oar_g", "entropy", "grail", "random")
ENTROPY_MODES = ("bilevel", "top_rho")


def check_trl_version(version: str | None = None) -> None:
    """Raise `UnsupportedTRLError` unless TRL is in [TRL_MIN, TRL_MAX) (or the override is set)."""
    if version is None:
        import trl

        version = trl.__version__
    if TRL_MIN <= Version(version) < TRL_MAX or os.environ.get(TRL_OVERRIDE_ENV) == "1":
        return
    raise UnsupportedTRLError(
        f"trl {version} is installed, but OARGRPOTrainer was tested with trl >={TRL_MIN},<{TRL_MAX} "
        f"(it overrides GRPOTrainer internals that change between releases); install "
        f"'trl>={TRL_MIN},<{TRL_MAX}', or set {TRL_OVERRIDE_ENV}=1 to try this version anyway"
    )


# transformers 5.x renamed `gradient_checkpointing` to `activation_checkpointing` (the old name
# is a deprecated alias there). OARConfig takes the new name on every supported version.
_NATIVE_ACTIVATION_CHECKPOINTING = "activation_checkpointing" in {f.name for f in fields(GRPOConfig)}


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise TrainingConfigError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


@dataclass
class OARConfig(GRPOConfig):
    """GRPOConfig with Outcome-grounded Advantage Reshaping: the per-token advantage is A_i * w_t."""

    oar_method: str = field(
        default="oar_g",
        metadata={"help": "Importance method whose weights reshape the advantages: one of "
                          f"{', '.join(OAR_METHODS)}. 'none' is plain GRPO (weights are not computed)."},
    )
    oar_probe: str = field(
        default="as_mean",
        metadata={"help": f"Outcome probe after the warm-up: one of {', '.join(PROBES)} (METHOD.md 3)."},
    )
    oar_probe_warmup_steps: int = field(
        default=0,
        metadata={"help": "Optimizer steps that use the 'lt' probe before switching to oar_probe "
                          "(the paper warms up with LT-Logits)."},
    )
    oar_tau: float = field(
        default=0.4, metadata={"help": "Quantile level in [0, 1] that splits suppression from boosting."}
    )
    oar_beta: float = field(default=2.0, metadata={"help": "Boost strength (>= 0) above the tau-quantile."})
    oar_min_weight: float = field(
        default=0.1, metadata={"help": "Suppression floor w_min in [0, 1] before mass preservation."}
    )
    oar_noise_std: float | None = field(
        default=None,
        metadata={"help": "OAR-G: std (>= 0) of the embedding noise on scored positions; None: 0.1 x "
                          "the RMS of the row's scored embeddings (the same in bf16 and fp32)."},
    )
    oar_max_batch_tokens: int | None = field(
        default=None,
        metadata={"help": "Token budget of one attribution forward: rows are grouped so that their "
                          "total length stays under it, and OAR-P sizes its perturbation batches by it. "
                          "None: OAR-P sizes it from the device's free memory (16384 on CPU, also "
                          "the row grouping's budget)."},
    )
    oar_entropy_mode: str = field(
        default="bilevel",
        metadata={"help": "entropy method only: 'bilevel' gates the entropies like OAR; 'top_rho' keeps "
                          "the top-rho entropy tokens of the local batch (weight 1) and zeroes the rest."},
    )
    oar_entropy_rho: float = field(
        default=0.2, metadata={"help": "Kept fraction in (0, 1] for oar_entropy_mode='top_rho'."}
    )
    oar_skip_zero_advantage: bool = field(
        default=True,
        metadata={"help": "Do not attribute completions whose advantage is 0 (groups with equal "
                          "rewards): A_i * w_t is 0 whatever the weights. False attributes all "
                          "(slower; for analysis of every completion)."},
    )
    answer_format: str = field(
        default="auto",
        metadata={"help": f"Answer format the span finder looks for: one of {', '.join(ANSWER_FORMATS)}."},
    )
    answer_pattern: str | None = field(
        default=None,
        metadata={"help": "Regex with one capturing group (the answer), for answer_format='regex'."},
    )
    oar_store_every: int = field(
        default=0,
        metadata={"help": "Write a sample of the generation batch to the run store every this many "
                          "optimizer steps (0: never)."},
    )
    oar_store_samples: int = field(
        default=4, metadata={"help": "Completions per written sample (taken from the main process)."}
    )
    oar_store_path: str | None = field(
        default=None,
        metadata={"help": "Run store the samples go to: a .db file (the web app's store, one run per "
                          "training) or a JSON Lines file; default <output_dir>/runs.db."},
    )
    if not _NATIVE_ACTIVATION_CHECKPOINTING:
        activation_checkpointing: bool = field(
            default=False,
            metadata={"help": "Recompute activations in the backward to save memory (this "
                              "transformers calls it gradient_checkpointing)."},
        )

    def __post_init__(self) -> None:
        check_trl_version()
        if not _NATIVE_ACTIVATION_CHECKPOINTING:
            self.gradient_checkpointing = self.gradient_checkpointing or self.activation_checkpointing
        super().__post_init__()
        _choice("oar_method", self.oar_method, OAR_METHODS)
        _choice("oar_probe", self.oar_probe, PROBES)
        _choice("oar_entropy_mode", self.oar_entropy_mode, ENTROPY_MODES)
        _choice("answer_format", self.answer_format, ANSWER_FORMATS)
        self._check_ranges()
        if self.answer_format == "regex" and not self.answer_pattern:
            raise TrainingConfigError("answer_format='regex' needs answer_pattern, a regex with one group")

    def _check_ranges(self) -> None:
        checks = [
            ("oar_tau", self.oar_tau, 0.0 <= self.oar_tau <= 1.0, "in [0, 1]"),
            ("oar_beta", self.oar_beta, self.oar_beta >= 0 and math.isfinite(self.oar_beta), "finite, >= 0"),
            ("oar_min_weight", self.oar_min_weight, 0.0 <= self.oar_min_weight <= 1.0, "in [0, 1]"),
            ("oar_noise_std", self.oar_noise_std, self.oar_noise_std is None or self.oar_noise_std >= 0,
             "None or >= 0"),
            ("oar_max_batch_tokens", self.oar_max_batch_tokens,
             self.oar_max_batch_tokens is None or self.oar_max_batch_tokens >= 1, "None or >= 1"),
            ("oar_probe_warmup_steps", self.oar_probe_warmup_steps, self.oar_probe_warmup_steps >= 0, ">= 0"),
            ("oar_entropy_rho", self.oar_entropy_rho, 0.0 < self.oar_entropy_rho <= 1.0, "in (0, 1]"),
            ("oar_store_every", self.oar_store_every, self.oar_store_every >= 0, ">= 0"),
            ("oar_store_samples", self.oar_store_samples, self.oar_store_samples >= 1, ">= 1"),
        ]
        for name, value, ok, rule in checks:
            if not ok:
                raise TrainingConfigError(f"{name}={value!r} must be {rule}")

    def probe_at(self, step: int) -> str:
        """The probe used at optimizer step `step` (warm-up with 'lt')."""
        return "lt" if step < self.oar_probe_warmup_steps else self.oar_probe
