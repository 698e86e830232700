"""The world's final answers: how a solution writes one, how a response's is read, its reward.

An answer is read with the pipeline's span finder (`spans.locate_answer` in the world's format),
so the reward reads the same characters that attribution scores as the answer span: the last
`#### N` (gsm8k) or the last balanced `\\boxed{N}` (boxed). Only an integer there is an
answer: `#### 3.5`, `\\boxed{x}` or a marker with nothing after it give None (reward 0).
"""
from __future__ import annotations

import re

from ..defaults import WORLD_FORMAT
from ..errors import unknown_name
from ..inputs.spans import locate_answer

WORLD_FORMATS = ("gsm8k", "boxed")  # the formats a world solution writes its answer in
_INTEGER = re.compile(r"-?\d+")


def format_answer(value: int, fmt: str = WORLD_FORMAT) -> str:
    """The answer line of a solution: `#### 29` or `\\boxed{29}`."""
    if fmt == "gsm8k":
        return f"#### {value}"
    if fmt == "boxed":
        return f"\\boxed{{{value}}}"
    raise unknown_name("answer format", fmt, WORLD_FORMATS)


def extract_answer(text: str, fmt: str = WORLD_FORMAT) -> int | None:
    """The integer of the final answer of `fmt` in `text` (see the module docstring), or None.
    Leading zeros are read as a number (`#### 007` is 7); text after the number is ignored."""
    if fmt not in WORLD_FORMATS:
        raise unknown_name("answer format", fmt, WORLD_FORMATS)
    found = locate_answer(text, fmt)
    if found is None:
        return None
    value = text[found.start:found.end]
    return int(value) if _INTEGER.fullmatch(value) else None


def reward(text: str, answer: int, fmt: str = WORLD_FORMAT) -> float:
    """1.0 when the extracted final answer equals `answer`, else 0.0 (also when none is found)."""
    got = extract_answer(text, fmt)
    return 1.0 if got is not None and got == answer else 0.0
