"""verl's actor worker group as the policy step OAR-P reads (`scoring.Policy`).

Each call is one `compute_log_prob` of the perturbed copies, given to the worker group as a
TensorDict (nested `input_ids`, the rows' own `position_ids`: a copy has its row's length and
positions), at temperature 1 (the probe is the policy's own distribution, whatever the
rollout's temperature), without entropies or a loss. verl splits the rows across the actor's
data-parallel ranks, so a call is padded to a multiple of their number with repeats of its last
copy, whose outputs are dropped.
"""
from __future__ import annotations

import torch

from verl.utils import tensordict_utils as tu

from . import verl_private


class ActorPolicy:
    """`scoring.Policy` over `worker_group.compute_log_prob`; `position_ids`: each batch row's
    (L,) position ids, as verl stores them."""

    def __init__(self, worker_group, position_ids: list[torch.Tensor]):
        self.worker_group = worker_group
        self.position_ids = position_ids
        self.ranks = verl_private.data_parallel_size(worker_group)

    def __call__(self, rows: list[int], ids: list[list[int]]) -> torch.Tensor:
        n = len(ids)
        extra = (-n) % self.ranks
        rows, ids = rows + rows[-1:] * extra, ids + ids[-1:] * extra
        jagged = lambda values: torch.nested.as_nested_tensor(values, layout=torch.jagged)  # noqa: E731
        data = tu.get_tensordict(
            tensor_dict={"input_ids": jagged([torch.tensor(i, dtype=torch.long) for i in ids]),
                         "position_ids": jagged([self.position_ids[r] for r in rows])},
            non_tensor_dict={"temperature": 1.0, "calculate_entropy": False, "compute_loss": False})
        output = self.worker_group.compute_log_prob(data)
        logprobs = output["log_probs"]  # nested (N, L): column i is log p(ids[i + 1] | ids[:i + 1])
        return logprobs.to_padded_tensor(0.0)[:n].float()
