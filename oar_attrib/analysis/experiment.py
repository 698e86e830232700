"""The report of an experiment grid: curves, final accuracies, paired differences from GRPO.

Everything is computed from the points of finished cells (`ExperimentStore.finished_cells`):

- curves: per key (held-out accuracies, credit metrics, entropy, step seconds) and method,
  the mean over seeds at each step with a band from the lowest to the highest seed;
- finals: per accuracy key, method and seed, the value at the last step;
- paired differences: per method, d_s = final(method, s) - final(none, s) over the seeds both
  finished; its mean, the 95% t-interval mean +- t(0.975, n-1) * sd / sqrt(n) (sd with n-1;
  at 3-5 seeds a normal or bootstrap interval would be too narrow), and how many seeds it won;
- seconds per optimizer step (evaluation excluded) and per evaluation.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from oar_attrib.defaults import NO_METHOD as BASELINE
from oar_attrib.errors import unknown_name
from oar_attrib.store.experiments import STEP_KEY, open_readonly

CREDIT_KEYS = ("oar/ess_ratio", "oar/top10_mass", "oar/weight_max", "entropy", "reward")


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p in (0.5, 1)) of Student's t with `df` degrees of freedom, by Simpson
    integration of its density and bisection (no scipy needed)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:  # for t >= 0
        x = np.linspace(0.0, t, 4001)
        y = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
        h = t / 4000
        return 0.5 + h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


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


@dataclass
class ExperimentReport:
    name: str
    spec: dict
    metric: str
    methods: list[str]
    cells: list[dict]
    curves: dict = field(default_factory=dict)   # key -> method -> {steps, mean, lo, hi, n}
    finals: dict = field(default_factory=dict)   # eval key -> method -> {seed: value}
    paired: dict = field(default_factory=dict)   # eval key -> method -> paired_difference
    seconds: dict = field(default_factory=dict)  # method -> {step, eval, steps}

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
    report.curves = _curves(frame)
    last = frame[frame.step == spec["steps"]]
    for key in keys:
        part = last[last.key == key]
        report.finals[key] = {m: {int(s): float(v) for s, v in zip(g.seed, g.value)}
                              for m, g in part.groupby("method", sort=False)}
        base = report.finals[key].get(BASELINE, {})
        report.paired[key] = {m: paired_difference(v, base) for m, v in report.finals[key].items()
                              if m != BASELINE}
    for method, part in frame.groupby("method", sort=False):
        step = part[(part.key == STEP_KEY)]
        evals = part[part.key == "eval_seconds"]
        report.seconds[method] = {"step": float(step.value.mean()), "eval": float(evals.value.mean()),
                                  "steps": int(len(step))}
    return report


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
    """The report as plain text: cells, final accuracy table with paired differences, timing."""
    finished = sum(c["finished"] for c in report.cells)
    lines = [f"experiment {report.name}: {finished}/{len(report.cells)} cells finished, "
             f"{report.spec['steps']} steps each", ""]
    pending = [f"{c['method']}-s{c['seed']}" for c in report.cells if not c["finished"]]
    if pending:
        lines[-1:] = [f"not finished (left out below): {', '.join(pending)}", ""]
    for key in report.finals:
        lines.append(f"final {key} (mean over seeds; difference from GRPO ('none'), paired by seed, "
                     "95% t-interval; wins = seeds where the method beat GRPO)")
        lines.append(f"  {'method':16} {'seeds':>5} {'mean':>7}  {'diff':>7}  {'95% interval':>18}  wins")
        for method in report.methods:
            values = report.finals[key].get(method, {})
            if not values:
                lines.append(f"  {method:16} {0:>5}     n/a")
                continue
            d = report.paired[key].get(method)
            diff = "" if d is None else (f"{_fmt(d['mean'], sign=True):>7}  "
                                         f"[{_fmt(d['lo'], sign=True)}, {_fmt(d['hi'], sign=True)}]  "
                                         f"{d['wins']}/{d['n']}")
            lines.append(f"  {method:16} {len(values):>5} {_fmt(float(np.mean(list(values.values())))):>7}  {diff}")
        lines.append("")
    lines.append("per method (means over steps and seeds): seconds/step, seconds/eval, ESS, top-10% mass, "
                 "weight max, entropy")
    for method in report.methods:
        s = report.seconds.get(method, {})
        credit = [_mean_curve(report, k, method) for k in CREDIT_KEYS[:4]]
        lines.append(f"  {method:16} {_fmt(s.get('step'), 2):>6} {_fmt(s.get('eval'), 1):>6}  "
                     + "  ".join(_fmt(c) for c in credit))
    return "\n".join(lines)


def _mean_curve(report: ExperimentReport, key: str, method: str) -> float | None:
    curve = report.curves.get(key, {}).get(method)
    return None if not curve else float(np.mean(curve["mean"]))


def summary(report: ExperimentReport) -> dict:
    """The committed summary: per method, each seed's final held-out accuracy and the paired
    difference from GRPO with its 95% interval (for `metric`, and every other eval key), and
    the training curves of the credit keys (ESS ratio, top-10% mass, weight max, entropy,
    reward: key -> method -> the mean over seeds per step with its min-max band)."""
    methods = {}
    for method in report.methods:
        entry = {"final": {str(s): v for s, v in report.finals.get(report.metric, {}).get(method, {}).items()}}
        if method != BASELINE:
            entry["vs_grpo"] = report.paired.get(report.metric, {}).get(method)
        entry["other_metrics"] = {
            key: {"final": {str(s): v for s, v in report.finals[key].get(method, {}).items()},
                  **({"vs_grpo": report.paired[key].get(method)} if method != BASELINE else {})}
            for key in report.finals if key != report.metric}
        entry["seconds_per_step"] = report.seconds.get(method, {}).get("step")
        entry["credit"] = {k: _mean_curve(report, k, method) for k in CREDIT_KEYS}
        methods[method] = entry
    finished = sum(c["finished"] for c in report.cells)
    return {"experiment": report.name, "metric": report.metric, "steps": report.spec["steps"],
            "complete": finished == len(report.cells), "finished_cells": finished,
            "total_cells": len(report.cells),
            "interval": "95% t-interval over paired seed differences (method - none), df = n - 1",
            "cells": report.cells, "settings": report.spec, "methods": methods,
            "curves": {k: report.curves[k] for k in CREDIT_KEYS if k in report.curves}}


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
