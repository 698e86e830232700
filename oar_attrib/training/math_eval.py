"""Accuracy of a model on a JSONL math set (GSM8K, MATH-500, AIME, AMC in ../shared/data's
layout): greedy and sampled answers, checked by math-verify against the gold `answer`.

The prompts are the training prompts (`data.math_dataset`: the question with the `boxed`
instruction, as a chat when the tokenizer has a template); answers are decoded and graded by
the rollouts (`oar_attrib.rollouts.sample_groups`: batches sorted by prompt length, each
prompt prefilled once, the greedy answer decoded in the same loop as the sampled ones) and
graded as the training reward `math_verify_reward` grades (`grading.grade`: the answer span,
in any format, 0 when cut off at max_new_tokens), so an evaluation and a training run agree on what is right.
"""
from __future__ import annotations

from pathlib import Path

from oar_attrib.defaults import PROMPT_FORMAT
from oar_attrib.rollouts import Question, sample_groups

from .data import math_dataset


def evaluate_math(model, tokenizer, path: str | Path, *, n: int | None = None, samples: int = 0,
                  temperature: float = 1.0, max_new_tokens: int = 1024, batch_size: int = 16,
                  template: str = PROMPT_FORMAT, system: str | None = None, seed: int = 0,
                  progress: bool = False) -> dict:
    """{data, n, accuracy (greedy), and with samples > 0: samples, temperature,
    accuracy_sampled (the mean over `samples` answers per record)} on the first `n` records."""
    from tqdm.auto import tqdm

    dataset = math_dataset(path, tokenizer, template, system, n)
    questions = [Question(i, p, a, f"{Path(path).name}:{r}")
                 for i, (p, a, r) in enumerate(zip(dataset["prompt"], dataset["answer"], dataset["id"]))]
    greedy, sampled = [], []
    with tqdm(total=len(questions), desc="evaluate", unit="record", disable=not progress) as bar:
        for groups in sample_groups(model, tokenizer, questions, samples=1 + samples, greedy=True,
                                    temperature=temperature, max_new_tokens=max_new_tokens,
                                    answer_format="auto",
                                    batch_size=batch_size, seed=seed):
            for group in groups:
                greedy.append(group[0]["reward"])
                sampled += [r["reward"] for r in group[1:]]
            bar.update(len(groups))
            bar.set_postfix(accuracy=f"{sum(greedy) / len(greedy):.3f}")
    result = {"data": str(path), "n": len(dataset), "accuracy": sum(greedy) / max(len(greedy), 1)}
    if samples:
        result |= {"accuracy_sampled": sum(sampled) / max(len(sampled), 1), "samples": samples,
                   "temperature": temperature}
    return result
