"""Command lines built from dataclasses (every field becomes a flag with its help text), and the
flags several commands share (`add_model_args`: `--device`, `--dtype`, `--max-batch-tokens`)."""
from __future__ import annotations

import argparse
import dataclasses
import typing


# The largest count a command-line number may ask for (noise draws, samples, batches): larger ones
# allocate memory by the terabyte before any check of theirs could run.
MAX_COUNT = 100_000


def number_problem(value, kind: type) -> str | None:
    """Why `value` is not a usable positive `kind` (int or float) setting, or None: a bool or
    text, NaN or an infinity, <= 0, or an int above MAX_COUNT."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        return f"must be a{'n integer' if kind is int else ' number'}, got {value!r}"
    if not math.isfinite(value) or not value > 0:
        return f"must be a finite number > 0, got {value!r}"
    if kind is int and value > MAX_COUNT:
        return f"must be at most {MAX_COUNT}, got {value}"
    return None


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` that shows each option's default (unless its help already says it, or it has
    none: None, False), descriptions and epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings
                or action.default is None or action.default is False or action.default == argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def add_dataclass_args(parser: argparse.ArgumentParser, cls, names=None) -> None:
    """`--field-name` flags of the dataclass `cls` (only `names`, when given), with each field's
    default and help text; an optional field (`T | None`) takes a T."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if names is not None and f.name not in names:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = hints[f.name]
        if type(None) in typing.get_args(kind):
            kind = next(t for t in typing.get_args(kind) if t is not type(None))
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif typing.get_origin(kind) in (list, tuple):
            (inner, *_) = typing.get_args(kind)
            parser.add_argument(flag, nargs="+", type=inner, default=default, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=default, help=f"{help_text} (default: {default})")


def dataclass_from_args(cls, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


# Model dtypes a command can load in (names of torch dtypes; torch is not imported to build a
# parser). Probe arithmetic stays float32 whatever the model's dtype.
DTYPES = ("float32", "bfloat16", "float16")


def add_dtype_arg(parser: argparse.ArgumentParser) -> None:
    """`--dtype {float32,bfloat16,float16}`: the dtype the command loads the model in."""
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="dtype of the model's weights and activations (default: float32; "
                             "probe arithmetic stays float32)")


def add_model_args(parser: argparse.ArgumentParser, budget: bool = True) -> None:
    """`--device`, `--dtype` and, with `budget`, `--max-batch-tokens N` (OAR-P's token budget
    per forward, default: auto): where and how a command loads its model and runs it."""
    parser.add_argument("--device", default=None, help="torch device (default: CPU)")
    add_dtype_arg(parser)
    if budget:
        parser.add_argument("--max-batch-tokens", type=int, default=None,
                            help="OAR-P: tokens in one forward (default: sized from the device's "
                                 "free memory and the model's shape; 16384 on CPU)")
