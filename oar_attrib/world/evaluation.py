"""Accuracy of a model on held-out arithmetic-world problems."""
from __future__ import annotations

from dataclasses import dataclass

from ..models.generation import generate
from ..world import WorldConfig, extract_answer, generate_problems, get_config


@dataclass
class EvalResult:
    preset: str
    n: int
    accuracy: float
    format_rate: float
    mixed_group_rate: float | None  # share of problems whose sampled group has right and wrong
    group_size: int
    seed: int
    # Mean accuracy of the sampled answers (all group_size per problem): the quantity the RL
    # objective raises, which greedy accuracy shows only once the mode itself changes.
    sampled_accuracy: float | None = None
    # Whether each held-out problem's greedy answer was right, in problem order: what a grid
    # stores per problem so that its report can resample problems as well as seeds.
    outcomes: list[bool] | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def evaluate_world(
    model,
    tokenizer,
    preset: str | WorldConfig = "default",
    n: int = 200,
    seed: int = 0,
    group_size: int = 0,
    temperature: float = 1.0,
    batch_size: int = 64,
    progress: bool = False,
    sample_batch_size: int | None = None,
) -> EvalResult:
    """Greedy accuracy and format rate on `n` held-out ('test' split) problems; with
    `group_size` > 0 also sample that many answers per problem at `temperature` and report
    their mean accuracy and the share of problems whose group holds both a right and a wrong
    answer (GRPO learns only from those). Sampling is seeded by `seed`: the same model gives
    the same figures. `batch_size` and `sample_batch_size` (default: `batch_size`) are the
    sequences per generate call, greedy and sampled."""
    cfg = get_config(preset)
    problems = generate_problems(n, cfg, seed=seed, split="test")
    prompts = [p.prompt for p in problems]
    ids = generate(model, tokenizer, prompts, batch_size=batch_size, progress=progress)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    answers = [extract_answer(t, cfg.answer_format) for t in texts]
    correct = [a == p.answer for a, p in zip(answers, problems)]
    mixed = sampled_accuracy = None
    if group_size > 0:
        sampled = generate(
            model, tokenizer, prompts, do_sample=True, temperature=temperature,
            num_return_sequences=group_size, batch_size=max(1, (sample_batch_size or batch_size) // group_size),
            seed=seed, progress=progress,
        )
        texts_s = tokenizer.batch_decode(sampled, skip_special_tokens=True)
        groups = [[extract_answer(t, cfg.answer_format) == p.answer
                   for t in texts_s[i * group_size : (i + 1) * group_size]]
                  for i, p in enumerate(problems)]
        mixed = sum(len(set(g)) == 2 for g in groups) / n
        sampled_accuracy = sum(map(sum, groups)) / (n * group_size)
    return EvalResult(
        preset=preset if isinstance(preset, str) else "custom",
        n=n,
        accuracy=sum(correct) / n,
        format_rate=sum(a is not None for a in answers) / n,
        mixed_group_rate=mixed,
        group_size=group_size,
        seed=seed,
        sampled_accuracy=sampled_accuracy,
        outcomes=correct,
    )
