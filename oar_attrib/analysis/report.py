"""The summary both recall reports share: token level (`recall.RecallReport`) and step level
(`instruments.steps.recall.StepRecallReport`), i.e. what `oar recall world --json` and `oar recall steps --json` print.

A report is its summary fields (`SUMMARY_FIELDS`, in the order the JSON gives them) and the
per-trace data they were computed from, kept for a closer look in a notebook. Each report adds
only its own fields and names where they stand in its `SUMMARY_FIELDS`.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import ClassVar

from ..attribution import AttributionBatch


@dataclass
class RecallSummary:
    """methods: {method: {oracle set or metric: `stats.mean_ci` stats}}; random: {set or
    metric: stats} of a random ranking's expectation; n problems sampled, n_scored of them
    scored, accuracy over all n, skipped: {reason: count} of the traces left out.

    traces, oracles and per_trace hold one entry per problem in sampling order (per_trace[i]
    is None for a skipped trace); they stay out of `as_dict`."""

    SUMMARY_FIELDS: ClassVar[tuple[str, ...]] = (
        "methods", "random", "n", "n_scored", "accuracy", "skipped")

    methods: dict
    random: dict
    n: int
    n_scored: int
    accuracy: float
    skipped: dict
    _: KW_ONLY
    traces: AttributionBatch = field(default_factory=AttributionBatch, repr=False)
    oracles: list = field(default_factory=list, repr=False)
    per_trace: list[dict | None] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        """The summary only: JSON-ready, without the traces."""
        return {name: getattr(self, name) for name in self.SUMMARY_FIELDS}

    def counts_line(self) -> str:
        """`n=.. scored=.. accuracy=.. skipped: reason count, ...`: the text report's first line
        (no Python repr)."""
        from .verdicts import plain

        return (f"n={self.n} scored={self.n_scored} accuracy={self.accuracy:.3f} "
                f"skipped: {plain(self.skipped) or 'none'}")
