"""What an `oar align` summary says, in words: one plain sentence per method and the caveats.

`reading(summary)` is the end of `oar align`'s text output and of `--report`'s: per method,
resolved better or worse than GRPO (and than random where that contrast was made), or not
resolved; what its reshaping does to GRPO's step (a learning-rate change, a gain or a loss in
direction: `step_sentence`); where it differs from GRPO on the rows of one sign of the
advantage (`sign_sentence`); the caveats that apply (too few batches for the bootstrap, a noisy
reference and the attenuation it brings, a smoke test, a blinded interim read, a result that
does not hold once g*'s own noise is counted or against one half pool, g*'s noise that the half
pools could not estimate); and the next command to run.
"""
from __future__ import annotations

from ..defaults import NO_METHOD as BASELINE
from .align_step import SIGNS
from ..analysis.stats import format_p

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


def _side(c: dict | None, null: float) -> int | None:
    """+1 above `null`, -1 below, 0 spanning it, None without an interval (a ratio's)."""
    if not c or c.get("low") is None or c.get("high") is None:
        return None
    return 1 if c["low"] > null else -1 if c["high"] < null else 0


def _x(c: dict) -> str:
    """A ratio as read: "x1.124 [1.026, 1.240]"; "[no interval]" where none could be placed."""
    if c.get("value") is None:
        return "n/a"
    bounds = "no interval" if c.get("low") is None or c.get("high") is None else f"{c['low']:.3f}, {c['high']:.3f}"
    return f"x{c['value']:.3f} [{bounds}]"


def step_sentence(label: str, step: dict | None) -> str | None:
    """What the method's reshaping does to GRPO's step, in words: the signal ratio read as a
    learning-rate change, the optimal-step gain as a gain or a loss in direction (none where
    its interval holds 1), whether both hold against each half pool's g*; None without them."""
    if not step:
        return None
    s, q, g = step["signal_ratio"], step["second_moment_ratio"], step["gain"]
    s_side, g_side = _side(s, 1.0), _side(g, 1.0)
    if s_side is None or g_side is None:
        return f"{label}: its step against GRPO's has no interval (GRPO's gradient holds no signal along g*)."
    scale = (f"in expectation a learning-rate change of about {_x(s)}" if s_side
             else f"the same expected step along g* as GRPO's ({_x(s)}: no learning-rate change resolved)")
    if g_side == 0:
        direction = f"no gain in direction (optimal-step gain {_x(g)})"
    elif g_side > 0:
        direction = f"a gain in direction: at each one's best learning rate, {_x(g)} GRPO's progress a step"
    else:
        direction = (f"a loss in direction, it adds noise: at each one's best learning rate, {_x(g)} "
                     "of GRPO's progress a step")
    text = f"{label}: {scale}, {direction}; second moment {_x(q)}"
    if s_side and g_side == 0:
        text += f" (a pure rescaling by x{s['value']:.3f} gives x{s['value'] ** 2:.3f})"
    halves = step.get("half_pools") or {}
    if halves and any((_side(halves[h]["signal_ratio"], 1.0), _side(halves[h]["gain"], 1.0)) != (s_side, g_side)
                      for h in ("a", "b")):
        gains = ", ".join(_x(halves[h]["gain"]) for h in ("a", "b"))
        text += f"; not the same against both half pools' g* (gain against half a, half b: {gains}): tentative"
    return text + "."


def _sign_said(c: dict) -> str:
    return f"{_said(c)}, Holm {format_p(c['p_t_holm'])}"


def sign_sentence(label: str, m: dict, alpha: float) -> str | None:
    """Where the method differs from GRPO on the rows of one sign of the advantage (Holm-
    adjusted t-test below alpha), in words; None where neither sign does."""
    parts = {part: (m.get(part) or {}).get("delta_cos") or {} for part in SIGNS}
    side = {part: (0 if c.get("p_t_holm") is None or c["p_t_holm"] >= alpha else 1 if c["mean"] > 0 else -1)
            for part, c in parts.items()}
    if not any(side.values()):
        return None
    role = {"pos": "credit", "neg": "blame"}
    said = {part: f"{role[part]} ({SIGNS[part].split(' (')[0]}: {_sign_said(c)})" for part, c in parts.items()}
    if side["pos"] and side["neg"] and side["pos"] != side["neg"]:
        whole = m.get("delta_cos") or {}
        net = "the two cancel in the whole batch" if _resolved(whole) == 0 else "the whole batch nets them"
        if whole.get("mean") is not None:
            net += f" ({whole['mean']:+.4f})"
        helps, hurts = ("pos", "neg") if side["pos"] > 0 else ("neg", "pos")
        return f"{label}, by the sign of the advantage: it helps {said[helps]} and hurts {said[hurts]}; {net}."
    done = [f"{'better' if side[p] > 0 else 'worse'} than GRPO on {said[p]}" for p in SIGNS if side[p]]
    rest = [f"not resolved on {role[p]} ({_said(parts[p])})" for p in SIGNS
            if not side[p] and parts[p].get("low") is not None]
    return f"{label}, by the sign of the advantage: " + "; ".join(done + rest) + "."


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
    noises = [c.get("with_gstar_noise") for c in _all_contrasts(summary)]
    spread = sum(1 for c in noises if c and c.get("gstar_from") == "spread")
    if spread:
        out.append(f"g*'s own noise could not be estimated for {spread} of {sum(1 for c in noises if c)} contrasts "
                   "(the two half pools cannot tell it from the batches' noise): their interval with g*'s noise "
                   "uses the half pools' spread instead, which overstates it on average.")
    reliability = ref.get("reliability")
    if reliability is not None and reliability < LOW_RELIABILITY:
        out.append(f"The reference g* is noisy (reliability {reliability:.2f}): every delta cos is shrunk "
                   f"by about {ref.get('attenuation') or 0:.2f} against the true gradient's, and small "
                   "effects hide in that.")
    return out


def _all_contrasts(summary: dict) -> list[dict]:
    own = [m.get("delta_cos") or {} for label, m in (summary.get("methods") or {}).items() if label != BASELINE]
    return own + list((summary.get("contrasts") or {}).values())


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
        for name, c in contrasts.items():
            if name.startswith(f"{label} - "):
                out.append(method_sentence(label, c, name.split(" - ", 1)[1]))
        out += [s for s in (step_sentence(label, m.get("step")),
                            sign_sentence(label, m, summary.get("alpha", 0.05))) if s]
    if not any(sign_sentence(label, m, summary.get("alpha", 0.05)) for label, m in
               (summary.get("methods") or {}).items() if label != BASELINE):
        out.append("By the sign of the advantage no method differs resolvably from GRPO (the planned secondary, "
                   "Holm over methods x signs).")
    return out + caveats(summary) + [next_command(summary)]
