"""`oar generate`: from a JSONL of questions to graded groups of answers, the lines `oar attribute` takes.

    oar generate --model smollm2-135m --data gsm8k_test.jsonl --out traces.jsonl --n 20 --samples 4
    oar attribute --input traces.jsonl --out runs.db   # then: oar web --store runs.db

Each question gets --samples answers (with --greedy the first is the greedy one; --temperature 0
is greedy decoding, one answer per question), graded by the answer span in --answer-format and
given GRPO group advantages (`oar_attrib.rollouts`). The answer format, temperature and token
limit default to the model's catalogue entry (`catalogue.Answering`: how it gives answers).
Every answer carries the sampling settings and the model that wrote it (`sampling`,
`rollouts.SamplingSettings.record`), which `oar attribute --input` takes as its defaults. A
question's answers are written together, flushed and fsynced, the groups in the order of the
questions in --data (so `oar attribute` meets them in that order); the progress bar counts answers
and tokens as they are made, and a line says so when fewer than half the replies have an
answer, naming the flag to change.
A rerun resumes by content: a question is known by its prompt and gold answer (not by the
file or line it came from), the answers --out already holds are kept, never rewritten away,
and only the missing ones are asked (a higher --samples adds to each group, whose advantages
are then recomputed); answers sampled with other settings are refused. Prompts longer than
the model can take with --max-new-tokens are skipped before anything is generated; bad
question lines are reported by number and skipped (exit status 2). An --out that is not an
answer file of `oar generate` is refused, left as it is (`answers_owner`); one writer at a
time (`store.lock.WriterLock`, deleted on every exit but a kill).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

from oar_attrib.commands import add_dataclass_args, add_model_args, dataclass_from_args, option
from oar_attrib.console import terminal_safe
from oar_attrib.files import write_file
from oar_attrib.inputs.spans import MARKER_FORMATS

# The most rows (questions x samples) decoded at once.
MAX_ROWS = 1 << 16


@dataclasses.dataclass(frozen=True, kw_only=True)  # --data and --out, required, come after --model
class GenerateSettings:
    """What `oar generate` asks, of which model, and where it writes: every field is its flag,
    but --device and --dtype (`commands.add_model_args`). The answer format, temperature and
    token limit left out (None) are the model's catalogue defaults (`model_defaults`)."""

    model: str = option("smollm2-135m", "catalogue name or local checkpoint folder")
    data: str = option(
        help="JSONL questions: 'question' or 'problem' and 'answer' per line (GSM8K / MATH-500 / "
             "AIME / AMC), or TRL's 'prompt' (string or chat messages) and 'answer'")
    out: str = option(help="JSONL to write (appended; a rerun resumes)")
    n: int | None = option(None, "the first N questions (default: all)")
    samples: int = option(
        4, "answers per question (GRPO's group size G); a rerun with more adds to the groups")
    temperature: float | None = option(
        None, "sampling temperature; 0 is greedy decoding (needs --samples 1); default: the "
              "model's in the catalogue (`oar models`: smollm2-135m 0.5), else 1.0")
    greedy: bool = option(False, "the first answer of each group is the greedy one", action="store_true")
    max_new_tokens: int | None = option(
        None, "tokens per answer (cut off: reward 0); default: the model's in the catalogue "
              "(smollm2-135m 320), else 512")
    answer_format: str | None = option(
        None, f"the format the prompt asks for and the grade reads: one of {', '.join(MARKER_FORMATS)}; "
              "default: the one the model follows in the catalogue (smollm2-135m answer_is), else boxed")
    batch_size: int = option(8, "questions decoded together")
    seed: int = option(0, "seed of the sampling")
    device: str | None = option(None, flag=None)  # add_model_args
    dtype: str = option("float32", flag=None)  # add_model_args
    no_progress: bool = option(False, "hide the progress bar", action="store_true")


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


_REMEDY = "rerun with those settings to add to them, or pass a new --out"


def _is_answer(record) -> bool:
    return isinstance(record, dict) and {"prompt", "gold", "group"} <= set(record) and isinstance(
        record.get("sampling"), dict)


def _sampling(record: dict) -> dict:
    """An answer's sampling record (one written before the model carried its hash: by name)."""
    theirs = record["sampling"]
    return {**theirs, "model": {"name": theirs["model"]}} if isinstance(theirs.get("model"), str) else theirs


def answers_owner(out: Path, settings: dict):
    """The `jsonl.LogOwner` of an `oar generate` --out sampled with `settings`: a first line
    that is not an answer is not its own; one sampled otherwise is a RecordMismatchError."""
    from oar_attrib.jsonl import LogOwner
    from oar_attrib.records.settings_record import check_resume

    def first(value) -> bool:
        if not _is_answer(value):
            return False
        check_resume(f"--out {out}", _sampling(value), settings, _REMEDY)
        return True

    return LogOwner("an answer file of oar generate", first)


def _not_an_answer(record, seen: dict, number: int) -> str | None:
    """Why a line of --out is not an answer of `oar generate` (of another shape, with keys no
    answer has, or an answer already on an earlier line: `seen`, (question, sample) -> line),
    else None."""
    from oar_attrib.rollouts import ANSWER_KEYS

    if not _is_answer(record):
        return "is not an answer line of oar generate"
    extra = sorted(set(record) - ANSWER_KEYS)
    if extra:
        return f"holds keys no answer line of oar generate has ({', '.join(extra[:4])})"
    key = (question_key(record["prompt"], record["gold"]), record.get("sample"))
    if key in seen:
        return f"repeats the answer on line {seen[key]} (the same question and sample)"
    seen[key] = number
    return None


def _held(out: Path, settings: dict) -> Held:
    """What `out` holds, read without changing it (a last line a kill left unfinished is left
    out; the next append cuts it): InputError when a line is not an answer of `oar generate`,
    RecordMismatchError when it was sampled with other settings or by another model (its
    weights: a moved folder is the same model)."""
    from oar_attrib.errors import InputError
    from oar_attrib.jsonl import iter_jsonl
    from oar_attrib.records.settings_record import check_resume

    held, checked, seen = Held(), set(), {}
    if not out.exists() or out.stat().st_size == 0:
        return held
    for number, record in iter_jsonl(out, whole_lines=True):
        why = _not_an_answer(record, seen, number)
        if why:
            raise InputError(f"--out {out}:{number} {why}; pass a new --out (the file is left as it is)")
        theirs = _sampling(record)
        key = json.dumps(theirs, sort_keys=True)
        if key not in checked:
            check_resume(f"--out {out}", theirs, settings, _REMEDY)
            checked.add(key)
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
        write_file(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def _write(log, groups: list[list[dict]]) -> None:
    log.write(r for g in groups for r in g)


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


def _check(options: GenerateSettings, settings) -> None:
    from oar_attrib.errors import InputError

    for flag, value in (("--samples", options.samples), ("--batch-size", options.batch_size),
                        ("--n", options.n or 1)):
        if value < 1:
            raise InputError(f"{flag} must be at least 1, got {value}")
    if options.samples * options.batch_size > MAX_ROWS:
        raise InputError(f"--samples {options.samples} x --batch-size {options.batch_size} answers "
                         f"decoded at once is more than {MAX_ROWS}; lower --batch-size")
    if settings.all_greedy and options.samples > 1:
        raise InputError(f"--temperature 0 is greedy decoding: all --samples {options.samples} "
                         "answers would be the same; pass --samples 1, or a temperature above 0 "
                         "(with --greedy for a greedy first answer)")


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


def output_signal(out: Path, hotter: bool = True) -> str | None:
    """`analysis.signal.signal_line` of the answers in JSONL `out` (this run's and those
    already there), or None when every group carries a GRPO signal. `hotter`: a higher
    --temperature is advised too (not after `few_answers` advised a lower one)."""
    import dataclasses

    from oar_attrib.analysis.signal import GENERATE, group_signal, signal_line
    from oar_attrib.jsonl import iter_jsonl

    if not out.exists():
        return None
    rows = ((r.get("group"), r.get("reward"), r.get("correct")) for _, r in iter_jsonl(out)
            if isinstance(r, dict))
    return signal_line(group_signal(rows), GENERATE if hotter else dataclasses.replace(GENERATE, temperature=None))


class Tally(Counter):
    """What `_answer` made: `written` answers (`right`, `answered`: with an answer span in
    the format, `cut`: cut off at --max-new-tokens) to `asked` questions."""

    def add(self, groups: list[list[dict]]) -> None:
        from oar_attrib.inputs.grading import NO_ANSWER, TRUNCATED

        answers = [r for g in groups for r in g]
        self["written"] += len(answers)
        self["right"] += sum(r["correct"] for r in answers)
        self["answered"] += sum(r["why"] not in (NO_ANSWER, TRUNCATED) for r in answers)
        self["cut"] += sum(r["why"] == TRUNCATED for r in answers)


class Progress:
    """`oar generate`'s progress bar: answers counted as they end (an EOS; those cut off at
    --max-new-tokens when their batch ends) and the tokens made so far, step by step; `clock`
    (`models.cost.DecodeClock`) hears of each step too, and says how long the run will take."""

    def __init__(self, bar, clock=None):
        self.bar, self.tokens, self.ended, self.clock = bar, 0, 0, clock

    def step(self, tokens: int, ended: int) -> None:
        """After each decoding step (`generation.StepCounter`)."""
        if self.clock is not None:
            self.clock.step()
        self.tokens += tokens
        self.ended += ended
        self.bar.set_postfix_str(f"{self.tokens} tokens", refresh=not ended)
        if ended:
            self.bar.update(ended)

    def batch(self, answers: int) -> None:
        """A batch of `answers` ended: the ones not counted yet were cut off."""
        self.bar.update(answers - self.ended)
        self.ended = 0


def _answer(model, tokenizer, todo: dict, options: GenerateSettings, settings, out: Path) -> Tally:
    """Append the answers `todo` lacks to `out` ({answers held: [(prompt ids, question)]}, the
    questions `_askable`), a batch of groups at a time (`Tally` of what was written). Ctrl-C
    keeps what was written and says so."""
    from tqdm.auto import tqdm

    from oar_attrib.jsonl import AppendLog
    from oar_attrib.rollouts import sample_encoded

    record = settings.record()
    tally = Tally()
    try:
        with AppendLog(out, "--out", owner=answers_owner(out, record)) as handle, \
                tqdm(total=sum(len(q) * (options.samples - have) for have, q in todo.items()),
                     desc="generate", unit="answer", disable=options.no_progress) as bar:
            above_bar = lambda line: bar.write(terminal_safe(line), file=sys.stderr)  # noqa: E731
            progress = Progress(bar, _clock(todo, options, above_bar))
            for have, encoded in sorted(todo.items()):
                tally["asked"] += len(encoded)
                for groups in sample_encoded(
                        model, tokenizer, encoded, samples=options.samples - have,
                        greedy=settings.greedy and have == 0, temperature=options.temperature or 1.0,
                        max_new_tokens=options.max_new_tokens, answer_format=options.answer_format,
                        batch_size=options.batch_size, seed=options.seed + have, first=have,
                        on_step=progress.step, in_order=True):
                    for answer in (r for g in groups for r in g):
                        answer["sampling"] = record
                    _write(handle, groups)
                    tally.add(groups)
                    progress.batch(sum(len(g) for g in groups))
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted; the {tally['written']} answers written to {out} are "
                                "kept, rerun the same command to resume") from None
    return tally


def _clock(todo: dict, options: GenerateSettings, tell):
    """The `DecodeClock` of the batches `todo` ({answers held: questions}) will take."""
    import math

    from oar_attrib.models.cost import DecodeClock

    batches = sum(math.ceil(len(q) / options.batch_size) for q in todo.values())
    return DecodeClock("oar generate", batches, options.max_new_tokens, tell,
                       shorter="fewer questions (--n), answers (--samples) or tokens (--max-new-tokens) take less")


def plan_line(todo: dict, options: GenerateSettings, done: int) -> str:
    """What `oar generate` will do, said before the model's first call (how long: `_clock`,
    once the first decoding steps are timed)."""
    questions = sum(len(q) for q in todo.values())
    answers = sum(len(q) * (options.samples - have) for have, q in todo.items())
    held = f" ({done} questions already complete in --out)" if done else ""
    return (f"oar generate: {answers} answers to {questions} questions{held}, up to {options.max_new_tokens} "
            f"tokens each, {options.batch_size} questions at a time; how long it takes is said after the "
            "first decoding steps, and Ctrl-C keeps every group written")


def few_answers(tally: Tally, settings) -> str | None:
    """The line that says fewer than half the replies have an answer, naming the flag to
    change; None when at least half do."""
    from oar_attrib.inputs.spans import MARKER_FORMATS

    if not tally["written"] or 2 * tally["answered"] >= tally["written"]:
        return None
    if 2 * tally["cut"] > tally["written"] - tally["answered"]:
        fix = (f"most were cut off: raise --max-new-tokens (now {settings.max_new_tokens}) or "
               f"lower --temperature (now {settings.temperature:g})")
    else:
        others = ", ".join(f for f in MARKER_FORMATS if f != settings.answer_format)
        fix = (f"most never state one: pass the --answer-format the model follows ({others}) "
               f"or lower --temperature (now {settings.temperature:g})")
    return (f"oar generate: only {tally['answered']} of {tally['written']} replies have an answer "
            f"in format {settings.answer_format!r} ({tally['cut']} cut off at --max-new-tokens "
            f"{settings.max_new_tokens}); {fix}")


def model_defaults(options: GenerateSettings) -> tuple[GenerateSettings, str | None]:
    """`options` with the sampling settings left out (None) filled in from the model's
    catalogue entry (`catalogue.Answering`: how it gives answers), else the generic defaults;
    and the line that says which came from the catalogue, None when none did."""
    from oar_attrib.models.catalogue import answering

    defaults, known = answering(options.model)
    taken = [name for name in ("answer_format", "temperature", "max_new_tokens")
             if getattr(options, name) is None]
    options = dataclasses.replace(options, **{name: getattr(defaults, name) for name in taken})
    if not known or not taken:
        return options, None
    shown = ", ".join(f"--{n.replace('_', '-')} {getattr(options, n):g}" if n == "temperature"
                      else f"--{n.replace('_', '-')} {getattr(options, n)}" for n in taken)
    return options, (f"oar generate: {options.model} answers with {shown} (its catalogue defaults; pass the "
                     "flag to change one)")


def run(args: argparse.Namespace) -> int:
    from oar_attrib.errors import InputError
    from oar_attrib.files import check_file, check_writable
    from oar_attrib.jsonl import check_log_path
    from oar_attrib.rollouts import SamplingSettings
    from oar_attrib.store.lock import WriterLock

    options, said = model_defaults(dataclass_from_args(GenerateSettings, args))
    settings = SamplingSettings(options.model, options.answer_format, options.temperature,
                                options.greedy or options.temperature == 0, options.max_new_tokens,
                                options.seed)
    _check(options, settings)
    data, out = Path(options.data), Path(options.out)
    check_file(data, "--data", "pass a JSONL file with 'question' (or 'problem', or TRL's "
               "'prompt') and 'answer' per line")
    if out.suffix == ".db":
        raise InputError(f"--out {out}: oar generate writes JSONL; attribute it into a store with "
                         f"oar attribute --input {out.with_suffix('.jsonl')} --out {out}")
    check_writable(out)
    check_log_path(out, "--out", answers_owner(out, settings.record()))  # read-only, before the lock
    with WriterLock(out, "--out"):  # deleted on every exit but a kill
        return _generate_into(out, data, options, settings, said)


def _generate_into(out: Path, data: Path, options: GenerateSettings, settings, said: str | None) -> int:
    """`oar generate` once its flags and --out are checked and its writer lock is held."""
    from oar_attrib.console import say
    from oar_attrib.inputs.encoding import position_limit
    from oar_attrib.models import load_model
    from oar_attrib.rollouts import read_questions

    held = _held(out, settings.record())
    if said:  # once every refusal has had its say
        say(said)
    model, tokenizer = load_model(options.model, device=options.device, dtype=options.dtype)
    skipped: Counter = Counter()

    def report(kind: str, line: str) -> None:
        skipped[kind] += 1
        say(line)

    questions = read_questions(data, tokenizer, options.answer_format, limit=options.n, report=report)
    todo, done = _to_ask(questions, held, options.samples)
    limit = position_limit(tokenizer, model)  # the prompts that do not fit are said before the plan
    todo = {have: encoded for have, asked in todo.items()
            if (encoded := _askable(tokenizer, asked, limit, options.max_new_tokens, data, report))}
    if todo:
        say(plan_line(todo, options, done))
    tally = _answer(model, tokenizer, todo, options, settings, out)
    if out.exists() and out.stat().st_size:
        _settle(out)
    warning = few_answers(tally, settings)
    if warning:  # before the summary, which stays the last line
        say(warning)
    signal = output_signal(out, hotter=warning is None)  # the warning advises a lower --temperature
    if signal:
        say(f"oar generate: {signal}")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(skipped.items()))
    say(f"wrote {tally['written']} answers to {tally['asked']} questions to {out} ({tally['right']} right"
        + (f", {done} questions already there" if done else "") + f"); {sum(skipped.values())} "
        "bad lines skipped" + (f" ({kinds})" if kinds else ""))
    return 2 if skipped else 0


def add_parser(sub) -> None:
    gen = sub.add_parser("generate", help="sample graded groups of answers to JSONL questions (for oar attribute)",
                         description=__doc__.split("\n\n")[0])
    add_dataclass_args(gen, GenerateSettings, names=[f for f in GenerateSettings.__dataclass_fields__
                                                     if f != "no_progress"])
    add_model_args(gen, budget=False)
    add_dataclass_args(gen, GenerateSettings, names=("no_progress",))
    gen.set_defaults(func=run)
