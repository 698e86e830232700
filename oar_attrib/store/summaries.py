"""Run-level summaries: oracle recall per method with bootstrap intervals, method agreement
(rank correlation) and credit metrics.

Recall and agreement read every trace of a run, so they are computed once when a run is
written (`Store.summarise`) and stored; credit metrics are a SQL average and read live.
Recall follows `oar_attrib.analysis.recall` exactly (same skips, same bootstrap), so the report page
and `oracle_recall` agree on the same traces.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from itertools import combinations
from types import SimpleNamespace

import numpy as np

from .records import TraceRecord, json_float

SUBSETS = ("all", "correct", "wrong")
ORACLE_SETS = ("direct", "chain")
N_BOOT = 2000  # the default of metrics.bootstrap_ci, which recall.summarize uses


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of a 1-D array, ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def spearman(a, b) -> float:
    """Spearman rank correlation of two 1-D arrays; NaN when either is constant."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def _skip_reason(record: TraceRecord) -> str | None:
    if not record.row.span_found:
        return "no_answer_span"
    if not record.oracle:
        return "no_oracle"
    if record.oracle_complete is False:
        return "incomplete_trace"
    return None


def _per_trace_recall(record: TraceRecord, sets) -> dict:
    from ..analysis.recall import trace_recall

    oracle = SimpleNamespace(**{name: record.oracle.get(name, []) for name in sets})
    return trace_recall(record.to_attribution(), oracle, sets)


def _agreement_rows(records: list[TraceRecord], methods: list[str]) -> list[tuple]:
    """(method_a, method_b, mean Spearman over traces, n traces) for every ordered pair."""
    values: dict[tuple[str, str], list[float]] = {p: [] for p in combinations(methods, 2)}
    for record in records:
        scored = record.scored
        if scored.sum() < 2:
            continue
        for a, b in values:
            if a in record.attributions and b in record.attributions:
                rho = spearman(record.attributions[a].scores[scored],
                               record.attributions[b].scores[scored])
                if np.isfinite(rho):
                    values[(a, b)].append(rho)
    rows = [(m, m, 1.0, len(records)) for m in methods]
    for (a, b), rhos in values.items():
        mean = float(np.mean(rhos)) if rhos else None
        rows += [(a, b, mean, len(rhos)), (b, a, mean, len(rhos))]
    return rows


def _recall_rows(per_trace: list[dict], correct: list[bool | None], methods, sets,
                 seed: int) -> list[tuple]:
    from ..analysis.recall import EXPECTED, summarize

    rows = []
    for subset in SUBSETS:
        keep = [t for t, c in zip(per_trace, correct)
                if subset == "all" or (c is not None and c == (subset == "correct"))]
        for method in methods:
            have = [t for t in keep if method in t]
            summary, _ = summarize(have, [method], sets, seed=seed)
            for name in sets:
                s = summary[method][name]
                rows.append((subset, name, method, s["recall"], *s["ci95"], s["ap"], s["n"]))
        _, floor = summarize(keep, [], sets, seed=seed)
        for name in sets:
            s = floor[name]
            rows.append((subset, name, EXPECTED, s["recall"], *s["ci95"], None, s["n"]))
    return rows


def compute(store, run_id: int, *, sets=ORACLE_SETS, seed: int = 0) -> dict:
    """Compute and store a run's recall and agreement summaries; returns what `read` returns."""
    records = list(store.iter_traces(run_id))
    methods = sorted({m for r in records for m in r.attributions})
    skipped: dict[str, int] = {}
    per_trace, correct = [], []
    for record in records:
        reason = _skip_reason(record)
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        per_trace.append(_per_trace_recall(record, sets))
        correct.append(record.row.correct)
    recall_rows = _recall_rows(per_trace, correct, methods, sets, seed)
    agreement_rows = _agreement_rows(records, methods)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with store._transaction(write=True) as conn:
        for table in ("recall", "agreement", "summaries"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        conn.executemany(
            "INSERT INTO recall (run_id, subset, oracle, method, mean, lo, hi, ap, n) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [(run_id, *r) for r in recall_rows])
        conn.executemany(
            "INSERT INTO agreement (run_id, method_a, method_b, spearman, n) VALUES (?, ?, ?, ?, ?)",
            [(run_id, *r) for r in agreement_rows])
        conn.execute(
            "INSERT INTO summaries (run_id, created, n_traces, n_used, skipped, n_boot) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, created, len(records), len(per_trace), json.dumps(skipped), N_BOOT))
    return read(store, run_id)


def _credit(conn, run_id: int) -> list[dict]:
    rows = conn.execute(
        "SELECT a.method, avg(a.ess_ratio), avg(a.top10_mass), avg(a.seconds), count(*), "
        "sum(a.seconds) FROM attributions a JOIN traces t ON t.id = a.trace_id "
        "WHERE t.run_id = ? GROUP BY a.method ORDER BY a.method", (run_id,)).fetchall()
    return [{"method": m, "ess_ratio": json_float(ess), "top10_mass": json_float(top),
             "seconds_per_trace": json_float(sec), "n": n, "seconds_total": json_float(total)}
            for m, ess, top, sec, n, total in rows]


def _agreement_matrix(rows) -> dict:
    methods = sorted({r[0] for r in rows})
    index = {m: i for i, m in enumerate(methods)}
    matrix = [[None] * len(methods) for _ in methods]
    counts = [[0] * len(methods) for _ in methods]
    for a, b, rho, n in rows:
        matrix[index[a]][index[b]] = json_float(rho)
        counts[index[a]][index[b]] = n
    return {"methods": methods, "spearman": matrix, "n": counts}


def read(store, run_id: int) -> dict:
    """A run's stored summaries plus live credit metrics; `summary` is None when the run was
    never summarised, and `stale` is True when traces were added after summarising."""
    with store._transaction(write=False) as conn:
        store._require_run(conn, run_id)
        info = conn.execute("SELECT created, n_traces, n_used, skipped, n_boot FROM summaries "
                            "WHERE run_id = ?", (run_id,)).fetchone()
        n_now = conn.execute("SELECT count(*) FROM traces WHERE run_id = ?", (run_id,)).fetchone()[0]
        recall = conn.execute("SELECT subset, oracle, method, mean, lo, hi, ap, n FROM recall "
                              "WHERE run_id = ? ORDER BY subset, oracle, method", (run_id,)).fetchall()
        agreement = conn.execute("SELECT method_a, method_b, spearman, n FROM agreement "
                                 "WHERE run_id = ?", (run_id,)).fetchall()
        credit = _credit(conn, run_id)
    summary = None
    if info is not None:
        created, n_traces, n_used, skipped, n_boot = info
        summary = {"created": created, "n_traces": n_traces, "n_used": n_used,
                   "skipped": json.loads(skipped), "n_boot": n_boot, "stale": n_now != n_traces}
    return {
        "run_id": run_id,
        "n_traces": n_now,
        "summary": summary,
        "recall": [{"subset": s, "oracle": o, "method": m, "recall": json_float(mean),
                    "ci95": [json_float(lo), json_float(hi)], "ap": json_float(ap), "n": n}
                   for s, o, m, mean, lo, hi, ap, n in recall],
        "agreement": _agreement_matrix(agreement),
        "credit": credit,
    }
