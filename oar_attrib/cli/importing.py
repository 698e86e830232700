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
import dataclasses
import shlex
from pathlib import Path

from ..commands import add_dataclass_args, dataclass_from_args, option
from ..console import say
from ..defaults import ANSWER_FORMAT, DEFAULT_MODEL
from ..files import check_writable
from ..errors import InputError
from ..importers.rows import MAX_RECORD_BYTES
from .choices import add_answer_format_arg

STACKS = ("trl", "verl", "jsonl")


@dataclasses.dataclass(frozen=True, kw_only=True)  # the positional stack and sources come first
class ImportSettings:
    """What `oar import` reads, how, and into which store: every field is its flag (or
    argument), but --answer-format (`choices.add_answer_format_arg`). --model and
    --answer-format left out (None) are filled in from the sources (`_defaults`)."""

    stack: str = option(
        flag="stack", choices=STACKS,
        help="trl: GRPOTrainer completion logs (output_dir or completions_*.parquet); verl: "
             "trainer.rollout_data_dir (or its <step>.jsonl files); jsonl: prompt/response/reward/group lines")
    sources: tuple[str, ...] = option(flag="sources", help="folders or files to import")
    out: str = option(help="run store *.db to add the run to (created if new)")
    model: str | None = option(
        None, "the policy: a catalogue name or checkpoint folder (its tokenizer splits the "
              "responses; `oar attribute --store` scores with it). Default: the policy the run "
              "folder holds (its top, its newest checkpoint-N/, or only its tokenizer files), or "
              f"the model an `oar generate` JSONL names, else {DEFAULT_MODEL}")
    name: str | None = option(None, "run name (default: the stack and first source)")
    answer_format: str | None = option(None, flag=None)  # add_answer_format_arg
    correct_threshold: float = option(
        1.0, "a row is correct when its reward is at least this (unless it logs its own verdict: "
             "verl's `acc`, a JSONL `correct`)", bounds=(0.0, None))
    reward_columns: tuple[str, ...] | None = option(
        None, "TRL: the reward function columns summed into the reward (default: every numeric "
              "column but step and advantage)")
    batch_size: int = option(64, "rows written per transaction")
    max_bytes: int = option(
        MAX_RECORD_BYTES, "longest row imported, prompt and response text in UTF-8 bytes (a longer "
                          "one is skipped as too_long before it is tokenised; rows of more tokens "
                          "than the model has positions are skipped too)")

    def __post_init__(self) -> None:
        if Path(self.out).suffix != ".db":
            raise InputError(f"--out {self.out} must be a run store ending in .db")
        if self.reward_columns and self.stack != "trl":
            raise InputError("--reward-columns is for TRL logs; verl and JSONL rows carry one reward")
        if self.max_bytes < 1:
            raise InputError(f"--max-bytes must be at least 1, got {self.max_bytes}")


# The flags listed after the shared --answer-format in --help.
_SHOWN_LAST = ("correct_threshold", "reward_columns", "batch_size", "max_bytes")


def _defaults(settings: ImportSettings, found) -> tuple[ImportSettings, str | None]:
    """`settings` with --model and --answer-format filled in where left out (None), and the
    line that says where they came from (None: from nowhere but the defaults). A JSONL of
    `oar generate` names its model and answer format (`provenance.input_defaults`); a TRL or
    verl run folder holds its policy (`provenance.run_policy`); else the bundled model and auto."""
    from .provenance import input_defaults, run_policy

    if settings.stack == "jsonl" and found:
        given = argparse.Namespace(model=settings.model, answer_format=settings.answer_format)
        line = input_defaults(given, found[0].path, DEFAULT_MODEL, "import")
        return dataclasses.replace(settings, model=given.model, answer_format=given.answer_format), line
    settings = dataclasses.replace(settings, answer_format=settings.answer_format or ANSWER_FORMAT)
    if settings.model is not None:
        return settings, None
    policy = run_policy(settings.sources)
    model = DEFAULT_MODEL if policy is None else str(policy.folder)
    return dataclasses.replace(settings, model=model), None if policy is None else policy.says("import")


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
    from ..analysis.signal import RL_RUN, Knobs, signal_line, store_signal
    from ..importers import READERS, RecordLimits, import_rollouts
    from ..inputs.chat_template import ROLE_TEMPLATE, ROLE_TEMPLATE_NAME
    from ..inputs.encoding import position_limit
    from ..models import load_tokenizer
    from ..store import Store
    from ..store.lock import WriterLock
    from ..store.schema import identify

    settings = dataclass_from_args(ImportSettings, args)
    out = Path(settings.out)
    check_writable(out)
    options = {"trl": {"reward_columns": settings.reward_columns}, "verl": {"said": say}}.get(settings.stack, {})
    left_out: list[str] = []  # files not read (a FIFO, a link out of the folder, a copy)

    def leave_out(line: str) -> None:
        left_out.append(line)
        say(line)

    read, found = READERS[settings.stack](settings.sources, **options, report=leave_out)
    identify(out)  # read-only: another program's file or a newer store fails unchanged
    settings, said = _defaults(settings, found)
    if said:
        say(said)
    model = settings.model
    tokenizer, model_config = load_tokenizer(model)
    limits = RecordLimits(settings.max_bytes, position_limit(tokenizer, model_config))
    # The sources as given (not the files found), each once: a rerun after more steps resumes.
    given = list(dict.fromkeys(str(Path(p).resolve()) for p in settings.sources))
    config = {"importer": settings.stack, "sources": given,
              "answer_format": settings.answer_format, "correct_threshold": settings.correct_threshold,
              "chat": "messages"}  # importers.rows.chat_rule, for `oar attribute --store`
    if getattr(tokenizer, "chat_template", None) is None:  # chat prompts are read all the same
        tokenizer.chat_template, config["chat_template"] = ROLE_TEMPLATE, ROLE_TEMPLATE_NAME
        read = _say_at_first_chat(read, (
            f"oar import: {model} has no chat template, so chat prompts are rendered as "
            "'role: content' lines; pass --model with the policy's checkpoint (or keep its "
            "tokenizer in the run folder) for its own"))
    name = settings.name or f"{settings.stack} {Path(settings.sources[0]).name}"
    with WriterLock(out, "--out"), Store(out) as store:
        summary = import_rollouts(store, read, name=name, model=model, tokenizer=tokenizer,
                                  config=config, answer_format=settings.answer_format,
                                  correct_threshold=settings.correct_threshold,
                                  batch=settings.batch_size, limits=limits, report=say)
        summarise(store, summary.run_id)
        signal = signal_line(store_signal(store, summary.run_id), Knobs() if settings.stack == "jsonl" else RL_RUN)
    _report(out, summary, left_out, signal, settings.sources if settings.stack == "trl" else ())
    return 2 if summary.skipped or left_out else 0


def _report(out: Path, summary, left_out: list[str], signal: str | None, sources=()) -> None:
    """The import's closing lines: the run's GRPO signal when it has none, the summary, which
    store to open when a source folder holds an OAR trainer's own (`trainer_stores`), and the
    next command."""
    if signal:
        say(f"oar import: {signal}")
    say(summary.line(out) + (f"; {len(left_out)} files left out" if left_out else ""))
    for store in trainer_stores(sources, out):
        say(f"oar import: {store} is the OAR trainer's own run store (a sample of completions every "
            f"oar_store_every steps, attributed by the method it trained with, as it trained); {out} holds "
            "every completion TRL logged, attributed by none yet: open the first for the credit the run "
            "trained on, this one to compare methods on all of them")
    where = shlex.quote(str(out))
    say(f"next: oar attribute --store {where} --run {summary.run_id} attributes it in place, "
        f"then oar web --store {where} shows it")


def trainer_stores(sources, out: Path) -> list[Path]:
    """The run stores an `OARGRPOTrainer` wrote into the source folders (`<output_dir>/runs.db`),
    other than `out`."""
    found = [Path(s) / "runs.db" for s in sources if Path(s).is_dir()]
    return [p for p in found if p.is_file() and p.resolve() != Path(out).resolve()]


def add_parser(sub) -> None:
    im = sub.add_parser("import", help="rollouts of TRL, verl or JSONL into a run store")
    add_dataclass_args(im, ImportSettings, names=[f for f in ImportSettings.__dataclass_fields__
                                                  if f not in _SHOWN_LAST])
    add_answer_format_arg(im, default=None, help_text="where the final answer is (default: the format "
                          "an `oar generate` JSONL was generated with, else auto)")
    add_dataclass_args(im, ImportSettings, names=_SHOWN_LAST)
    im.set_defaults(func=run)
