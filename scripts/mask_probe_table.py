"""Which OAR-P mask x probe best predicts a model's own counterfactuals (recall@|O| and Spearman).

    python scripts/mask_probe_table.py --model arith-tiny --data arith --n 40 \\
        --out docs/experiments/masks/arith-tiny.jsonl
    python scripts/mask_probe_table.py --model smollm2-135m --data gsm8k_test.jsonl --n 10 \\
        --cf-positions 16 --out docs/experiments/masks/smollm2-gsm8k.jsonl

--data: `arith` (the bundled model's world: held-out problems of the preset `recall`, plain
prompts, as `oar recall` builds them), `wordworld:<preset>` (the template word-problem world,
held-out problems, asked through the chat template for "The answer is N."), or a JSONL file of
questions with gold answers (`instruments.data.recall.read_records`). The model answers greedily;
each trace gets the counterfactual oracle (replacement `--replace`, default resample) on at
most --cf-positions scored positions and token OAR-P under every mask x probe on the same
positions (`analysis.mask_probe`). Resumable: one JSON row per trace is appended to --out as
soon as it is done, and a rerun with the same settings skips the traces already there (an
interrupted run loses at most one trace). The summary (mean over traces, 95% bootstrap
intervals) goes to <out>.summary.json and <out>.md.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from oar_attrib.analysis import mask_probe as mp
from oar_attrib.instruments.data.recall import data_records, model_traces, record_prompt
from oar_attrib.models.generation import generate
from oar_attrib.inputs.grading import grade
from oar_attrib.jsonl import NotJSON, iter_jsonl
from oar_attrib.models import load_model


def load_records(data: str, n: int, seed: int) -> list[dict]:
    """Records {"prompt" or "question", "answer"} of --data (module docstring)."""
    if data == "arith":
        from oar_attrib.world import generate_problems

        return [{"prompt": p.prompt, "answer": str(p.answer)}
                for p in generate_problems(n, "recall", seed=seed, split="test")]
    return data_records(data, n, seed)


def responses(model, tok, records: list[dict], data: str, max_new_tokens: int) -> list[str]:
    """The model's greedy answer to each record (the world's plain prompts for `arith`)."""
    if data == "arith":
        ids = generate(model, tok, [r["prompt"] for r in records], max_new_tokens=max_new_tokens)
        return tok.batch_decode(ids, skip_special_tokens=True)
    return model_traces(model, tok, records, max_new_tokens)


def done_rows(out: Path, config: dict) -> dict[int, dict]:
    """{index: row} of the rows of `out` written with `config` (a cut-off last line is skipped)."""
    if not out.is_file():
        return {}
    rows = {}
    for _, value in iter_jsonl(out):
        if not isinstance(value, NotJSON) and isinstance(value, dict) and value.get("config") == config:
            rows[value["index"]] = value
    return rows


def append_row(out: Path, row: dict) -> None:
    """Append one JSON line; after a line cut off by a kill, on a new line (not glued to it)."""
    cut = out.is_file() and out.stat().st_size > 0 and not out.read_bytes().endswith(b"\n")
    with out.open("a") as f:
        f.write(("\n" if cut else "") + json.dumps(row) + "\n")


def run(args, config: dict) -> None:
    torch.set_num_threads(args.threads)  # 1 is fastest on a busy machine: 2 threads spin-wait
    records = load_records(args.data, args.n, args.seed)
    todo = [i for i in range(len(records)) if i not in done_rows(args.out, config)]
    if not todo:
        return
    model, tok = load_model(args.model)
    masks = mp.usable_masks(tok, args.masks)
    for start in range(0, len(todo), args.chunk):
        chunk = todo[start:start + args.chunk]
        texts = responses(model, tok, [records[i] for i in chunk], args.data, args.max_new_tokens)
        for i, text in zip(chunk, texts):
            began, record = time.time(), records[i]
            gold = record.get("answer")
            row = mp.trace_row(model, tok, record_prompt(record), text, gold, masks=masks,
                               probes=args.probes, cf_positions=args.cf_positions, seed=args.seed,
                               replacement=args.replace, step=args.step)
            row |= {"index": i, "config": config, "response": text, "gold": gold,
                    "correct": None if gold is None else grade(text, gold).correct,
                    "masks": {k: v for k, v in masks.items()}, "seconds": round(time.time() - began, 1)}
            append_row(args.out, row)
            print(f"trace {i}: {row['status']} {row.get('causal')} {row['seconds']} s", flush=True)


def summarise(args, config: dict) -> dict:
    rows = [r for i, r in sorted(done_rows(args.out, config).items()) if i < args.n]
    summary = mp.summarise_rows(rows, seed=args.seed)
    summary |= {"config": config, "masks": rows[0]["masks"] if rows else {},
                "accuracy": _mean([r["correct"] for r in rows if r.get("correct") is not None]),
                "seconds": round(sum(r["seconds"] for r in rows), 1)}
    base = args.out.with_suffix("")
    Path(f"{base}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    head = (f"{args.model} on {config['data']}: n = {summary['n_scored']} scored traces of "
            f"{summary['n_traces']}, {summary['positions_tested']} positions tested, "
            f"{summary['causal']} causal; oracle replacement {args.replace}")
    parts = [head, f"random expectation of recall@|O|: {_expected(summary)}"]
    for step in (False, True):
        if not any((c.count("/") == 2) == step for c in summary["cells"]):
            continue
        what = "step OAR-P" if step else "token OAR-P"
        for stat, name in (("recall", "recall@|O|"), ("spearman", "Spearman rho with the 0/1 outcome")):
            parts += [f"### {what}: {name}, mean [95% CI] (traces)",
                      mp.markdown_table(summary, stat, step),
                      f"### {what}: {name} minus that of {summary['reference']} on the same traces",
                      mp.markdown_table(summary, stat, step, paired=True)]
    Path(f"{base}.md").write_text("\n\n".join(parts) + "\n")
    return summary


def _mean(values):
    return sum(values) / len(values) if values else None


def _expected(summary: dict) -> str:
    first = next(iter(summary["cells"].values()), None)
    if not first or first["expected"]["expected"] is None:
        return "n/a"
    e = first["expected"]
    return f"{e['expected']:.2f} [{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}] ({e['n']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="arith-tiny")
    parser.add_argument("--data", default="arith", help="arith, wordworld:<preset> or a JSONL file")
    parser.add_argument("--n", type=int, default=20, help="traces (the first n records)")
    parser.add_argument("--masks", nargs="+", default=list(mp.TABLE_MASKS), choices=list(mp.TABLE_MASKS))
    parser.add_argument("--probes", nargs="+", default=list(mp.TABLE_PROBES), choices=list(mp.TABLE_PROBES))
    parser.add_argument("--cf-positions", type=int, default=16, help="positions tested per trace")
    parser.add_argument("--replace", default="resample", choices=("resample", "pad"),
                        help="the oracle's replacement token")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="of the model's answers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=4, help="answers generated per batch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="JSONL, one row per trace")
    parser.add_argument("--step", action="store_true", help="step OAR-P's cells too")
    parser.add_argument("--summary-only", action="store_true", help="compute nothing new")
    args = parser.parse_args()
    data = args.data if args.data == "arith" or args.data.startswith("wordworld") else Path(args.data).name
    config = {"model": args.model, "data": data, "cf_positions": args.cf_positions,
              "replace": args.replace, "seed": args.seed, "max_new_tokens": args.max_new_tokens}
    if not args.summary_only:
        run(args, config)
    print(json.dumps(summarise(args, config)["cells"].get("pad/as_mean"), indent=1))


if __name__ == "__main__":
    main()
