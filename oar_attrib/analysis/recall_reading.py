"""The reading in words that ends `oar recall`'s text output (`verdicts.reading`): each method
against the random ranking's expectation, paired per trace, on each oracle set or metric.

The recall instruments keep per trace each method's value and the random expectation
(`recall.EXPECTED`); the difference per trace, bootstrapped by `metrics.mean_ci` (the interval
the tables show), resolves a method better or worse than random, or not. The graded oracle
gives its own paired differences (`vs_random`).
"""
from __future__ import annotations

from .verdicts import Comparison, caveat_few, caveats, reading

EXPECTED = "random_expectation"  # the random ranking's key in a recall trace (recall.py takes it from here)
STABLE_TRACES = 30  # fewer scored traces than this: the bootstrap intervals are rough


def _value(cell) -> float:
    return cell["recall"] if isinstance(cell, dict) else cell


def paired_comparisons(report, names, seed: int = 0) -> list[Comparison]:
    """One `Comparison` per method (the `random` draw left out) and set of `names`: the mean
    per-trace difference from the random expectation with its bootstrap interval, over its
    traces (too few below `stats.MIN_UNITS`: never resolved)."""
    from .stats import mean_ci

    used = [t for t in report.per_trace if t is not None]
    out = []
    for method in report.methods:
        if method == "random":
            continue
        for name in names:
            diffs = [_value(t[method][name]) - t[EXPECTED][name] for t in used]
            stats = mean_ci(diffs, seed, "mean")
            out.append(Comparison(method, "random", f"{name} {'recall' if name != 'upstream' else 'AUC'}",
                                  stats["mean"], *stats["ci95"], units=stats["n"], unit="traces"))
    return out


def graded_comparisons(report) -> list[Comparison]:
    """One `Comparison` per method of a graded report with a `vs_random` Spearman difference."""
    out = []
    for method, stats in report.methods.items():
        versus = stats.get("vs_random", {}).get("spearman")
        if versus:
            out.append(Comparison(method, "random", "Spearman with the flip rates", versus["mean"],
                                  *versus["ci95"], units=versus.get("n"), unit="traces"))
    return out


def recall_reading(report, comparisons: list[Comparison], next_step: str) -> list[str]:
    """The block of lines: verdicts, the caveats that apply (few scored traces, skipped ones,
    no `random` method for a graded run), and the next command."""
    skipped = sum((report.skipped or {}).values()) if isinstance(report.skipped, dict) else 0
    notes = caveats(
        caveat_few(report.n_scored, STABLE_TRACES, "traces"),
        f"{skipped} of {report.n} traces could not be scored (see skipped above); the reading is "
        "about the others" if skipped else None,
        "no comparison with random: run with `random` among --methods" if not comparisons else None)
    return reading(comparisons, notes, next_step)


def next_recall_step(report, command: str) -> str:
    """The command to run next: more traces when few were scored, else a real model's own
    traces (`oar recall data`) or the graded oracle (`oar recall graded`)."""
    if report.n_scored < STABLE_TRACES:
        return f"{command} --n 200 (more traces for tighter intervals)"
    if "--data" not in command:
        return ("oar recall data --data wordworld:tiny --model smollm2-135m (the same question on a real "
                "model's own traces)")
    graded = command.replace("oar recall data ", "oar recall graded ", 1)
    return f"{graded} (how strongly each token moves the answer, not only whether it does)"
