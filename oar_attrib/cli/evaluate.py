"""`oar eval`: accuracy of a model, on held-out arithmetic-world problems or on a JSONL math set.

    oar eval --model arith-tiny --n 200                      # the world (world models only)
    oar eval --model path/to/Qwen2.5-1.5B --data gsm8k_test.jsonl --samples 4

The world's problems are scored here (`world.evaluation`). A JSONL math set is scored with
training's evaluator and rewards (`training.math_eval`, the train extra), which the core never
imports: the training package hands the evaluator to this command when it registers its own
(`training.cli.add_train_command`, an `oar_attrib.commands` entry point).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from oar_attrib.commands import add_dataclass_args, add_model_args, dataclass_from_args, option
from oar_attrib.defaults import DEFAULT_MODEL
from oar_attrib.errors import InputError

# The parser default through which the training package hands `oar eval --data` its evaluator
# (`evaluate_math(model, tokenizer, path, **settings) -> dict`).
DATA_EVALUATOR = "evaluate_data"


@dataclass(frozen=True)
class EvalSettings:
    """What `oar eval` evaluates and how: every field is its flag, but --device and --dtype
    (`commands.add_model_args`, shared with the other commands that load a model)."""

    model: str = option(DEFAULT_MODEL, "bundled name or local checkpoint folder")
    data: str | None = option(
        None, "a JSONL math set (question or problem, and answer per line, as GSM8K / MATH-500 / "
              "AIME / AMC exports); answers checked by math-verify. Without it: the arithmetic "
              "world, for world models only")
    preset: str = option("default", "world preset (default, recall, medium, hard)")
    n: int | None = option(None, "number of problems (default: 200 world problems; every record of --data)")
    seed: int = option(0, "seed of the problem sample and of sampling")
    group_size: int = option(
        0, "world: also sample this many answers per problem (temperature 1) and report the share "
           "of problems with both right and wrong answers")
    samples: int = option(
        0, "--data: also sample this many answers per record and report their mean accuracy "
           "(accuracy_sampled)")
    temperature: float = option(1.0, "--data: sampling temperature")
    max_new_tokens: int = option(1024, "--data: tokens per answer")
    batch_size: int = option(16, "--data: records generated together")
    device: str | None = option(None, flag=None)  # add_model_args
    dtype: str = option("float32", flag=None)  # add_model_args
    json: bool = option(False, "print one JSON object", action="store_true")
    no_progress: bool = option(False, "hide the progress bar", action="store_true")

    def __post_init__(self) -> None:
        if self.n is not None and self.n < 1:
            raise InputError(f"--n must be at least 1 (the number of problems), got {self.n}")
        if self.group_size < 0 or self.samples < 0:
            raise InputError("--group-size and --samples must be 0 (off) or more")


# The flags listed after the shared model flags in --help.
_SHOWN_LAST = ("json", "no_progress")


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        shown = f"{value:.3f}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")


def check_world_tokenizer(model: str) -> None:
    """InputError, before the weights load, when `model`'s tokenizer is not the world's: its
    world accuracy would mean nothing."""
    from transformers import AutoTokenizer

    from oar_attrib.models import resolve
    from oar_attrib.world.tokenizer import not_the_worlds

    why = not_the_worlds(AutoTokenizer.from_pretrained(str(resolve(model))))
    if why is not None:
        raise InputError(
            f"--model {model}: its tokenizer {why}, so it is not an arithmetic-world model and its "
            "accuracy on world problems means nothing; evaluate it on a JSONL math set instead: "
            f"oar eval --model {model} --data path/to/gsm8k_test.jsonl")


def data_evaluator(args: argparse.Namespace):
    """The evaluator of a JSONL math set that the training package handed this command
    (`DATA_EVALUATOR`); the one line naming the train extra when it is not installed."""
    from oar_attrib.extras import require_extra

    require_extra("train", "oar eval --data")
    evaluate = getattr(args, DATA_EVALUATOR, None)
    if evaluate is None:
        raise InputError("--data: no evaluator of JSONL math sets was registered with this command "
                         "line (the training package's `oar` commands register it)")
    return evaluate


def run(args: argparse.Namespace) -> int:
    from oar_attrib.models import load_model

    settings = dataclass_from_args(EvalSettings, args)
    if settings.data is not None:
        evaluate = data_evaluator(args)
        model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
        result = evaluate(model, tokenizer, settings.data, n=settings.n, samples=settings.samples,
                          temperature=settings.temperature, max_new_tokens=settings.max_new_tokens,
                          batch_size=settings.batch_size, seed=settings.seed,
                          progress=not settings.no_progress)
        _print({"model": settings.model, **result}, settings.json)
        return 0
    from oar_attrib.world.evaluation import evaluate_world

    check_world_tokenizer(settings.model)
    model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
    res = evaluate_world(model, tokenizer, settings.preset, n=settings.n or 200, seed=settings.seed,
                         group_size=settings.group_size, progress=not settings.no_progress)
    _print({"model": settings.model, **res.as_dict()}, settings.json)
    return 0


def add_parser(sub) -> None:
    ev = sub.add_parser("eval", help="accuracy of a model on held-out world problems or a JSONL math set",
                        description=__doc__.split("\n\n")[0])
    add_dataclass_args(ev, EvalSettings, names=[f for f in EvalSettings.__dataclass_fields__
                                                if f not in _SHOWN_LAST])
    add_model_args(ev, budget=False)
    add_dataclass_args(ev, EvalSettings, names=_SHOWN_LAST)
    ev.set_defaults(func=run)
