"""Readings in words of a measured comparison: what a command prints after its figures.

Pure functions over numbers the instruments already computed (no statistics of their own):
a `Comparison` is a method's difference from a reference (random, GRPO, ...) with its 95%
interval; `verdict` says whether it is resolved better, resolved worse or not resolved;
`reading` puts one verdict per method, the caveats that apply and the next command into a
block of plain lines. `caveat_*` word the common caveats the same way everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .stats import MIN_UNITS, too_few

ALPHA = 0.05  # the family-wise level of a resolved verdict


@dataclass(frozen=True)
class Comparison:
    """`method` against `reference` on `metric`: `difference` = method - reference (None when
    nothing was measured), (`low`, `high`) its 95% interval (None when none could be formed);
    `higher_is_better`: whether a positive difference favours the method; `p_holm`, where the
    comparison is one of a family, its Holm-adjusted p: then it is resolved only where that is
    below 0.05 as well (an interval is per comparison, the family's error rate is Holm's);
    `units`, where given, the traces or groups it was measured over: fewer than
    `stats.MIN_UNITS` is too few to read, never resolved."""

    method: str
    reference: str
    metric: str
    difference: float | None
    low: float | None = None
    high: float | None = None
    higher_is_better: bool = True
    p_holm: float | None = None
    units: int | None = None
    unit: str = "units"

    @property
    def outcome(self) -> str:
        """"better", "worse", "unresolved" (the interval holds 0), "too_few" (fewer units than
        `stats.MIN_UNITS`) or "unmeasured"."""
        if not _finite(self.difference):
            return "unmeasured"
        if self.units is not None and too_few(self.units):
            return "too_few"
        if not (_finite(self.low) and _finite(self.high)):
            return "unresolved"
        if (self.low > 0 or self.high < 0) and not self.held_by_holm:
            favours = self.low > 0
            return "better" if favours == self.higher_is_better else "worse"
        return "unresolved"

    @property
    def held_by_holm(self) -> bool:
        """Whether the family's Holm adjustment keeps a comparison whose interval excludes 0
        from being resolved (p_holm >= ALPHA)."""
        return _finite(self.p_holm) and self.p_holm >= ALPHA


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _interval(c: Comparison) -> str:
    if not (_finite(c.low) and _finite(c.high)):
        return f"{c.difference:+.3f}, no interval"
    return f"{c.difference:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"


def verdict(c: Comparison) -> str:
    """One sentence: `oar_p: resolved better than random on direct recall (+0.210 [+0.150, +0.270]).`"""
    outcome = c.outcome
    if outcome == "unmeasured":
        return f"{c.method}: not measured against {c.reference} on {c.metric} (no trace could be scored)."
    if outcome == "too_few":
        return (f"{c.method}: too few to read against {c.reference} on {c.metric} ({c.units} {c.unit}, fewer than "
                f"the {MIN_UNITS} a reading needs; {c.difference:+.3f}).")
    said = {"better": f"resolved better than {c.reference}", "worse": f"resolved worse than {c.reference}",
            "unresolved": f"not resolved from {c.reference}"}[outcome]
    tail = "" if outcome != "unresolved" else (
        f"; Holm p {c.p_holm:.3f} across the methods" if c.held_by_holm and not (c.low <= 0 <= c.high) else
        "; the 95% interval holds 0" if _finite(c.low) and _finite(c.high) else "")
    return f"{c.method}: {said} on {c.metric} ({_interval(c)}{tail})."


def leader(comparisons: Sequence[Comparison]) -> str | None:
    """The sentence naming the method resolved best (largest difference in its favour among
    those resolved better), or None when none is."""
    better = [c for c in comparisons if c.outcome == "better"]
    if not better:
        return None
    sign = 1 if better[0].higher_is_better else -1
    best = max(better, key=lambda c: sign * c.difference)
    return f"Leading: {best.method} (the largest resolved gain over {best.reference} on {best.metric})."


def reading(comparisons: Sequence[Comparison], caveats: Sequence[str] = (),
            next_step: str | None = None, title: str = "Reading") -> list[str]:
    """The plain-language block: `title:`, one `verdict` per comparison, the `leader`, then
    `Caveats:` (one line each) and `Next:` the command to run. Lines, without reprs."""
    lines = [f"{title}:"] + [f"  {verdict(c)}" for c in comparisons]
    lead = leader(comparisons)
    if lead:
        lines.append(f"  {lead}")
    elif comparisons and all(c.outcome in ("too_few", "unmeasured") for c in comparisons):
        lines.append(f"  Nothing can be read here: every figure is over fewer units than the {MIN_UNITS} a reading needs.")
    elif comparisons:
        lines.append("  No method is resolved better than its reference here.")
    if caveats:
        lines.append("Caveats:")
        lines += [f"  - {c}" for c in caveats]
    if next_step:
        lines.append(f"Next: {next_step}")
    return lines


def caveat_few(n: int, needed: int, what: str = "traces") -> str | None:
    """The caveat of a sample smaller than `needed` (None when it is not)."""
    if n >= needed:
        return None
    return (f"only {n} {what} were scored (fewer than the {needed} a stable interval needs): "
            "read the intervals as rough")


def caveat_reliability(value: float | None, floor: float, what: str = "reference") -> str | None:
    """The caveat of a reference reliability below `floor` (None when it is not)."""
    if value is None or not math.isfinite(value) or value >= floor:
        return None
    return (f"the {what}'s reliability is {value:.2f} (below {floor:.2f}): differences against "
            "it are mostly noise")


def caveat_smoke() -> str:
    return "a smoke test: it checks that the pipeline runs, it is not evidence"


def caveats(*items: str | None) -> list[str]:
    """The caveats given, without the Nones (`caveat_*` give None where they do not apply)."""
    return [c for c in items if c]


def plain(value) -> str:
    """A mapping or list as `key value, key value` / `a, b` text (never a Python repr), for
    lines that report settings such as the oracle's."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {plain(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(plain(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
