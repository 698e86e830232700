"""`OARConfig`: TRL's `GRPOConfig` plus the settings of advantage reshaping (METHOD.md 3, 6).

Every new field has help text and is checked on construction; errors name the allowed values.
The trainer hooks into TRL internals (`_generate_and_score_completions`, `_compute_loss`), so
the TRL version is pinned to the range those hooks were tested against (`compat`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, make_dataclass

from trl import GRPOConfig

from oar_attrib.commands import DTYPES
from oar_attrib.defaults import option
from oar_attrib.methods import trainable_methods
from oar_attrib.weights.settings import ReshapeSettings, SettingError, config_fields, config_name

from .compat import check_trl_version
from .errors import TrainingConfigError

def oar_method_choices() -> list[str]:
    """Allowed `oar_method` values: every registered method that is not analysis-only ('none',
    plain GRPO, among them), read from the registry when called (so methods registered later
    count)."""
    return trainable_methods()


# The reshaping knobs, generated from `ReshapeSettings` (defaults, help text and checks are
# written there once): oar_method, oar_probe, oar_tau, oar_beta, oar_w_min, oar_entropy_rho,
# oar_weighting, oar_granularity, oar_step_pool, oar_noise_std, oar_max_batch_tokens,
# answer_format, answer_pattern.
ReshapeFields = make_dataclass("ReshapeFields", config_fields())


# transformers 5.x renamed `gradient_checkpointing` to `activation_checkpointing` (the old name
# is a deprecated alias there). OARConfig takes the new name on every supported version.
_NATIVE_ACTIVATION_CHECKPOINTING = "activation_checkpointing" in {f.name for f in fields(GRPOConfig)}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_bf16() -> bool:
    import torch

    return _cuda() and torch.cuda.is_bf16_supported()


@dataclass
class OARConfig(GRPOConfig, ReshapeFields):
    """GRPOConfig with Outcome-grounded Advantage Reshaping: the per-token advantage is A_i * w_t."""

    oar_probe_warmup_steps: int = option(0, "Optimizer steps that use the 'lt' probe before switching to oar_probe "
                                            "(the paper warms up with LT-Logits).")
    oar_skip_zero_advantage: bool = option(True, "Do not attribute completions whose advantage is 0 (groups with equal "
                                                 "rewards): A_i * w_t is 0 whatever the weights. False attributes all "
                                                 "(slower; for analysis of every completion).")
    oar_store_every: int = option(25, "Write a sample of the generation batch to the run store (default "
                                      "<output_dir>/runs.db, what `oar web --store` reads) at step 0 and every "
                                      "this many optimizer steps (0: never).")
    oar_correct_threshold: float | None = option(None, "The run store marks a completion correct when its total reward"
                                                       " is >= this. Unset: when every reward function that declares "
                                                       "`correct_threshold` (the built-in ones: 1.0) reaches it; "
                                                       "unknown when none declares one.")
    oar_store_samples: int = option(4, "Completions per written sample (taken from the main process).")
    oar_store_path: str | None = option(None, "Run store the samples go to: a .db file (the web app's store, one run "
                                              "per training) or a JSON Lines file; default <output_dir>/runs.db.")
    if not _NATIVE_ACTIVATION_CHECKPOINTING:
        activation_checkpointing: bool = option(False, "Recompute activations in the backward to save memory (this "
                                                       "transformers calls it gradient_checkpointing).")

    def __post_init__(self) -> None:
        check_trl_version()
        if not _NATIVE_ACTIVATION_CHECKPOINTING:
            self.gradient_checkpointing = self.gradient_checkpointing or self.activation_checkpointing
        self._quiet_defaults()
        super().__post_init__()
        self.reshape_settings()  # checks the generated fields, answer_format and answer_pattern
        if self.oar_method not in trainable_methods():  # registered (checked above), analysis-only
            raise TrainingConfigError(
                f"oar_method={self.oar_method!r} is analysis-only (it can explain traces with "
                f"attribute() but not reshape training); choose one of {', '.join(oar_method_choices())}")
        self._check_ranges()

    def reshape_settings(self, probe: str | None = None) -> ReshapeSettings:
        """The `ReshapeSettings` of this config (`probe`: the warm-up's, else oar_probe); an
        invalid value is a TrainingConfigError naming the config field and the allowed values."""
        try:
            return ReshapeSettings.from_config(self, probe)
        except SettingError as err:
            name = config_name(err.field)
            raise TrainingConfigError(str(err).replace(f"{err.field}=", f"{name}=", 1)) from None

    def _quiet_defaults(self) -> None:
        """Defaults that work where the config is built. bf16 left unset is bf16 only on a CUDA
        device that supports it (TRL would turn it on everywhere, which stops a CPU machine with
        "doesn't support bf16/gpu", or with use_cpu=True runs every step under a slow CPU bf16
        autocast): elsewhere fp32, as the CPU presets set. TRL's default gradient_checkpointing
        is passed on under transformers 5's name, activation_checkpointing, when that field
        exists and is unset, so that no deprecation warning is printed on every run; without CUDA
        the dataloader pins no memory (torch warns on every run that it cannot)."""
        if self.bf16 is None:
            self.bf16 = not self.fp16 and not self.use_cpu and _cuda_bf16()
        if self.use_cpu or not _cuda():
            self.dataloader_pin_memory = False  # nothing to pin to; torch warns on every run
        if getattr(self, "activation_checkpointing", False) is None and self.gradient_checkpointing is not None:
            self.activation_checkpointing = self.gradient_checkpointing

    def _check_ranges(self) -> None:
        checks = [
            ("oar_probe_warmup_steps", self.oar_probe_warmup_steps, self.oar_probe_warmup_steps >= 0, ">= 0"),
            ("oar_store_every", self.oar_store_every, self.oar_store_every >= 0, ">= 0"),
            ("oar_store_samples", self.oar_store_samples, self.oar_store_samples >= 1, ">= 1"),
        ]
        for name, value, ok, rule in checks:
            if not ok:
                raise TrainingConfigError(f"{name}={value!r} must be {rule}")

    def probe_at(self, step: int) -> str:
        """The probe used at optimizer step `step` (warm-up with 'lt')."""
        return "lt" if step < self.oar_probe_warmup_steps else self.oar_probe

    def settings_record(self, model, dtype=None) -> dict:
        """The settings record of a training with this config (`records.settings_record`):
        the method with the parameters training runs it with (OAR-G: the paper's 1 draw, not
        analysis's 8), the reshaping settings, the model and dtype, and the trainer fields of
        `RECORDED_TRAINER_FIELDS` under `training`. `model`: a name, path or loaded model."""
        from oar_attrib.records.settings_record import settings_record

        return settings_record(self.reshape_settings(), [self.oar_method], model=model, dtype=dtype,
                               training={k: getattr(self, k) for k in RECORDED_TRAINER_FIELDS})


# Trainer fields beyond the reshaping that change what a run learns, kept in its settings
# record so that a resume with one changed is refused. Not max_steps (a resume may train on),
# nor logging, saving or the run store (they change what is written, not what is learned).
RECORDED_TRAINER_FIELDS = ("oar_probe_warmup_steps", "loss_type", "learning_rate", "num_generations",
                           "per_device_train_batch_size", "gradient_accumulation_steps", "temperature",
                           "beta", "seed", "bf16", "fp16")


HALF_DTYPE_NAMES = tuple(name for name in DTYPES if name != "float32")


def fit_to_device(settings: dict, cuda: bool | None = None) -> list[str]:
    """Make merged {'run', 'trainer'} settings start on this machine, in place, and say what
    changed (one line each; the caller prints them). Without CUDA: use_cpu on, bf16/fp16 off
    (TRL stops with "doesn't support bf16/gpu", or runs every step under a slow CPU autocast)
    and a half-precision weights dtype becomes float32 (it would train and save in bf16 where
    the preset meant mixed precision on a GPU). With CUDA nothing changes."""
    if cuda is None:
        cuda = _cuda()
    run, trainer = settings["run"], settings["trainer"]
    if cuda and not trainer.get("use_cpu"):
        return []
    said = []
    for name in ("bf16", "fp16"):
        if trainer.get(name):
            trainer[name] = False
            said.append(f"{name}=true needs a GPU; training on the CPU in float32 ({name}=false)")
    if run.get("dtype") in HALF_DTYPE_NAMES:
        said.append(f"dtype={run['dtype']} on the CPU would train and save in {run['dtype']}; "
                    "loading the model in float32 (set dtype on a GPU machine)")
        run["dtype"] = "float32"
    if not trainer.get("use_cpu"):
        trainer["use_cpu"] = True
    return said
