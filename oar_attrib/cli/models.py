"""`oar models`: the model catalogue (name, architecture, parameters, vocabulary, licence,
source, whether it is on this machine); `--fetch NAME` brings one onto this machine now."""
from __future__ import annotations

import argparse
import json

from ..catalogue import CATALOGUE, entry_folder, listing
from ..errors import ModelLoadError

COLUMNS = ("name", "architecture", "parameters", "vocabulary", "licence", "cached", "source")


def _cmd_models(args: argparse.Namespace) -> int:
    if args.fetch:
        if args.fetch not in CATALOGUE:
            raise ModelLoadError(f"no catalogue model {args.fetch!r}; known: {', '.join(CATALOGUE)}")
        print(f"{args.fetch}: {entry_folder(CATALOGUE[args.fetch])}")
        return 0
    rows = listing()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    shown = [[str(row[c]) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in shown)) for i, c in enumerate(COLUMNS[:-1])]
    for cells in [list(COLUMNS), *shown]:
        print("  ".join(cell.ljust(w) for cell, w in zip(cells, widths)) + "  " + cells[-1])
    print("\nAlso: any .gguf file (converted once, cached by its hash) or local Hugging Face folder.")
    return 0


def add_parser(sub) -> None:
    parser = sub.add_parser("models", help="the model catalogue: what --model accepts by name")
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    parser.add_argument("--fetch", metavar="NAME", default=None,
                        help="bring a catalogue model onto this machine now (its folder is printed)")
    parser.set_defaults(func=_cmd_models)
