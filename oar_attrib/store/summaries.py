"""A run's stored summaries as the report page and API serve them: oracle recall per method
with bootstrap intervals and method agreement (computed and written by
`oar_attrib.analysis.run_summary.summarise`), plus the credit metrics, a SQL average read live.
"""
from __future__ import annotations

import json

from .records import json_float


def _credit(store, run_id: int) -> list[dict]:
    _, rows = store.query(
        "SELECT a.method, avg(a.ess_ratio), avg(a.top10_mass), avg(a.seconds), count(*), "
        "sum(a.seconds) FROM attributions a JOIN traces t ON t.id = a.trace_id "
        "WHERE t.run_id = ? GROUP BY a.method ORDER BY a.method", (run_id,))
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
    _, info = store.query("SELECT created, n_traces, n_used, skipped, n_boot FROM summaries "
                          "WHERE run_id = ?", (run_id,), run_id=run_id)
    _, ((n_now,),) = store.query("SELECT count(*) FROM traces WHERE run_id = ?", (run_id,))
    _, recall = store.query("SELECT subset, oracle, method, mean, lo, hi, ap, n FROM recall "
                            "WHERE run_id = ? ORDER BY subset, oracle, method", (run_id,))
    _, agreement = store.query("SELECT method_a, method_b, spearman, n FROM agreement "
                               "WHERE run_id = ?", (run_id,))
    credit = _credit(store, run_id)
    summary = None
    if info:
        created, n_traces, n_used, skipped, n_boot = info[0]
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
