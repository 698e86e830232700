"""`oar_grpo`: verl's GRPO outcome advantage, reshaped by token weights when they are given.

Registered with verl's own decorator (`core_algos.register_adv_est`), so that
`algorithm.adv_estimator=oar_grpo` selects it. verl's `compute_advantage` calls an estimator
with the rewards, the response mask, the group index and the algorithm config only: no other
tensor of the batch reaches it, and it cannot call the policy. So the weights are computed
where the policy is, by the `oar_sync` trainer mode, which passes them here (`oar_weights`);
called by verl, the estimator is `grpo` itself, bit for bit (it calls verl's
`compute_grpo_outcome_advantage` and changes nothing).
"""
from __future__ import annotations

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from .step import reshape_token_advantages

ESTIMATOR = "oar_grpo"


@register_adv_est(ESTIMATOR)
def compute_oar_grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                               epsilon: float = 1e-6, config=None, oar_weights: torch.Tensor | None = None,
                               oar_bonus: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's advantage A_i on every response token, times w_t when `oar_weights` are given.

    token_level_rewards: (bs, response_length); response_mask: (bs, response_length);
    index: (bs,) the group of each row (verl's uid); config: verl's algorithm config, whose
    `norm_adv_by_std_in_grpo` (default true) is read as verl's `grpo` branch reads it;
    oar_weights: (bs, response_length) w_t, or None (plain GRPO); oar_bonus: (bs,
    response_length) an additive weighting's term, or None. Other keywords verl passes
    (`reward_baselines`) are not used, as `grpo` does not use them.
    Returns (advantages, returns), each (bs, response_length), equal as in GRPO.
    """
    norm = True if config is None else config.get("norm_adv_by_std_in_grpo", True)
    advantages, returns = compute_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=epsilon,
                                                         norm_adv_by_std_in_grpo=norm, config=config)
    if oar_weights is None:
        return advantages, returns
    reshaped = reshape_token_advantages(advantages, response_mask, oar_weights, oar_bonus)
    return reshaped, reshaped
