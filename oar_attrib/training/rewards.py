"""Verifiable rewards with TRL's signature: `fn(prompts, completions, **columns) -> list[float]`.

TRL passes every dataset column as a keyword argument (one value per completion), so the
rewards read `answer` (and, for the world, `answer_format`). A completion is a string, or a
list of chat messages whose last one is the assistant's. Users can pass their own callables
with the same signature; `get_reward` finds the built-in ones by name, or a `module:function`.
"""
from __future__ import annotations

import functools
import importlib
import re
from typing import Callable

from oar_attrib.errors import unknown_name
from oar_attrib.grading import Grade, grade
from oar_attrib.spans import locate_answer
from oar_attrib.world import reward as world_answer_reward

from .errors import TrainingConfigError

RewardFn = Callable[..., list]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def completion_text(completion) -> str:
    """The text of a completion: a string, or the content of the last chat message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else str(content)
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _answers(answer, n: int) -> list:
    if answer is None:
        raise TrainingConfigError("this reward needs an 'answer' column in the dataset")
    return list(answer) if isinstance(answer, (list, tuple)) else [answer] * n


# ------------------------------------------------------------------ arithmetic world


def world_reward(prompts, completions, answer=None, answer_format=None, **kwargs) -> list[float]:
    """The world's exact reward: 1.0 when the integer after the last answer marker equals the
    answer (marker `####`, or `\\boxed{}` for rows whose answer_format is 'boxed')."""
    answers = _answers(answer, len(completions))
    fmts = answer_format
    if not isinstance(fmts, (list, tuple)):
        fmts = [fmts or "gsm8k"] * len(completions)
    return [world_answer_reward(completion_text(c), int(a), f or "gsm8k")
            for c, a, f in zip(completions, answers, fmts)]


# ------------------------------------------------------------------ GSM8K, MATH, AIME, AMC
#
# Both rewards grade the answer the span finder finds (`oar_attrib.grading.grade`), in the
# format the trainer reads (`answer_format`, a keyword `bind_reward` supplies, or a dataset
# column), so the reward pays for exactly the span OAR treats as the answer. A completion cut
# off at the length limit earns 0 when the reward is told the stop ids (`stop_ids`, from
# `bind_reward`; TRL passes `completion_ids`). `lenient=True` (or the `*_lenient` rewards) grades
# a completion without a span by its last number or expression anywhere, as before.


def _to_number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace("$", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def extract_number(text: str) -> float | None:
    """The final numeric answer: the last number of the answer span (`\\boxed{}`, `####`,
    `The answer is`), else (leniently) the last number of the text."""
    location = locate_answer(text)
    if location is not None:
        value = _to_number(text[location.start : location.end])
        if value is not None:
            return value
    return _to_number(text)


def numbers_equal(answer: str, gold: str) -> bool:
    """The last numbers of both equal to 1e-6 relative (commas, `$` ignored)."""
    pred, ref = _to_number(answer), _to_number(gold)
    return pred is not None and ref is not None and abs(pred - ref) <= 1e-6 * max(1.0, abs(ref))


def _per_row(value, n: int, default) -> list:
    if isinstance(value, (list, tuple)):
        return [default if v is None else v for v in value]
    return [default if value is None else value] * n


def truncated_rows(completion_ids, stop_ids, n: int) -> list[bool]:
    """Per completion, whether it was cut off: its ids do not end in a stop id. All False when
    either is unknown (a caller that does not say cannot be judged)."""
    if completion_ids is None or not stop_ids:
        return [False] * n
    stop = {int(s) for s in stop_ids}
    return [len(ids) > 0 and int(ids[-1]) not in stop for ids in completion_ids]


def grade_completions(completions, answer, *, answer_format=None, answer_pattern=None,
                      completion_ids=None, stop_ids=None, lenient: bool = False,
                      compare=None) -> list[Grade]:
    """The `Grade` of each completion (`oar_attrib.grading.grade`), with TRL's columns."""
    golds = _answers(answer, len(completions))
    fmts = _per_row(answer_format, len(completions), "auto")
    patterns = _per_row(answer_pattern, len(completions), None)
    cut = truncated_rows(completion_ids, stop_ids, len(completions))
    return [grade(completion_text(c), g, f, p, truncated=t, lenient=lenient, compare=compare)
            for c, g, f, p, t in zip(completions, golds, fmts, patterns, cut)]


def gsm8k_reward(prompts, completions, answer=None, lenient: bool = False, **kwargs) -> list[float]:
    """GSM8K numeric match: 1.0 when the last number of the answer span equals the gold number
    (commas, `$` ignored; compared to 1e-6 relative); 0 without a span or when cut off."""
    grades = grade_completions(completions, answer, lenient=lenient, compare=numbers_equal, **_grading(kwargs))
    return [g.reward for g in grades]


def math_verify_reward(prompts, completions, answer=None, lenient: bool = False, **kwargs) -> list[float]:
    """1.0 when math-verify finds the completion's final answer (the answer span) equivalent
    to the gold answer, else 0.0; 0 without a span or when cut off. lenient: without a span,
    math-verify's own reading of the whole text (`\\boxed{}` first, then the last expression)."""
    return [g.reward for g in grade_completions(completions, answer, lenient=lenient, **_grading(kwargs))]


def _grading(kwargs: dict) -> dict:
    keys = ("answer_format", "answer_pattern", "completion_ids", "stop_ids")
    return {k: kwargs.get(k) for k in keys}


def gsm8k_lenient_reward(prompts, completions, answer=None, **kwargs) -> list[float]:
    """`gsm8k_reward` with the lenient fallback (the last number anywhere): opt-in only."""
    return gsm8k_reward(prompts, completions, answer, lenient=True, **kwargs)


def math_verify_lenient_reward(prompts, completions, answer=None, **kwargs) -> list[float]:
    """`math_verify_reward` with the lenient fallback (the last expression anywhere): opt-in only."""
    return math_verify_reward(prompts, completions, answer, lenient=True, **kwargs)


def bind_reward(fn: RewardFn, **settings) -> RewardFn:
    """`fn` with keyword settings (answer_format, answer_pattern, stop_ids) supplied to every
    call unless the call (a dataset column) gives its own; keeps `fn`'s name, which TRL logs,
    and its `correct_threshold`."""
    @functools.wraps(fn)
    def bound(prompts, completions, **kwargs):
        return fn(prompts, completions, **{**settings, **{k: v for k, v in kwargs.items() if v is not None}})

    return bound


# A reward function may say from which reward a completion counts as correct, as the attribute
# `correct_threshold` (the run store records `correct = reward >= it`); the built-ins give 1.0
# exactly to right answers. A partial-credit reward declares its own, or the user sets
# OARConfig.oar_correct_threshold.
CORRECT_THRESHOLD = "correct_threshold"
for _fn in (world_reward, gsm8k_reward, math_verify_reward, gsm8k_lenient_reward, math_verify_lenient_reward):
    setattr(_fn, CORRECT_THRESHOLD, 1.0)


def correctness(per_function, reward_funcs, total, threshold: float | None = None) -> list:
    """Whether each completion is correct, for the run store: `total >= threshold` when the
    user set one, else every reward function that declares `correct_threshold` at or above
    it; None where nothing says (no threshold and no function declares one).

    per_function: (N, F) rewards of each function (NaN: not scored); total: N weighted sums."""
    if threshold is not None:
        return [bool(t >= threshold) for t in total]
    declared = [(j, getattr(fn, CORRECT_THRESHOLD)) for j, fn in enumerate(reward_funcs)
                if isinstance(getattr(fn, CORRECT_THRESHOLD, None), (int, float))]
    if not declared:
        return [None] * len(total)
    return [all(float(row[j]) >= at for j, at in declared) for row in per_function]


REWARDS: dict[str, RewardFn] = {
    "world": world_reward,
    "gsm8k": gsm8k_reward,
    "math_verify": math_verify_reward,
    "gsm8k_lenient": gsm8k_lenient_reward,
    "math_verify_lenient": math_verify_lenient_reward,
}


def get_reward(name: str) -> RewardFn:
    """A built-in reward by name, or any callable named as `package.module:function`."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise TrainingConfigError(f"cannot import reward {name!r}: {err}") from None
        if not callable(fn):
            raise TrainingConfigError(f"reward {name!r} is not callable")
        return fn
    if name not in REWARDS:
        raise unknown_name("reward", name, [*REWARDS, "<module>:<function>"])
    return REWARDS[name]
