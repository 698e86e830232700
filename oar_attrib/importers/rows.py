"""Rollouts of other RL stacks, as rows, and the one writer that puts them in a run store.

A reader (trl.py, verl.py, jsonl.py) yields, for each row of its files in order, a `Rollout`
or a `BadRow` (why that row cannot be used). `import_rollouts` reads the rows twice, streaming:
the first pass collects each group's rewards (floats only), the second tokenises the rows and
writes them, `batch` per transaction, with the sequence advantage the stack logged or, when it
logged none, the group rule recomputed from the rewards (`group_advantages`). Each written
trace records its source file and row in `extra`, so a rerun into the same store resumes after
the rows already there; bad rows are reported as `FILE:ROW: skipped (KIND): why`.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..defaults import ANSWER_FORMAT
from ..errors import InputError
from ..inputs.pairs import is_chat

# TRL's GRPO rule (scale_rewards="group"): (r - mean) / (std + 1e-4), std with Bessel's
# correction; a group of one has no spread and gets advantage 0 here (TRL: NaN std).
ADVANTAGE_EPS = 1e-4


@dataclass
class Rollout:
    """One sampled response of an RL run.

    source, row: the file it came from and its row (1-based line or parquet row);
    group: the key of its prompt group within the run (rows with the same key share a group
    mean and std); advantage: the sequence advantage the stack logged, if any;
    gold: the reference answer, if logged; correct: the stack's own verdict, if logged."""

    source: str
    row: int
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


def check_text(prompt, response) -> str | None:
    """Why a prompt/response pair cannot be a trace, or None."""
    if isinstance(prompt, list):
        if not is_chat(prompt):
            return "the prompt is a list but not of {'role': str, 'content': str} messages"
    elif not isinstance(prompt, str):
        return f"the prompt is {type(prompt).__name__}, not text or chat messages"
    if not isinstance(response, str):
        return f"the response is {type(response).__name__}, not text"
    if not response.strip():
        return "the response is empty; there is nothing to attribute"
    return None


def as_reward(value) -> float | None | str:
    """A finite float reward, None when absent, or the message of a bad value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            return f"the reward {str(value)[:40]!r} is not a number"
    value = float(value)
    return value if math.isfinite(value) else f"the reward {value} is not finite"


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
    if run_id is None:
        return set()
    return {(s, int(r)) for s, r in store.trace_extras(run_id, "source", "row")
            if s is not None and r is not None}


def chat_rule(prompt) -> bool:
    """An imported prompt's chat flag: message lists get the chat template, text is used as it
    is (verl logs the templated prompt; TRL fed its text prompts untemplated). A run's config
    says `"chat": "messages"` for this rule (`oar attribute --store` encodes them again)."""
    return isinstance(prompt, list)


def _trace_of(tokenizer, item: Rollout, advantage, answer_format: str):
    """The attribution-less trace record of a rollout (tokens, segments, steps), or the
    message of why it cannot be tokenised."""
    from ..errors import TokenizerError
    from ..inputs.encoding import _default_max_length, encode_pair
    from ..records.traces import build_trace

    try:
        pair = encode_pair(tokenizer, item.prompt, item.response, answer_format=answer_format,
                           chat=chat_rule(item.prompt))
    except (InputError, TokenizerError) as err:
        return str(err)
    if not pair.response_ids:
        return "the response has no tokens"
    limit = _default_max_length(tokenizer)
    if limit is not None and pair.length > limit:  # it could never be attributed
        return f"{pair.length} tokens, more than the model's {limit}"
    return build_trace(pair, item.prompt, probe="", scores={}, weights={}, advantage=advantage)


def _correct(item: Rollout, threshold: float):
    from ..store.core import UNKNOWN

    if item.correct is not None:
        return bool(item.correct)
    return UNKNOWN if item.reward is None else item.reward >= threshold


def import_rollouts(store, read: Reader, *, name: str, model: str, tokenizer, config: dict,
                    answer_format: str = ANSWER_FORMAT, correct_threshold: float = 1.0,
                    batch: int = 64, report: Callable[[str], None] = print) -> ImportSummary:
    """Write the rollouts of `read` into the run of `store` whose config is `config` (resumed)
    or a new one named `name`; returns what was written and skipped.

    correct: the row's own verdict when logged, else reward >= `correct_threshold` (1.0: the
    full reward of a verifiable-reward function), else not known."""
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
                         extras=[{**i.extra, "source": i.source, "row": i.row,
                                  **({"gold": i.gold} if i.gold is not None else {})} for i in items])
        written += len(pending)
        pending.clear()

    for item in read():
        if isinstance(item, BadRow):
            skipped[item.kind] += 1
            report(str(item))
            continue
        if (item.source, item.row) in done:
            resumed += 1
            continue
        advantage = item.advantage
        if advantage is None and item.reward is not None:
            advantage = advantage_of(item.reward, stats[item.group])
            recomputed += 1
        trace = _trace_of(tokenizer, item, advantage, answer_format)
        if isinstance(trace, str):
            skipped["unscorable"] += 1
            report(str(BadRow(item.source, item.row, "unscorable", trace)))
            continue
        pending.append((trace, item))
        if len(pending) >= batch:
            flush()
    flush()
    if run_id is None and not resumed:
        raise InputError(f"no usable rollout in {config.get('sources')}; every row was skipped")
    return ImportSummary(run_id, written, resumed, skipped, recomputed)


def consecutive_groups(items: Iterable[Rollout]) -> Iterator[Rollout]:
    """Rollouts whose group is unset get one: a run of consecutive rows of the same step and
    prompt is one group (TRL and verl write a prompt's samples next to each other)."""
    number, last = -1, object()
    for item in items:
        if isinstance(item, Rollout) and item.group is None:
            here = (item.source, item.step, str(item.prompt))
            if here != last:
                number, last = number + 1, here
            item.group = (item.source, number)
        yield item
