"""Reshaped GRPO on verl (the `verl` extra: pip install 'oar-attrib[verl]'): a plugin verl loads
itself, through the `verl.plugins` entry point, in every process that imports verl.

- `oar_grpo` (`estimator`): an advantage estimator, verl's `grpo` reshaped by token weights
  when its caller passes them (`oar_weights`); without them it is `grpo`, bit for bit;
- `oar_sync` (`trainer`): a trainer mode (`trainer.v1.trainer_mode=oar_sync`), verl's `sync`
  whose advantage step computes the weights where the policy is (`step`, `scoring`) and
  stores A_i * w_t, with the `oar` block's settings (`settings`);
- `OARActorRolloutRefWorker` (`worker`): the actor worker with a `compute_oar_weights` method,
  the design of the methods that need the policy module itself (token OAR-P, OAR-G).

Every verl name reached is listed, with the version it was checked on, in `verl_private`.
Names load on first use, so `import oar_attrib.training.verl` needs no verl; those whose module
needs it name the extra in one line when it is missing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from oar_attrib.lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .estimator import compute_oar_grpo_advantage
    from .settings import VerlOARSettings
    from .step import VerlRows, advantage_step
    from .trainer import OARSyncTrainer

__all__ = ["OARSyncTrainer", "VerlOARSettings", "VerlRows", "advantage_step", "compute_oar_grpo_advantage"]

__getattr__, __dir__ = lazy_exports(__name__, __file__, extras={
    "oar_attrib.training.verl.estimator": "verl", "oar_attrib.training.verl.trainer": "verl"})
