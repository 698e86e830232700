"""Settings checked against the types of the dataclass fields they fill, so that a typo such
as `learning_rate=abc` fails in `--dry-run` with the field's type, not steps later in torch."""
from __future__ import annotations

import enum
import types
import typing

from .errors import TrainingConfigError


def fits(value, tp) -> bool:
    """Whether `value` (parsed from YAML) is acceptable for a field annotated `tp`. Typing
    constructs it does not know are accepted (the dataclass still checks them)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (typing.Any, object):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:  # a number where a string is expected is its text (run_name=3)
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if origin in (list, tuple, set, frozenset, typing.Sequence):
        return isinstance(value, (list, tuple)) and (not args or all(fits(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or value in {m.value for m in tp}
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _shown(tp) -> str:
    return getattr(tp, "__name__", None) if isinstance(tp, type) else str(tp).replace("typing.", "")


def check_types(cls, values: dict, section: str) -> dict:
    """`values` with numbers given to string fields turned into text; TrainingConfigError
    naming the first setting whose value does not fit its field's type."""
    hints = typing.get_type_hints(cls)
    checked = dict(values)
    for name, value in values.items():
        tp = hints.get(name)
        if tp is None:
            continue
        if not fits(value, tp):
            raise TrainingConfigError(
                f"{section}.{name}={value!r} does not fit the type {_shown(tp)}; give a value of that type")
        if tp is str and not isinstance(value, str):
            checked[name] = str(value)
    return checked
