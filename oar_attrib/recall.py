"""Oracle causal-token recall on the arithmetic world (METHOD.md section 8).

Problems are sampled from the held-out split, the model writes its own traces (greedy), every
method attributes them, and each method's top-|O| tokens are compared with the structural
oracle sets of the trace (`direct`, `chain`), with 95% bootstrap intervals over traces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attribute import TraceAttribution, attribute
from .generation import generate
from .methods import available_methods
from .metrics import average_precision, bootstrap_ci, random_recall, recall_at_k
from .world import Oracle, generate_problems

ORACLE_SETS = ("direct", "chain")
EXPECTED = "random_expectation"


def oracle_token_mask(offsets, spans) -> np.ndarray:
    """(T,) bool: tokens whose character span overlaps any of `spans`."""
    mask = np.zeros(len(offsets), dtype=bool)
    for i, (a, b) in enumerate(offsets):
        mask[i] = b > a and any(a < e and s < b for s, e in spans)
    return mask


def trace_recall(trace: TraceAttribution, oracle: Oracle, sets=ORACLE_SETS) -> dict:
    """Recall@|O| and AP per method and oracle set for one trace, plus the expectation of a
    random ranking under the key EXPECTED (the method named `random` is a real draw)."""
    scored = np.array(trace.scored)
    out: dict = {EXPECTED: {}}
    for name in sets:
        target = oracle_token_mask(trace.offsets, getattr(oracle, name)) & scored
        out[EXPECTED][name] = float(random_recall(target, scored)) if target.any() else float("nan")
        for method, scores in trace.scores.items():
            values = np.asarray(scores, dtype=np.float64)
            res = out.setdefault(method, {})
            if not target.any() or not np.isfinite(values[scored]).all():
                res[name] = {"recall": float("nan"), "ap": float("nan")}
                continue
            res[name] = {
                "recall": float(recall_at_k(values, target, scored)),
                "ap": float(average_precision(values, target, scored)),
            }
    return out


def _summary(values: list[float], seed: int) -> dict:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {"recall": None, "ci95": [None, None], "n": 0}
    lo, hi = bootstrap_ci(arr, seed=seed)
    return {"recall": float(arr.mean()), "ci95": [float(lo), float(hi)], "n": int(arr.size)}


@dataclass
class RecallReport:
    methods: dict
    random: dict
    n: int
    n_scored: int
    accuracy: float
    skipped: dict

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(per_trace: list[dict], methods, sets=ORACLE_SETS, seed: int = 0) -> tuple[dict, dict]:
    """Mean recall with a bootstrap CI (and mean AP) per method and set, and the random floor."""
    summary = {}
    for method in methods:
        summary[method] = {}
        for name in sets:
            stats = _summary([t[method][name]["recall"] for t in per_trace], seed)
            aps = [t[method][name]["ap"] for t in per_trace if np.isfinite(t[method][name]["ap"])]
            stats["ap"] = float(np.mean(aps)) if aps else None
            summary[method][name] = stats
    rand = {name: _summary([t[EXPECTED][name] for t in per_trace], seed) for name in sets}
    return summary, rand


def oracle_recall(model, tokenizer, n: int = 200, seed: int = 0, preset: str = "default",
                  methods=None, probe: str = "as_mean", progress: bool = False,
                  method_params: dict | None = None) -> RecallReport:
    """Sample `n` held-out problems, let the model answer, attribute, and score against the
    oracle. Traces without an answer span or without both final quantities are skipped and
    counted in `skipped`."""
    methods = list(methods or available_methods())
    problems = generate_problems(n, preset, seed=seed, split="test")
    ids = generate(model, tokenizer, [p.prompt for p in problems], progress=progress)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    traces = attribute(model, tokenizer, [p.prompt for p in problems], texts, methods,
                       probe=probe, seed=seed, progress=progress, method_params=method_params)
    skipped = {"no_answer_span": 0, "incomplete_trace": 0}
    per_trace, correct = [], 0
    for problem, text, trace in zip(problems, texts, traces):
        correct += problem.reward(text) == 1.0
        oracle = problem.oracle(text)
        if not trace.span_found:
            skipped["no_answer_span"] += 1
        elif not oracle.complete:
            skipped["incomplete_trace"] += 1
        else:
            per_trace.append(trace_recall(trace, oracle))
    summary, rand = summarize(per_trace, methods, seed=seed)
    return RecallReport(methods=summary, random=rand, n=n, n_scored=len(per_trace),
                        accuracy=correct / n, skipped=skipped)
