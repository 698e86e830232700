"""Each imported value checked on its own row: a value of the wrong type or out of range is
the message of why its row is skipped (never a traceback that loses the file, never a value
the store cannot hold or the group rule cannot use).

Each check returns the usable value, None when absent, or a `Bad` message.
"""
from __future__ import annotations

import json
import math

from ..inputs.pairs import is_chat

INT64 = 2 ** 63  # SQLite's INTEGER holds -INT64 .. INT64 - 1


class Bad(str):
    """Why a value cannot be used (a str, so it can be told from a usable str by type)."""


def _shown(value) -> str:
    if isinstance(value, int) and value.bit_length() > 256:  # (str() fails past 4300 digits)
        digits = len(str(abs(value))) if value.bit_length() < 14000 else "over 4000"
        return f"<an integer of {digits} digits>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def as_number(value, what: str = "reward") -> float | None | Bad:
    """A finite float (a number, or a string of one), None when absent, or why not."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if not isinstance(value, (str, bool)):
            return Bad(f"the {what} is {type(value).__name__} {_shown(value)}, not a number")
        try:
            value = float(value)
        except ValueError:
            return Bad(f"the {what} {_shown(value)} is not a number")
    try:
        value = float(value)
    except OverflowError:
        return Bad(f"the {what} {_shown(value)} is too large for a float")
    return value if math.isfinite(value) else Bad(f"the {what} {value} is not finite")


def total(parts: list[float], what: str = "reward") -> float | None | Bad:
    """The sum of finite numbers, None for none, or why not (1e308 + 1e308 is inf)."""
    if not parts:
        return None
    value = sum(parts)
    if not math.isfinite(value):
        return Bad(f"the {what} columns sum to {value} (from {', '.join(map(str, parts))}); "
                   "a reward must be finite")
    return value


def as_step(value) -> int | None | Bad:
    """A training step: an integer (or an integral float) that SQLite can hold."""
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return Bad(f"the step {_shown(value)} is not an integer")
    if not -INT64 <= value < INT64:
        return Bad(f"the step {_shown(value)} is out of range (|step| < 2**63)")
    return value


def as_group(value) -> object | None | Bad:
    """A group key: a string, an integer SQLite can hold, or a finite float."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Bad(f"the group {_shown(value)} must be a string or a number")
    if isinstance(value, float) and not math.isfinite(value):
        return Bad(f"the group {value} is not finite")
    if isinstance(value, int) and not -INT64 <= value < INT64:
        return Bad(f"the group {_shown(value)} is out of range (|group| < 2**63)")
    return value


def as_verdict(value) -> bool | None:
    """A logged verdict (`correct`, verl's `acc`): a bool, or a finite number's truth."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return bool(value)
    return None


def as_gold(value) -> str | None | Bad:
    """A reference answer as text: a string, a number, or JSON of a list or an object."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return Bad(f"the reference answer {value} is not finite")
        return str(value) if not isinstance(value, int) or value.bit_length() < 13000 else Bad(
            "the reference answer is an integer of more than 3900 digits")
    if isinstance(value, (list, dict)):
        return json.dumps(loggable(value), ensure_ascii=False)
    return Bad(f"the reference answer is {type(value).__name__}, not text or a number")


def loggable(value, depth: int = 0):
    """A JSON-safe copy of a logged value: non-finite floats and integers SQLite cannot hold
    become None, other types their repr; nesting deeper than 8 is cut."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value if -INT64 <= value < INT64 else None
    if depth >= 8:
        return None
    if isinstance(value, dict):
        return {str(k): loggable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [loggable(v, depth + 1) for v in value]
    return _shown(value)


def check_text(prompt, response, names=("prompt", "response")) -> Bad | None:
    """Why a prompt/response pair cannot be a trace, or None. `names` name the two fields
    as the source calls them (verl: input, output; TRL: prompt, completion)."""
    what, said = names
    if isinstance(prompt, list):
        if not is_chat(prompt):
            return Bad(f"the {what} is a list but not of {{'role': str, 'content': str}} messages")
    elif not isinstance(prompt, str):
        return Bad(f"the {what} is {type(prompt).__name__} {_shown(prompt)}, not text or chat messages")
    if not isinstance(response, str):
        return Bad(f"the {said} is {type(response).__name__} {_shown(response)}, not text")
    if not response.strip():
        return Bad(f"the {said} is empty; there is nothing to attribute")
    return None


def text_bytes(prompt, response) -> int:
    """The UTF-8 bytes of a pair's texts (a chat prompt: its messages' contents)."""
    if isinstance(prompt, list):
        prompt = "".join(m["content"] for m in prompt)
    return len(prompt.encode("utf-8", "surrogatepass")) + len(response.encode("utf-8", "surrogatepass"))
