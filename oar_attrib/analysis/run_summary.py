"""A stored run's summaries: oracle recall per method with bootstrap intervals, and method
agreement, computed from the run's traces and written through `Store.write_summary`.

Recall follows `recall.summarise` exactly (same skips, same bootstrap), so the report page and
`oracle_recall` agree on the same traces; agreement is `agreement.agreement_matrix`, the same
as the notebook figure's.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .agreement import agreement_matrix
from ..instruments.world.recall import EXPECTED, trace_recall
from ..instruments.world.recall import summarise as summarise_recall
from .sets import DEFAULT_SETS, SUBSETS

N_BOOT = 2000  # the default of stats.bootstrap_ci, which recall.summarise uses


def _skip_reason(record) -> str | None:
    if not record.row.span_found:
        return "no_answer_span"
    if not record.oracle:
        return "no_oracle"
    if record.oracle_complete is False:
        return "incomplete_trace"
    return None


def _recall_rows(per_trace: list[dict], correct: list[bool | None], methods, sets,
                 seed: int) -> list[tuple]:
    """(subset, oracle set, method, recall, lo, hi, ap, n) rows, the random floor included."""
    rows = []
    for subset in SUBSETS:
        keep = [t for t, c in zip(per_trace, correct)
                if subset == "all" or (c is not None and c == (subset == "correct"))]
        for method in methods:
            have = [t for t in keep if method in t]
            summary, _ = summarise_recall(have, [method], sets, seed=seed)
            for name in sets:
                s = summary[method][name]
                rows.append((subset, name, method, s["recall"], *s["ci95"], s["ap"], s["n"]))
        _, floor = summarise_recall(keep, [], sets, seed=seed)
        for name in sets:
            s = floor[name]
            rows.append((subset, name, EXPECTED, s["recall"], *s["ci95"], None, s["n"]))
    return rows


def _agreement_rows(traces, methods: list[str]) -> list[tuple]:
    """(method_a, method_b, mean Spearman or None, n traces) for every ordered pair."""
    methods, matrix, counts = agreement_matrix(traces, methods)
    return [(a, b, None if np.isnan(matrix[i, j]) else float(matrix[i, j]), int(counts[i, j]))
            for i, a in enumerate(methods) for j, b in enumerate(methods)]


def summarise(store, run_id: int, *, sets=DEFAULT_SETS, seed: int = 0) -> dict:
    """Compute and store a run's oracle recall (per method, oracle set and subset
    all/correct/wrong, with 95% bootstrap intervals) and method agreement; returns
    `store.report(run_id)`. Run it after a run's traces are written (again after adding more)."""
    records = list(store.iter_traces(run_id))
    traces = [r.to_attribution() for r in records]
    methods = sorted({m for r in records for m in r.attributions})
    skipped: dict[str, int] = {}
    per_trace, correct = [], []
    for record, trace in zip(records, traces):
        reason = _skip_reason(record)
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        oracle = SimpleNamespace(**{name: record.oracle.get(name, []) for name in sets})
        per_trace.append(trace_recall(trace, oracle, tuple(sets)))
        correct.append(record.row.correct)
    store.write_summary(run_id, recall=_recall_rows(per_trace, correct, methods, tuple(sets), seed),
                        agreement=_agreement_rows(traces, methods), n_traces=len(records),
                        n_used=len(per_trace), skipped=skipped, n_boot=N_BOOT)
    return store.report(run_id)
