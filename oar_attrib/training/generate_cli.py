"""`oar generate`: from a JSONL of questions to graded groups of answers, the lines `oar attribute` takes.

    oar generate --model smollm2-135m --data gsm8k_test.jsonl --out traces.jsonl --n 20 --samples 4
    oar attribute --model smollm2-135m --input traces.jsonl --out runs.db   # then: oar web --store runs.db

Each question gets --samples answers (with --greedy the first is the greedy one), graded by the
answer span in --answer-format and given GRPO group advantages (`oar_attrib.rollouts`). A
question's lines are written together, flushed and fsynced, so a rerun of the same command
appends only the questions not yet complete; bad question lines are reported by number and
skipped (exit status 2).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from oar_attrib.configs import add_model_args
from oar_attrib.defaults import PROMPT_FORMAT
from oar_attrib.inputs.spans import MARKER_FORMATS


def _complete_groups(out: Path, data: Path, samples: int) -> set[int]:
    """The questions `out` already holds all `samples` answers of. Lines of groups a kill left
    incomplete (and a last line cut short) are dropped, so each group is written exactly once."""
    from oar_attrib.errors import InputError
    from oar_attrib.jsonl import NotJSON, iter_jsonl

    if not out.exists() or out.stat().st_size == 0:
        return set()
    kept, counts = [], Counter()
    for number, record in iter_jsonl(out):
        if isinstance(record, NotJSON) or not isinstance(record, dict) or "group" not in record:
            continue  # a line cut short by a kill
        if not str(record.get("source", "")).startswith(f"{data.name}:"):
            raise InputError(f"--out {out}:{number} holds answers to {record.get('source')!r}, not to "
                             f"{data.name}; pass a new --out (a rerun resumes only the same command)")
        kept.append(record)
        counts[record["group"]] += 1
    done = {g for g, n in counts.items() if n == samples}
    if any(n > samples for n in counts.values()):
        raise InputError(f"--out {out} holds more than --samples {samples} answers to a question; "
                         "rerun with the --samples it was written with, or pass a new --out")
    if len(kept) != sum(counts[g] for g in done) or _cut_short(out):
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept if r["group"] in done), encoding="utf-8")
        os.replace(tmp, out)
    return done


def _cut_short(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _write(handle, groups: list[list[dict]]) -> None:
    handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for g in groups for r in g))
    handle.flush()
    os.fsync(handle.fileno())


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from oar_attrib.commands import check_writable
    from oar_attrib.errors import InputError
    from oar_attrib.models import load_model
    from oar_attrib.rollouts import read_questions, sample_groups

    data, out = Path(args.data), Path(args.out)
    for flag, value, least in (("--samples", args.samples, 1), ("--batch-size", args.batch_size, 1),
                               ("--max-new-tokens", args.max_new_tokens, 1), ("--n", args.n or 1, 1)):
        if value < least:
            raise InputError(f"{flag} must be at least {least}, got {value}")
    if args.answer_format not in MARKER_FORMATS:
        raise InputError(f"--answer-format {args.answer_format!r}: known {', '.join(MARKER_FORMATS)}")
    if not data.is_file():
        raise InputError(f"--data {data} does not exist; pass a JSONL file with 'question' (or "
                         "'problem', or TRL's 'prompt') and 'answer' per line")
    if out.suffix == ".db":
        raise InputError(f"--out {out}: oar generate writes JSONL; attribute it into a store with "
                         f"oar attribute --input {out.with_suffix('.jsonl')} --out {out}")
    check_writable(out)
    done = _complete_groups(out, data, args.samples)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    skipped: Counter = Counter()

    def report(kind: str, line: str) -> None:
        skipped[kind] += 1
        print(line, file=sys.stderr)

    questions = list(read_questions(data, tokenizer, args.answer_format, limit=args.n, report=report))
    todo = [q for q in questions if q.group not in done]
    written, right = 0, 0
    with open(out, "a", encoding="utf-8") as handle, \
            tqdm(total=len(todo), desc="generate", unit="question", disable=args.no_progress) as bar:
        for groups in sample_groups(model, tokenizer, todo, samples=args.samples, greedy=args.greedy,
                                    temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                                    answer_format=args.answer_format, batch_size=args.batch_size,
                                    seed=args.seed):
            _write(handle, groups)
            written += sum(len(g) for g in groups)
            right += sum(r["correct"] for g in groups for r in g)
            bar.update(len(groups))
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(skipped.items()))
    print(f"wrote {written} answers to {len(todo)} questions to {out} ({right} right"
          + (f", {len(done)} questions already there" if done else "") + f"); {sum(skipped.values())} "
          "bad lines skipped" + (f" ({kinds})" if kinds else ""), file=sys.stderr)
    return 2 if skipped else 0


def add_parser(sub) -> None:
    gen = sub.add_parser("generate", help="sample graded groups of answers to JSONL questions (for oar attribute)",
                         description=__doc__.split("\n\n")[0])
    gen.add_argument("--model", default="smollm2-135m", help="catalogue name or local checkpoint folder")
    gen.add_argument("--data", required=True,
                     help="JSONL questions: 'question' or 'problem' and 'answer' per line (GSM8K / "
                          "MATH-500 / AIME / AMC), or TRL's 'prompt' (string or chat messages) and 'answer'")
    gen.add_argument("--out", required=True, help="JSONL to write (appended; a rerun resumes)")
    gen.add_argument("--n", type=int, default=None, help="the first N questions (default: all)")
    gen.add_argument("--samples", type=int, default=4, help="answers per question (GRPO's group size G)")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    gen.add_argument("--greedy", action="store_true", help="the first answer of each group is the greedy one")
    gen.add_argument("--max-new-tokens", type=int, default=512, help="tokens per answer (cut off: reward 0)")
    gen.add_argument("--answer-format", default=PROMPT_FORMAT,
                     help=f"the format the prompt asks for and the grade reads: one of {', '.join(MARKER_FORMATS)}")
    gen.add_argument("--batch-size", type=int, default=8, help="questions decoded together")
    gen.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    add_model_args(gen, budget=False)
    gen.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    gen.set_defaults(func=run)


def add_generate_command(subparsers) -> None:
    """Register `oar generate` (entry point `oar_attrib.commands`)."""
    add_parser(subparsers)
