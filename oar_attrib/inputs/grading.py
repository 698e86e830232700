"""Grading a completion against a gold answer: one notion of "the answer" for reward and credit.

The answer graded is the one the span finder finds (`spans.locate_answer`, in the format the
prompt asks for), the very span whose tokens OAR treats as the answer: a completion without
one, or cut off at the length limit, earns 0 (`why` says which). Parsing the whole text for
its last expression, as math-verify does on its own, pays for numbers that happen to appear
in rambling; it is here only as an explicit opt-in (`lenient=True`).

Answers are compared by math-verify (`parse` / `verify`), or by a caller's `compare`.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable

from ..defaults import ANSWER_FORMAT
from .spans import locate_answer

CORRECT, WRONG, NO_ANSWER, TRUNCATED, UNPARSABLE = "correct", "wrong", "no_answer", "truncated", "unparsable"
# "lenient": no answer span, but the lenient fallback found an expression that matches.
LENIENT = "lenient"
WHYS = (CORRECT, WRONG, NO_ANSWER, TRUNCATED, UNPARSABLE, LENIENT)


@dataclass(frozen=True)
class Grade:
    """How one completion was graded.

    reward: 1.0 for a right final answer, else 0.0. correct: reward == 1.0.
    answer: the text graded (the answer span's text), or None without a span.
    span: the answer's character span (start, end) in the completion, or None.
    why: one of WHYS.
    """

    reward: float
    correct: bool
    answer: str | None
    span: tuple[int, int] | None
    why: str

    def __post_init__(self) -> None:
        if self.why not in WHYS:
            raise ValueError(f"unknown grade reason {self.why!r}; known: {', '.join(WHYS)}")


def parsing_timeout() -> int | None:
    """math-verify's timeout: it uses SIGALRM, which only the main thread may set."""
    return 5 if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=8192)  # a gold answer is parsed once, not once per completion
def parse_answer(answer: str) -> tuple:
    """math-verify's parse of a bare answer ("\\frac{14}{3}", "18", "(3, \\frac{\\pi}{2})").

    Boxing it makes the parser take the whole answer as one expression."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    return tuple(parse(f"\\boxed{{{answer}}}", extraction_config=configs, parsing_timeout=parsing_timeout()))


def _parse_anywhere(text: str) -> list:
    """The lenient reading: `\\boxed{}` first, then the last LaTeX or plain expression anywhere."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return parse(text, extraction_config=configs, parsing_timeout=parsing_timeout())


def math_equal(answer: str, gold: str) -> bool:
    """Whether math-verify finds `answer` equivalent to `gold` (both bare answers)."""
    from math_verify import verify

    pred, ref = parse_answer(answer), parse_answer(gold)
    return bool(pred) and bool(ref) and verify(list(ref), list(pred), timeout_seconds=parsing_timeout())


def _lenient(text: str, gold: str) -> bool:
    from math_verify import verify

    pred, ref = _parse_anywhere(text), parse_answer(gold)
    return bool(pred) and bool(ref) and verify(list(ref), pred, timeout_seconds=parsing_timeout())


def grade(completion: str, gold, answer_format: str = ANSWER_FORMAT, answer_pattern=None, *,
          truncated: bool = False, lenient: bool = False,
          compare: Callable[[str, str], bool] | None = None) -> Grade:
    """Grade `completion` against the gold answer.

    The final answer is the span `locate_answer(completion, answer_format, answer_pattern)`
    finds. truncated: the completion was cut off at the length limit (reward 0, `truncated`,
    whatever it says). lenient: without a span, grade the whole text instead of giving 0
    (math-verify's own reading: its last expression; or `compare` on the whole text).
    compare(answer, gold) -> bool replaces math-verify's equivalence (e.g. a numeric match).
    """
    gold = str(gold)
    location = locate_answer(completion, answer_format, answer_pattern)
    span = None if location is None else location.span
    answer = None if location is None else completion[location.start : location.end]
    if truncated:
        return Grade(0.0, False, answer, span, TRUNCATED)
    if location is None:
        if lenient and (compare or _lenient)(completion, gold):
            return Grade(1.0, True, None, None, LENIENT)
        return Grade(0.0, False, None, None, NO_ANSWER)
    if compare is None:
        if not parse_answer(answer):
            return Grade(0.0, False, answer, span, UNPARSABLE)
        compare = math_equal
    ok = bool(compare(answer, gold))
    return Grade(1.0 if ok else 0.0, ok, answer, span, CORRECT if ok else WRONG)
