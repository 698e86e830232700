"""`oar recall`: oracle causal-token recall of every method on the arithmetic world."""
from __future__ import annotations

import argparse
import json
import sys

from ..configs import add_budget_arg, add_dtype_arg
from ..world import KNOWN_SETS

# `recall.RECALL_SETS`, spelled out so that building the parser does not import torch.
RECALL_SET_NAMES = KNOWN_SETS + ("counterfactual",)


def run(args: argparse.Namespace) -> int:
    from ..models import load_model
    from ..analysis.recall import oracle_recall

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    params = None if args.max_batch_tokens is None else {"oar_p": {"max_batch_tokens": args.max_batch_tokens}}
    report = oracle_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset,
                           methods=args.methods, probe=args.probe, progress=not args.no_progress,
                           sets=args.sets, cf_positions=args.cf_positions, method_params=params)
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    print(f"n={report.n} scored={report.n_scored} accuracy={report.accuracy:.3f} skipped={report.skipped}")
    print(f"{'method':<10} " + " ".join(f"{name:>22}" for name in args.sets))
    rows = {**report.methods, "random": report.random}
    for method, sets in rows.items():
        cells = []
        for name in args.sets:
            s = sets[name]
            cells.append("n/a" if s["recall"] is None else
                         f"{s['recall']:.3f} [{s['ci95'][0]:.3f},{s['ci95'][1]:.3f}]")
        print(f"{method:<10} " + " ".join(f"{cell:>22}" for cell in cells))
    return 0



def add_parser(sub) -> None:
    rc = sub.add_parser("recall", help="oracle causal-token recall of every method on the arithmetic world")
    rc.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    rc.add_argument("--n", type=int, default=200, help="number of held-out problems")
    rc.add_argument("--seed", type=int, default=0, help="seed of problems, sampling and bootstrap")
    rc.add_argument("--preset", default="recall",
                    help="world preset (recall: final results written once, so `direct` is exact)")
    rc.add_argument("--methods", nargs="+", default=None, help="methods (default: all registered)")
    rc.add_argument("--probe", default="as_mean", help="outcome probe: lt, as_mean, as_joint")
    rc.add_argument("--sets", nargs="+", default=["direct", "chain"], choices=RECALL_SET_NAMES,
                    help="oracle sets to score against (results = direct; names: the final steps' "
                         "names; counterfactual: the positions whose replacement changes the "
                         "model's regenerated answer)")
    rc.add_argument("--cf-positions", type=int, default=64,
                    help="counterfactual set: scored positions tested per trace (one greedy "
                         "regeneration each)")
    rc.add_argument("--device", default=None, help="torch device (default: CPU)")
    add_dtype_arg(rc)
    add_budget_arg(rc)
    rc.add_argument("--json", action="store_true", help="print one JSON object")
    rc.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rc.set_defaults(func=run)
