"""Step-level recall on the arithmetic world: does a method find the steps the answer depends on?

Every trace's steps (`TraceAttribution.steps`) get the world oracle's sets by overlap with its
character spans: `direct`, the steps whose results the answer reads (the final quantities'
steps); `upstream`, steps on the answer's dependency path that the answer does not read
(their results reach it only through later steps); `distractor`, steps off the path. Each
method's token scores are pooled per step (`steps.pool_steps`, `max` by default: a step-level
method's score is constant per step, so every pooling but `sum` gives it back).

- `direct`: recall@|D| of the steps ranked by score (random expectation |D| / #steps);
- `upstream`: AUC of ranking an upstream step above a distractor step, over all such pairs of
  a trace, ties counted 1/2 (random expectation 0.5). Teacher-forced methods hold the later
  steps fixed, so an upstream step has no direct effect: they should sit near 0.5; resampling
  regenerates the later steps and should rank it above the distractor.
Means over traces with 95% bootstrap intervals; `by_outcome` gives the upstream AUC on the
traces the model got right and wrong apart.

`intervention` (when asked for) is the same upstream AUC for the world's own intervention on
the model: each step's result changed by one (`world.shift_result`), the rest of the trace
sampled from it, the step scored by the JS divergence of the answers against the unchanged
trace's (`resample_steps` with that removal). It is no attribution method: it asks the model
directly how far an upstream step's result reaches its answer, which bounds what any method
that measures this model can credit upstream.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...attribution import AttributionBatch, TraceAttribution, analysis_params, attribute
from ...defaults import VIEW_STEP_POOL
from ...errors import InputError
from ...models.generation import generate
from ...inputs.encoding import encode_pairs
from ...inputs.steps import STEP_POOLS, pool_steps
from ...methods import available_methods
from ...methods.resample import resample_steps
from ...records.settings_record import settings_record
from ...weights.metrics import random_recall, recall_at_k
from ...weights.settings import ReshapeSettings
from ...world import Oracle, shift_result
from ...analysis.report import RecallSummary
from ...analysis.stats import mean_ci
from ..base import Run, settings_of
from ..units import Units, drawn_share

STEP_SETS = ("direct", "upstream", "distractor")
STEP_METRICS = ("direct", "upstream")


def overlaps(span: tuple[int, int], spans) -> bool:
    """Whether the character span (start, end) overlaps one of `spans`."""
    return any(span[0] < e and s < span[1] for s, e in spans)


def step_sets(trace: TraceAttribution, oracle: Oracle) -> dict[str, np.ndarray]:
    """(S,) bool masks of the trace's steps per set (module docstring): a step is in a set
    when its characters overlap one of the set's spans; `upstream` is chain minus direct and
    `distractor` excludes chain steps."""
    chars = [(trace.offsets[a][0], trace.offsets[b - 1][1]) for a, b in trace.steps]
    direct = np.array([overlaps(c, oracle.direct) for c in chars], dtype=bool)
    chain = np.array([overlaps(c, oracle.chain) for c in chars], dtype=bool)
    distractor = np.array([overlaps(c, oracle.distractor) for c in chars], dtype=bool)
    return {"direct": direct, "upstream": chain & ~direct, "distractor": distractor & ~chain}


def pair_auc(scores: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 1/2 P(tie), over all pairs; NaN when
    either side is empty or a score is not finite."""
    pos, neg = scores[positive], scores[negative]
    if not len(pos) or not len(neg) or not np.isfinite(np.concatenate([pos, neg])).all():
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def trace_step_recall(trace: TraceAttribution, oracle: Oracle, pool: str = VIEW_STEP_POOL) -> dict:
    """{method: {"direct": recall@|D|, "upstream": AUC}} for one trace, plus the random
    expectation under "random_expectation"."""
    sets = step_sets(trace, oracle)
    everything = np.ones(len(trace.steps), dtype=bool)
    has_pairs = sets["upstream"].any() and sets["distractor"].any()
    out = {"random_expectation": {
        "direct": float(random_recall(sets["direct"], everything)) if sets["direct"].any() else float("nan"),
        "upstream": 0.5 if has_pairs else float("nan")}}
    for method in trace.scores:
        values = np.asarray(pool_steps(trace.scores[method], trace.steps, pool))
        ok = np.isfinite(values).all() and sets["direct"].any()
        out[method] = {
            "direct": float(recall_at_k(values, sets["direct"], everything)) if ok else float("nan"),
            "upstream": pair_auc(values, sets["upstream"], sets["distractor"]),
        }
    return out


@dataclass
class StepRecallReport(RecallSummary):
    """Summary of `step_recall` (`as_dict`, what `oar recall steps --json`
    prints) and the per-trace data behind it (`per_trace[i]`: `trace_step_recall` of trace i).
    Its own fields: the granularity ("step"), world preset and step pool; by_outcome: {method:
    {"right" | "wrong": upstream AUC stats}}; resample: the resample method's cost, intervention:
    the result-shift intervention's upstream AUC (each {} when not run)."""

    SUMMARY_FIELDS: ClassVar[tuple[str, ...]] = (
        "granularity", "preset", "pool", *RecallSummary.SUMMARY_FIELDS, "by_outcome", "resample",
        "intervention")
    granularity: str
    preset: str
    pool: str
    by_outcome: dict
    resample: dict
    intervention: dict


def intervention_auc(run: Run, prompts, texts, traces, oracles, rows: list[int] | None = None) -> list[float]:
    """Upstream AUC of the result-shift intervention (module docstring) per trace, at the
    run's settings' `intervention_samples` continuations per side and step: NaN for a trace
    without an answer span, steps or both upstream and distractor steps. Trace j's
    continuations are seeded by the settings' `seed` + its problem's index (`rows[j]`, default
    j), so a problem's AUC does not depend on which others are scored beside it."""
    tokenizer, settings = run.tokenizer, run.settings

    def shift(ids: list[int]) -> list[int]:
        return tokenizer.encode(shift_result(tokenizer.decode(ids)), add_special_tokens=False)

    out = []
    for row, (trace, oracle) in enumerate(zip(traces, oracles)):
        sets = step_sets(trace, oracle) if trace.span_found and trace.steps else None
        if sets is None or not (sets["upstream"].any() and sets["distractor"].any()):
            out.append(float("nan"))
            continue
        batch, _ = encode_pairs(tokenizer, [prompts[row]], [texts[row]])
        if len(batch.step_ranges(0)) != len(trace.steps):
            raise InputError(f"trace {row}: {len(trace.steps)} steps in the trace, "
                             f"{len(batch.step_ranges(0))} on re-encoding; attribute with the default steps")
        steps = resample_steps(run.model, tokenizer, batch, n_samples=settings.intervention_samples, removal=shift,
                               seed=settings.seed + (row if rows is None else rows[row]), progress=run.progress)[0]
        scores = np.array([step.divergence for step in steps])
        out.append(pair_auc(scores, sets["upstream"], sets["distractor"]))
    return out


# `step_recall`'s keywords that are spelled otherwise in its settings (`StepRecall`).
_KEYWORDS = {"pool": "step_pool"}


def step_recall(model, tokenizer, settings=None, *, cache=None, **keywords) -> StepRecallReport:
    """Sample `settings.n` held-out problems of `preset` (default `upstream`), let the model
    answer greedily, attribute with every method (steps: auto, the world's clauses), and score
    each method at step level (module docstring). `resample` gets the tokenizer and
    `resample_samples` continuations per side and step; `intervention_samples` > 0 adds the
    `intervention` row at that many continuations per side and step. Traces without an answer
    span or without both final quantities are skipped and counted.

    settings: the `instruments.steps.StepRecall` `oar recall steps` runs on; or its fields as
    keywords (`n`, `seed`, `preset`, `methods`, `probe`, `pool`, `method_params`,
    `resample_samples`, `intervention_samples`, `progress`, `shard`: only its share of the n
    problems). cache (`units.unit_cache`): each problem's answer and row are read from it or
    kept in it (`units`); `traces` then holds the problems scored now."""
    settings = _settings(settings, keywords)
    if settings.step_pool not in STEP_POOLS:
        raise InputError(f"pool={settings.step_pool!r}; choose one of {', '.join(STEP_POOLS)}")
    methods = list(settings.methods or available_methods())
    run = Run(model, tokenizer, cache, settings, settings.progress)
    pairs = drawn_share(settings, "upstream")
    problems = [p for _, p in pairs]
    units = Units(cache, None if cache is None else _record(run, methods))
    traces, found = units.fill(pairs, lambda todo: _score(run, methods, todo, units))
    return _report(run, methods, found, traces, [p.oracle(u["text"]) for p, u in zip(problems, found)])


def _settings(settings, keywords: dict):
    """The `StepRecall` of a call: `settings`, or one made of the keywords (module API)."""
    from . import StepRecall

    return settings_of(StepRecall, settings, keywords, "step_recall", _KEYWORDS)


def _record(run: Run, methods: list[str]) -> dict:
    """What keys a problem's unit: everything that made its row (`units`)."""
    s = run.settings
    return settings_record(ReshapeSettings(probe=s.probe, seed=s.seed), methods,
                           analysis_params(methods, s.params(False)), model=run.model, instrument="steps", preset=s.preset or "upstream", pool=s.step_pool,
                           resample_samples=s.resample_samples, intervention_samples=s.intervention_samples)


def _score(run: Run, methods: list[str], problems: list, units: Units) -> tuple[AttributionBatch, list[dict]]:
    """(the traces of `problems`, (index, problem) pairs: the model's greedy answers,
    attributed; each one's unit {"text", "correct", "status", "row", "intervention",
    "resample_seconds"}, kept in `units`)."""
    if not problems:
        return AttributionBatch(), []
    model, tokenizer, s = run.model, run.tokenizer, run.settings
    params = {k: dict(v) for k, v in (s.params(False) or {}).items()}
    if "resample" in methods:
        params.setdefault("resample", {}).update(tokenizer=tokenizer, n_samples=s.resample_samples,
                                                 progress=run.progress)
    prompts, index = [p.prompt for _, p in problems], [i for i, _ in problems]
    texts = tokenizer.batch_decode(generate(model, tokenizer, prompts, progress=run.progress), skip_special_tokens=True)
    traces = attribute(model, tokenizer, prompts, texts, methods, ReshapeSettings(probe=s.probe, seed=s.seed),
                       progress=run.progress, method_params=params)
    oracles = [p.oracle(t) for (_, p), t in zip(problems, texts)]
    aucs = intervention_auc(run, prompts, texts, traces, oracles, rows=index) if s.intervention_samples > 0 else None
    made = []
    for j, ((i, problem), text, trace, oracle) in enumerate(zip(problems, texts, traces, oracles)):
        reason = ("no_answer_span" if not trace.span_found or not trace.steps
                  else "incomplete_trace" if not oracle.complete else None)
        unit = {"text": text, "correct": problem.reward(text) == 1.0, "status": reason or "scored",
                "row": None if reason else trace_step_recall(trace, oracle, s.step_pool),
                "intervention": float("nan") if aucs is None else aucs[j],
                "resample_seconds": trace.timings.get("resample", 0.0)}
        units.put(i, problem.prompt, **unit)
        made.append(unit)
    return traces, made


def _report(run: Run, methods, units: list[dict], traces, oracles) -> StepRecallReport:
    s, seed = run.settings, run.settings.seed
    per_trace, correct = [u["row"] for u in units], [u["correct"] for u in units]
    status = [u["status"] for u in units]
    skipped = {reason: status.count(reason) for reason in ("no_answer_span", "incomplete_trace")}
    used = [t for t in per_trace if t is not None]
    summary = {m: {k: mean_ci([t[m][k] for t in used], seed) for k in STEP_METRICS} for m in methods}

    # The oracle's dependency path is the problem's; on a wrong trace the model may not have
    # followed it, so the upstream AUC is also given on right and wrong traces apart.
    def split(values) -> dict:  # mean_ci of the scored traces' values, right and wrong apart
        return {outcome: mean_ci([v for v, t, ok in zip(values, per_trace, correct)
                                  if t is not None and ok == (outcome == "right")], seed)
                for outcome in ("right", "wrong")}

    by_outcome = {m: split([t and t[m]["upstream"] for t in per_trace]) for m in methods}
    rand = {k: mean_ci([t["random_expectation"][k] for t in used], seed) for k in STEP_METRICS}
    if s.intervention_samples > 0:
        aucs = [u["intervention"] for u in units]
        intervention = {"n_samples": s.intervention_samples,
                        "upstream": mean_ci([a for a, t in zip(aucs, per_trace) if t is not None], seed),
                        "by_outcome": split(aucs)}
    else:
        intervention = {}
    cost = {"n_samples": s.resample_samples,
            "seconds": sum(u["resample_seconds"] for u in units)} if "resample" in methods else {}
    return StepRecallReport(methods=summary, random=rand, n=len(units), n_scored=len(used),
                            accuracy=sum(correct) / len(units), skipped=skipped, granularity="step",
                            preset=s.preset or "upstream", pool=s.step_pool, by_outcome=by_outcome, resample=cost,
                            intervention=intervention, traces=traces, oracles=oracles, per_trace=per_trace)
