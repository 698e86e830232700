"""Rollouts of other RL stacks, as rows, and the one writer that puts them in a run store.

A reader (trl.py, verl.py, jsonl.py) yields, for each row of its files in order, a `Rollout`
or a `BadRow` (why that row cannot be used: every value is checked on its row, values.py).
`import_rollouts` reads the rows twice, streaming: the first pass collects each group's rewards
(floats only), the second tokenises the rows and writes them, `batch` per transaction, with the
sequence advantage the stack logged or, when it logged none, the group rule recomputed from
the rewards (`group_advantages`). A row longer than `max_bytes` is skipped before it is
tokenised, and one of more tokens than the model has positions after. Each written trace
records its source file (shown), the file's content id (sources.py) and its row in `extra`, so
a rerun into the same store resumes each file after its rows already there; bad rows are
reported as `FILE:ROW: skipped (KIND): why`.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..defaults import ANSWER_FORMAT
from ..errors import InputError
from .values import text_bytes

# TRL's GRPO rule (scale_rewards="group"): (r - mean) / (std + 1e-4), std with Bessel's
# correction; a group of one has no spread and gets advantage 0 here (TRL: NaN std).
ADVANTAGE_EPS = 1e-4
# The longest row imported by default, prompt and response together (`oar import --max-bytes`):
# far above any trace a model with 32k positions can hold, far below what fills memory.
MAX_RECORD_BYTES = 1 << 20


@dataclass
class Rollout:
    """One sampled response of an RL run.

    source, row: the file it came from (as shown) and its row (1-based line or parquet row);
    source_id: that file's content id (sources.Source.id), what a resumed import keys rows by;
    group: the key of its prompt group within the run (rows with the same key share a group
    mean and std); advantage: the sequence advantage the stack logged, if any;
    gold: the reference answer, if logged; correct: the stack's own verdict, if logged."""

    source: str
    row: int
    source_id: str
    prompt: str | list
    response: str
    reward: float | None
    group: object = None
    step: int | None = None
    advantage: float | None = None
    gold: str | None = None
    correct: bool | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class BadRow:
    source: str
    row: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.row}: skipped ({self.kind}): {self.message}"

    @classmethod
    def of(cls, source, row: int, kind: str, message: str) -> "BadRow":
        """The bad row `row` of a `sources.Source`."""
        return cls(source.shown, row, kind, message)


Reader = Callable[[], Iterator["Rollout | BadRow"]]


def group_advantages(rewards: dict[object, list[float]]) -> dict[object, tuple[float, float]]:
    """(mean, std) of each group's rewards, std with Bessel's correction (0 for one reward)."""
    out = {}
    for key, values in rewards.items():
        n = len(values)
        mean = sum(values) / n
        var = sum((r - mean) ** 2 for r in values) / (n - 1) if n > 1 else 0.0
        out[key] = (mean, math.sqrt(var))
    return out


def advantage_of(reward: float, stats: tuple[float, float]) -> float:
    mean, std = stats
    return (reward - mean) / (std + ADVANTAGE_EPS)


@dataclass
class ImportSummary:
    run_id: int
    written: int
    resumed: int
    skipped: Counter
    recomputed: int  # rows whose advantage was recomputed from the group's rewards

    def line(self, out) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items()))
        text = (f"imported {self.written} rollouts into run {self.run_id} of {out}"
                f" ({self.recomputed} advantages recomputed from group rewards")
        if self.resumed:
            text += f", {self.resumed} rows already there"
        return text + f"); {sum(self.skipped.values())} bad rows skipped" + (f" ({kinds})" if kinds else "")


def _first_pass(read: Reader) -> tuple[dict, dict]:
    """(group key -> rewards, group key -> group number) over the good rows."""
    rewards: dict[object, list[float]] = {}
    numbers: dict[object, int] = {}
    for item in read():
        if isinstance(item, Rollout):
            numbers.setdefault(item.group, len(numbers))
            if item.reward is not None:
                rewards.setdefault(item.group, []).append(item.reward)
    return rewards, numbers


def _done_rows(store, run_id: int | None) -> set[tuple[str, int]]:
    """The (source id, row) of the rows the run holds. Rows written before sources had ids
    carry only their file's name: ("name:" + name, row), matched by name as then."""
    if run_id is None:
        return set()
    return {(i if i is not None else f"name:{s}", int(r))
            for i, s, r in store.trace_extras(run_id, "source_id", "source", "row")
            if (i is not None or s is not None) and r is not None}


def _is_done(item: "Rollout", done: set) -> bool:
    return (item.source_id, item.row) in done or (f"name:{Path(item.source).name}", item.row) in done


def chat_rule(prompt) -> bool:
    """An imported prompt's chat flag: message lists get the chat template, text is used as it
    is (verl logs the templated prompt; TRL fed its text prompts untemplated). A run's config
    says `"chat": "messages"` for this rule (`oar attribute --store` encodes them again)."""
    return isinstance(prompt, list)


def _trace_of(tokenizer, item: Rollout, advantage, answer_format: str, limits: "RecordLimits"):
    """The attribution-less trace record of a rollout (tokens, segments, steps), or the
    BadRow of why it cannot be one (too long, not tokenisable)."""
    from ..errors import TokenizerError
    from ..inputs.chat_template import TemplateRefusedError
    from ..inputs.encoding import encode_pair
    from ..records.traces import build_trace

    size = text_bytes(item.prompt, item.response)
    if size > limits.max_bytes:  # never tokenised: a 10 MB completion costs nothing
        return _bad(item, "too_long", f"{size} bytes, more than --max-bytes {limits.max_bytes}")
    try:
        pair = encode_pair(tokenizer, item.prompt, item.response, answer_format=answer_format,
                           chat=chat_rule(item.prompt))
    except TemplateRefusedError:
        raise  # the model's template is at fault, not the row: stop here, in one line
    except (InputError, TokenizerError) as err:
        return _bad(item, "unscorable", str(err))
    if not pair.response_ids:
        return _bad(item, "unscorable", "the response has no tokens")
    if limits.max_tokens is not None and pair.length > limits.max_tokens:  # never attributable
        return _bad(item, "too_long", f"{pair.length} tokens, more than the model's "
                                      f"{limits.max_tokens} positions (--model: the policy's)")
    return build_trace(pair, item.prompt, probe="", scores={}, weights={}, advantage=advantage)


def _bad(item: Rollout, kind: str, message: str) -> BadRow:
    return BadRow(item.source, item.row, kind, message)


@dataclass(frozen=True)
class RecordLimits:
    """How long an imported row may be: `max_bytes` of prompt and response text (checked
    before tokenising), `max_tokens` (the model's positions; None: no bound known)."""

    max_bytes: int = MAX_RECORD_BYTES
    max_tokens: int | None = None


def _correct(item: Rollout, threshold: float):
    from ..store.core import UNKNOWN

    if item.correct is not None:
        return bool(item.correct)
    return UNKNOWN if item.reward is None else item.reward >= threshold


def _extras(item: Rollout) -> dict:
    """What a trace keeps of its rollout's origin: the source, the row and the gold answer."""
    return {**item.extra, "source": item.source, "source_id": item.source_id, "row": item.row,
            **({"gold": item.gold} if item.gold is not None else {})}


def import_rollouts(store, read: Reader, *, name: str, model: str, tokenizer, config: dict,
                    answer_format: str = ANSWER_FORMAT, correct_threshold: float = 1.0,
                    batch: int = 64, limits: RecordLimits = RecordLimits(),
                    report: Callable[[str], None] = print) -> ImportSummary:
    """Write the rollouts of `read` into the run of `store` whose config is `config` (resumed)
    or a new one named `name`; returns what was written and skipped.

    correct: the row's own verdict when logged, else reward >= `correct_threshold` (1.0: the
    full reward of a verifiable-reward function), else not known. limits: the longest row
    imported (longer ones are skipped as too_long)."""
    run_id = next((r.id for r in store.runs() if r.config == config), None)
    done = _done_rows(store, run_id)
    rewards, numbers = _first_pass(read)
    stats = group_advantages(rewards)
    skipped: Counter = Counter()
    written = resumed = recomputed = 0
    pending: list[tuple] = []

    def flush() -> None:
        nonlocal run_id, written
        if not pending:
            return
        if run_id is None:
            run_id = store.add_run(name, model=model, config=config)
        traces, items = zip(*pending)
        store.add_traces(run_id, list(traces), rewards=[i.reward for i in items],
                         correct=[_correct(i, correct_threshold) for i in items],
                         steps=[i.step for i in items], groups=[numbers[i.group] for i in items],
                         extras=[_extras(i) for i in items])
        written += len(pending)
        pending.clear()

    try:
        for item in read():
            if isinstance(item, BadRow):
                skipped[item.kind] += 1
                report(str(item))
                continue
            if _is_done(item, done):
                resumed += 1
                continue
            advantage = item.advantage
            if advantage is None and item.reward is not None:
                advantage = advantage_of(item.reward, stats[item.group])
                recomputed += 1
            trace = _trace_of(tokenizer, item, advantage, answer_format, limits)
            if isinstance(trace, BadRow):
                skipped[trace.kind] += 1
                report(str(trace))
                continue
            pending.append((trace, item))
            if len(pending) >= batch:
                flush()
        flush()
    except KeyboardInterrupt:
        raise _interrupted(store, run_id) from None
    if run_id is None and not resumed:
        raise InputError(f"no usable rollout in {config.get('sources')}; every row was skipped")
    return ImportSummary(run_id, written, resumed, skipped, recomputed)


def _interrupted(store, run_id: int | None) -> KeyboardInterrupt:
    """The Ctrl-C of an import, saying the rows its run holds: read back, not counted (the
    Ctrl-C may land after a batch's commit and before its count)."""
    kept = 0 if run_id is None else len(store.trace_extras(run_id, "row"))
    return KeyboardInterrupt(f"interrupted; the {kept} rows of this run in {store.path} are kept, "
                             "rerun the same command to resume")


def consecutive_groups(items: Iterable[Rollout]) -> Iterator[Rollout]:
    """Rollouts whose group is unset get one: a run of consecutive rows of the same file, step
    and prompt is one group (TRL and verl write a prompt's samples next to each other). The
    file is known by its content id, so two runs' files of the same name never share a group."""
    number, last = -1, object()
    for item in items:
        if isinstance(item, Rollout) and item.group is None:
            here = (item.source_id, item.step, str(item.prompt))
            if here != last:
                number, last = number + 1, here
            item.group = (item.source_id, number)
        yield item
