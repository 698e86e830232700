"""SFT of the tiny arithmetic reasoning model that ships as `arith-tiny`.

    python -m oar_attrib.training.pretrain --out oar_attrib/assets/arith-tiny

Seeded and reproducible on CPU: the tokenizer is trained on a seeded corpus, the problems of
each step come from a seeded generator, and torch runs deterministic kernels. The loss is on the
response tokens only (the prompt is context). A curriculum moves the preset mix from
`default` towards `medium`, under a cosine learning-rate schedule with warm-up.

A share of the reasoning tokens (`mask_rate`) is the pad token in the input, their targets kept:
OAR-P masks with the pad token and IG's baseline is it, so the model should have seen a missing
token and learned to read what is left. Without it a masked `=` or `+` is an input the model never
met, and its answer moves for that reason rather than for what the token said.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import Qwen2ForCausalLM

from oar_attrib.commands import add_dataclass_args, dataclass_from_args
from oar_attrib.defaults import option
from oar_attrib.models import random_qwen2
from oar_attrib.world.evaluation import evaluate_world
from oar_attrib.world import PRESETS, WorldConfig, generate_problems
from oar_attrib.inputs.spans import ANSWER, REASONING, locate_answer, segment_tokens
from oar_attrib.world.tokenizer import build_tokenizer


@dataclass
class PretrainConfig:
    out: str = option("runs/arith-tiny", "checkpoint folder to write")
    seed: int = option(0, "seed of data, init and order")
    steps: int = option(8000, "optimizer steps")
    batch_size: int = option(32, "sequences per step")
    lr: float = option(3e-3, "peak learning rate (AdamW)")
    warmup: int = option(100, "linear warm-up steps")
    weight_decay: float = option(0.01, "AdamW weight decay")
    hidden: int = option(128, "model width")
    layers: int = option(4, "decoder layers")
    heads: int = option(4, "attention heads")
    vocab_size: int = option(320, "BPE vocabulary size")
    answer_weight: float = option(4.0, "loss weight of the final answer's tokens: the answer is the one step computed "
                                       "from distant results, and only 2-3 of ~50 response tokens")
    boxed_rate: float = option(0.15, "share of \\boxed{} answers")
    eval_n: int = option(200, "held-out problems per preset at the end")
    group_size: int = option(8, "samples per problem for the group check")
    threads: int = option(2, "torch CPU threads")
    mask_rate: float = option(0.15, "share of reasoning tokens replaced by the pad token in the input (targets kept), "
                                    "so that a masked token, as OAR-P and IG's baseline make one, is a context the "
                                    "model has seen: it reads what is left instead of failing on an unknown input")

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.warmup < 0:
            raise ValueError("steps and batch_size must be >= 1 and warmup >= 0")
        if not 0.0 <= self.mask_rate < 1.0:
            raise ValueError(f"mask_rate={self.mask_rate} must lie in [0, 1)")
        if not 0.0 <= self.boxed_rate <= 1.0:
            raise ValueError(f"boxed_rate={self.boxed_rate} must lie in [0, 1]")


# The tokenizer's training text: problems of these worlds, both answer formats. Fixed here, not
# read from PRESETS, so that a new preset does not change the tokenizer of a re-run.
TOKENIZER_WORLDS = (
    WorldConfig(n_steps=2, n_distractors=0, max_given=9, max_value=20),
    WorldConfig(), PRESETS["medium"], PRESETS["hard"],
)


def curriculum(progress: float) -> dict[str, float]:
    """Preset mix (weights summing to 1) at training progress in [0, 1], moved linearly from
    `start` to `end`. `default` (what RL trains on), `recall` and `recall-wide` (what
    attribution is scored on) stay throughout, so that the model reads the traces recall
    scores; `medium` grows and a little `hard` is added for longer traces. The mixes that were
    tried and their accuracies are in docs/benchmarks.md ("Pretraining arith-tiny")."""
    start = {"default": 0.45, "recall": 0.15, "recall-wide": 0.15, "medium": 0.2, "hard": 0.05}
    end = {"default": 0.35, "recall": 0.15, "recall-wide": 0.15, "medium": 0.25, "hard": 0.1}
    return {k: (1 - progress) * start[k] + progress * end[k] for k in start}


def batch_problems(step: int, cfg: PretrainConfig) -> list:
    """The problems of one step: one preset per step, drawn from the curriculum's mix, so that
    rows of a batch have similar lengths and little padding."""
    mix = curriculum(step / max(cfg.steps - 1, 1))
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    preset = list(mix)[int(torch.multinomial(torch.tensor(list(mix.values())), 1, generator=gen))]
    n_boxed = int(torch.binomial(torch.tensor(float(cfg.batch_size)), torch.tensor(cfg.boxed_rate), generator=gen))
    seed = cfg.seed * 10_000_019 + step
    return generate_problems(cfg.batch_size - n_boxed, preset, seed=seed, split="train") + generate_problems(
        n_boxed, preset, seed=seed, split="train", answer_format="boxed"
    )


def encode(problems, tokenizer, answer_weight: float = 1.0, mask_rate: float = 0.0,
           generator: torch.Generator | None = None):
    """input_ids, attention_mask, labels (-100 on the prompt and padding) and per-token loss
    weights (`answer_weight` on the final answer's tokens, 1 elsewhere): each (B, L). With
    `mask_rate`, that share of the reasoning tokens (OAR's scored segment, before the answer
    marker) is the pad token in input_ids; labels keep the true tokens."""
    rows, labels, weights = [], [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids
        enc = tokenizer(p.solution, return_offsets_mapping=True)
        # The segments OAR scores by: reasoning (maskable), the answer (weighted), the rest.
        segments = segment_tokens(enc.offset_mapping, locate_answer(p.solution)).labels
        w = [answer_weight if label == ANSWER else 1.0 for label in segments]
        response = enc.input_ids + [tokenizer.eos_token_id]
        inputs = list(response)
        if mask_rate > 0:
            draw = torch.rand(len(enc.input_ids), generator=generator).tolist()
            for i, label in enumerate(segments):
                if label == REASONING and draw[i] < mask_rate:
                    inputs[i] = tokenizer.pad_token_id
        rows.append(prompt + inputs)
        labels.append([-100] * len(prompt) + response)
        weights.append([0.0] * len(prompt) + w + [1.0])
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    lab = torch.full((len(rows), width), -100)
    wts = torch.zeros((len(rows), width))
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, l, w) in enumerate(zip(rows, labels, weights)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        wts[i, : len(w)] = torch.tensor(w)
        mask[i, : len(r)] = True
    return ids, mask, lab, wts


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, weighted per target token. logits (B, L, V); labels and
    weights (B, L), aligned with the input (the target of position i is labels[i + 1])."""
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100, reduction="none"
    )
    w = weights[:, 1:].flatten() * (labels[:, 1:].flatten() != -100)
    return (ce * w).sum() / w.sum()


def build_model(cfg: PretrainConfig, vocab: int, pad_id: int, eos_id: int) -> Qwen2ForCausalLM:
    """A random Qwen2 of `cfg`'s size, drawn from the global RNG (seeded by the caller)."""
    model = random_qwen2(vocab, seed=None, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads,
                         kv_heads=cfg.heads, intermediate=4 * cfg.hidden, max_positions=512,
                         init_std=0.02, pad_id=pad_id, eos_id=eos_id, bos_token_id=eos_id,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return model.train()


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(cfg.steps - cfg.warmup, 1)
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(cfg: PretrainConfig, command: str) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    corpus = [p.prompt + p.solution for world in TOKENIZER_WORLDS for fmt in ("gsm8k", "boxed")
              for p in generate_problems(1500, world, seed=cfg.seed + 99, answer_format=fmt)]
    tokenizer = build_tokenizer(corpus, cfg.vocab_size)
    model = build_model(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    t0, curve = time.time(), []
    for step in range(cfg.steps):
        gen = torch.Generator().manual_seed(cfg.seed * 7_000_003 + step)
        ids, mask, labels, weights = encode(batch_problems(step, cfg), tokenizer, cfg.answer_weight,
                                            cfg.mask_rate, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = weighted_loss(model(input_ids=ids, attention_mask=mask.long()).logits, labels, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == cfg.steps - 1:
            curve.append({"step": step, "loss": round(loss.item(), 4), "s": round(time.time() - t0, 1)})
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step, cfg):.2e}  {time.time() - t0:6.0f}s", flush=True)
    train_s = time.time() - t0
    model.eval()
    results = {}
    for preset in PRESETS:
        res = evaluate_world(model, tokenizer, preset, n=cfg.eval_n, seed=0, group_size=cfg.group_size)
        results[preset] = res.as_dict()
        print(json.dumps(res.as_dict()), flush=True)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    card = {
        "name": "arith-tiny",
        "command": command,
        "config": asdict(cfg),
        "parameters": n_params,
        "train_seconds": round(train_s, 1),
        "torch": torch.__version__,
        "held_out": results,
        "loss_curve": curve,
    }
    (out / "model_card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dataclass_args(parser, PretrainConfig)
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    train(dataclass_from_args(PretrainConfig, args), "python -m oar_attrib.training.pretrain " + shlex.join(argv))


if __name__ == "__main__":
    main()
