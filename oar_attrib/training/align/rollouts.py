"""The rollouts of an alignment run: screened groups, dealt into a reference pool and batches.

Every completion is sampled and scored by the trainer itself: one screening call is one
generation batch of the trainer (`batch_prompts` prompts x G completions through TRL's
`_generate_and_score_completions`, the call a training step makes), seeded per call so a
resumed screen samples what an uninterrupted one would. A group (one prompt's G completions)
is *mixed* when its rewards differ; only a mixed group has a non-zero GRPO advantage, and the
screen keeps the mixed ones, as DAPO's dynamic sampling fills a batch. The prompts come in a
seeded random order (`prompt_order`); the kept groups make the reference pool first and the
training batches after it (disjoint prompts), and a batch of groups from different calls is
padded again exactly as TRL pads one generation batch (`collate`, with TRL's own `pad`). The advantages stay the ones TRL computed
within each group, which is why `gradients.check_trainer` refuses batch-wide reward scaling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import compat


@dataclass(frozen=True)
class GroupRef:
    """A group: its screening `call` and its index `group` among that call's groups."""

    call: int
    group: int


def call_seed(seed: int, call: int) -> int:
    """The seed of screening call `call` of a run seeded `seed`."""
    return (seed * 1_000_003 + call) % (2**31 - 1)


def prompt_order(n: int, seed: int) -> list[int]:
    """The order in which the screen takes the `n` prompts of the training set."""
    return np.random.default_rng(seed).permutation(n).tolist()


def prompt_text(prompt) -> str:
    """A prompt as one string: a chat's last message, or the string itself."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)


def total_rewards(trainer) -> torch.Tensor:
    """(N,) the weighted total reward of each completion of the trainer's last generation batch."""
    rewards = trainer.last_rewards  # (N, n_funcs), kept by OARGRPOTrainer._calculate_rewards
    return (rewards * trainer.reward_weights.to(rewards.device)[None]).nansum(dim=1).float().cpu()


def screen_call(trainer, dataset, indices: list[int], seed: int) -> tuple[dict, list[dict]]:
    """One screening call: the prompts `indices` of `dataset`, G completions each, sampled and
    scored by the trainer. Returns (TRL's generation output on the CPU, one screen line per
    prompt: index, prompt text, rewards, mixed)."""
    from transformers import set_seed

    generations = trainer.num_generations
    rows = [dict(dataset[i]) for i in indices for _ in range(generations)]
    set_seed(seed)
    trainer.model.train()  # TRL samples with the training settings in train mode
    output = compat.generate_and_score(trainer, rows)
    rewards = total_rewards(trainer).view(len(indices), generations)
    lines = [{"index": int(i), "prompt": prompt_text(dataset[i]["prompt"]),
              "rewards": [float(r) for r in group], "mixed": bool(group.max() > group.min())}
             for i, group in zip(indices, rewards)]
    keep = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch")
    return {k: output[k].detach().cpu() for k in keep}, lines


def group_rows(output: dict, group: int, generations: int) -> dict:
    """The rows of one group of a generation output, unpadded: prompt (P,), and per completion
    its ids and mask (up to its own length: the mask's length, or the full width for a
    completion TRL masked out as truncated), advantage."""
    rows = range(group * generations, (group + 1) * generations)
    width = output["completion_ids"].shape[1]
    out = {"prompt": [], "completion_ids": [], "completion_mask": [], "advantages": []}
    for r in rows:
        out["prompt"].append(output["prompt_ids"][r][output["prompt_mask"][r].bool()])
        length = int(output["completion_mask"][r].sum()) or width
        out["completion_ids"].append(output["completion_ids"][r, :length])
        out["completion_mask"].append(output["completion_mask"][r, :length])
        out["advantages"].append(output["advantages"][r])
    return out


def collate(parts: list[dict], pad_token_id: int, pad_to_multiple_of: int | None = None) -> dict:
    """One generation batch from `group_rows` parts, padded as TRL pads (prompts left,
    completions right, TRL's `pad`), with `num_items_in_batch` the completion tokens in it.

    Returns prompt_ids, prompt_mask: (B, P); completion_ids, completion_mask: (B, C);
    advantages: (B,) float32; num_items_in_batch: () tensor."""
    from trl.trainer.utils import pad

    prompts = [p for part in parts for p in part["prompt"]]
    ids = [c for part in parts for c in part["completion_ids"]]
    masks = [m for part in parts for m in part["completion_mask"]]
    completion_mask = pad(masks, padding_value=0, padding_side="right", pad_to_multiple_of=pad_to_multiple_of)
    return {
        "prompt_ids": pad(prompts, padding_value=pad_token_id, padding_side="left", pad_to_multiple_of=pad_to_multiple_of),
        "prompt_mask": pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left",
                           pad_to_multiple_of=pad_to_multiple_of),
        "completion_ids": pad(ids, padding_value=pad_token_id, padding_side="right", pad_to_multiple_of=pad_to_multiple_of),
        "completion_mask": completion_mask,
        "advantages": torch.stack([a for part in parts for a in part["advantages"]]).float(),
        "num_items_in_batch": completion_mask.sum(),
    }


def batch_of(store, refs: list[GroupRef], trainer) -> dict:
    """The generation batch of the groups `refs` (their calls read from the store), on the
    trainer's device."""
    parts = [group_rows(store.call_output(ref.call), ref.group, trainer.num_generations) for ref in refs]
    batch = collate(parts, compat.tokenizer(trainer).pad_token_id, trainer.pad_to_multiple_of)
    return {k: v.to(trainer.accelerator.device) for k, v in batch.items()}
