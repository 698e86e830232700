"""The statistics of a gradient-alignment run (`oar align`), made from its store folder.

Per training batch b and method m (parts: all rows, positive-advantage rows, negative ones):

- cos_m,b = cos(g_m,b, g*)                       alignment with the reference gradient
- delta_cos_m,b = cos_m,b - cos_GRPO,b           the primary endpoint, paired by batch
- sign_m,b = <g*, sign(g_m,b)> / ||g*||_1        the sign-agreement proxy (1: every sign right)
- norm_ratio_m,b = ||g_m,b|| / ||g_GRPO,b||      step size against GRPO's
- cos_grpo_m,b = cos(g_m,b, g_GRPO,b)            how far the reshaping turns GRPO's gradient

Each is summarised by its mean over batches with a percentile bootstrap interval over batches
(the batches are resampled together, so every contrast stays paired). The contrasts (every
method against GRPO, and OAR-G against random weights) get two-sided bootstrap p-values and
Holm's step-down correction across the family; each contrast's interval is at Holm's level
for its rank (1 - alpha / (K - rank + 1)), so an interval that excludes 0 agrees with its
adjusted p below alpha.

Bias or variance, from the running sums S_a, S_b of each method's gradients over the even and
odd batches (independent halves, n_a and n_b batches): ||mu_m||^2 = <S_a, S_b> / (n_a n_b) is
the squared norm of the method's expected gradient without the batch noise, and the noise is
E||g_m,b||^2 - ||mu_m||^2. `direction_grpo` = cos(mu_m, mu_GRPO) from cross-half sums (1 for
GRPO; below 1: the method points elsewhere on average, a bias), `direction_star` = cos(mu_m,
mu*) against the pool's expected gradient (GRPO's is ~1 up to noise: the instrument's check),
`noise_to_signal` its per-batch noise over its signal (lower than GRPO's: a variance gain), and
`mean_cos_star` the plain cosine of its mean gradient with g*. These are point estimates.

g*'s own noise: every contrast is also reported against each half pool's g*, and with g*'s
noise added to its interval (`with_gstar_noise`); where the two halves cannot tell that noise
from the batches' (its moment estimate is not positive), the half pools' spread stands in for it
and the summary says so (`gstar_from`), so the interval never silently holds no g* noise.

What the reshaping does to GRPO's step (`align_step`, `step` of each method): the
signal ratio E<g, g*> / E<g_0, g*>, the second-moment ratio E||g||^2 / E||g_0||^2 and the
optimal-step gain (their S^2 / Q) with bootstrap intervals; and delta_cos on the rows of each
sign of the advantage with a paired t-test and Holm's correction (`pos`, `neg`, `by_sign`).

Power: with the per-batch SD of delta_cos, the batches a paired two-sided t-test at alpha / K
(Holm's first step) needs to detect an effect with the given power, and the smallest effect the
batches at hand resolve (`stats.units_needed`, `stats.min_detectable_effect`: statsmodels'
t-test power).

The bootstrap, its p-values (a bound where no resample crosses 0), Holm, the t-tests and the
power are `analysis.stats`'s, which every summary shares.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..defaults import NO_METHOD as BASELINE
from ..errors import InputError
from .align_folder import HALVES, PARTS, RESULTS, AlignFolder
from .align_step import sign_lines, sign_stats, step_lines, step_stats
from ..analysis.stats import (
    PValue,
    bootstrap_index,
    bootstrap_means,
    bootstrap_p,
    format_p,
    holm,
    min_detectable_effect,
    t_bounds,
    units_needed,
)
from ..analysis.stats import percentile_interval as interval

ENDPOINTS = ("cos", "delta_cos", "sign_agreement", "norm_ratio", "cos_grpo")
DEFAULT_EFFECTS = (0.002, 0.005, 0.01, 0.02, 0.05)
# The named contrasts, when both ran: the issue's, and the positive control against its own
# scores scrambled (`training.align.control`: it must win by which tokens it picks).
PLANNED = (("oar_g", "none"), ("oar_g", "random"), ("causal_oracle", "causal_scramble"))


def load(folder: str | Path) -> dict:
    """What the statistics read from an align folder (`AlignFolder`'s checked reads): record,
    reference, result lines, mean gradients and the screen's counts. InputError when the folder
    holds no reference yet, an `AlignFolderError` (one line) when a file is not what the writer
    writes."""
    owner = AlignFolder(folder)
    record, reference = owner.record(), owner.reference()
    if record is None or reference is None:
        raise InputError(f"{owner.path} holds no finished reference gradient yet (a settings record and "
                         "reference/reference.json); run oar align into it first")
    screen = owner.screen()
    results = owner.results()
    labels = list(record["align"]["methods"])
    for k, line in enumerate(results):
        if sorted(line["methods"]) != sorted(labels):
            raise owner._bad(RESULTS, f"measures {', '.join(sorted(line['methods']))}, not the record's "
                                      f"{', '.join(sorted(labels))}", k + 1)
    return {"folder": str(owner.path), "record": record, "reference": reference, "results": results,
            "mean_gradients": owner.mean_gradients(),
            "screen": {"prompts": len(screen), "mixed": sum(bool(s.get("mixed")) for s in screen),
                       "seconds": float(sum(s.get("seconds", 0.0) for s in screen)),
                       "cpu_seconds": float(sum(s.get("cpu_seconds", 0.0) for s in screen))}}


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def per_batch(data: dict) -> dict:
    """method -> part -> endpoint -> (n,) float64 array over the committed batches."""
    ref = data["reference"]
    results = data["results"]
    labels = list(results[0]["methods"]) if results else list(data["record"]["align"]["methods"])
    out = {}
    for label in labels:
        out[label] = {}
        for part in PARTS:
            col = {k: np.array([r["methods"][label][part][k] for r in results], dtype=np.float64)
                   for k in ("dot_star", "sq", "dot_grpo", "sign_star")}
            grpo_sq = np.array([r["methods"][labels[0]][part]["sq"] for r in results], dtype=np.float64)
            out[label][part] = {
                **_half_cosines(results, label, part, col["sq"], ref),
                "cos": _ratio(col["dot_star"], np.sqrt(col["sq"] * ref["sq"])),
                "sign_agreement": col["sign_star"] / ref["l1"],
                "norm_ratio": np.sqrt(_ratio(col["sq"], grpo_sq)),
                "cos_grpo": _ratio(col["dot_grpo"], np.sqrt(col["sq"] * grpo_sq)),
            }
    for label in labels:
        for part in PARTS:
            out[label][part]["delta_cos"] = out[label][part]["cos"] - out[labels[0]][part]["cos"]
    return out


def _half_cosines(results: list[dict], label: str, part: str, sq: np.ndarray, ref: dict) -> dict:
    """{"cos_a", "cos_b"}: per batch, the cosine with each half pool's own g* (the lines of a
    run made before those dot products were recorded have none: {})."""
    halves = ref.get("halves_sq")
    if not results or not isinstance(halves, dict):
        return {}
    out = {}
    for h in HALVES:
        dots = [r["methods"][label][part].get(f"dot_star_{h}") for r in results]
        if any(d is None for d in dots) or not halves.get(h):
            return {}
        out[f"cos_{h}"] = _ratio(np.array(dots, dtype=np.float64), np.sqrt(sq * halves[h]))
    return out


def _num(x) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def contrasts(labels: list[str], planned=PLANNED) -> list[tuple[str, str]]:
    """The Holm family: every method against GRPO, then the planned contrasts not yet in it
    whose two methods both ran."""
    family = [(m, BASELINE) for m in labels if m != BASELINE]
    return family + [c for c in planned if c not in family and c[0] in labels and c[1] in labels]


def _contrast(values: dict, pair: tuple[str, str], part: str = "all", against: str = "cos") -> np.ndarray:
    """Per batch, the difference of the two methods' cosines with g* (`against` "cos"), or with
    a half pool's ("cos_a", "cos_b")."""
    return values[pair[0]][part][against] - values[pair[1]][part][against]


def gstar_variance(split: float, split_var: float) -> tuple[float, str, float]:
    """(the variance g*'s own noise adds to a contrast, where it comes from, the moment
    estimate) from the half pools' split (the contrast against g*_a minus that against g*_b)
    and its variance over batches: the moment estimate (split^2 - split_var) / 4 where it is
    positive ("estimate"); else g*'s noise cannot be told from the batches' with the one
    degree of freedom two halves give, and the half pools' whole spread stands in for it,
    (split^2 + split_var) / 4 ("spread": on average var_g* + split_var / 2, more than g*'s
    noise, and above 0 whenever the batches vary), never a silent 0."""
    moment = (split ** 2 - split_var) / 4
    if moment > 0:
        return moment, "estimate", moment
    return (split ** 2 + split_var) / 4, "spread", moment


def with_gstar_noise(values: dict, pair: tuple[str, str], index: np.ndarray, level: float) -> dict | None:
    """The contrast's interval against the true expected gradient: the bootstrap's variance over
    batches plus g*'s own noise, estimated from the two half pools (cross-fit: the contrast
    against g*_a minus that against g*_b is 2x the half pools' noise plus batch noise, whose
    part the same bootstrap gives; the whole pool's noise variance is a quarter of what is
    left; `gstar_variance`, with `gstar_from` saying whether that was estimated or, the
    estimate not being positive, the half pools' spread stands in). Welch-Satterthwaite
    degrees of freedom: the g* part has one (two halves), so a contrast whose g* noise
    dominates gets a wide interval. None without half-pool cosines."""
    if "cos_a" not in values[pair[0]]["all"]:
        return None
    d = _contrast(values, pair)
    da, db = _contrast(values, pair, against="cos_a"), _contrast(values, pair, against="cos_b")
    ok = np.isfinite(d) & np.isfinite(da) & np.isfinite(db)
    if ok.sum() < 2:
        return None
    batch_var = float(np.var(bootstrap_means(d, index), ddof=1))
    split = float(np.nanmean(da[ok]) - np.nanmean(db[ok]))
    split_var = float(np.var(bootstrap_means(da - db, index), ddof=1))
    gstar_var, source, moment = gstar_variance(split, split_var)
    se = math.sqrt(batch_var + gstar_var)
    n = int(ok.sum())
    df = (batch_var + gstar_var) ** 2 / (batch_var ** 2 / (n - 1) + gstar_var ** 2) if se > 0 else float("nan")
    mean = float(np.mean(d[ok]))
    low, high, p = t_bounds(mean, se, df, level)
    return {"mean": mean, "low": _num(low), "high": _num(high), "level": level, "p": _num(p), "se": _num(se),
            "gstar_sd": _num(math.sqrt(gstar_var)), "gstar_from": source, "gstar_moment": _num(moment),
            "batch_se": _num(math.sqrt(batch_var)), "df": _num(df)}


def half_pool_stats(values: dict, pair: tuple[str, str], index: np.ndarray, level: float) -> dict | None:
    """The contrast against each half pool's g* ({"a": {...}, "b": {...}}: mean, interval at
    `level`, p); None without half-pool cosines."""
    if "cos_a" not in values[pair[0]]["all"]:
        return None
    out = {}
    for h in HALVES:
        d = _contrast(values, pair, against=f"cos_{h}")
        boot = bootstrap_means(d, index)
        out[h] = {**interval(d, boot, level), "p": float(bootstrap_p(boot))}
    return out


def mean_gradient_stats(data: dict, values: dict) -> dict:
    """Per method: the bias-or-variance estimates of the module docstring (None before any
    mean gradient was summed)."""
    sums, ref = data["mean_gradients"], data["reference"]
    if not sums or not data["results"]:
        return {}
    na, nb = sums["halves"]["a"], sums["halves"]["b"]
    n = na + nb
    labels = list(sums["methods"])
    out = {}
    for label in labels:
        s = sums["methods"][label]
        signal = s["ab"] / (na * nb) if na and nb else float("nan")
        sq = np.array([r["methods"][label]["all"]["sq"] for r in data["results"]], dtype=np.float64)
        grpo_signal = sums["methods"][labels[0]]["ab"] / (na * nb) if na and nb else float("nan")
        total = s["aa"] + s["bb"] + 2 * s["ab"]
        out[label] = {
            "mean_cos_star": _num(s["star"] / math.sqrt(total * ref["sq"])) if total > 0 else None,
            "split_half_cos": _num(s["ab"] / math.sqrt(s["aa"] * s["bb"])) if s["aa"] * s["bb"] > 0 else None,
            "signal_sq": _num(signal),
            "noise_to_signal": _num((sq.mean() - signal) / signal) if signal > 0 else None,
            "direction_star": (_num(s["star"] / n / math.sqrt(signal * ref["signal_sq"]))
                               if signal > 0 and ref["signal_sq"] > 0 else None),
            "direction_grpo": (_num(s["cross_grpo"] / (2 * na * nb) / math.sqrt(signal * grpo_signal))
                               if signal > 0 and grpo_signal > 0 else None),
        }
    return out


def _power(values: dict, pairs, n: int, planned_batches: int, alpha: float, power: float,
           effects) -> dict:
    table = {}
    for pair in pairs:
        d = _contrast(values, pair)
        d = d[np.isfinite(d)]
        sd = float(d.std(ddof=1)) if d.size >= 2 else float("nan")
        table[f"{pair[0]} - {pair[1]}"] = {
            "sd": _num(sd), "batches_needed": [units_needed(sd, e, alpha, power, len(pairs)) for e in effects],
            "detectable_now": min_detectable_effect(sd, n, alpha, power, len(pairs)),
            "detectable_at_planned": min_detectable_effect(sd, planned_batches, alpha, power, len(pairs))}
    return {"alpha": alpha, "power": power, "family": len(pairs), "effects": list(effects),
            "batches": n, "planned_batches": planned_batches, "contrasts": table}


def _contrast_stats(values: dict, pairs, index: np.ndarray, alpha: float) -> dict:
    """name -> the paired difference of each contrast: mean, Holm-level interval, p, p_holm,
    p_bound (no resample crossed 0: p and p_holm are bounds, printed "< x"), and the
    unadjusted 95% interval."""
    boots = {pair: bootstrap_means(_contrast(values, pair), index) for pair in pairs}
    raw = {pair: bootstrap_p(boot) for pair, boot in boots.items()}
    adjusted, rank = holm(raw)
    out = {}
    for pair in pairs:
        d, level = _contrast(values, pair), 1 - alpha / (len(pairs) - rank[pair] + 1)
        held = interval(d, boots[pair], level)
        plain95 = interval(d, boots[pair], 0.95)
        out[f"{pair[0]} - {pair[1]}"] = {**held, "level": level, "low95": plain95["low"],
                                         "high95": plain95["high"], "p": float(raw[pair]), "p_holm": adjusted[pair],
                                         "p_bound": raw[pair].bound,
                                         "half_pools": half_pool_stats(values, pair, index, level),
                                         "with_gstar_noise": with_gstar_noise(values, pair, index, level)}
    return out


def summarise(folder: str | Path, *, n_boot: int = 10_000, alpha: float = 0.05, power: float = 0.8,
              effects=DEFAULT_EFFECTS, seed: int | None = None, planned=PLANNED) -> dict:
    """The statistics of an align store (module docstring) as one JSON-ready dict; for each
    method `methods[label]["delta_cos"]` is {"mean", "low", "high", ...} (GRPO's: 0, exactly).
    seed: of the bootstrap; default the store's own (its record's, else 0), so that every reader
    of a store resamples as the run that measured it did."""
    data = load(folder)
    if seed is None:
        recorded = (data["record"].get("align") or {}).get("seed")
        seed = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else 0
    values = per_batch(data)
    labels = list(values)
    n = len(data["results"])
    index = bootstrap_index(n, n_boot, seed)
    pairs = contrasts(labels, planned)
    tested = _contrast_stats(values, pairs, index, alpha) if n else {}
    bias = mean_gradient_stats(data, values)
    step = step_stats(data["results"], index)
    by_sign = sign_stats(values, alpha) if n else {}
    methods = {}
    for label in labels:
        entry = {}
        for part in PARTS:
            stats = {e: interval(values[label][part][e], bootstrap_means(values[label][part][e], index), 0.95)
                     for e in ENDPOINTS if e != "delta_cos"}
            stats["delta_cos"] = interval(values[label][part]["delta_cos"],
                                          bootstrap_means(values[label][part]["delta_cos"], index), 0.95)
            entry[part] = stats
            stats["delta_cos"].update(by_sign.get(label, {}).get(part, {}))
        own = dict(entry.pop("all"))
        held = tested.get(f"{label} - {BASELINE}")
        if held is not None:  # the Holm-level interval of the contrast with GRPO
            own["delta_cos"] = held
        elif label == BASELINE and n:
            own["delta_cos"] = {"mean": 0.0, "low": 0.0, "high": 0.0, "level": None, "p": 1.0, "p_holm": 1.0}
        seconds = [r["methods"][label]["seconds"] for r in data["results"]]
        methods[label] = {**own, "pos": entry["pos"], "neg": entry["neg"], "step": step.get(label),
                          "mean_gradient": bias.get(label), "seconds_per_batch": _seconds(seconds)}
    record, ref = data["record"], data["reference"]
    planned_batches = int(record["align"]["batches"])
    return {
        "format": 1, "store": data["folder"], "model": record.get("model"), "preset": record["align"]["preset"],
        "batches": n, "planned_batches": planned_batches, "n_boot": n_boot, "alpha": alpha,
        "rows_per_batch": data["results"][0]["rows"] if n else None,
        "screen": {**data["screen"], "rate": data["screen"]["mixed"] / max(data["screen"]["prompts"], 1)},
        "reference": {"pool_batches": ref["pool_batches"], "split_half_cos": ref["split_half_cos"],
                      "reliability": _spearman_brown(ref["split_half_cos"]),
                      "attenuation": _attenuation(_spearman_brown(ref["split_half_cos"])),
                      "batch_cos_expected": _num(math.sqrt(ref["signal_sq"] / ref["batch_sq_mean"]))
                      if ref["signal_sq"] > 0 else None},
        "methods": methods,
        "contrasts": {k: v for k, v in tested.items() if not k.endswith(f" - {BASELINE}")},
        "by_sign": {"test": "paired t-test over batches", "family": sum(len(v) for v in by_sign.values()),
                    "alpha": alpha},
        "power": _power(values, pairs, n, planned_batches, alpha, power, effects) if n else None,
    }


# What a blinded interim read shows (`blinded`): how far the run is, the instrument's own checks
# and the noise that sizes it, none of the methods' estimates.
BLIND_FIELDS = ("format", "store", "model", "preset", "batches", "planned_batches", "n_boot", "alpha",
                "rows_per_batch", "screen", "reference", "power")


def blinded(summary: dict) -> dict:
    """The part of a summary a run still under way may be read by without looking at an effect
    (a pilot's read: the batches so far, the reference's reliability, the per-batch SD of each
    contrast with the power table, each method's seconds per batch); `blinded: True` marks it."""
    out = {k: summary[k] for k in BLIND_FIELDS if k in summary}
    out["seconds_per_batch"] = {label: m.get("seconds_per_batch") for label, m in summary["methods"].items()}
    return {**out, "blinded": True}


def cpu_seconds(seconds: dict | None) -> float | None:
    """A method's CPU seconds per batch (its weights and its backward) from its
    `seconds_per_batch`; None when not recorded."""
    if not seconds or "weights_cpu" not in seconds:
        return None
    return seconds["weights_cpu"] + seconds["backward_cpu"]


def _seconds(per_batch: list[dict]) -> dict | None:
    """Mean seconds per batch of a method: wall and CPU, computing its weights and its backward."""
    if not per_batch:
        return None
    return {k: float(np.mean([s.get(k, np.nan) for s in per_batch])) for k in per_batch[0]}


def _spearman_brown(r: float) -> float | None:
    """The reliability of the whole pool's mean from its halves' correlation r: 2r / (1 + r)."""
    return _num(2 * r / (1 + r)) if r > -1 else None


def _attenuation(reliability: float | None) -> float | None:
    """sqrt(reliability): about how much g*'s noise shrinks every cosine with it (and so every
    delta_cos) against the cosine with the true expected gradient."""
    return _num(math.sqrt(reliability)) if reliability is not None and reliability > 0 else None


def _fmt(x, spec: str = "+.4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _p_holm(contrast: dict) -> str:
    """A contrast's Holm p as printed: a bound ("<0.0004") where no resample crossed 0."""
    p = contrast.get("p_holm")
    return "n/a" if p is None else format_p(PValue(p, bool(contrast.get("p_bound"))), label="").replace(" ", "")


def _shown(c: dict | None) -> str:
    if not c:
        return "n/a"
    return f"{_fmt(c.get('mean'))} [{_fmt(c.get('low'))}, {_fmt(c.get('high'))}]"


def contrast_rows(summary: dict) -> dict:
    """name -> the contrast's statistics, every method against GRPO first, then the others."""
    rows = {f"{label} - {BASELINE}": m["delta_cos"] for label, m in summary.get("methods", {}).items()
            if label != BASELINE and m.get("delta_cos")}
    return {**rows, **summary.get("contrasts", {})}


def _robust_lines(summary: dict) -> list[str]:
    """Each contrast against each half pool's g* and with g*'s own noise in its interval."""
    if summary.get("blinded"):
        return []
    rows = [(name, c) for name, c in contrast_rows(summary).items() if c.get("half_pools")]
    if not rows:
        return []
    att = summary["reference"].get("attenuation")
    out = ["", f"the same contrasts against each half pool's g* and with g*'s noise (Holm-level intervals; "
               f"every delta cos is shrunk by about {_fmt(att, '.2f')} against the true gradient's):",
           f"{'contrast':<32} {'half a':<28} {'half b':<28} {'with g* noise':<28} {'g* sd':>7}  from"]
    for name, c in rows:
        noise = c.get("with_gstar_noise") or {}
        out.append(f"{name:<32} {_shown(c['half_pools']['a']):<28} {_shown(c['half_pools']['b']):<28} "
                   f"{_shown(noise):<28} {_fmt(noise.get('gstar_sd'), '.4f'):>7}  {noise.get('gstar_from', 'n/a')}")
    spread = [name for name, c in rows if (c.get("with_gstar_noise") or {}).get("gstar_from") == "spread"]
    if spread:
        out.append(f"(from 'spread': for {len(spread)} of {len(rows)} contrasts the two half pools cannot tell "
                   "g*'s noise from the batches' (its estimate is not positive); the half pools' whole spread "
                   "stands in for it, more than g*'s noise on average)")
    return out


def format_summary(summary: dict) -> str:
    """The summary as a few tables of text."""
    ref = summary["reference"]
    lines = [f"gradient alignment: {summary['batches']} of {summary['planned_batches']} batches of "
             f"{summary['rows_per_batch']} completions; reference g* from {ref['pool_batches']} pool batches "
             f"(split-half cos {_fmt(ref['split_half_cos'], '.3f')}, reliability {_fmt(ref['reliability'], '.3f')}, "
             f"attenuation sqrt(reliability) {_fmt(ref.get('attenuation'), '.2f')}); "
             f"screen kept {summary['screen']['mixed']} of {summary['screen']['prompts']} prompts", ""]
    if summary.get("blinded"):
        lines.append("blinded: the estimates stay hidden until the planned batches are in (--unblind "
                     "shows them); the noise and the cost so far:")
        lines += [""] + [f"{label:<20} cpu s per batch {_fmt(cpu_seconds(seconds), '.1f')}"
                  for label, seconds in summary["seconds_per_batch"].items()]
    else:
        if summary["batches"] < 20:
            lines.insert(1, "(fewer than 20 batches: bootstrap intervals this short are too narrow)")
        lines.append(f"{'method':<20} {'delta cos(g,g*) [Holm interval]':<38} {'p_holm':>7} {'cos':>8} "
                     f"{'sign':>7} {'|g|/|gG|':>8} {'cos gG':>7} {'dir gG':>7} {'noise/sig':>9} {'cpu s':>7}")
    for label, m in ({} if summary.get("blinded") else summary["methods"]).items():
        d, bias = m.get("delta_cos") or {}, m.get("mean_gradient") or {}
        cpu = cpu_seconds(m.get("seconds_per_batch"))
        shown = f"{_fmt(d.get('mean'))} [{_fmt(d.get('low'))}, {_fmt(d.get('high'))}]"
        lines.append(f"{label:<20} {shown:<38} {_p_holm(d):>7} {_fmt(m['cos']['mean'], '.4f'):>8} "
                     f"{_fmt(m['sign_agreement']['mean'], '.4f'):>7} {_fmt(m['norm_ratio']['mean'], '.3f'):>8} "
                     f"{_fmt(m['cos_grpo']['mean'], '.3f'):>7} {_fmt(bias.get('direction_grpo'), '.3f'):>7} "
                     f"{_fmt(bias.get('noise_to_signal'), '.1f'):>9} {_fmt(cpu, '.1f'):>7}")
    for name, c in summary.get("contrasts", {}).items():
        lines.append(f"{name:<20} {_fmt(c['mean'])} [{_fmt(c['low'])}, {_fmt(c['high'])}]  p_holm {_p_holm(c)}")
    lines += _robust_lines(summary)
    if not summary.get("blinded"):
        lines += step_lines(summary) + sign_lines(summary)
    power = summary.get("power")
    if power:
        head = " ".join(f"{e:>8g}" for e in power["effects"])
        width = max([20] + [len(name) for name in power["contrasts"]])
        lines += ["", f"batches needed (paired t-test, alpha {power['alpha']}/{power['family']}, power "
                      f"{power['power']}) for an effect in delta cos of:",
                  f"{'contrast':<{width}} {'sd':>8} {head}  detectable now"]
        for name, row in power["contrasts"].items():
            needed = " ".join(f"{'n/a' if n is None else n:>8}" for n in row["batches_needed"])
            lines.append(f"{name:<{width}} {_fmt(row['sd'], '.4f'):>8} {needed}  {_fmt(row['detectable_now'], '.4f')}")
    from .align_reading import reading

    return "\n".join(lines + ["", "what it says:"] + [f"  {sentence}" for sentence in reading(summary)])
