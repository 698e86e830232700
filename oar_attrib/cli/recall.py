"""`oar recall`: oracle causal-token recall of every method on the arithmetic world."""
from __future__ import annotations

import argparse
import json
import sys

from ..analysis.sets import DEFAULT_SETS, RECALL_SETS
from .choices import method_name, probe_name


RANDOM_DRAW, RANDOM_EXPECTED = "random (a draw)", "random expectation"


def recall_table(report, sets) -> str:
    """The text table of `oar recall`: one row per method, the random method's own draw
    labelled as one, and the random-ranking expectation as its own last row (as README's)."""
    rows = {(RANDOM_DRAW if m == "random" else m): v for m, v in report.methods.items()}
    rows[RANDOM_EXPECTED] = report.random
    width = max(len(m) for m in rows)
    lines = [f"{'method':<{width}} " + " ".join(f"{name:>22}" for name in sets)]
    for method, stats in rows.items():
        cells = ["n/a" if stats[name]["recall"] is None else
                 f"{stats[name]['recall']:.3f} [{stats[name]['ci95'][0]:.3f},{stats[name]['ci95'][1]:.3f}]"
                 for name in sets]
        lines.append(f"{method:<{width}} " + " ".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..models import load_model
    from ..analysis.recall import oracle_recall

    model, tokenizer = load_model(args.model, device=args.device)
    report = oracle_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset,
                           methods=args.methods, probe=args.probe, progress=not args.no_progress,
                           sets=args.sets, cf_positions=args.cf_positions)
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    print(f"n={report.n} scored={report.n_scored} accuracy={report.accuracy:.3f} skipped={report.skipped}")
    print(recall_table(report, args.sets))
    return 0



def add_parser(sub) -> None:
    rc = sub.add_parser("recall", help="oracle causal-token recall of every method on the arithmetic world")
    rc.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    rc.add_argument("--n", type=int, default=200, help="number of held-out problems")
    rc.add_argument("--seed", type=int, default=0, help="seed of problems, sampling and bootstrap")
    rc.add_argument("--preset", default="recall",
                    help="world preset (recall: final results written once, so `direct` is exact)")
    rc.add_argument("--methods", nargs="+", default=None, type=method_name,
                    help="methods (default: all registered)")
    rc.add_argument("--probe", default="as_mean", type=probe_name, help="outcome probe: lt, as_mean, as_joint")
    rc.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), choices=RECALL_SETS,
                    help="oracle sets to score against (results = direct; names: the final steps' "
                         "names; counterfactual: the positions whose replacement changes the "
                         "model's regenerated answer)")
    rc.add_argument("--cf-positions", type=int, default=64,
                    help="counterfactual set: scored positions tested per trace (one greedy "
                         "regeneration each)")
    rc.add_argument("--device", default=None, help="torch device (default: CPU)")
    rc.add_argument("--json", action="store_true", help="print one JSON object")
    rc.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rc.set_defaults(func=run)
