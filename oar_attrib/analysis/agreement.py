"""Method agreement: Spearman rank correlation of two methods' scores over each trace's scored
tokens, averaged over traces. One computation for the notebook figure (`figures.method_agreement`)
and the stored run summary (`run_summary.summarise`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..weights.metrics import spearman

if TYPE_CHECKING:
    from ..records.traces import TraceAttribution


def agreement_matrix(traces: Sequence[TraceAttribution], methods: Sequence[str] | None = None):
    """Mean Spearman rank correlation between methods' scores over each trace's scored tokens.

    Per trace with at least 2 scored tokens and both methods' scores, rho(a, b) over those
    tokens; the mean over traces where rho is defined (neither score constant). Returns
    (methods, (M, M) matrix, (M, M) counts of traces averaged). The diagonal is 1 by definition
    (its count: the traces with at least 2 scored tokens); a pair with no defined rho is NaN.
    Methods default to those every trace has, in the first trace's order.
    """
    traces = list(traces)
    if methods is None:
        methods = [m for m in (traces[0].scores if traces else {})
                   if all(m in t.scores for t in traces)]
    methods = list(methods)
    n = len(methods)
    sums, counts = np.zeros((n, n)), np.zeros((n, n), dtype=int)
    for trace in traces:
        scored = np.array(trace.scored, dtype=bool)
        if scored.sum() < 2:
            continue
        values = [np.asarray(trace.scores[m], np.float64)[scored] if m in trace.scores else None
                  for m in methods]
        for i in range(n):
            for j in range(i + 1, n):
                if values[i] is None or values[j] is None:
                    continue
                rho = spearman(values[i], values[j])
                if np.isfinite(rho):
                    sums[i, j] += rho
                    counts[i, j] += 1
    counts = counts + counts.T
    sums = sums + sums.T
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    np.fill_diagonal(matrix, 1.0)
    np.fill_diagonal(counts, sum(int(np.sum(t.scored) >= 2) for t in traces))
    return methods, matrix, counts
