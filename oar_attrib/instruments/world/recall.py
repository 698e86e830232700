"""Oracle causal-token recall on the arithmetic world (METHOD.md section 8).

Problems are sampled from the held-out split, the model writes its own traces (greedy), every
method attributes them, and each method's top-|O| tokens are compared with the structural
oracle sets of the trace (`direct`, `chain`), with 95% bootstrap intervals over traces.

The set `counterfactual` is the model's own oracle (METHOD.md 8b) instead of the world's: a
scored position is in it when replacing its token by the pad token and regenerating the rest
greedily changes the extracted answer. It is ranked among the positions tested (all scored
ones, up to `cf_positions` per trace), and traces where no tested position changes the answer
have no recall for it (the summary's `n` counts the rest).
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import numpy as np
from tqdm.auto import tqdm

from ...attribution import AttributionBatch, TraceAttribution, analysis_params, attribute
from ...defaults import CF_POSITIONS, REPLACEMENT
from ...errors import InputError
from ...inputs.segments import span_mask
from ...methods import available_methods, ranking_scores
from ...models.generation import generate
from ...records.settings_record import settings_record
from ...weights.metrics import average_precision, random_recall, recall_at_k
from ...weights.settings import ReshapeSettings
from ...world import Oracle, Problem, extract_answer
from ..data.oracle import counterfactual_oracle
from ..base import Run, settings_of
from ..units import Units, drawn_share
from ...analysis.recall_reading import EXPECTED
from ...analysis.report import RecallSummary
from ...analysis.sets import COUNTERFACTUAL, DEFAULT_SETS, RECALL_SETS
from ...analysis.stats import mean_ci



# (T,) bool: tokens whose character span overlaps any oracle span (`segments.span_mask`).
oracle_token_mask = span_mask


def trace_recall(trace: TraceAttribution, oracle: Oracle, sets=DEFAULT_SETS,
                 token_sets: dict | None = None) -> dict:
    """Recall@|O| and AP per method and oracle set for one trace, plus the expectation of a
    random ranking under the key EXPECTED (the method named `random` is a real draw).

    A set named in `token_sets` is given per token instead of by the oracle's character spans:
    `token_sets[name] = (target, tested)`, two (T,) bool masks; it is ranked among the tested
    scored positions only."""
    scored = np.array(trace.scored)
    token_sets = token_sets or {}
    out: dict = {EXPECTED: {}}
    for name in sets:
        if name in token_sets:
            target, tested = (np.asarray(m, dtype=bool) for m in token_sets[name])
            among = tested & scored
            target = target & among
        else:
            among = scored
            target = oracle_token_mask(trace.offsets, getattr(oracle, name)) & scored
        out[EXPECTED][name] = float(random_recall(target, among)) if target.any() else float("nan")
        for method, scores in trace.scores.items():
            values = ranking_scores(method, np.asarray(scores, dtype=np.float64))
            res = out.setdefault(method, {})
            if not target.any() or not np.isfinite(values[among]).all():
                res[name] = {"recall": float("nan"), "ap": float("nan")}
                continue
            res[name] = {
                "recall": float(recall_at_k(values, target, among)),
                "ap": float(average_precision(values, target, among)),
            }
    return out


def counterfactual_masks(model, tokenizer, problem: Problem, trace: TraceAttribution,
                         max_positions: int = CF_POSITIONS, seed: int = 0,
                         replacement=REPLACEMENT) -> tuple[np.ndarray, np.ndarray]:
    """(target, tested): (T,) bool masks of the trace's scored positions whose replacement (by
    the pad token, or `replacement`: `data.oracle.counterfactual_oracle`) changes the
    greedily regenerated answer, and of the positions tested (at most
    `max_positions`, spread evenly by `choose_positions`)."""
    positions = [t for t, s in enumerate(trace.scored) if s]
    target = np.zeros(len(trace.token_ids), dtype=bool)
    tested = np.zeros_like(target)
    if not positions:
        return target, tested

    def answer(text: str) -> str | None:
        value = extract_answer(text, problem.answer_format)
        return None if value is None else str(value)

    prompt_ids = tokenizer(problem.prompt, add_special_tokens=False).input_ids
    causal = counterfactual_oracle(
        model, tokenizer, prompt_ids, trace.token_ids, positions, answer,
        replacement=replacement, max_positions=max_positions, seed=seed, batch_size=64,
        # The original response reached its answer within its own length.
        max_new_tokens=len(trace.token_ids) + 8,
    )
    tested[list(causal)] = True
    target[[t for t, c in causal.items() if c]] = True
    return target, tested


@dataclass
class RecallReport(RecallSummary):
    """Summary of an `oracle_recall` run (`RecallSummary`: what `as_dict` and `oar recall
    --json` give), and the per-trace data it was computed from.

    Besides the shared traces, oracles and per_trace (`per_trace[i]` is `trace_recall` of
    trace i), one entry per problem in sampling order: the problem, its text, whether it was
    right, and `status[i]`, why it was or was not scored ("scored", "no_answer_span",
    "incomplete_trace").
    """

    _: KW_ONLY
    problems: list = field(default_factory=list, repr=False)
    texts: list[str] = field(default_factory=list, repr=False)
    correct: list[bool] = field(default_factory=list, repr=False)
    status: list[str] = field(default_factory=list, repr=False)

    def to_frame(self):
        """pandas DataFrame, one row per scored trace x method x oracle set: recall@|O|, AP
        and the random-ranking expectation of that trace. Its mean recall per (method, oracle)
        is the summary's (NaN rows, where O is empty or a score is not finite, are skipped)."""
        import pandas as pd

        rows = []
        for i, res in enumerate(self.per_trace):
            if res is None:
                continue
            for method, sets in res.items():
                if method == EXPECTED:
                    continue
                for name, stats in sets.items():
                    rows.append({"trace": i, "correct": self.correct[i], "method": method,
                                 "oracle": name, "recall": stats["recall"], "ap": stats["ap"],
                                 "expected": res[EXPECTED][name]})
        columns = ["trace", "correct", "method", "oracle", "recall", "ap", "expected"]
        return pd.DataFrame(rows, columns=columns)


def summarise(per_trace: list[dict], methods, sets=DEFAULT_SETS, seed: int = 0) -> tuple[dict, dict]:
    """Mean recall with a bootstrap CI (and mean AP) per method and set, and the random floor."""
    summary = {}
    for method in methods:
        summary[method] = {}
        for name in sets:
            stats = mean_ci([t[method][name]["recall"] for t in per_trace], seed, "recall")
            aps = [t[method][name]["ap"] for t in per_trace if np.isfinite(t[method][name]["ap"])]
            stats["ap"] = float(np.mean(aps)) if aps else None
            summary[method][name] = stats
    rand = {name: mean_ci([t[EXPECTED][name] for t in per_trace], seed, "recall") for name in sets}
    return summary, rand


# `oracle_recall`'s keywords that are spelled otherwise in its settings (`WorldRecall`).
_KEYWORDS = {"replacement": "replace"}


def oracle_recall(model, tokenizer, settings=None, *, cache=None, **keywords) -> RecallReport:
    """Sample `settings.n` held-out problems, let the model answer, attribute, and score
    against the oracle sets `sets` (see RECALL_SETS) on world `preset` (default `recall`: no
    step copies a final result and every value is one digit, so every `direct` token is the
    only carrier of a value the answer needs). `counterfactual` is the model's own oracle
    (module docstring), tested on up to `cf_positions` scored positions per trace, one greedy
    regeneration each, a position replaced by `replace` ("pad" or "resample", `data.oracle`).
    Traces without an answer span or without both final quantities are skipped and counted in
    `skipped`. The report keeps the problems, texts, traces and per-trace recall
    (`RecallReport.to_frame`) for a closer look.

    settings: the `instruments.world.WorldRecall` `oar recall world` runs on; or its fields as
    keywords (`n`, `seed`, `preset`, `methods`, `probe`, `sets`, `cf_positions`,
    `replacement`, `method_params`, `progress`, `shard`: only its share of the n problems).
    cache (`units.unit_cache`): each problem's answer and row are read from it or kept in it
    (`units`); `traces` then holds the problems scored now."""
    settings = _settings(settings, keywords)
    sets = tuple(settings.sets or DEFAULT_SETS)
    unknown = [s for s in sets if s not in RECALL_SETS]
    if unknown or not sets:
        raise InputError(f"unknown oracle set(s) {unknown or sets}; choose from {', '.join(RECALL_SETS)}")
    methods = list(settings.methods or available_methods())
    run = Run(model, tokenizer, cache, settings, settings.progress)
    pairs = drawn_share(settings, "recall")
    problems = [p for _, p in pairs]
    units = Units(cache, None if cache is None else _record(run, methods, sets))
    traces, found = units.fill(pairs, lambda todo: _score(run, methods, sets, todo, units))
    per_trace, status = [u["row"] for u in found], [u["status"] for u in found]
    texts, correct = [u["text"] for u in found], [u["correct"] for u in found]
    skipped = {reason: status.count(reason) for reason in ("no_answer_span", "incomplete_trace")}
    summary, rand = summarise([t for t in per_trace if t is not None], methods, sets, seed=settings.seed)
    return RecallReport(methods=summary, random=rand, n=len(problems), n_scored=status.count("scored"),
                        accuracy=sum(correct) / len(problems), skipped=skipped, problems=problems,
                        texts=texts, traces=traces, oracles=[p.oracle(t) for p, t in zip(problems, texts)],
                        correct=correct, status=status, per_trace=per_trace)


def _settings(settings, keywords: dict):
    """The `WorldRecall` of a call: `settings`, or one made of the keywords (module API)."""
    from . import WorldRecall

    return settings_of(WorldRecall, settings, keywords, "oracle_recall", _KEYWORDS)


def _record(run: Run, methods: list[str], sets: tuple) -> dict:
    """What keys a problem's unit: everything that made its row (`units`)."""
    s = run.settings
    return settings_record(ReshapeSettings(probe=s.probe, seed=s.seed), methods, analysis_params(methods, s.params()),
                           model=run.model, instrument="world", preset=s.preset or "recall", sets=list(sets),
                           cf_positions=s.cf_positions, replacement=s.replace)


def _score(run: Run, methods: list[str], sets: tuple, problems: list, units: Units) -> tuple[AttributionBatch, list]:
    """(the traces of `problems`, (index, problem) pairs: the model's greedy answers,
    attributed; each one's unit {"text", "correct", "status", "row"}, kept in `units` as it is
    made)."""
    if not problems:
        return AttributionBatch(), []
    model, tokenizer, s = run.model, run.tokenizer, run.settings
    prompts = [p.prompt for _, p in problems]
    texts = tokenizer.batch_decode(generate(model, tokenizer, prompts, progress=run.progress), skip_special_tokens=True)
    traces = attribute(model, tokenizer, prompts, texts, methods, ReshapeSettings(probe=s.probe, seed=s.seed),
                       progress=run.progress, method_params=s.params())
    made = []
    rows = tqdm(zip(problems, texts, traces), total=len(problems), desc="counterfactual oracle",
                disable=not run.progress or COUNTERFACTUAL not in sets)
    for (i, problem), text, trace in rows:
        oracle = problem.oracle(text)
        reason = ("no_answer_span" if not trace.span_found
                  else "incomplete_trace" if not oracle.complete else None)
        row = None
        if reason is None:
            token_sets = {}
            if COUNTERFACTUAL in sets:
                token_sets[COUNTERFACTUAL] = counterfactual_masks(model, tokenizer, problem, trace,
                                                                  s.cf_positions, s.seed, s.replace)
            row = trace_recall(trace, oracle, sets, token_sets)
        unit = {"text": text, "correct": problem.reward(text) == 1.0, "status": reason or "scored", "row": row}
        units.put(i, problem.prompt, **unit)
        made.append(unit)
    return traces, made
