"""The report of an experiment grid: curves, final accuracies, paired differences from GRPO.

Everything is computed from the points of finished cells (`ExperimentStore.finished_cells`):

- curves: per key (held-out accuracies, credit metrics, entropy, step seconds) and method,
  the mean over seeds at each step with a band from the lowest to the highest seed;
- finals: per accuracy key, method and seed, the value at the last step;
- differences from GRPO: per method, d_s = final(method, s) - final(none, s) over the seeds
  both finished, their mean and how many seeds it won; the interval is the pooled-error one of
  the method x seed two-way ANOVA with Holm's correction over the methods
  (`experiment_stats`: one residual error of (M - 1)(S - 1) degrees of freedom shared by every
  comparison, not a t-interval of S - 1 per method), with the ANOVA's F tests of the method
  and the seed effects and the seeds a 3-point difference would need;
- when the grid stored each held-out problem's outcome (`eval/problem/<preset>/<i>`), a
  bootstrap over seeds and problems of the same differences;
- seconds per optimizer step (evaluation excluded) and per evaluation.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from oar_attrib.errors import unknown_name
from oar_attrib.store.experiments import STEP_KEY, open_readonly

from .experiment_stats import (
    BASELINE,
    bootstrap_difference,
    grid_frame,
    pooled_differences,
    seeds_for_power,
    two_way_anova,
)
from ..analysis.stats import t_quantile

CREDIT_KEYS = ("oar/ess_ratio", "oar/top10_mass", "oar/weight_max", "entropy", "reward", "grad_norm",
               "delta_theta")
PROBLEM_KEY = "eval/problem/"  # eval/problem/<preset>/<i>: 1 if held-out problem i was answered right
POOLED = ("pooled-error interval of the method x seed two-way ANOVA (residual df (M-1)(S-1)), "
          "Holm-corrected over the methods' differences from GRPO")
POWER_EFFECT = 0.03  # the difference the report sizes seeds for


def paired_difference(method: dict[int, float], baseline: dict[int, float], level: float = 0.95) -> dict:
    """Paired differences method - baseline over the seeds both have: mean, t-interval, wins."""
    seeds = sorted(set(method) & set(baseline))
    diffs = np.array([method[s] - baseline[s] for s in seeds], dtype=np.float64)
    out = {"seeds": seeds, "diffs": diffs.tolist(), "n": len(seeds), "mean": None, "lo": None, "hi": None,
           "sd": None, "wins": int((diffs > 0).sum()), "losses": int((diffs < 0).sum()),
           "ties": int((diffs == 0).sum()), "interval": f"{level:.0%} t-interval over paired seed differences"}
    if len(seeds):
        out["mean"] = float(diffs.mean())
    if len(seeds) >= 2:
        sd = float(diffs.std(ddof=1))
        half = t_quantile(0.5 + level / 2, len(seeds) - 1) * sd / math.sqrt(len(seeds))
        out.update(sd=sd, lo=out["mean"] - half, hi=out["mean"] + half)
    return out


def compare_to_grpo(finals: dict[str, dict[int, float]]) -> tuple[dict | None, dict[str, dict]]:
    """(ANOVA, {method: difference from GRPO}) of one eval key's finals {method: {seed: y}}:
    each difference is `paired_difference`'s (mean, seeds, wins) with the pooled Holm interval
    (`experiment_stats.pooled_differences`) as its lo, hi; the paired t-interval where the grid
    is too small for the pooled model (one method or one seed in common)."""
    base = finals.get(BASELINE, {})
    out = {m: paired_difference(v, base) for m, v in finals.items() if m != BASELINE}
    if BASELINE not in finals:
        return None, out
    frame = grid_frame(finals)
    anova = two_way_anova(frame)
    if anova is None:
        return None, out
    for method, pooled in pooled_differences(frame, anova).items():
        out[method] |= {"lo": pooled["lo"], "hi": pooled["hi"], "pooled": pooled, "interval": POOLED}
    anova["seeds_for_3_points"] = seeds_for_power(anova["residual"]["sd"], POWER_EFFECT)
    return anova, out


@dataclass
class ExperimentReport:
    name: str
    spec: dict
    metric: str
    methods: list[str]
    cells: list[dict]
    curves: dict = field(default_factory=dict)   # key -> method -> {steps, mean, lo, hi, n}
    finals: dict = field(default_factory=dict)   # eval key -> method -> {seed: value}
    paired: dict = field(default_factory=dict)   # eval key -> method -> difference from GRPO (compare_to_grpo)
    seconds: dict = field(default_factory=dict)  # method -> {step, eval, steps}
    anova: dict = field(default_factory=dict)    # eval key -> two_way_anova (None: too small a grid)
    bootstrap: dict = field(default_factory=dict)  # eval key -> method -> bootstrap_difference

    def to_dict(self) -> dict:
        out = asdict(self)
        out["finals"] = {k: {m: {str(s): v for s, v in by.items()} for m, by in ms.items()}
                         for k, ms in self.finals.items()}
        return out


def _curves(frame: pd.DataFrame) -> dict:
    """key -> method -> mean over seeds per step, with the min-max band over seeds."""
    grouped = frame.groupby(["key", "method", "step"])["value"].agg(["mean", "min", "max", "count"])
    curves: dict = {}
    for (key, method), part in grouped.groupby(level=[0, 1]):
        steps = part.index.get_level_values("step")
        curves.setdefault(key, {})[method] = {
            "steps": [int(s) for s in steps], "mean": part["mean"].tolist(),
            "lo": part["min"].tolist(), "hi": part["max"].tolist(), "n": part["count"].astype(int).tolist()}
    return curves


def _eval_keys(spec: dict) -> list[str]:
    presets = spec["eval_presets"]
    keys = [f"eval/accuracy_sampled/{p}" for p in presets] if int(spec["base"]["run"].get("eval_samples") or 0) else []
    return keys + [f"eval/accuracy/{p}" for p in presets]


def build_report(db, name: str, metric: str | None = None) -> ExperimentReport:
    """The report of experiment `name` from an open `ExperimentStore`."""
    exp_id, name, spec = db.experiment(name)
    keys = _eval_keys(spec)
    metric = metric or keys[0]
    if metric not in keys:
        raise unknown_name(f"metric of experiment {name}", metric, keys)
    cells = db.cells(exp_id)
    done = db.finished_cells(exp_id, spec["steps"], keys + ["reward"])
    methods = list(dict.fromkeys(c.method for c in cells))
    by_id = {c.id: c for c in cells if c.id in done}
    rows = [(by_id[c].method, by_id[c].seed, s, k, v) for c, s, k, v in db.points(exp_id) if c in by_id]
    frame = pd.DataFrame(rows, columns=["method", "seed", "step", "key", "value"]).dropna(subset=["value"])
    report = ExperimentReport(name, spec, metric, methods, [
        {"method": c.method, "seed": c.seed, "finished": c.id in done, "attempts": c.attempts} for c in cells])
    if frame.empty:
        return report
    report.curves = _curves(frame[~frame.key.str.startswith(PROBLEM_KEY)])
    last = frame[frame.step == spec["steps"]]
    for key in keys:
        part = last[last.key == key]
        report.finals[key] = {m: {int(s): float(v) for s, v in zip(g.seed, g.value)}
                              for m, g in part.groupby("method", sort=False)}
        report.anova[key], report.paired[key] = compare_to_grpo(report.finals[key])
        outcomes = problem_outcomes(last, key.rsplit("/", 1)[-1])
        if outcomes:
            report.bootstrap[key] = {m: bootstrap_difference(outcomes, m) for m in methods if m != BASELINE}
    for method, part in frame.groupby("method", sort=False):
        step = part[(part.key == STEP_KEY)]
        evals = part[part.key == "eval_seconds"]
        report.seconds[method] = {"step": float(step.value.mean()), "eval": float(evals.value.mean()),
                                  "steps": int(len(step))}
    return report


def problem_outcomes(last: pd.DataFrame, preset: str) -> dict[tuple[str, int], np.ndarray]:
    """{(method, seed): (P,) 0/1} of the held-out problems of `preset` at the last step, from
    the `eval/problem/<preset>/<i>` points (empty when the grid did not store them)."""
    prefix = f"{PROBLEM_KEY}{preset}/"
    part = last[last.key.str.startswith(prefix)]
    out = {}
    for (method, seed), group in part.groupby(["method", "seed"], sort=False):
        order = group.key.str.slice(len(prefix)).astype(int).argsort()
        out[(method, int(seed))] = group.value.to_numpy()[order.to_numpy()]
    sizes = {len(v) for v in out.values()}
    return out if len(sizes) == 1 else {}


def load_report(store: str | Path, name: str, metric: str | None = None) -> ExperimentReport:
    """The report of experiment `name` in the store file `store` (opened read-only)."""
    with open_readonly(store) as db:
        return build_report(db, name, metric)


experiment_report = load_report  # the public name (oar_attrib.experiment_report)


# ------------------------------------------------------------------ text and summary


def _fmt(x, digits=3, sign=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def format_report(report: ExperimentReport) -> str:
    """The report as plain text: cells, final accuracy table with the differences from GRPO
    and their pooled Holm intervals, the ANOVA, the bootstrap, timing."""
    finished = sum(c["finished"] for c in report.cells)
    lines = [f"experiment {report.name}: {finished}/{len(report.cells)} cells finished, "
             f"{report.spec['steps']} steps each", ""]
    pending = [f"{c['method']}-s{c['seed']}" for c in report.cells if not c["finished"]]
    if pending:
        lines[-1:] = [f"not finished (left out below): {', '.join(pending)}", ""]
    for key in report.finals:
        lines += _final_table(report, key)
    lines.append("per method (means over steps and seeds): seconds/step, seconds/eval, ESS, top-10% mass, "
                 "weight max, entropy")
    for method in report.methods:
        s = report.seconds.get(method, {})
        credit = [_mean_curve(report, k, method) for k in CREDIT_KEYS[:4]]
        lines.append(f"  {method:16} {_fmt(s.get('step'), 2):>6} {_fmt(s.get('eval'), 1):>6}  "
                     + "  ".join(_fmt(c) for c in credit))
    return "\n".join(lines)


def _final_table(report: ExperimentReport, key: str) -> list[str]:
    """The lines of one eval key: per method its mean, difference from GRPO, interval, Holm's
    adjusted p and wins; then the ANOVA and, when stored, the bootstrap over seeds and problems."""
    anova = report.anova.get(key)
    what = "pooled two-way ANOVA error, Holm-corrected" if anova else "95% paired t-interval"
    lines = [f"final {key} (mean over seeds; difference from GRPO ('none'), {what}; "
             "wins = seeds where the method beat GRPO)",
             f"  {'method':16} {'seeds':>5} {'mean':>7}  {'diff':>7}  {'interval':>18}  {'p (Holm)':>8}  wins"
             + ("   unadjusted 95%" if anova else "")]
    for method in report.methods:
        values = report.finals[key].get(method, {})
        if not values:
            lines.append(f"  {method:16} {0:>5}     n/a")
            continue
        d = report.paired[key].get(method)
        pooled = (d or {}).get("pooled") or {}
        diff = "" if d is None else (f"{_fmt(d['mean'], sign=True):>7}  "
                                     f"[{_fmt(d['lo'], sign=True)}, {_fmt(d['hi'], sign=True)}]  "
                                     f"{_fmt(pooled.get('p_holm'), 2):>8}  {d['wins']}/{d['n']}")
        if pooled:
            diff += f"   [{_fmt(pooled['lo95'], sign=True)}, {_fmt(pooled['hi95'], sign=True)}]"
        lines.append(f"  {method:16} {len(values):>5} {_fmt(float(np.mean(list(values.values())))):>7}  {diff}")
    if anova:
        m, sd, r = anova["method"], anova["seed"], anova["residual"]
        lines.append(f"  method effect F({m['df']},{r['df']}) = {_fmt(m['F'], 2)}, p = {_fmt(m['p'], 3)}; "
                     f"seed effect F({sd['df']},{r['df']}) = {_fmt(sd['F'], 2)}, p = {_fmt(sd['p'], 3)}; "
                     f"residual SD {_fmt(r['sd'])}: a {POWER_EFFECT:.2f} difference needs about "
                     f"{anova['seeds_for_3_points']} seeds per method for 80% power")
    for method, b in (report.bootstrap.get(key) or {}).items():
        if b:
            lines.append(f"  bootstrap over {b['seeds']} seeds x {b['problems']} problems: {method} "
                         f"{_fmt(b['mean'], sign=True)} [{_fmt(b['lo'], sign=True)}, {_fmt(b['hi'], sign=True)}]")
    return lines + [""]


def _mean_curve(report: ExperimentReport, key: str, method: str) -> float | None:
    curve = report.curves.get(key, {}).get(method)
    return None if not curve else float(np.mean(curve["mean"]))


def summary(report: ExperimentReport) -> dict:
    """The committed summary: per method, each seed's final held-out accuracy and its
    difference from GRPO with the pooled Holm interval (for `metric`, and every other eval
    key; `pool_summary`), the bootstrap over seeds and problems when stored, and the training
    curves of the credit keys (ESS ratio, top-10% mass, weight max, entropy, reward, grad norm,
    ||delta theta||: key -> method -> the mean over seeds per step with its min-max band)."""
    methods = {}
    for method in report.methods:
        entry = {"final": {str(s): v for s, v in report.finals.get(report.metric, {}).get(method, {}).items()}}
        entry["other_metrics"] = {key: {"final": {str(s): v for s, v in report.finals[key].get(method, {}).items()}}
                                  for key in report.finals if key != report.metric}
        entry["seconds_per_step"] = report.seconds.get(method, {}).get("step")
        entry["credit"] = {k: _mean_curve(report, k, method) for k in CREDIT_KEYS}
        methods[method] = entry
    finished = sum(c["finished"] for c in report.cells)
    data = {"experiment": report.name, "metric": report.metric, "steps": report.spec["steps"],
            "complete": finished == len(report.cells), "finished_cells": finished,
            "total_cells": len(report.cells), "cells": report.cells, "settings": report.spec, "methods": methods,
            "curves": {k: report.curves[k] for k in CREDIT_KEYS if k in report.curves}}
    data = pool_summary(data)
    for key, by_method in report.bootstrap.items():
        for method, b in by_method.items():
            target = methods[method] if key == report.metric else methods[method]["other_metrics"][key]
            if b and target.get("vs_grpo"):
                target["vs_grpo"]["bootstrap"] = b
    return data


def pool_summary(data: dict) -> dict:
    """A summary's differences from GRPO and ANOVA computed from its own finals
    (`compare_to_grpo`), for its metric and every other eval key: what `summary` writes, and
    how a summary written before the pooled analysis is brought up to it."""
    methods = data["methods"]

    def finals(get) -> dict[str, dict[int, float]]:
        return {m: {int(s): float(v) for s, v in get(e).items()} for m, e in methods.items()}

    data["anova"] = {}
    keys = [data["metric"]] + sorted({k for e in methods.values() for k in e.get("other_metrics", {})})
    for key in keys:
        main = key == data["metric"]
        anova, paired = compare_to_grpo(finals(lambda e: e["final"] if main else e["other_metrics"][key]["final"]))
        data["anova"][key] = anova
        for method, entry in methods.items():
            if method != BASELINE:
                (entry if main else entry["other_metrics"][key])["vs_grpo"] = paired.get(method)
    data["interval"] = POOLED if data["anova"].get(data["metric"]) else "95% t-interval over paired seed differences"
    return data


def write_summary(report: ExperimentReport, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary(report), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def write_figure(report: ExperimentReport, path: str | Path) -> Path:
    """A figure of the report: .html (Plotly, self-contained) or .png/.svg (matplotlib)."""
    from .experiment_figures import plotly_figure, save_matplotlib

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".html":
        plotly_figure(report).write_html(path, include_plotlyjs=True)
    else:
        save_matplotlib(report, path)
    return path
