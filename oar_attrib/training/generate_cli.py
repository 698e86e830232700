"""`oar generate`: from a JSONL of questions to graded groups of answers, the lines `oar attribute` takes.

    oar generate --model smollm2-135m --data gsm8k_test.jsonl --out traces.jsonl --n 20 --samples 4
    oar attribute --model smollm2-135m --input traces.jsonl --out runs.db   # then: oar web --store runs.db

Each question gets --samples answers (with --greedy the first is the greedy one; --temperature 0
is greedy decoding, one answer per question), graded by the answer span in --answer-format and
given GRPO group advantages (`oar_attrib.rollouts`). Every answer carries the sampling settings
(`rollouts.SamplingSettings`). A question's answers are written together, flushed and fsynced.
A rerun resumes by content: a question is known by its prompt and gold answer (not by the
file or line it came from), the answers --out already holds are kept, never rewritten away,
and only the missing ones are asked (a higher --samples adds to each group, whose advantages
are then recomputed); answers sampled with other settings are refused. Prompts longer than
the model can take with --max-new-tokens are skipped before anything is generated; bad
question lines are reported by number and skipped (exit status 2).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

from oar_attrib.configs import add_model_args
from oar_attrib.defaults import PROMPT_FORMAT
from oar_attrib.inputs.spans import MARKER_FORMATS

# The most rows (questions x samples) decoded at once.
MAX_ROWS = 1 << 16


def question_key(prompt, gold) -> str:
    """A question's identity: the hash of its prompt (as asked) and gold answer."""
    text = json.dumps([prompt, gold], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclasses.dataclass
class Held:
    """The answers --out holds: how many per question key, and each key's group number."""

    counts: Counter = dataclasses.field(default_factory=Counter)
    groups: dict = dataclasses.field(default_factory=dict)

    def group_of(self, key: str) -> int:
        if key not in self.groups:
            self.groups[key] = max(self.groups.values(), default=-1) + 1
        return self.groups[key]


def _held(out: Path, settings: dict) -> Held:
    """What `out` holds (after cutting a last line a kill left unfinished); InputError when a
    line is not an answer of `oar generate` or was sampled with other settings."""
    from oar_attrib.files import drop_partial_tail
    from oar_attrib.errors import InputError
    from oar_attrib.jsonl import NotJSON, iter_jsonl

    held = Held()
    if not out.exists() or out.stat().st_size == 0:
        return held
    drop_partial_tail(out)
    for number, record in iter_jsonl(out):
        if isinstance(record, NotJSON) or not isinstance(record, dict) or not {
                "prompt", "gold", "group"} <= set(record):
            raise InputError(f"--out {out}:{number} is not an answer line of oar generate; pass "
                             "a new --out (the file is left as it is)")
        theirs = record.get("sampling")
        if theirs != settings:
            changed = [f"{k} {theirs.get(k)!r}, not {v!r}" for k, v in settings.items()
                       if theirs.get(k) != v] if isinstance(theirs, dict) else ["no settings recorded"]
            raise InputError(f"--out {out} holds answers sampled otherwise ({'; '.join(changed)}); "
                             "rerun with those settings to add to them, or pass a new --out")
        key = question_key(record["prompt"], record["gold"])
        held.counts[key] += 1
        held.groups.setdefault(key, record["group"])
    return held


def _settle(out: Path) -> None:
    """Recompute each group's advantages from all its answers (a group that grew has stale
    ones in its earlier lines); the file is rewritten, atomically, only when one changed."""
    import torch

    from oar_attrib.jsonl import iter_jsonl
    from oar_attrib.rollouts import group_advantages

    records = [r for _, r in iter_jsonl(out)]
    by_group: dict = {}
    for record in records:
        by_group.setdefault(record["group"], []).append(record)
    changed = False
    for group in by_group.values():
        group.sort(key=lambda r: r.get("sample", 0))
        new = group_advantages(torch.tensor([[float(r["reward"]) for r in group]]))[0].tolist()
        for record, advantage in zip(group, new):
            changed |= record.get("advantage") != advantage
            record["advantage"] = advantage
    if changed:
        tmp = out.with_name(f".{out.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)


def _write(handle, groups: list[list[dict]]) -> None:
    handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for g in groups for r in g))
    handle.flush()
    os.fsync(handle.fileno())


def _askable(tokenizer, questions, limit: int | None, max_new_tokens: int, data: Path,
             report) -> list:
    """(prompt ids, question) of the questions whose prompt and answer fit the model's
    `limit` positions; each other one reported as too_long, as `DATA:LINE: skipped ...` (its
    text bounded before it is tokenised)."""
    from oar_attrib.importers import MAX_RECORD_BYTES
    from oar_attrib.rollouts import prompt_ids

    out = []
    for q in questions:
        text = q.prompt if isinstance(q.prompt, str) else "".join(m["content"] for m in q.prompt)
        size = len(text.encode("utf-8", "surrogatepass"))
        where = data.with_name(q.source)  # the question's file and line
        if size > MAX_RECORD_BYTES:
            report("too_long", f"{where}: skipped (too_long): the prompt has {size} bytes, "
                               f"more than {MAX_RECORD_BYTES}")
            continue
        ids = prompt_ids(tokenizer, q.prompt)
        if limit is not None and len(ids) + max_new_tokens > limit:
            report("too_long", f"{where}: skipped (too_long): the prompt has {len(ids)} tokens; "
                               f"with --max-new-tokens {max_new_tokens} that is more than the "
                               f"model's {limit} positions")
            continue
        out.append((ids, q))
    return out


def _check(args, settings) -> None:
    from oar_attrib.errors import InputError

    for flag, value in (("--samples", args.samples), ("--batch-size", args.batch_size),
                        ("--n", args.n or 1)):
        if value < 1:
            raise InputError(f"{flag} must be at least 1, got {value}")
    if args.samples * args.batch_size > MAX_ROWS:
        raise InputError(f"--samples {args.samples} x --batch-size {args.batch_size} answers decoded "
                         f"at once is more than {MAX_ROWS}; lower --batch-size")
    if settings.all_greedy and args.samples > 1:
        raise InputError(f"--temperature 0 is greedy decoding: all --samples {args.samples} answers "
                         "would be the same; pass --samples 1, or a temperature above 0 (with "
                         "--greedy for a greedy first answer)")


def _to_ask(questions, held: Held, samples: int) -> tuple[dict, int]:
    """{answers held: [questions with that many]} of the questions still short of `samples`
    (each given its group in --out), and how many questions are complete."""
    todo, done = {}, 0
    for q in questions:
        key = question_key(q.prompt, q.gold)
        have = held.counts[key]
        if have >= samples:
            done += 1
            continue
        todo.setdefault(have, []).append(dataclasses.replace(q, group=held.group_of(key)))
    return todo, done


def _answer(model, tokenizer, todo: dict, args, settings, out: Path, report) -> tuple[int, int, int]:
    """Append the answers `todo` lacks to `out`, a batch of groups at a time; (answers
    written, right, questions asked). Ctrl-C keeps what was written and says so."""
    from tqdm.auto import tqdm

    from oar_attrib.inputs.encoding import position_limit
    from oar_attrib.rollouts import sample_encoded

    record, limit = dataclasses.asdict(settings), position_limit(tokenizer, model)
    written = right = asked = 0
    try:
        with open(out, "a", encoding="utf-8") as handle, \
                tqdm(total=sum(map(len, todo.values())), desc="generate", unit="question",
                     disable=args.no_progress) as bar:
            for have, questions in sorted(todo.items()):
                encoded = _askable(tokenizer, questions, limit, args.max_new_tokens, Path(args.data), report)
                bar.update(len(questions) - len(encoded))
                asked += len(encoded)
                for groups in sample_encoded(
                        model, tokenizer, encoded, samples=args.samples - have,
                        greedy=settings.greedy and have == 0, temperature=args.temperature or 1.0,
                        max_new_tokens=args.max_new_tokens, answer_format=args.answer_format,
                        batch_size=args.batch_size, seed=args.seed + have, first=have):
                    for answer in (r for g in groups for r in g):
                        answer["sampling"] = record
                    _write(handle, groups)
                    written += sum(len(g) for g in groups)
                    right += sum(r["correct"] for g in groups for r in g)
                    bar.update(len(groups))
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted; the {written} answers written to {out} are kept, "
                                "rerun the same command to resume") from None
    return written, right, asked


def run(args: argparse.Namespace) -> int:
    from oar_attrib.console import say
    from oar_attrib.errors import InputError
    from oar_attrib.files import check_file, check_writable
    from oar_attrib.models import load_model
    from oar_attrib.rollouts import SamplingSettings, read_questions

    settings = SamplingSettings(args.model, args.answer_format, args.temperature,
                                args.greedy or args.temperature == 0, args.max_new_tokens, args.seed)
    _check(args, settings)
    data, out = Path(args.data), Path(args.out)
    check_file(data, "--data", "pass a JSONL file with 'question' (or 'problem', or TRL's "
               "'prompt') and 'answer' per line")
    if out.suffix == ".db":
        raise InputError(f"--out {out}: oar generate writes JSONL; attribute it into a store with "
                         f"oar attribute --input {out.with_suffix('.jsonl')} --out {out}")
    check_writable(out)
    held = _held(out, dataclasses.asdict(settings))
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    skipped: Counter = Counter()

    def report(kind: str, line: str) -> None:
        skipped[kind] += 1
        say(line)

    questions = read_questions(data, tokenizer, args.answer_format, limit=args.n, report=report)
    todo, done = _to_ask(questions, held, args.samples)
    written, right, asked = _answer(model, tokenizer, todo, args, settings, out, report)
    if out.exists() and out.stat().st_size:
        _settle(out)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(skipped.items()))
    say(f"wrote {written} answers to {asked} questions to {out} ({right} right"
        + (f", {done} questions already there" if done else "") + f"); {sum(skipped.values())} "
        "bad lines skipped" + (f" ({kinds})" if kinds else ""))
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
    gen.add_argument("--samples", type=int, default=4,
                     help="answers per question (GRPO's group size G); a rerun with more adds to the groups")
    gen.add_argument("--temperature", type=float, default=1.0,
                     help="sampling temperature; 0 is greedy decoding (needs --samples 1)")
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
