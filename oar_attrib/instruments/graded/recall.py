"""Graded counterfactual recall: does a method's score order a trace's tokens by how often
replacing them changes the model's answer (METHOD.md 8, `oracle`)?

Per trace, over its tested positions: the Spearman correlation between the method's scores
(`ranking_scores`: a signed method's magnitude) and the flip rates, and the AUC of the top
tercile of positions by flip rate against the bottom tercile (the probability that a position
of the top one outscores one of the bottom one, ties counted half; the terciles are the
positions at or above the 2/3 quantile of the trace's flip rates and at or below its 1/3
quantile, or, when those quantiles are equal, above and at or below it; a trace whose flip
rates do not separate has no AUC, one whose flip rates or scores are constant no Spearman, and
one whose scores are constant no AUC either: undefined values are counted apart, `undefined`).
Pooled: the mean over traces with a 95% percentile bootstrap over traces, the paired
difference to the `random` method on the same traces, and between every two methods. A random
ranking's expectation is 0 (Spearman) and 0.5 (AUC). Beside the methods, the report scores one
reference ranking that reads nothing of the model, `earliest_first` (`EARLIEST`: a token's
position, earlier first): on a real model a replacement early in an answer derails more of what
follows, so the flip rates fall with position, and a method is worth reading against this as
well as against random. Two more figures per trace say how much of a method's agreement is
position: `position_spearman`, the Spearman correlation of its scores with earliness (> 0: it
ranks early tokens higher, as `earliest_first` does, which scores 1), and `partial_spearman`,
its Spearman correlation with the flip rates with position held fixed (`weights.metrics.
partial_spearman`; undefined for `earliest_first`; a random ranking's expectation is 0).

Resumable end to end, in one JSON Lines cache (`instruments.cache.OracleCache`): each model answer, each
method's scores of each trace and each trace's oracle are appended as soon as they are made,
keyed by a hash of the trace (prompt and response ids) and of the record of everything that
made them (`records.settings_record`: the model's identity (its weights' hash) and dtype, the
method and the parameters it ran with, the settings; the oracle's settings); a rerun with the
same cache reads them back and calls the model for nothing.

KTAE compares a group of rollouts: with `group_samples` G > 0, G answers per problem are
sampled (temperature 1, seeded by their cache key: `answers.sampled_group`, the advantage
oracle's groups' sampler) and graded against the gold answer, and the greedy trace and these
form KTAE's group; without it KTAE does not apply and is refused.
"""
from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from ...attribution import analysis_params, attribute
from ...errors import InputError
from ...inputs.grading import grade
from ..answers import greedy_answers, sampled_group
from ..base import Run, settings_of
from ..cache import OracleCache, cache_key
from ...methods import available_methods, method_spec, ranking_scores
from ...records.record import json_safe
from ...records.settings_record import settings_record
from ...weights.metrics import partial_spearman, spearman
from ...weights.settings import ReshapeSettings
from ..data.recall import answer_key, encode_prompt_ids, record_prompt
from .oracle import DecodeStats, GradedTrace, graded_oracle
from ...analysis.report import RecallSummary
from ...analysis.sets import GRADED
from ...analysis.stats import auc_or_none, count_undefined, mean_ci

METRICS = ("spearman", "auc", "partial_spearman", "position_spearman")
RANDOM_RANKING = {"spearman": 0.0, "auc": 0.5, "partial_spearman": 0.0, "position_spearman": 0.0}  # a random ranking's


def graded_cache(path, record: dict | None = None, shard: str | None = None) -> OracleCache:
    """The graded oracle's cache at `path` (`--cf-cache`), read and checked now (before a model
    loads): its kinds are the common ones (`instruments.cache.COMMON_CHECKS`); entries are keyed
    by everything that made them, so one cache may hold several models' and settings'."""
    return OracleCache(path, record=record, shard=shard)


# ------------------------------------------------------------------ per-trace statistics

EARLIEST = "earliest_first"  # the reference ranking by position (module docstring)


def tercile_auc(scores: np.ndarray, flips: np.ndarray) -> float:
    """AUC of the top tercile of positions by flip rate against the bottom one (module
    docstring, `stats.auc_or_none`); NaN when the flip rates do not separate two terciles or
    the scores are constant (a ranking that ranks nothing has no AUC, not 0.5)."""
    lo, hi = np.quantile(flips, [1 / 3, 2 / 3])
    top, bottom = (flips >= hi, flips <= lo) if hi > lo else (flips > lo, flips <= lo)
    auc = auc_or_none(scores, top, bottom)
    return float("nan") if auc is None else auc


def trace_metrics(scores: dict[str, list[float]], flip_rates: dict[int, float]) -> dict[str, dict]:
    """{method: {metric: value for each of METRICS}} of one trace over its tested positions
    (NaN where undefined or where a score is not finite)."""
    positions = sorted(flip_rates)
    flips = np.array([flip_rates[t] for t in positions], dtype=np.float64)
    earliness = -np.array(positions, dtype=np.float64)
    out = {}
    for method, values in scores.items():
        s = ranking_scores(method, np.array([values[t] for t in positions], dtype=np.float64))
        if len(positions) < 2 or not np.isfinite(s).all():
            out[method] = {metric: float("nan") for metric in METRICS}
            continue
        out[method] = {"spearman": spearman(s, flips), "auc": tercile_auc(s, flips),
                       "partial_spearman": partial_spearman(s, flips, earliness),
                       "position_spearman": spearman(s, earliness)}
    return out


def pooled(per_trace: list[dict], methods: list[str], seed: int = 0) -> tuple[dict, dict]:
    """(methods: {method: {metric: mean_ci, "vs_random": {metric: mean_ci of the paired
    difference}, "undefined": {metric: traces without a value}}}, between: {"a - b": {metric:
    mean_ci}}). An undefined value (constant scores or flip rates) is counted apart, not as 0
    or 0.5."""
    def column(method, metric):  # a row made before a metric existed holds none of it
        return np.array([t[method].get(metric, np.nan) for t in per_trace], dtype=np.float64)

    summary, between = {}, {}
    for m in methods:
        summary[m] = {metric: mean_ci(column(m, metric), seed, "mean") for metric in METRICS}
        if "random" in methods and m != "random":
            summary[m]["vs_random"] = {metric: mean_ci(column(m, metric) - column("random", metric), seed, "mean")
                                       for metric in METRICS}
        summary[m]["undefined"] = {metric: count_undefined(column(m, metric)) for metric in METRICS}
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            between[f"{a} - {b}"] = {metric: mean_ci(column(a, metric) - column(b, metric), seed, "mean")
                                     for metric in METRICS}
    return summary, between


@dataclass
class GradedReport(RecallSummary):
    """The summary `oar recall graded --json` prints (`RecallSummary`'s fields, then
    `between`, `oracle`, `decode` (the regeneration work of the oracles computed in this run,
    and summed over those read from the cache, when they were made) and `cache`), with the
    per-trace data kept for a closer look (`graded`: each trace's `GradedTrace`, None when
    skipped)."""

    SUMMARY_FIELDS = RecallSummary.SUMMARY_FIELDS + ("between", "oracle", "decode", "cache", "per_trace")
    _: KW_ONLY
    between: dict = field(default_factory=dict)
    oracle: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)
    graded: list = field(default_factory=list, repr=False)
    texts: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        """The summary as strict JSON, `per_trace` included (each trace's {method: {"spearman",
        "auc"}}, None for a skipped trace or an undefined value): `pooled` over its non-None
        entries gives `methods` and `between` again, so a reader recomputes them from the file."""
        return json_safe(super().as_dict())


# ------------------------------------------------------------------ the run


@dataclass
class GradedRun(Run):
    """A graded recall's run (`base.Run`; its settings the `GradedRecall`): the methods and the
    reshaping settings every method runs with, KTAE's groups when it runs (per problem its
    texts, and whether each is right), and the decode work of the oracles it reads back."""

    methods: list = field(default_factory=list)
    reshape: ReshapeSettings | None = None
    groups: tuple | None = None
    cached_decode: dict = field(default_factory=dict)  # the summed decode stats of cached oracles


def _ktae_groups(run: GradedRun, prompts, records, texts) -> tuple[list, list]:
    """KTAE's groups: per problem its greedy trace and --group-samples answers sampled at
    temperature 1 (`answers.sampled_group`), graded against the gold answer; (texts of every
    row, right or wrong of every row)."""
    rows, right = [], []
    s = run.settings
    for ids, rec, text in tqdm(list(zip(prompts, records, texts)), desc="KTAE groups", disable=not run.progress):
        if "answer" not in rec:
            raise InputError("KTAE's groups are graded against the gold answer: every record needs `answer`")
        group = [text] + sampled_group(run, ids, s.group_samples, 1.0, s.max_new_tokens)
        rows.append(group)
        right.append([grade(t, rec["answer"]).correct for t in group])
    return rows, right


def _scores(run: GradedRun, prompts, texts, prompt_ids, traces) -> list[dict[str, list[float]]]:
    """Each trace's scores (over its response tokens) of every method: cached, or computed
    now, method by method over the traces that lack them."""
    params = run.settings.params() or {}
    out = [dict() for _ in traces]
    for method in run.methods:
        record = settings_record(dataclasses.replace(run.reshape, method=method), [method],
                                 analysis_params([method], params), model=run.model)
        grouped = method_spec(method).grouped
        keys = []
        for i, (ids, trace) in enumerate(zip(prompt_ids, traces)):
            group = [run.groups[0][i], run.groups[1][i]] if grouped else []  # the rollouts it compares
            keys.append(cache_key(record, ids, trace.token_ids, *group))
        todo = []
        for i, key in enumerate(keys):
            hit = run.cache.get("scores", key)
            if hit is None:
                todo.append(i)
            else:
                out[i][method] = [float("nan") if v is None else v for v in hit["scores"]]
        if todo and grouped:
            _group_scores(run, prompts, todo, method, out, keys)
        elif todo:
            done = attribute(run.model, run.tokenizer, [prompts[i] for i in todo], [texts[i] for i in todo], [method],
                             run.reshape, method_params=params, progress=run.progress)
            for i, trace in zip(todo, done):
                _keep(run, out, i, method, keys[i], trace.scores[method])
    return out


def _keep(run: GradedRun, out: list, i: int, method: str, key: str, values: list[float]) -> None:
    out[i][method] = values
    run.cache.put("scores", key, {"method": method,
                                  "scores": [v if np.isfinite(v) else None for v in values]})


def _group_scores(run: GradedRun, prompts, todo, method, out, keys) -> None:
    """A grouped method's scores of each trace: its problem's group (the trace first) scored
    together, the trace's row kept."""
    texts, right = run.groups
    for i in todo:
        n = len(texts[i])
        done = attribute(run.model, run.tokenizer, [prompts[i]] * n, texts[i], [method], run.reshape,
                         method_params=run.settings.params() or {}, groups=[0] * n, correct=right[i])
        _keep(run, out, i, method, keys[i], done[0].scores[method])


def _oracle(run: GradedRun, prompt_ids, trace, answer_of) -> GradedTrace:
    settings = run.settings.oracle
    key = cache_key(run.record(oracle=GRADED, **settings.record()), prompt_ids, trace.token_ids)
    hit = run.cache.get("oracle", key)
    if hit is not None:
        for name, value in (hit.get("decode") or {}).items():  # the work it took when it was made
            if isinstance(value, (int, float)) and name != "tokens_per_second":
                run.cached_decode[name] = run.cached_decode.get(name, 0) + value
        return GradedTrace.from_json(hit)
    positions = [t for t, s in enumerate(trace.scored) if s]
    graded = graded_oracle(run.model, run.tokenizer, prompt_ids, trace.token_ids, positions, answer_of, settings)
    run.cache.put("oracle", key, {**graded.to_json(), "decode": graded.stats.to_dict()})
    return graded


# `graded_recall`'s settings object before 0.2.0 was the oracle's: where its fields go now.
_ORACLE_FIELDS = ("the oracle's settings are GradedRecall's fields graded_k, positions, seed and margin "
                  "(GradedSettings(k=3, positions=4) is graded_k=3, positions=4)")


def graded_recall(model, tokenizer, records: list[dict], settings=None, *,
                  cache: "str | Path | OracleCache | None" = None,
                  answer_of: Callable[[str], str | None] = answer_key, **keywords) -> GradedReport:
    """Graded recall of every method against the model's own graded oracle on `records`
    (module docstring; records as `data.recall.data_records` gives them: a question
    and its gold answer, or a `prompt`). The model's identity (`records.settings_record.
    model_identity`: its name and its weights' hash) and dtype key the cache with everything
    else that made each entry. `answer_of`: response text -> comparable answer.

    settings: the `instruments.graded.GradedRecall` `oar recall graded` runs on (its `oracle`
    is the `GradedSettings` of the oracle); or its fields as keywords (`methods`, `probe`,
    `seed`, `graded_k`, `positions`, `margin`, `max_new_tokens`, `max_batch_tokens` (the
    oracle's rows and every method's budget), `group_samples`, `method_params`, `progress`)."""
    from . import GradedRecall

    settings = settings_of(GradedRecall, settings, keywords, "graded_recall", hint=_ORACLE_FIELDS)
    methods = list(settings.methods or available_methods())
    grouped = [m for m in methods if method_spec(m).grouped]
    if grouped and settings.group_samples < 1:
        raise InputError(f"{', '.join(grouped)} compares a group of rollouts, which single traces do not "
                         "have: pass --group-samples G (answers sampled per problem), or leave it out")
    cache = cache if isinstance(cache, OracleCache) else graded_cache(cache)
    run = GradedRun(model, tokenizer, cache, settings, settings.progress, methods=methods,
                    reshape=ReshapeSettings(probe=settings.probe, seed=settings.seed))
    prompts = [record_prompt(r, tokenizer) for r in records]
    prompt_ids = [encode_prompt_ids(tokenizer, p) for p in prompts]
    texts = [r.get("response") for r in records]
    if any(t is None for t in texts):
        fresh = greedy_answers(run, prompt_ids, settings.max_new_tokens)
        texts = [t if t is not None else f for t, f in zip(texts, fresh)]
    traces = attribute(model, tokenizer, prompts, texts, [], run.reshape)
    run.groups = _ktae_groups(run, prompt_ids, records, texts) if grouped else None
    scores = _scores(run, prompts, texts, prompt_ids, traces)
    per_trace, graded, status, decode = [], [], [], DecodeStats()
    rows = tqdm(list(zip(prompt_ids, traces, scores)), desc="graded oracle", disable=not run.progress)
    for ids, trace, trace_scores in rows:
        trace.scores.update(trace_scores)  # kept on the report's traces for a closer look
        text = tokenizer.decode(trace.token_ids, skip_special_tokens=True)
        if not trace.span_found or answer_of(text) is None or not any(trace.scored):
            status.append("no_answer_span")
            per_trace.append(None)
            graded.append(None)
            continue
        oracle = _oracle(run, ids, trace, answer_of)
        decode.add(oracle.stats)
        status.append("scored")
        graded.append(oracle)
        position = [-float(t) for t in range(len(trace.token_ids))]
        per_trace.append(trace_metrics({**trace_scores, EARLIEST: position}, oracle.flip_rates()))
    return _report(records, texts, traces, per_trace, graded, status, decode, run)


def _report(records, texts, traces, per_trace, graded, status, decode, run: GradedRun) -> GradedReport:
    oracle_settings = run.settings.oracle
    scored = [t for t in per_trace if t is not None]
    summary, between = pooled(scored, [*run.methods, EARLIEST], oracle_settings.seed) if scored else ({}, {})
    rates = np.array([f for g in graded if g is not None for f in g.flip_rates().values()])
    k = oracle_settings.k
    levels = np.round(rates * k).astype(int) if rates.size else np.zeros(0, dtype=int)
    correct = [None if "answer" not in r else grade(t, r["answer"]).correct for r, t in zip(records, texts)]
    known = [c for c in correct if c is not None]
    oracle = {"k": k, "positions_per_trace": oracle_settings.positions, "seed": oracle_settings.seed,
              "margin": oracle_settings.margin, "positions_tested": int(rates.size),
              "mean_flip_rate": float(rates.mean()) if rates.size else None,
              "flip_rate_counts": {f"{j}/{k}": int((levels == j).sum()) for j in range(k + 1)}}
    return GradedReport(
        methods=summary, random={m: {"mean": v, "expected": True} for m, v in RANDOM_RANKING.items()},
        n=len(records), n_scored=status.count("scored"),
        accuracy=sum(known) / len(known) if known else None,
        skipped={"no_answer_span": status.count("no_answer_span")}, traces=traces, per_trace=per_trace,
        between=between, oracle=oracle, cache=run.cache.counts,
        decode={"computed": decode.to_dict(), "cached": {k: round(v, 3) for k, v in run.cached_decode.items()}},
        graded=graded, texts=texts)
