"""The gradient the trainer applies on a batch, per method and per sign of the rows' advantages.

What is measured is what `OARGRPOTrainer` does in a training step, through its own code:

1. the method's token weights of the batch, by the trainer's `batch_token_weights` (the same
   pipeline and settings as its reshaping hook), and the advantages its loss takes,
   `reshaping.token_advantages` (A_i * w_t; plain GRPO's (B,) as they are);
2. the loss by the trainer's `compute_loss` (TRL's `_compute_loss`, every loss type), and its
   backward by `accelerator.backward`, as `Trainer.training_step` does with one accumulation
   step; the gradient is read before any clipping (cosines do not see a clip; the norm ratio
   is of the unclipped gradients).

The gradient of a batch is split by the sign of the rows' sequence advantages (pos: A_i > 0,
neg: A_i <= 0): g = g_pos + g_neg, each the gradient of the same loss with the other rows' advantages at zero (the loss
normaliser stays the batch's). With one policy step per generation (the ratio is 1) and no KL or
entropy term (`check_trainer`), the loss is linear in the advantages, so the two halves sum to
the full gradient (tests/training/test_align.py checks it against a real trainer step). When the
normaliser does not depend on which rows are present (loss types dapo, cispo, vespo: the batch's
`num_items_in_batch`) a half is the loss of that half's rows alone, so one method costs one
backward of the batch; otherwise each half zeroes the other rows and costs a full backward.

The forward pass is the same for every method of a batch (same policy, same tokens): within
`shared_forward` the trainer's `_get_per_token_logps_and_entropies` runs once per distinct
input and its graph is kept for every method's backward. The loss code that follows it is the
trainer's, unchanged.

Gradients are flat float32 vectors over the trainable parameters in `named_parameters()` order
(`ParamLayout`; a tied weight counts once), on the parameters' device, so a GPU run takes its
sums there; only the running sums go to the CPU, chunk by chunk, on their way to disk.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from oar_attrib.reports.align import PARTS
from oar_attrib.methods import method_spec
from oar_attrib.weights.settings import ReshapeSettings

from ..errors import AlignError
from ..reshaping import token_advantages
from ..compat import FORWARD, entropy_bonus
from .settings import MethodChoice

ROW_INDEPENDENT_LOSSES = ("dapo", "cispo", "vespo")  # normalised by the batch's num_items_in_batch
CHUNK = 1 << 24  # elements per float64 chunk of a dot product (128 MiB)


def check_trainer(trainer) -> None:
    """AlignError unless the trainer's loss is linear in the advantages of a batch that can be
    regrouped: one policy step per generation, no KL or entropy term, no vLLM, rewards scaled
    within groups, one process, one accumulation step."""
    args = trainer.args
    problems = [
        (trainer.beta != 0.0, f"beta={trainer.beta} (the KL term is not linear in the advantages): set beta=0"),
        (trainer.num_iterations != 1, f"num_iterations={trainer.num_iterations}: set num_iterations=1 "
                                      "(one policy step per generation, ratio 1)"),
        (entropy_bonus(trainer), "an entropy bonus (entropy_coef / use_adaptive_entropy): turn it off"),
        (trainer.use_vllm, "use_vllm=true: sample with the policy (use_vllm=false)"),
        (trainer.scale_rewards == "batch" or args.multi_objective_aggregation != "sum_then_normalize",
         "rewards scaled over the whole batch: set scale_rewards=group (or none) and "
         "multi_objective_aggregation=sum_then_normalize (batches regroup screened groups)"),
        (trainer.accelerator.num_processes != 1, "several processes: run oar align as one process"),
        (args.gradient_accumulation_steps != 1, "gradient_accumulation_steps must be 1 (one batch, one step)"),
        (trainer.aux_loss_enabled, "a mixture-of-experts aux loss: not measured"),
    ]
    for bad, why in problems:
        if bad:
            raise AlignError(f"oar align measures a loss linear in the advantages; this trainer has {why}")


class ParamLayout:
    """The trainable parameters of a model as one flat vector: `size` elements in
    `named_parameters()` order (a tied weight once)."""

    def __init__(self, model):
        self.names, self.params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
        self.size = sum(p.numel() for p in self.params)

    def flat_grad(self) -> torch.Tensor:
        """(size,) float32 copy of the parameters' gradients on their device (0 where a
        parameter has none)."""
        return torch.cat([(p.grad.detach().float().reshape(-1) if p.grad is not None
                           else torch.zeros(p.numel(), device=p.device)) for p in self.params])

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


def chunk64(vector, cut: slice, device=None) -> torch.Tensor:
    """vector[cut] as a float64 tensor (on `device`, default the vector's): `vector` is a
    (D,) tensor, or an array such as a memmap of running sums, read only where it is cut."""
    if torch.is_tensor(vector):
        return vector[cut].to(device=device, dtype=torch.float64)
    return torch.tensor(np.asarray(vector[cut]), dtype=torch.float64, device=device)


def dot64(a, b) -> float:
    """<a, b> of two (D,) float32 vectors (tensors or arrays), summed in float64 chunk by chunk."""
    device = a.device if torch.is_tensor(a) else None
    return float(sum(torch.dot(chunk64(a, cut), chunk64(b, cut, device))
                     for cut in (slice(i, i + CHUNK) for i in range(0, len(a), CHUNK))))


def _key(tensors) -> str:
    """A digest of the values (tensors by shape and bytes, anything else by repr)."""
    digest = hashlib.sha1()
    for t in tensors:
        if torch.is_tensor(t):
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        else:
            digest.update(repr(t).encode())
    return digest.hexdigest()


@contextmanager
def shared_forward(trainer):
    """Within the block the trainer's forward (`_get_per_token_logps_and_entropies`) runs once
    per distinct (model, tokens, mask, logits kept) and returns the same graph-carrying tensors
    after that; backward passes must keep the graph (`retain_graph=True`). The graphs go at exit."""
    original = getattr(trainer, FORWARD)
    cache: dict[str, tuple] = {}

    def cached(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        named = [part for name in sorted(kwargs) for part in (name, kwargs[name])]
        key = _key([id(model), input_ids, attention_mask, logits_to_keep, *args, *named])
        if key not in cache:
            cache[key] = original(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        return cache[key]

    setattr(trainer, FORWARD, cached)
    try:
        yield
    finally:
        delattr(trainer, FORWARD)  # the class's method again
        cache.clear()


def backward(trainer, inputs: dict, retain_graph: bool = True) -> None:
    """The backward of one training step on `inputs` (one accumulation step), as
    `Trainer.training_step` runs it: train mode, `compute_loss`, `accelerator.backward`."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, inputs)
    trainer.accelerator.backward(loss, retain_graph=retain_graph)


def half_inputs(trainer, inputs: dict, advantages: torch.Tensor, sign: int) -> dict | None:
    """The loss inputs of the rows of one half, with the token `advantages` (B,) or (B, C):
    sign +1 the rows whose sequence advantage is > 0, -1 the others (<= 0, so the halves cover
    every row whatever a method adds to a row's advantage); None when the half has no row. A
    row-independent loss (`ROW_INDEPENDENT_LOSSES`) gets those rows alone and the batch's
    num_items_in_batch; any other keeps every row and zeroes the others' advantages."""
    positive = inputs["advantages"] > 0  # (B,) from the sequence advantages
    rows = positive if sign > 0 else ~positive
    if not bool(rows.any()):
        return None
    if trainer.loss_type in ROW_INDEPENDENT_LOSSES and trainer.top_entropy_quantile == 1.0:
        out = {k: (v[rows] if torch.is_tensor(v) and v.dim() >= 1 else v) for k, v in inputs.items()}
        out["advantages"] = advantages[rows]
        return out
    keep = rows.view(-1, *([1] * (advantages.dim() - 1))).to(advantages.dtype)
    return {**inputs, "advantages": advantages * keep}


@dataclass
class MethodGradient:
    """A method's gradient on a batch, split by the sign of the rows' advantages (pos + neg is
    the batch's gradient), and where its time went."""

    pos: torch.Tensor       # (D,) float32, on the parameters' device
    neg: torch.Tensor       # (D,) float32, on the parameters' device
    seconds: dict           # weights, backward: wall seconds; *_cpu: this process's CPU seconds

    @property
    def all(self) -> torch.Tensor:
        return self.pos + self.neg


def method_gradient(trainer, layout: ParamLayout, inputs: dict, choice: MethodChoice,
                    base: ReshapeSettings) -> MethodGradient:
    """The gradient the trainer applies on the batch `inputs` (TRL's generation output, (B,)
    sequence advantages) when it reshapes with `choice`, under the trainer's other settings
    `base`. Call inside `shared_forward`."""
    start, start_cpu = time.perf_counter(), time.process_time()
    settings = dataclasses.replace(base, method=choice.name)
    uniform = method_spec(choice.name).uniform
    select = trainer.rows_to_attribute(inputs["advantages"], settings)
    weights = trainer.batch_token_weights(inputs, settings, select, choice.params)
    advantages = token_advantages(inputs["advantages"], weights, uniform)
    middle, middle_cpu = time.perf_counter(), time.process_time()
    halves = []
    for sign in (1, -1):
        layout.zero_grad()
        sub = half_inputs(trainer, inputs, advantages, sign)
        if sub is None:
            halves.append(torch.zeros(layout.size, device=layout.params[0].device))
            continue
        backward(trainer, sub)
        halves.append(layout.flat_grad())
    layout.zero_grad()
    seconds = {"weights": middle - start, "backward": time.perf_counter() - middle,
               "weights_cpu": middle_cpu - start_cpu, "backward_cpu": time.process_time() - middle_cpu}
    return MethodGradient(halves[0], halves[1], seconds)


def grpo_gradient(trainer, layout: ParamLayout, inputs: dict) -> torch.Tensor:
    """(D,) the plain GRPO gradient of a batch in one backward (the reference pool's)."""
    layout.zero_grad()
    backward(trainer, inputs, retain_graph=False)
    flat = layout.flat_grad()
    layout.zero_grad()
    return flat


SUM_CHUNK = 1 << 22  # elements per chunk of `endpoint_sums` (float64 temporaries of 32 MiB)


def endpoint_sums(gradient: MethodGradient, grpo: MethodGradient, star, halves: dict | None = None) -> dict:
    """The sums the endpoints are made of, per part (all = pos + neg, pos, neg) of a method's
    gradient v: <v, g*>, ||v||^2, <v, g_GRPO> (the same part of GRPO's gradient on the batch)
    and <sign(v), g*>; with `halves` ({"a": g*_a, "b": g*_b}, each half pool's own mean
    gradient) also <v, g*_a> and <v, g*_b> (dot_star_a, dot_star_b), which the statistics use
    for the contrasts against each half pool and for g*'s own noise. `star` and the halves:
    (D,) tensors or arrays (a memmap is read chunk by chunk). Float64 sums over float32 chunks."""
    names = ("dot_star", "sq", "dot_grpo", "sign_star") + tuple(f"dot_star_{h}" for h in (halves or {}))
    out = {part: dict.fromkeys(names, 0.0) for part in PARTS}
    for i in range(0, gradient.pos.numel(), SUM_CHUNK):
        cut = slice(i, i + SUM_CHUNK)
        s = chunk64(star, cut, gradient.pos.device)
        half = {h: chunk64(v, cut, gradient.pos.device) for h, v in (halves or {}).items()}
        pos, neg = gradient.pos[cut].double(), gradient.neg[cut].double()
        gpos, gneg = grpo.pos[cut].double(), grpo.neg[cut].double()
        for part, v, w in (("all", pos + neg, gpos + gneg), ("pos", pos, gpos), ("neg", neg, gneg)):
            sums = out[part]
            sums["dot_star"] += float(torch.dot(v, s))
            sums["sq"] += float(torch.dot(v, v))
            sums["dot_grpo"] += float(torch.dot(v, w))
            sums["sign_star"] += float(torch.dot(torch.sign(v), s))
            for h, g in half.items():
                sums[f"dot_star_{h}"] += float(torch.dot(v, g))
    return out


def base_settings(trainer) -> ReshapeSettings:
    """The trainer's reshaping settings with its configured probe (a warm-up probe belongs to
    the first steps of a run, not to a policy being measured)."""
    return ReshapeSettings.from_config(trainer.args)
