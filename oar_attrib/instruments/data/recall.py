"""Counterfactual recall on any model and any JSONL data set (METHOD.md 8b): does a method rank
first the tokens whose replacement changes the model's own answer?

Each record is a question (`question` or `problem`, with an optional gold `answer`) that the
model answers greedily through its chat template (asked to end with "The answer is N."), or a
finished trace (`prompt` and `response`). Every method attributes the trace; then each tested
position t of its scored reasoning is replaced (by the pad token, or `replacement`), the rest regenerated greedily
(`oracle.counterfactual_oracle`: left-padded batches, KV cache), and t is causal when
the final answer read by `spans.locate_answer` changes (a number compared by value: `$1,200`
and `1200` agree) or disappears. Recall@|O| of each method among the tested positions, with
the random-ranking expectation beside it and 95% bootstrap intervals over traces; also apart
on the traces the model got right and wrong (when the records carry a gold answer).

On the word-problem world (`data_records("wordworld:<preset>")`: each record carries its
word problem under WORD_PROBLEM) the same traces are also scored against the world's value oracle
(`world.value_oracle`: `direct`, `upstream`, `distractor`, the tokens that write each quantity
in the model's own text): structural recall beside the counterfactual one, on the same traces.
Without `counterfactual` in `sets` no regeneration is run.

The budget is bounded: at most `cf_positions` positions per trace (drawn one per stratum of
the scored positions with the seed, `choose_positions`, so the subset spans the trace; the
recall is then over those positions, not all), a regeneration of at most the response's length
plus a margin, and batches of at most `max_batch_tokens` tokens. Each trace's oracle is
appended to `cache` (JSONL) as soon as it is computed; a rerun with the same cache reads it back
instead of regenerating, so an interrupted run loses one trace at most.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ...attribution import attribute
from ...defaults import REGENERATION_MARGIN
from ...errors import InputError
from ...files import check_file
from ...models.budget import CPU_BATCH_TOKENS
from ...models.generation import generate
from ...inputs.chat_template import chat_ids
from ...inputs.grading import grade
from ..cache import CAUSAL_CHECKS, LEGACY_KIND, OracleCache
from ...jsonl import NotJSON, iter_jsonl
from ...methods import available_methods
from ...inputs.spans import locate_answer
from ...world.value_oracle import VALUE_SETS, parse_number, value_oracle
from ...world.words import WordProblem, generate_word_problems
from .oracle import CounterfactualSettings, check_replacement, counterfactual_oracle
from . import DataRecall
from ..base import Run, settings_of
from ..world.recall import RecallReport, summarise, trace_recall
from ...analysis.sets import COUNTERFACTUAL
from ...weights.settings import ReshapeSettings

# The instruction of the `answer_is` prompt template (training.data, which the core does not import).
INSTRUCTION = "{question}\nPlease reason step by step, and end with a final line 'The answer is <answer>.'"


def read_records(path: str | Path, n: int | None = None) -> list[dict]:
    """The first `n` usable records of a JSONL file: a `question` / `problem` (and an optional
    gold `answer`), or a `prompt` and a `response`. A bad line is an InputError naming it and
    what is wrong (a missing field, a value of the wrong type)."""
    path = check_file(path, "--data", "pass a JSON Lines file of questions or traces")
    records = []
    for number, value in iter_jsonl(path):
        if isinstance(value, NotJSON) or not isinstance(value, dict):
            raise InputError(f"{path}:{number}: {value if isinstance(value, NotJSON) else 'not a JSON object'}")
        if not ({"question", "problem"} & set(value) or {"prompt", "response"} <= set(value)):
            raise InputError(f"{path}:{number}: needs `question` (or `problem`), or `prompt` and `response`")
        why = _wrong_type(value)
        if why:
            raise InputError(f"{path}:{number}: {why}")
        records.append(value)
        if n is not None and len(records) == n:
            break
    if not records:
        raise InputError(f"--data {path} has no records")
    return records


def _wrong_type(record: dict) -> str | None:
    """What in a record has the wrong type (named with the type it has), or None."""
    for key in ("question", "problem", "response"):
        if key in record and not isinstance(record[key], str):
            return f"`{key}` is {type(record[key]).__name__}, not text"
    prompt = record.get("prompt")
    if "prompt" in record and not isinstance(prompt, str) and not (
            isinstance(prompt, list) and prompt and all(
                isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str) for m in prompt)):
        return f"`prompt` is {type(prompt).__name__}, not text or {{'role', 'content'}} messages"
    answer = record.get("answer")
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, (str, int, float))):
        return f"`answer` is {type(answer).__name__}, not text or a number"
    return None


WORDWORLD = "wordworld"
# The record key of a word problem (a `world.words.WordProblem`, never a JSONL field: MATH-500's
# `problem` is its question text).
WORD_PROBLEM = "word_problem"


def data_records(data: str, n: int, seed: int = 0) -> list[dict]:
    """The records of `--data`: `wordworld:<preset>` (n held-out word problems drawn with
    `seed`, each {"question", "answer", WORD_PROBLEM}), else a JSONL file (`read_records`)."""
    name, _, preset = data.partition(":")
    if name != WORDWORLD:
        return read_records(data, n)
    return [{"question": p.question, "answer": str(p.answer), WORD_PROBLEM: p}
            for p in generate_word_problems(n, preset or "tiny", seed=seed, split="test")]


def data_sets(records: list[dict]) -> tuple[str, ...]:
    """The sets recall can score on `records`: the counterfactual oracle's always, the value
    oracle's when every record carries its word problem."""
    word = all(isinstance(r.get(WORD_PROBLEM), WordProblem) for r in records)
    return (COUNTERFACTUAL,) + (VALUE_SETS if word else ())


def answer_key(text: str) -> str | None:
    """The final answer of `text` as a comparable string (a number by its value), or None."""
    found = locate_answer(text)
    if found is None:
        return None
    value = text[found.start:found.end]
    number = parse_number(value)
    return repr(number) if number is not None else value.strip()


def record_prompt(record: dict, tokenizer=None):
    """The prompt of a record: its `prompt`, else its question asking for "The answer is N."
    (`INSTRUCTION`): a chat message, or the plain text for a `tokenizer` without a chat
    template (as `rollouts.format_prompt` asks such a model)."""
    if "prompt" in record:
        return record["prompt"]
    text = INSTRUCTION.format(question=record.get("question", record.get("problem")))
    if tokenizer is not None and getattr(tokenizer, "chat_template", None) is None:
        return text
    return [{"role": "user", "content": text}]


def encode_prompt_ids(tokenizer, prompt) -> list[int]:
    """The prompt's ids as `attribute` encodes it: a string goes through the chat template when
    the tokenizer has one (as one user message), else as it is."""
    if isinstance(prompt, str) and getattr(tokenizer, "chat_template", None) is None:
        return tokenizer(prompt, add_special_tokens=False).input_ids
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    return chat_ids(tokenizer, prompt)


def model_traces(model, tokenizer, records: list[dict], max_new_tokens: int,
                 progress: bool = False) -> list[str]:
    """Each record's response: its own `response`, else the model's greedy answer."""
    texts = [r.get("response") for r in records]
    todo = [i for i, t in enumerate(texts) if t is None]
    if todo:
        prompts = [tokenizer.decode(encode_prompt_ids(tokenizer, record_prompt(records[i], tokenizer))) for i in todo]
        ids = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=8, progress=progress)
        for i, row in zip(todo, ids):
            texts[i] = tokenizer.decode(row, skip_special_tokens=True)
    return texts


def _cache_key(model_name: str, prompt_ids, response_ids, cf_positions: int, seed: int,
               replacement="pad") -> str:
    """The oracle cache's key of one trace; the replacement joins it only when it is not the
    pad token, so caches written before the knob existed (all pad) still read back."""
    parts = [model_name, list(prompt_ids), list(response_ids), cf_positions, seed]
    blob = json.dumps(parts if replacement == "pad" else parts + [replacement])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def causal_cache(path: str | Path | None, record: dict | None = None, shard: str | None = None) -> OracleCache:
    """The counterfactual oracle's cache at `path` (`--cf-cache`), read and checked before any
    compute (a link or a FIFO is refused, a line of the wrong shape is one InputError naming
    it); with `record` (the model and dtype), a cache of another is refused."""
    return OracleCache(path, checks=CAUSAL_CHECKS, record=record, check_record=True, shard=shard)


def _read_cache(cache: "str | Path | OracleCache | None") -> dict[str, dict[int, bool]]:
    """The oracle results the cache holds: {key: {position: causal}}."""
    cache = cache if isinstance(cache, OracleCache) else causal_cache(cache)
    return {e["key"]: {t: c for t, c in e["causal"]} for e in cache.entries() if e["kind"] == LEGACY_KIND}


@dataclass
class CounterfactualReport(RecallReport):
    """`RecallReport` of a data set, with `by_outcome`: {"right" | "wrong": {"methods",
    "random", "n"}} on the traces graded right and wrong against the records' gold answers,
    and `oracle`: what the counterfactual oracle tested and found."""

    SUMMARY_FIELDS = RecallReport.SUMMARY_FIELDS + ("by_outcome", "oracle")
    _: KW_ONLY
    by_outcome: dict = field(default_factory=dict)
    oracle: dict = field(default_factory=dict)


@dataclass
class CausalRun(Run):
    """A counterfactual recall's run (`base.Run`; its settings the `DataRecall`), with the
    oracle results its cache held when it started (`known`: {key: {position: causal}})."""

    known: dict = field(default_factory=dict)


def _causal(run: CausalRun, trace, prompt_ids: list[int], key: str) -> dict[int, bool]:
    """The counterfactual oracle of one trace: known, or computed now (its rows batched within
    the token budget) and kept in `run.known`."""
    if key in run.known:
        return run.known[key]
    s = run.settings
    positions = [t for t, scored in enumerate(trace.scored) if scored]
    n = len(trace.token_ids)
    budget = s.max_batch_tokens or CPU_BATCH_TOKENS
    oracle = CounterfactualSettings(replacement=s.replace, max_positions=s.cf_positions, seed=s.seed,
                                    batch_size=max(1, budget // (len(prompt_ids) + 2 * n + REGENERATION_MARGIN)),
                                    max_new_tokens=n + REGENERATION_MARGIN)
    causal = counterfactual_oracle(run.model, run.tokenizer, prompt_ids, trace.token_ids, positions, answer_key,
                                   oracle)
    run.known[key] = causal
    return causal


def _counterfactual_set(run: CausalRun, trace, prompt) -> tuple[np.ndarray, np.ndarray]:
    """(target, tested): (T,) bool masks of the trace's causal positions and of the positions
    the oracle tested, from `run.known` (the cache read) or computed now and put in the cache."""
    s = run.settings
    prompt_ids = encode_prompt_ids(run.tokenizer, prompt)
    key = _cache_key(s.model, prompt_ids, trace.token_ids, s.cf_positions, s.seed, s.replace)
    fresh = key not in run.known
    causal = _causal(run, trace, prompt_ids, key)
    if fresh:
        run.cache.put(LEGACY_KIND, key, {"causal": [list(pair) for pair in sorted(causal.items())]})
    target = np.zeros(len(trace.token_ids), dtype=bool)
    tested = np.zeros_like(target)
    tested[list(causal)] = True
    target[[t for t, c in causal.items() if c]] = True
    return target, tested


def _by_outcome(per_trace: list, correct: list, methods, sets, seed: int) -> dict:
    """The recall summaries of the right and of the wrong traces, each where there are any."""
    out = {}
    for name, want in (("right", True), ("wrong", False)):
        part = [t for t, c in zip(per_trace, correct) if t is not None and c is want]
        if part:
            m, r = summarise(part, methods, sets, seed=seed)
            out[name] = {"methods": m, "random": r, "n": len(part)}
    return out


# `counterfactual_recall`'s keywords that are spelled otherwise in its settings (`DataRecall`).
_KEYWORDS = {"replacement": "replace", "model_name": "model"}


def counterfactual_recall(model, tokenizer, records: list[dict], settings=None, *,
                          cache: "str | Path | OracleCache | None" = None, **keywords) -> CounterfactualReport:
    """Recall@|O| of every method against the model's own counterfactual oracle on `records`
    (module docstring), and against the value oracle's sets on word-problem records.

    settings: the `instruments.data.DataRecall` `oar recall data` runs on; or its fields as
    keywords (`methods`, `probe`, `seed`, `cf_positions`, `replace` or `replacement` ("pad",
    "resample" or a token id, `oracle`), `sets` (default: every set `records` can be scored on,
    `data_sets`), `max_new_tokens`, `max_batch_tokens`, `method_params`, `progress`, and
    `model` or `model_name`: the name that keys the cache with the trace's ids, cf_positions,
    seed and replacement)."""
    settings = settings_of(DataRecall, settings, keywords, "counterfactual_recall", _KEYWORDS)
    check_replacement(settings.replace)
    known = data_sets(records)
    sets = tuple(dict.fromkeys(settings.sets or known))
    unknown = [name for name in sets if name not in known]
    if unknown or not sets:
        raise InputError(f"sets {', '.join(unknown) or '(none)'}: these records are scored on "
                         f"{', '.join(known)} (the value oracle's sets need word-problem "
                         f"records, --data {WORDWORLD}:<preset>)")
    methods = list(settings.methods or available_methods())
    cache = cache if isinstance(cache, OracleCache) else causal_cache(cache)
    run = CausalRun(model, tokenizer, cache, settings, settings.progress, known=_read_cache(cache))
    texts = model_traces(model, tokenizer, records, settings.max_new_tokens, settings.progress)
    prompts = [record_prompt(r, tokenizer) for r in records]
    traces = attribute(model, tokenizer, prompts, texts, methods, ReshapeSettings(probe=settings.probe, seed=settings.seed),
                       progress=settings.progress, method_params=settings.params())
    correct = [None if "answer" not in r else grade(t, r["answer"]).correct for r, t in zip(records, texts)]
    status, per_trace, tested, found = [], [], 0, 0
    desc = "counterfactual oracle" if COUNTERFACTUAL in sets else "value oracle"
    rows = tqdm(list(zip(records, prompts, traces, texts)), desc=desc, disable=not settings.progress)
    for record, prompt, trace, text in rows:
        if not trace.span_found or answer_key(tokenizer.decode(trace.token_ids, skip_special_tokens=True)) is None:
            status.append("no_answer_span")
            per_trace.append(None)
            continue
        token_sets = {}
        if COUNTERFACTUAL in sets:
            target, was_tested = _counterfactual_set(run, trace, prompt)
            tested, found = tested + int(was_tested.sum()), found + int(target.sum())
            token_sets[COUNTERFACTUAL] = (target, was_tested)
        oracle = value_oracle(record[WORD_PROBLEM], text) if set(VALUE_SETS) & set(sets) else None
        status.append("scored")
        per_trace.append(trace_recall(trace, oracle, sets, token_sets))
    scored = [t for t in per_trace if t is not None]
    summary, rand = summarise(scored, methods, sets, seed=settings.seed)
    by_outcome = _by_outcome(per_trace, correct, methods, sets, settings.seed)
    graded = [c for c in correct if c is not None]
    return CounterfactualReport(
        methods=summary, random=rand, n=len(records), n_scored=status.count("scored"),
        accuracy=sum(graded) / len(graded) if graded else None,
        skipped={"no_answer_span": status.count("no_answer_span")}, traces=traces, texts=texts,
        correct=correct, status=status, per_trace=per_trace, problems=records, by_outcome=by_outcome,
        oracle={"sets": list(sets), "positions_tested": tested, "causal": found, "cf_positions": settings.cf_positions,
                "replacement": settings.replace, "regeneration": f"greedy, response length + {REGENERATION_MARGIN}"})
