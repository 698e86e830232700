"""`oar attribute`: token importances of prompt/response pairs from a JSONL file."""
from __future__ import annotations

import argparse
import json
import sys

from ..configs import add_budget_arg, add_dtype_arg

def _read_pairs(path: str) -> tuple[list, list, list[int], int]:
    """Prompts, responses and line numbers of the valid lines, and the number of bad lines
    (each reported on stderr with its line number)."""
    from ..jsonl import NotJSON, iter_jsonl

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


def run(args: argparse.Namespace) -> int:
    from ..attribution import attribute
    from ..models import load_model

    prompts, responses, lines, bad = _read_pairs(args.input)
    if not prompts:
        print(f"oar attribute: error: {args.input} has no valid line", file=sys.stderr)
        return 2
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    traces = attribute(model, tokenizer, prompts, responses, args.methods, probe=args.probe,
                       fmt=args.format, tau=args.tau, beta=args.beta, w_min=args.w_min,
                       progress=not args.no_progress, max_batch_tokens=args.max_batch_tokens)
    if args.out.endswith(".db"):
        from ..store import Store

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



def add_parser(sub) -> None:
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
    add_dtype_arg(at)
    add_budget_arg(at)
    at.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    at.set_defaults(func=run)
