"""Accuracy of a model on a JSONL math set (GSM8K, MATH-500, AIME, AMC in ../shared/data's
layout): greedy and sampled answers, checked by math-verify against the gold `answer`.

The prompts are the training prompts (`data.math_dataset`: the question with the `boxed`
instruction, as a chat when the tokenizer has a template); the check is the training reward
(`rewards.math_verify_reward`), so an evaluation and a training run agree on what is right.
"""
from __future__ import annotations

from pathlib import Path

from .callbacks import reward_evaluator
from .data import math_dataset
from .rewards import math_verify_reward


def evaluate_math(model, tokenizer, path: str | Path, *, n: int | None = None, samples: int = 0,
                  temperature: float = 1.0, max_new_tokens: int = 1024, batch_size: int = 16,
                  template: str = "boxed", system: str | None = None, seed: int = 0,
                  progress: bool = False) -> dict:
    """{data, n, accuracy (greedy), and with samples > 0: samples, temperature,
    accuracy_sampled (the mean over `samples` answers per record)} on the first `n` records."""
    dataset = math_dataset(path, tokenizer, template, system, n)
    evaluate = reward_evaluator(tokenizer, dataset, math_verify_reward, max_new_tokens, batch_size,
                                samples=samples, temperature=temperature, seed=seed, progress=progress)
    result = {"data": str(path), "n": len(dataset), **evaluate(model)}
    if samples:
        result |= {"samples": samples, "temperature": temperature}
    return result

