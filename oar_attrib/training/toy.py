"""Tiny policies, the world tokenizer and scripted rollouts, built in code (tests and benches).

A random tiny model rarely writes an answer marker, so attribution would have nothing to score.
`ScriptedRollout` replaces sampling with known completions of each world problem (right,
wrong, without an answer) so that rewards differ within a group and spans exist; with
`generate_tokens` > 0 it still runs the model's `generate` for that many tokens per completion
first, so that a timed step pays the cost of generation.
"""
from __future__ import annotations

import functools
import re

import torch
from transformers import Qwen2ForCausalLM

from oar_attrib.models.generation import continue_rows
from oar_attrib.models import random_qwen2
from oar_attrib.world import Problem, generate_problems
from oar_attrib.world.tokenizer import build_tokenizer

VARIANTS = ("right", "wrong", "no_answer", "right")


@functools.lru_cache(maxsize=2)
def world_tokenizer(vocab_size: int = 256):
    """The world's byte-level BPE tokenizer, trained on a fixed corpus (same ids every call)."""
    corpus = [p.prompt + p.solution for preset in ("default", "medium", "hard") for fmt in ("gsm8k", "boxed")
              for p in generate_problems(200, preset, seed=99, split=None, answer_format=fmt)]
    return build_tokenizer(corpus, vocab_size)


def tiny_policy(tokenizer, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
                vocab_size: int | None = None, init_std: float = 0.3) -> Qwen2ForCausalLM:
    """A seeded random Qwen2 causal LM over `tokenizer`'s ids (tied embeddings, see
    `models.random_qwen2` for why init_std is large)."""
    eos = tokenizer.eos_token_id
    return random_qwen2(vocab_size or len(tokenizer), seed=seed, hidden=hidden, layers=layers, heads=heads,
                        max_positions=512, init_std=init_std, pad_id=tokenizer.pad_token_id, eos_id=eos,
                        bos_token_id=eos)


def variant_text(problem: Problem, variant: str) -> str:
    """The reference solution, with a wrong final answer, or with the answer line removed."""
    solution = problem.solution
    if variant == "right":
        return solution
    if variant == "wrong":
        return solution.replace(f"#### {problem.answer}", f"#### {problem.answer + 1}")
    if variant == "no_answer":
        return re.sub(r"\s*(####.*|\\boxed\{.*\})$", "", solution)
    raise ValueError(f"unknown variant {variant!r}; known: right, wrong, no_answer")


class ScriptedRollout:
    """A TRL `rollout_func`: completion i of the batch is variant i % len(variants) of the
    reference solution of its prompt's problem, followed by EOS."""

    def __init__(self, problems: list[Problem], tokenizer, variants=VARIANTS, generate_tokens: int = 0):
        self.by_prompt = {p.prompt: p for p in problems}
        self.tokenizer = tokenizer
        self.variants = tuple(variants)
        self.generate_tokens = generate_tokens

    def completion_ids(self, prompt: str, index: int) -> list[int]:
        text = variant_text(self.by_prompt[prompt], self.variants[index % len(self.variants)])
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]

    def __call__(self, prompts: list[str], trainer) -> dict:
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        if self.generate_tokens > 0:
            self._generate(prompt_ids, trainer)
        completions = [self.completion_ids(p, i) for i, p in enumerate(prompts)]
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    @torch.no_grad()
    def _generate(self, prompt_ids: list[list[int]], trainer) -> None:
        """Sample `generate_tokens` tokens per prompt (discarded): the cost of real rollouts."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        continue_rows(model, prompt_ids, self.tokenizer.pad_token_id, max_new_tokens=self.generate_tokens,
                      min_new_tokens=self.generate_tokens, do_sample=True)
