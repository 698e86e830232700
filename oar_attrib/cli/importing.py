"""`oar import`: rollouts of TRL, verl or plain JSONL into a run store, ready for `oar web`
and for `oar attribute --store S --run R` (any method, attributed in place).

The sources are checked and the tokenizer loaded before anything is written; rows are read
twice, streaming (group rewards, then the rows), and written in batches; a rerun with the same
sources and store resumes each file after its rows already there (files are known by their
content: two runs' files of the same name are never confused, a file named twice is read
once). Only regular files are read. Bad rows are reported as `FILE:ROW: skipped (KIND): why`,
files left out as `FILE: skipped: why`; the exit status is 2 when any row or file was skipped.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..console import say
from ..defaults import ANSWER_FORMAT, DEFAULT_MODEL
from ..files import check_writable
from ..errors import InputError
from .choices import add_answer_format_arg



def _defaults(args, found) -> str | None:
    """Fill in --model and --answer-format where left out (None), and return the line that
    says where they came from (None: from nowhere but the defaults). A JSONL of `oar generate`
    names its model and answer format (`provenance.input_defaults`); a TRL or verl run folder
    holds its policy (`provenance.run_policy`); else the bundled model and auto."""
    from .provenance import input_defaults, run_policy

    if args.stack == "jsonl" and found:
        return input_defaults(args, found[0].path, DEFAULT_MODEL, "import")
    args.answer_format = args.answer_format or ANSWER_FORMAT
    if args.model is not None:
        return None
    policy = run_policy(args.sources)
    args.model = DEFAULT_MODEL if policy is None else str(policy.folder)
    return None if policy is None else policy.says("import")


def _say_at_first_chat(read, line: str):
    """`read` (rows.Reader) that says `line` once, at the first row with a chat prompt."""
    from ..importers import Rollout

    said = False

    def wrapped():
        nonlocal said
        for item in read():
            if not said and isinstance(item, Rollout) and isinstance(item.prompt, list):
                said = True
                say(line)
            yield item

    return wrapped


def run(args: argparse.Namespace) -> int:
    from ..analysis.run_summary import summarise
    from ..analysis.signal import signal_line, store_signal
    from ..importers import READERS, RecordLimits, import_rollouts
    from ..inputs.chat_template import ROLE_TEMPLATE, ROLE_TEMPLATE_NAME
    from ..inputs.encoding import position_limit
    from ..models import load_tokenizer
    from ..store import Store
    from ..store.lock import WriterLock
    from ..store.schema import identify

    out = Path(args.out)
    if out.suffix != ".db":
        raise InputError(f"--out {out} must be a run store ending in .db")
    check_writable(out)
    options = {"reward_columns": args.reward_columns} if args.stack == "trl" else {}
    if args.reward_columns and args.stack != "trl":
        raise InputError("--reward-columns is for TRL logs; verl and JSONL rows carry one reward")
    if args.max_bytes < 1:
        raise InputError(f"--max-bytes must be at least 1, got {args.max_bytes}")
    left_out: list[str] = []  # files not read (a FIFO, a link out of the folder, a copy)

    def leave_out(line: str) -> None:
        left_out.append(line)
        say(line)

    read, found = READERS[args.stack](args.sources, **options, report=leave_out)
    identify(out)  # read-only: another program's file or a newer store fails unchanged
    said = _defaults(args, found)
    if said:
        say(said)
    model = args.model
    tokenizer, model_config = load_tokenizer(model)
    limits = RecordLimits(args.max_bytes, position_limit(tokenizer, model_config))
    # The sources as given (not the files found), each once: a rerun after more steps resumes.
    given = list(dict.fromkeys(str(Path(p).resolve()) for p in args.sources))
    config = {"importer": args.stack, "sources": given,
              "answer_format": args.answer_format, "correct_threshold": args.correct_threshold,
              "chat": "messages"}  # importers.rows.chat_rule, for `oar attribute --store`
    if getattr(tokenizer, "chat_template", None) is None:  # chat prompts are read all the same
        tokenizer.chat_template, config["chat_template"] = ROLE_TEMPLATE, ROLE_TEMPLATE_NAME
        read = _say_at_first_chat(read, (
            f"oar import: {model} has no chat template, so chat prompts are rendered as "
            "'role: content' lines; pass --model with the policy's checkpoint (or keep its "
            "tokenizer in the run folder) for its own"))
    name = args.name or f"{args.stack} {Path(args.sources[0]).name}"
    with WriterLock(out, "--out"), Store(out) as store:
        summary = import_rollouts(store, read, name=name, model=model, tokenizer=tokenizer,
                                  config=config, answer_format=args.answer_format,
                                  correct_threshold=args.correct_threshold, batch=args.batch_size,
                                  limits=limits, report=say)
        summarise(store, summary.run_id)
        signal = signal_line(store_signal(store, summary.run_id))
    _report(out, summary, left_out, signal)
    return 2 if summary.skipped or left_out else 0


def _report(out: Path, summary, left_out: list[str], signal: str | None) -> None:
    """The import's closing lines: the run's GRPO signal when it has none, the summary, and
    the next command."""
    if signal:
        say(f"oar import: {signal}")
    say(summary.line(out) + (f"; {len(left_out)} files left out" if left_out else ""))
    where = shlex.quote(str(out))
    say(f"next: oar attribute --store {where} --run {summary.run_id} attributes it in place, "
        f"then oar web --store {where} shows it")


def add_parser(sub) -> None:
    from ..importers.rows import MAX_RECORD_BYTES

    im = sub.add_parser("import", help="rollouts of TRL, verl or JSONL into a run store")
    im.add_argument("stack", choices=("trl", "verl", "jsonl"),
                    help="trl: GRPOTrainer completion logs (output_dir or completions_*.parquet); "
                         "verl: trainer.rollout_data_dir (or its <step>.jsonl files); jsonl: "
                         "prompt/response/reward/group lines")
    im.add_argument("sources", nargs="+", help="folders or files to import")
    im.add_argument("--out", required=True, help="run store *.db to add the run to (created if new)")
    im.add_argument("--model", default=None,
                    help="the policy: a catalogue name or checkpoint folder (its tokenizer splits "
                         "the responses; `oar attribute --store` scores with it). Default: the "
                         "policy the run folder holds (its top, its newest checkpoint-N/, or "
                         "only its tokenizer files), or the model an `oar generate` JSONL names, "
                         f"else {DEFAULT_MODEL}")
    im.add_argument("--name", default=None, help="run name (default: the stack and first source)")
    add_answer_format_arg(im, default=None, help_text="where the final answer is (default: the format "
                          "an `oar generate` JSONL was generated with, else auto)")
    im.add_argument("--correct-threshold", type=float, default=1.0,
                    help="a row is correct when its reward is at least this (unless it logs "
                         "its own verdict: verl's `acc`, a JSONL `correct`)")
    im.add_argument("--reward-columns", nargs="+", default=None,
                    help="TRL: the reward function columns summed into the reward (default: "
                         "every numeric column but step and advantage)")
    im.add_argument("--batch-size", type=int, default=64, help="rows written per transaction")
    im.add_argument("--max-bytes", type=int, default=MAX_RECORD_BYTES,
                    help="longest row imported, prompt and response text in UTF-8 bytes (a longer "
                         "one is skipped as too_long before it is tokenised; rows of more tokens "
                         "than the model has positions are skipped too)")
    im.set_defaults(func=run)
