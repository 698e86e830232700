"""Oracle causal-token recall on the arithmetic world (METHOD.md section 8).

Problems are sampled from the held-out split, the model writes its own traces (greedy), every
method attributes them, and each method's top-|O| tokens are compared with the structural
oracle sets of the trace (`direct`, `chain`), with 95% bootstrap intervals over traces.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .attribution import AttributionBatch, TraceAttribution, attribute
from .generation import generate
from .errors import InputError
from .methods import available_methods
from .metrics import average_precision, bootstrap_ci, random_recall, recall_at_k
from .world import KNOWN_SETS, Oracle, generate_problems

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
    """Summary of an `oracle_recall` run, and the per-trace data it was computed from.

    The summary fields are what `as_dict` (and `oar recall --json`) give. The rest, one entry
    per problem in sampling order, are kept so that a notebook can look at single traces:
    `per_trace[i]` is `trace_recall` of trace i, or None when it was skipped, and
    `status[i]` says why ("scored", "no_answer_span", "incomplete_trace").
    """

    SUMMARY_FIELDS: ClassVar[tuple[str, ...]] = (
        "methods", "random", "n", "n_scored", "accuracy", "skipped")

    methods: dict
    random: dict
    n: int
    n_scored: int
    accuracy: float
    skipped: dict
    problems: list = field(default_factory=list, repr=False)
    texts: list[str] = field(default_factory=list, repr=False)
    traces: AttributionBatch = field(default_factory=AttributionBatch, repr=False)
    oracles: list[Oracle] = field(default_factory=list, repr=False)
    correct: list[bool] = field(default_factory=list, repr=False)
    status: list[str] = field(default_factory=list, repr=False)
    per_trace: list[dict | None] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        """The summary only: JSON-ready, without the traces."""
        return {name: getattr(self, name) for name in self.SUMMARY_FIELDS}

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


def oracle_recall(model, tokenizer, n: int = 200, seed: int = 0, preset: str = "recall",
                  methods=None, probe: str = "as_mean", progress: bool = False,
                  method_params: dict | None = None, sets=ORACLE_SETS) -> RecallReport:
    """Sample `n` held-out problems, let the model answer, attribute, and score against the
    oracle sets `sets` (see KNOWN_SETS) on world `preset` (`recall`: no step copies a final
    result, so every `direct` token is the only carrier of its information). Traces without
    an answer span or without both final quantities are skipped and counted in `skipped`. The
    report keeps the problems, texts, traces and per-trace recall (`RecallReport.to_frame`)
    for a closer look."""
    sets = tuple(sets)
    unknown = [s for s in sets if s not in KNOWN_SETS]
    if unknown or not sets:
        raise InputError(f"unknown oracle set(s) {unknown or sets}; choose from {', '.join(KNOWN_SETS)}")
    methods = list(methods or available_methods())
    problems = generate_problems(n, preset, seed=seed, split="test")
    ids = generate(model, tokenizer, [p.prompt for p in problems], progress=progress)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    traces = attribute(model, tokenizer, [p.prompt for p in problems], texts, methods,
                       probe=probe, seed=seed, progress=progress, method_params=method_params)
    correct = [problem.reward(text) == 1.0 for problem, text in zip(problems, texts)]
    oracles = [problem.oracle(text) for problem, text in zip(problems, texts)]
    skipped, status, per_trace = {"no_answer_span": 0, "incomplete_trace": 0}, [], []
    for trace, oracle in zip(traces, oracles):
        reason = ("no_answer_span" if not trace.span_found
                  else "incomplete_trace" if not oracle.complete else None)
        if reason is not None:
            skipped[reason] += 1
        status.append(reason or "scored")
        per_trace.append(None if reason else trace_recall(trace, oracle, sets))
    summary, rand = summarize([t for t in per_trace if t is not None], methods, sets, seed=seed)
    return RecallReport(methods=summary, random=rand, n=n, n_scored=status.count("scored"),
                        accuracy=sum(correct) / n, skipped=skipped, problems=problems,
                        texts=texts, traces=traces, oracles=oracles, correct=correct,
                        status=status, per_trace=per_trace)
