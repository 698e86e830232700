"""The `oar` command line: one subcommand per job."""
from __future__ import annotations

import argparse
import json
import sys

from . import world
from .errors import OARError

# `recall.RECALL_SETS`, spelled out so that building the parser does not import torch.
RECALL_SET_NAMES = world.KNOWN_SETS + ("counterfactual",)


def _cmd_eval(args: argparse.Namespace) -> int:
    from .world.evaluation import evaluate_world
    from .models import load_model

    model, tokenizer = load_model(args.model)
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


def _read_pairs(path: str) -> tuple[list, list, list[int], int]:
    """Prompts, responses and line numbers of the valid lines, and the number of bad lines
    (each reported on stderr with its line number)."""
    from .jsonl import NotJSON, iter_jsonl

    prompts, responses, lines, bad = [], [], [], 0
    for number, record in iter_jsonl(path):
        if isinstance(record, NotJSON):
            print(f"{path}:{number}: skipped: not JSON ({record})", file=sys.stderr)
            bad += 1
            continue
        prompt = record.get("prompt") if isinstance(record, dict) else None
        response = record.get("response") if isinstance(record, dict) else None
        if not isinstance(prompt, (str, list)) or not isinstance(response, str):
            print(f"{path}:{number}: skipped: needs a 'prompt' (string or chat messages) "
                  "and a 'response' string", file=sys.stderr)
            bad += 1
            continue
        prompts.append(prompt)
        responses.append(response)
        lines.append(number)
    return prompts, responses, lines, bad


def _cmd_attribute(args: argparse.Namespace) -> int:
    from .attribution import attribute
    from .models import load_model

    prompts, responses, lines, bad = _read_pairs(args.input)
    if not prompts:
        print(f"oar attribute: error: {args.input} has no valid line", file=sys.stderr)
        return 2
    model, tokenizer = load_model(args.model, device=args.device)
    traces = attribute(model, tokenizer, prompts, responses, args.methods, probe=args.probe,
                       fmt=args.format, tau=args.tau, beta=args.beta, w_min=args.w_min,
                       progress=not args.no_progress)
    if args.out.endswith(".db"):
        from .store import Store

        store = Store(args.out)
        run = store.add_run(f"attribute {args.input}", model=args.model,
                            config={"methods": args.methods, "probe": args.probe, "input": args.input})
        store.add_traces(run, traces, extras=[{"line": line} for line in lines])
        store.summarise(run)
    else:
        with open(args.out, "w", encoding="utf-8") as handle:
            for line, trace in zip(lines, traces):
                handle.write(json.dumps({"line": line, **trace.to_dict()}) + "\n")
    flagged = sum(bool(t.flags) for t in traces)
    print(f"wrote {len(traces)} attributions to {args.out} ({flagged} flagged, "
          f"{bad} bad lines skipped)", file=sys.stderr)
    return 0


def _cmd_recall(args: argparse.Namespace) -> int:
    from .models import load_model
    from .analysis.recall import oracle_recall

    model, tokenizer = load_model(args.model, device=args.device)
    report = oracle_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset,
                           methods=args.methods, probe=args.probe, progress=not args.no_progress,
                           sets=args.sets, cf_positions=args.cf_positions)
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


def _add_plugin_commands(sub) -> None:
    """Subcommands of the other packages of the distribution (`oar demo`, `oar web`,
    `oar train`), found through the `oar_attrib.commands` entry points so that the core
    never imports `training` or `webapp` itself."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="oar_attrib.commands"), key=lambda e: e.name):
        entry.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oar", description="Outcome-grounded Advantage Reshaping")
    sub = parser.add_subparsers(dest="command", required=True)

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
    ev.set_defaults(func=_cmd_eval)

    at = sub.add_parser("attribute", help="token importances of prompt/response pairs (JSONL in, JSONL out)")
    at.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    at.add_argument("--input", required=True, help="JSONL with 'prompt' and 'response' per line")
    at.add_argument("--out", required=True,
                    help="JSONL to write (one attribution per valid line), or a run store *.db "
                         "to add a run to (readable by `oar web --store`)")
    at.add_argument("--methods", nargs="+", default=["oar_p", "oar_g"], help="importance methods")
    at.add_argument("--probe", default="as_mean", help="outcome probe: lt, as_mean, as_joint")
    at.add_argument("--format", default="auto", help="answer format: auto, boxed, gsm8k, answer_is")
    at.add_argument("--tau", type=float, default=0.4, help="gating quantile level")
    at.add_argument("--beta", type=float, default=2.0, help="gating boost strength")
    at.add_argument("--w-min", type=float, default=0.1, help="gating weight floor")
    at.add_argument("--device", default=None, help="torch device (default: CPU)")
    at.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    at.set_defaults(func=_cmd_attribute)

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
    rc.add_argument("--json", action="store_true", help="print one JSON object")
    rc.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rc.set_defaults(func=_cmd_recall)

    _add_plugin_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except OARError as err:
        print(f"oar {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
