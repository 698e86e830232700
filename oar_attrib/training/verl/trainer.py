"""`oar_sync`: verl's `sync` trainer mode whose advantage step stores A_i * w_t (METHOD.md 6).

verl's own advantage step runs first (`PPOTrainer._compute_advantage`: GRPO's A_i, with its KL
penalty, rollout correction and multi-output sessions as configured); then the weights of the
batch are computed where the policy is (`step.advantage_step`: verl's entropies, or step OAR-P
through the actor's `compute_log_prob`), the advantages (and GRPO's equal returns) are replaced
by A_i * w_t, and the `oar/*` metrics are logged beside verl's. Select it with
`trainer.v1.trainer_mode=oar_sync algorithm.adv_estimator=oar_grpo` and an `oar` block
(`settings.VerlOARSettings`); the plugin registers it in every process that imports verl.
"""
from __future__ import annotations

import time

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from ..errors import TrainingConfigError
from . import verl_private
from .settings import VerlOARSettings
from .step import VerlRows, advantage_step, warn_low_span_rate

MODE = "oar_sync"
ESTIMATORS = ("oar_grpo", "grpo")  # outcome advantages: A_i on every response token of row i
ENTROPY_METHODS = ("entropy", "entropy_reasoning")


def check_config(config, settings: VerlOARSettings) -> None:
    """TrainingConfigError, one line, for a verl config the trainer mode cannot reshape."""
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in ESTIMATORS:
        raise TrainingConfigError(
            f"algorithm.adv_estimator={estimator} gives per-token advantages; the {MODE} trainer mode "
            f"reshapes an outcome advantage A_i: set algorithm.adv_estimator={ESTIMATORS[0]} (or {ESTIMATORS[1]})")
    correction = config.algorithm.get("rollout_correction", None) or {}
    if settings.method in ENTROPY_METHODS and correction.get("bypass_mode", False):
        raise TrainingConfigError(
            f"oar.method={settings.method} reads the entropies verl's actor computes with the old "
            "log-probabilities, which algorithm.rollout_correction.bypass_mode=true skips; turn it off "
            "or choose oar.method=oar_p_step")


def verl_rows(data, entropies: bool) -> VerlRows:
    """The advantage step's rows from the nested TensorDict verl keeps (`verl_private.fetch`)."""
    ids = lambda name: [t.tolist() for t in data[name].unbind()]  # noqa: E731
    return VerlRows(prompts=ids("prompts"), responses=ids("responses"),
                    response_mask=data["response_mask"].to_padded_tensor(0),
                    advantages=data["advantages"].to_padded_tensor(0.0),
                    scores=data["rm_scores"].to_padded_tensor(0.0).sum(dim=1), groups=list(tu.get(data, "uid")),
                    entropies=data["entropy"].to_padded_tensor(0.0) if entropies else None)


@register_trainer(MODE)
class OARSyncTrainer(PPOTrainerSync):
    """verl's `sync` mode with advantages A_i * w_t; its settings are the config's `oar` block."""

    def __init__(self, config):
        self.oar_setup(config)  # before verl starts anything
        super().__init__(config)

    def oar_setup(self, config) -> None:
        """Check verl and the config, and read the `oar` block (one line for what is wrong)."""
        verl_private.check()
        self.oar = VerlOARSettings.from_config(config)
        check_config(config, self.oar)
        self.oar_span_warned = False

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics)
        start = time.perf_counter()
        entropies = self.oar.method in ENTROPY_METHODS
        policy_fields = ("position_ids",) if self.oar.method == "oar_p_step" else ()
        fields = ("uid", "prompts", "responses", "response_mask", "rm_scores", "advantages",
                  *(("entropy",) if entropies else ()), *policy_fields)
        data = verl_private.fetch(batch, fields)
        policy = None
        if policy_fields:
            from .actor import ActorPolicy

            policy = ActorPolicy(self.actor_rollout_wg, list(data["position_ids"].unbind()))
        result = advantage_step(verl_rows(data, entropies), self.oar, self.tokenizer, policy)
        if result.advantages is not None:
            batch = verl_private.store(batch, {"advantages": result.advantages, "returns": result.advantages},
                                       data["response_mask"])
        metrics.update({**result.metrics, "oar/step_s": time.perf_counter() - start})
        if not self.oar_span_warned:
            self.oar_span_warned = warn_low_span_rate(result.metrics, len(result.weights.span_found), self.oar)
        return batch
