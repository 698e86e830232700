"""What an `oar align` summary says, in words: one plain sentence per method and the caveats.

`reading(summary)` is the end of `oar align`'s text output and of `--report`'s: per method,
resolved better or worse than GRPO (and than random where that contrast was made), or not
resolved; the caveats that apply (too few batches for the bootstrap, a noisy reference and the
attenuation it brings, a smoke test, a blinded interim read, a result that does not hold once
g*'s own noise is counted or against one half pool); and the next command to run.
"""
from __future__ import annotations

from ..defaults import NO_METHOD as BASELINE

FEW_BATCHES = 20  # below this a bootstrap over batches gives intervals that are too narrow
LOW_RELIABILITY = 0.5  # below this g*'s noise shrinks every delta cos by more than 0.7
SMOKE = {"batches": 3, "pool_batches": 2}  # --quick's sizes


def _resolved(c: dict | None) -> int | None:
    """+1 above 0, -1 below 0, 0 spanning it, None when there is no interval."""
    if not c or c.get("low") is None or c.get("high") is None:
        return None
    return 1 if c["low"] > 0 else -1 if c["high"] < 0 else 0


def _said(c: dict) -> str:
    return f"{c['mean']:+.4f} [{c['low']:+.4f}, {c['high']:+.4f}]"


def method_sentence(label: str, c: dict, against: str) -> str:
    """One sentence: the method against GRPO or random, and whether it holds with g*'s noise
    and against both half pools."""
    sign = _resolved(c)
    if sign is None:
        return f"{label}: no estimate against {against} (too few batches)."
    if sign == 0:
        text = f"{label}: not resolved against {against} ({_said(c)} spans 0)."
    else:
        text = f"{label}: resolved {'better' if sign > 0 else 'worse'} than {against} ({_said(c)})"
        noisy = c.get("with_gstar_noise")
        halves = c.get("half_pools") or {}
        if noisy and _resolved(noisy) != sign:
            text += f", but not once g*'s own noise is counted ({_said(noisy)}): raise --pool-batches"
        elif halves and any(_resolved(halves.get(h)) != sign for h in ("a", "b")):
            text += ", but not against both half pools' g*: read it as tentative"
        text += "."
    return text


def caveats(summary: dict) -> list[str]:
    """The caveats that apply to the whole summary."""
    out = []
    ref = summary.get("reference") or {}
    if summary.get("planned_batches", 0) <= SMOKE["batches"] or ref.get("pool_batches", 0) <= SMOKE["pool_batches"]:
        out.append("A smoke test (a tiny pool or a few batches): it shows the command works, not how "
                   "the methods compare.")
    if summary.get("batches", 0) < FEW_BATCHES:
        out.append(f"{summary.get('batches', 0)} batches: fewer than the {FEW_BATCHES} a bootstrap over "
                   "batches needs, so its intervals are too narrow.")
    reliability = ref.get("reliability")
    if reliability is not None and reliability < LOW_RELIABILITY:
        out.append(f"The reference g* is noisy (reliability {reliability:.2f}): every delta cos is shrunk "
                   f"by about {ref.get('attenuation') or 0:.2f} against the true gradient's, and small "
                   "effects hide in that.")
    return out


def next_command(summary: dict) -> str:
    """The command to run next."""
    store, n, planned = summary.get("store"), summary.get("batches", 0), summary.get("planned_batches", 0)
    if n < planned:
        return (f"Next: rerun the command that made {store} (same --store and settings) to measure "
                f"batches {n + 1}-{planned}; `oar align --store {store} --report` reads it meanwhile.")
    if planned <= SMOKE["batches"]:
        return f"Next: oar align --preset {summary.get('preset')} --pilot (12 batches and the power table)."
    power = (summary.get("power") or {}).get("contrasts") or {}
    needed = [row["batches_needed"][len(row["batches_needed"]) // 2] for row in power.values()
              if row.get("batches_needed") and row["batches_needed"][len(row["batches_needed"]) // 2]]
    effects = (summary.get("power") or {}).get("effects") or []
    if needed and effects:
        effect = effects[len(effects) // 2]
        return (f"Next: to resolve an effect of {effect:g} in delta cos, about {max(needed)} batches "
                "(the power table); measure them into a new --store with --batches set.")
    return "Next: the power table above sizes a longer run."


def reading(summary: dict) -> list[str]:
    """The plain-language reading of a summary: one sentence per method, caveats, next command."""
    if summary.get("blinded"):
        return [f"Blinded: {summary.get('batches')} of {summary.get('planned_batches')} planned batches are in, "
                "and no estimate is shown before all are (`--unblind` shows them: an interim look that a "
                "plan fixed in advance may forbid).", *[c for c in caveats(summary) if "bootstrap" not in c],
                next_command(summary)]
    out = []
    contrasts = summary.get("contrasts") or {}
    for label, m in (summary.get("methods") or {}).items():
        if label == BASELINE:
            continue
        out.append(method_sentence(label, m.get("delta_cos") or {}, "GRPO"))
        vs_random = contrasts.get(f"{label} - random")
        if vs_random:
            out.append(method_sentence(label, vs_random, "random"))
    return out + caveats(summary) + [next_command(summary)]
