"""`oar eval`: accuracy of a model, on held-out arithmetic-world problems or on a JSONL math set.

    oar eval --model arith-tiny --n 200                      # the world (world models only)
    oar eval --model path/to/Qwen2.5-1.5B --data gsm8k_test.jsonl --samples 4
"""
from __future__ import annotations

import argparse
import json

from oar_attrib.commands import add_model_args


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

    from oar_attrib.errors import InputError
    from oar_attrib.models import resolve
    from oar_attrib.world.tokenizer import not_the_worlds

    why = not_the_worlds(AutoTokenizer.from_pretrained(str(resolve(model))))
    if why is not None:
        raise InputError(
            f"--model {model}: its tokenizer {why}, so it is not an arithmetic-world model and its "
            "accuracy on world problems means nothing; evaluate it on a JSONL math set instead: "
            f"oar eval --model {model} --data path/to/gsm8k_test.jsonl")


def run(args: argparse.Namespace) -> int:
    from oar_attrib.errors import InputError
    from oar_attrib.models import load_model

    if args.n is not None and args.n < 1:
        raise InputError(f"--n must be at least 1 (the number of problems), got {args.n}")
    if args.group_size < 0 or args.samples < 0:
        raise InputError("--group-size and --samples must be 0 (off) or more")
    if args.data is not None:
        from .math_eval import evaluate_math

        model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
        result = evaluate_math(model, tokenizer, args.data, n=args.n, samples=args.samples,
                               temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                               batch_size=args.batch_size, seed=args.seed, progress=not args.no_progress)
        _print({"model": args.model, **result}, args.json)
        return 0
    from oar_attrib.world.evaluation import evaluate_world

    check_world_tokenizer(args.model)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    res = evaluate_world(model, tokenizer, args.preset, n=args.n or 200, seed=args.seed,
                         group_size=args.group_size, progress=not args.no_progress)
    _print({"model": args.model, **res.as_dict()}, args.json)
    return 0


def add_parser(sub) -> None:
    ev = sub.add_parser("eval", help="accuracy of a model on held-out world problems or a JSONL math set",
                        description=__doc__.split("\n\n")[0])
    ev.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    ev.add_argument("--data", default=None,
                    help="a JSONL math set (question or problem, and answer per line, as GSM8K / "
                         "MATH-500 / AIME / AMC exports); answers checked by math-verify. Without "
                         "it: the arithmetic world, for world models only")
    ev.add_argument("--preset", default="default", help="world preset (default, recall, medium, hard)")
    ev.add_argument("--n", type=int, default=None,
                    help="number of problems (default: 200 world problems; every record of --data)")
    ev.add_argument("--seed", type=int, default=0, help="seed of the problem sample and of sampling")
    ev.add_argument("--group-size", type=int, default=0,
                    help="world: also sample this many answers per problem (temperature 1) and report "
                         "the share of problems with both right and wrong answers")
    ev.add_argument("--samples", type=int, default=0,
                    help="--data: also sample this many answers per record and report their mean "
                         "accuracy (accuracy_sampled)")
    ev.add_argument("--temperature", type=float, default=1.0, help="--data: sampling temperature")
    ev.add_argument("--max-new-tokens", type=int, default=1024, help="--data: tokens per answer")
    ev.add_argument("--batch-size", type=int, default=16, help="--data: records generated together")
    add_model_args(ev, budget=False)
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ev.set_defaults(func=run)
