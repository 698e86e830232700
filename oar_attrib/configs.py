"""Command lines built from dataclasses (every field becomes a flag with its help text), and the
flags several commands share (`--dtype`, `--max-batch-tokens`)."""
from __future__ import annotations

import argparse
import dataclasses
import typing


def add_dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind = hints[f.name]
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


def add_budget_arg(parser: argparse.ArgumentParser) -> None:
    """`--max-batch-tokens N`: OAR-P's token budget per forward (default: auto)."""
    parser.add_argument("--max-batch-tokens", type=int, default=None,
                        help="OAR-P: tokens in one forward (default: sized from the device's free "
                             "memory and the model's shape; 16384 on CPU)")
