"""The design of the methods that need the policy module itself on verl: token-level OAR-P
(a clean key/value cache reused per scored token), OAR-G (input-embedding gradients), GRAIL
and IG. verl's actor returns log-probabilities and entropies only, so these run inside the
actor worker, where the module is: `OARActorRolloutRefWorker` is verl's `ActorRolloutRefWorker`
with one more method, `compute_oar_weights`, dispatched as `compute_log_prob` is (the rows split
across the data-parallel ranks), which runs the project's own weights pipeline
(`reshaping.token_weights`, the TRL trainer's) on the rows it gets and returns each row's
weights nested over its response.

Built and tested on CPU: the request (`weights_request`) and the worker's side
(`weights_of_rows`), through verl's own split and concatenation of TensorDicts. Not yet done,
and so refused by the `oar` block: mapping the actor role to this class in the `oar_sync`
trainer mode (its `_init_resource_pool_mgr`) and calling it there, and a run on a GPU, where
the module is sharded by FSDP and a backward for input gradients has to leave its parameter
gradients alone.
"""
from __future__ import annotations

import dataclasses

import torch
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker

from oar_attrib.inputs.batch import GroupOutcomes
from oar_attrib.weights.settings import ReshapeSettings

from ..reshaping import token_weights
from . import verl_private

_jagged = lambda values: torch.nested.as_nested_tensor(values, layout=torch.jagged)  # noqa: E731


def weights_request(prompts: list[list[int]], responses: list[list[int]], settings: ReshapeSettings,
                    select: list[bool], outcomes: GroupOutcomes):
    """The TensorDict `compute_oar_weights` takes: B rows' prompt and response ids (nested), which
    to attribute, their group outcomes, and the settings (one copy, not per row)."""
    return tu.get_tensordict(
        tensor_dict={"prompts": _jagged([torch.tensor(p, dtype=torch.long) for p in prompts]),
                     "responses": _jagged([torch.tensor(r, dtype=torch.long) for r in responses]),
                     "oar_select": torch.tensor(select, dtype=torch.bool),
                     "oar_group": outcomes.group.long(), "oar_correct": outcomes.correct.bool(),
                     "oar_advantage": outcomes.advantage.float()},
        non_tensor_dict={"oar_settings": dataclasses.asdict(settings)})


def weights_of_rows(model, tokenizer, data):
    """The worker's side: the weights of the request's rows with `model` in this process.

    Returns a TensorDict of B rows: `oar_weights` and `oar_bonus` nested over each response,
    `oar_span_found`, `oar_attributed`, `oar_nonfinite` (B,) bool."""
    settings = ReshapeSettings(**tu.get(data, "oar_settings"))
    prompts = [t.tolist() for t in data["prompts"].unbind()]
    responses = [t.tolist() for t in data["responses"].unbind()]
    outcomes = GroupOutcomes(data["oar_group"], data["oar_correct"], data["oar_advantage"])
    width = max(map(len, responses), default=0)
    weights = token_weights(model, tokenizer, prompts, responses, width, settings,
                            data["oar_select"].tolist(), outcomes)
    lengths = [len(r) for r in responses]
    return tu.get_tensordict(tensor_dict={
        "oar_weights": _jagged([w[:n] for w, n in zip(weights.weights, lengths)]),
        "oar_bonus": _jagged([b[:n] for b, n in zip(weights.bonus, lengths)]),
        "oar_span_found": weights.span_found, "oar_attributed": weights.attributed,
        "oar_nonfinite": weights.nonfinite})


class OARActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor worker with `compute_oar_weights` (module docstring)."""

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_oar_weights(self, data):
        module, tokenizer, engine = verl_private.worker_policy(self)
        with engine.eval_mode():
            return weights_of_rows(module, tokenizer, data).cpu()
