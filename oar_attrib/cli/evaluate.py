"""`oar eval`: held-out accuracy of a model."""
from __future__ import annotations

import argparse
import json
import sys

from ..configs import add_dtype_arg

def run(args: argparse.Namespace) -> int:
    from ..world.evaluation import evaluate_world
    from ..models import load_model

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    res = evaluate_world(
        model, tokenizer, args.preset, n=args.n, seed=args.seed, group_size=args.group_size,
        progress=not args.no_progress,
    )
    if args.json:
        print(json.dumps({"model": args.model, **res.as_dict()}))
    else:
        rows = [("model", args.model), *res.as_dict().items()]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            shown = f"{value:.3f}" if isinstance(value, float) else value
            print(f"{key:<{width}}  {shown}")
    return 0



def add_parser(sub) -> None:
    ev = sub.add_parser("eval", help="accuracy of a model on held-out arithmetic-world problems")
    ev.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    ev.add_argument("--preset", default="default", help="world preset (default, recall, medium, hard)")
    ev.add_argument("--n", type=int, default=200, help="number of held-out problems")
    ev.add_argument("--seed", type=int, default=0, help="seed of the problem sample")
    ev.add_argument("--group-size", type=int, default=0,
                    help="also sample this many answers per problem (temperature 1) and report "
                         "the share of problems with both right and wrong answers")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_dtype_arg(ev)
    ev.set_defaults(func=run)
