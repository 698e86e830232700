"""The verl names the plugin reaches, all behind this one seam (as `training.compat` is
TRL's): each listed with the version it was read on, checked by `check` when an `oar_sync`
trainer starts, so that a rename is one line naming the names and the versions, not an
AttributeError in the middle of a run.

Public API the plugin builds on: `core_algos.register_adv_est` and
`compute_grpo_outcome_advantage` (the `oar_grpo` estimator), `v1.register_trainer` and the
`sync` mode's `PPOTrainerSync` (the `oar_sync` mode), `tensordict_utils.get_tensordict` and `get`,
`padding.response_to_nested`, `single_controller.base.decorator.register` and
`make_nd_compute_dataproto_dispatch_fn` (the worker method), TransferQueue's `kv_batch_get` and
`kv_batch_put` (verl 0.9.1 installs TransferQueue 0.1.11 with its core extra).

Private names, reached here only:
- `PPOTrainer._compute_advantage`: overridden by `OARSyncTrainer` (verl's step runs first);
- `PPOTrainer.actor_rollout_wg`, `.tokenizer`, `.global_steps`: read;
- `WorkerGroup._dispatch_info` and `Worker._query_dispatch_info`: the actor's data-parallel
  size, which every `compute_log_prob` call's rows must be a multiple of (read as verl's own
  `_balance_batch` reads it);
- `ActorRolloutRefWorker.actor` and `TrainingWorker.engine`, `.model_config`: the policy module
  and its tokenizer inside the worker (`worker.OARActorRolloutRefWorker`).

The fields a v1 batch holds in TransferQueue (`fetch`): `prompts`, `responses`, `input_ids`,
`position_ids`, `response_mask`, `rm_scores` (per response token), `uid` (the prompt's),
`entropy` and `advantages` (response-aligned), nested (jagged) per sample.
"""
from __future__ import annotations

import os

from packaging.version import Version

from oar_attrib.errors import LibraryVersionError
from oar_attrib.compat import private_names_missing, version_line

VERL_CHECKED_ON = "0.9.1"  # the verl versions every name below was read against
VERL_MIN, VERL_MAX = Version("0.9.1"), Version("0.10")
VERL_OVERRIDE_ENV = "OAR_ALLOW_UNTESTED_VERL"
_V1 = "verl.trainer.ppo.v1.trainer_base"
VERL_NAMES = (
    "verl.trainer.ppo.core_algos:register_adv_est",
    "verl.trainer.ppo.core_algos:compute_grpo_outcome_advantage",
    f"{_V1}:register_trainer",
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync",
    f"{_V1}:PPOTrainer._compute_advantage",
    f"{_V1}:PPOTrainer.actor_rollout_wg",
    f"{_V1}:PPOTrainer.tokenizer",
    f"{_V1}:PPOTrainer.global_steps",
    "verl.single_controller.base.worker_group:WorkerGroup._dispatch_info",
    "verl.single_controller.base.worker:Worker._query_dispatch_info",
    "verl.utils.tensordict_utils:get_tensordict",
    "verl.utils.tensordict_utils:get",
    "verl.workers.utils.padding:response_to_nested",
    "verl.single_controller.base.decorator:register",
    "verl.single_controller.base.decorator:make_nd_compute_dataproto_dispatch_fn",
    "verl.workers.engine_workers:ActorRolloutRefWorker.actor",
    "verl.workers.engine_workers:TrainingWorker.engine",
    "verl.workers.engine_workers:TrainingWorker.model_config",
    "transfer_queue:kv_batch_get",
    "transfer_queue:kv_batch_put",
)
FIELDS = ("uid", "prompts", "responses", "input_ids", "position_ids", "response_mask", "rm_scores", "entropy",
          "advantages")


def check(names=VERL_NAMES, version: str | None = None) -> None:
    """LibraryVersionError, in one line, when the installed verl is outside [VERL_MIN, VERL_MAX)
    (unless VERL_OVERRIDE_ENV=1) or lacks one of `names`."""
    if version is None:
        import verl

        version = verl.__version__
    if not VERL_MIN <= Version(version) < VERL_MAX and os.environ.get(VERL_OVERRIDE_ENV) != "1":
        raise LibraryVersionError(
            f"verl {version} is installed, but the oar_sync trainer mode was checked on verl "
            f">={VERL_MIN},<{VERL_MAX} (it overrides private names that change between releases); "
            f"install 'oar-attrib[verl]', or set {VERL_OVERRIDE_ENV}=1 to try this version anyway")
    missing = private_names_missing(names)
    if missing:
        raise LibraryVersionError(version_line("verl", VERL_CHECKED_ON, missing))


def fetch(batch, fields=FIELDS):
    """The TensorDict of `fields` of the batch a v1 trainer step holds (`KVBatchMeta`)."""
    import transfer_queue as tq

    return tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(fields))


def store(batch, values: dict, response_mask):
    """Write (B, T) response-aligned `values` (name -> tensor) back as verl keeps them, nested
    by the nested `response_mask`; the batch's updated `KVBatchMeta`."""
    import transfer_queue as tq
    from tensordict import TensorDict

    from verl.workers.utils.padding import response_to_nested

    nested = TensorDict({k: response_to_nested(v, response_mask) for k, v in values.items()},
                        batch_size=len(batch))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=nested)


def data_parallel_size(worker_group, mesh: str = "actor") -> int:
    """The number of data-parallel ranks of `mesh` in `worker_group`."""
    if mesh not in worker_group._dispatch_info:
        worker_group._dispatch_info[mesh] = worker_group._query_dispatch_info(mesh)
    return max(worker_group._dispatch_info[mesh]) + 1


def worker_policy(worker):
    """(module, tokenizer, engine) of the policy inside an actor worker."""
    engine = worker.actor.engine
    return engine.module, worker.actor.model_config.tokenizer, engine
