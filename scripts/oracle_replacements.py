"""How often the pad oracle and the resample oracle call the same positions causal.

    python scripts/oracle_replacements.py --rows docs/experiments/masks/smollm2-wordworld-tiny.jsonl \\
        --data wordworld:tiny --out docs/experiments/masks/smollm2-wordworld-tiny.oracles.json

Reads the rows of `mask_probe_table.py` (their tested positions and resample outcomes), runs
the counterfactual oracle again on the same positions with the pad token as the replacement,
and reports the share of positions each calls causal and how often they agree. Evidence for the
oracle's default in the table: a pad that ends the turn makes nearly every position causal.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from oar_attrib.instruments.data.oracle import counterfactual_oracle
from oar_attrib.instruments.data.recall import REGENERATION_MARGIN, answer_key, record_prompt
from oar_attrib.inputs.encoding import encode_pair
from oar_attrib.jsonl import NotJSON, iter_jsonl
from oar_attrib.models import load_model

from mask_probe_table import load_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True, help="mask_probe_table.py's JSONL")
    parser.add_argument("--data", required=True, help="the --data of that run")
    parser.add_argument("--n", type=int, default=None, help="at most this many scored rows")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [v for _, v in iter_jsonl(args.rows)
            if not isinstance(v, NotJSON) and isinstance(v, dict) and v.get("status") == "scored"]
    rows = rows[: args.n]
    config = rows[0]["config"]
    model, tok = load_model(config["model"])
    records = load_records(args.data, max(r["index"] for r in rows) + 1, config["seed"])
    out = []
    for row in rows:
        pair = encode_pair(tok, record_prompt(records[row["index"]]), row["response"])
        pad = counterfactual_oracle(model, tok, pair.prompt_ids, pair.response_ids, row["positions"],
                                    answer_key, replacement="pad", max_positions=len(row["positions"]),
                                    batch_size=len(row["positions"]),
                                    max_new_tokens=len(pair.response_ids) + REGENERATION_MARGIN)
        out.append({"index": row["index"], "resample": row["causal"],
                    "pad": [int(pad[t]) for t in row["positions"]]})
        print(out[-1], flush=True)
    both = [(a, b) for r in out for a, b in zip(r["resample"], r["pad"])]
    summary = {"model": config["model"], "data": config["data"], "traces": len(out),
               "positions": len(both), "causal_resample": sum(a for a, _ in both) / len(both),
               "causal_pad": sum(b for _, b in both) / len(both),
               "agree": sum(a == b for a, b in both) / len(both), "rows": out}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
