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
import threading
from typing import Callable

from oar_attrib.errors import unknown_name
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


# ------------------------------------------------------------------ GSM8K


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
    `The answer is`), else the last number of the text."""
    location = locate_answer(text)
    if location is not None:
        value = _to_number(text[location.start : location.end])
        if value is not None:
            return value
    return _to_number(text)


def gsm8k_reward(prompts, completions, answer=None, **kwargs) -> list[float]:
    """GSM8K numeric match: 1.0 when the final number equals the gold number (commas, `$`
    ignored; compared to 1e-6 relative)."""
    out = []
    for completion, gold in zip(completions, _answers(answer, len(completions))):
        pred, ref = extract_number(completion_text(completion)), _to_number(str(gold))
        ok = pred is not None and ref is not None and abs(pred - ref) <= 1e-6 * max(1.0, abs(ref))
        out.append(1.0 if ok else 0.0)
    return out


# ------------------------------------------------------------------ MATH / AIME / AMC


@functools.lru_cache(maxsize=8192)  # a gold answer is parsed once, not once per completion
def _gold(answer: str):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    # Gold answers are bare LaTeX ("\\frac{14}{3}", "(3, \\frac{\\pi}{2})"): boxing them makes
    # the parser take the whole answer as one expression.
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    return tuple(parse(f"\\boxed{{{answer}}}", extraction_config=configs, parsing_timeout=_timeout()))


def _timeout() -> int | None:
    # math-verify times out with SIGALRM, which only the main thread may set.
    return 5 if threading.current_thread() is threading.main_thread() else None


def math_verify_reward(prompts, completions, answer=None, **kwargs) -> list[float]:
    """1.0 when math-verify finds the completion's final answer (`\\boxed{}` first, then the
    last LaTeX or plain expression) equivalent to the gold answer, else 0.0."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    out = []
    for completion, gold in zip(completions, _answers(answer, len(completions))):
        gold_parsed = _gold(str(gold))
        pred = parse(completion_text(completion), extraction_config=configs, parsing_timeout=_timeout())
        ok = bool(gold_parsed) and bool(pred) and verify(list(gold_parsed), pred, timeout_seconds=_timeout())
        out.append(1.0 if ok else 0.0)
    return out


# A reward function may say from which reward a completion counts as correct, as the attribute
# `correct_threshold` (the run store records `correct = reward >= it`); the built-ins give 1.0
# exactly to right answers. A partial-credit reward declares its own, or the user sets
# OARConfig.oar_correct_threshold.
CORRECT_THRESHOLD = "correct_threshold"
for _fn in (world_reward, gsm8k_reward, math_verify_reward):
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
