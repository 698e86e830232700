"""Figures of an experiment report: Plotly (web page, notebook, .html) and matplotlib (.png).

Both draw the same panels from `ExperimentReport` data: held-out sampled accuracy on the
training preset and on the preset never trained on (mean over seeds, band = lowest to highest
seed), each method's difference from GRPO at the last step with its pooled Holm interval,
and seconds per optimizer step.
"""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

PALETTE = ["#4c4c4c", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]


def accuracy_keys(report) -> list[str]:
    """The curve keys of the two accuracy panels (sampled if the grid sampled, else greedy)."""
    sampled = [k for k in report.finals if k.startswith("eval/accuracy_sampled/")]
    return sampled or [k for k in report.finals if k.startswith("eval/accuracy/")]


def colours(report) -> dict[str, str]:
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(report.methods)}


def _band(curve: dict, colour: str, name: str, show: bool, row: int, col: int, fig) -> None:
    steps = curve["steps"]
    fig.add_trace(go.Scatter(x=steps + steps[::-1], y=curve["hi"] + curve["lo"][::-1], fill="toself",
                             line=dict(width=0), fillcolor=colour, opacity=0.15, hoverinfo="skip",
                             showlegend=False, legendgroup=name), row=row, col=col)
    fig.add_trace(go.Scatter(x=steps, y=curve["mean"], mode="lines+markers", name=name, legendgroup=name,
                             line=dict(color=colour), showlegend=show), row=row, col=col)



def _curves(fig, report, keys, col: dict) -> None:
    """Each method's curve of each key (mean over seeds, min-max band) in row 1, one column per key."""
    for i, key in enumerate(keys):
        for method in report.methods:
            curve = report.curves.get(key, {}).get(method)
            if curve:
                _band(curve, col[method], method, i == 0, 1, i + 1, fig)

def plotly_figure(report) -> go.Figure:
    """2 x 2 panels: two accuracy curves, paired differences, seconds per step."""
    keys = accuracy_keys(report)[:2]
    titles = [k.replace("eval/", "") for k in keys] + [f"final {report.metric.replace('eval/', '')} - GRPO "
                                                       "(pooled interval, Holm)", "seconds per step"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=titles + [""] * (4 - len(titles)))
    col = colours(report)
    _curves(fig, report, keys, col)
    paired = report.paired.get(report.metric, {})
    names = [m for m in report.methods if m in paired and paired[m]["mean"] is not None]
    means = [paired[m]["mean"] for m in names]
    plus = [(paired[m]["hi"] - paired[m]["mean"]) if paired[m]["hi"] is not None else 0 for m in names]
    fig.add_trace(go.Bar(x=names, y=means, marker_color=[col[m] for m in names], showlegend=False,
                         error_y=dict(type="data", array=plus, visible=True)), row=2, col=1)
    secs = [report.seconds.get(m, {}).get("step") for m in report.methods]
    fig.add_trace(go.Bar(x=report.methods, y=secs, marker_color=[col[m] for m in report.methods],
                         showlegend=False), row=2, col=2)
    fig.update_layout(height=720, margin=dict(l=50, r=20, t=50, b=40),
                      title=f"{report.name}: held-out accuracy per method (band: lowest to highest seed)")
    return fig


def credit_figure(report, keys=("oar/ess_ratio", "oar/top10_mass", "oar/weight_max", "entropy")) -> go.Figure:
    """Credit metrics and policy entropy per step (mean over seeds, min-max band)."""
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=list(keys))
    col = colours(report)
    _curves(fig, report, keys, col)
    fig.update_layout(height=340, margin=dict(l=40, r=20, t=40, b=30))
    return fig


def _curves_matplotlib(ax, report, key: str, col: dict) -> None:
    for method in report.methods:
        curve = report.curves.get(key, {}).get(method)
        if curve:
            ax.fill_between(curve["steps"], curve["lo"], curve["hi"], color=col[method], alpha=0.12)
            ax.plot(curve["steps"], curve["mean"], "-", color=col[method], label=method, lw=1.2)
    ax.set_xlabel("optimizer step")


def save_matplotlib(report, path: Path) -> None:
    """The same panels as `plotly_figure`, as a static image (needs the figures extra:
    matplotlib)."""
    from ..extras import require_extra

    require_extra("figures", f"a {path.suffix or 'static'} figure (or write .html)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    col = colours(report)
    fig, axes = plt.subplots(3, 2, figsize=(11, 11.5))
    for ax, key in zip(axes[2], ("oar/ess_ratio", "entropy")):
        _curves_matplotlib(ax, report, key, col)
        ax.set_title(f"{key} per step (mean over seeds, band: min-max)", fontsize=9)
    for ax, key in zip(axes[0], accuracy_keys(report)[:2]):
        for method in report.methods:
            curve = report.curves.get(key, {}).get(method)
            if curve:
                ax.fill_between(curve["steps"], curve["lo"], curve["hi"], color=col[method], alpha=0.12)
                ax.plot(curve["steps"], curve["mean"], "o-", color=col[method], label=method, ms=3)
        ax.set_title(key.replace("eval/", "") + " (mean over seeds, band: min-max)", fontsize=9)
        ax.set_xlabel("optimizer step")
    axes[0][0].legend(fontsize=8)
    paired = report.paired.get(report.metric, {})
    names = [m for m in report.methods if m in paired and paired[m]["mean"] is not None]
    ax = axes[1][0]
    for i, m in enumerate(names):
        d = paired[m]
        ax.plot([i], [d["mean"]], "o", color=col[m])
        if d["lo"] is not None:
            ax.plot([i, i], [d["lo"], d["hi"]], "-", color=col[m])
        ax.scatter([i] * len(d["diffs"]), d["diffs"], s=10, color=col[m], alpha=0.5)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_title(f"final {report.metric.replace('eval/', '')} minus GRPO, per seed (dots), "
                 "mean and pooled interval (Holm)", fontsize=9)
    ax = axes[1][1]
    secs = [report.seconds.get(m, {}).get("step") or 0 for m in report.methods]
    ax.bar(range(len(secs)), secs, color=[col[m] for m in report.methods])
    ax.set_xticks(range(len(secs)), report.methods, fontsize=8)
    ax.set_title("seconds per optimizer step (two cells at a time, shared 2-core machine)", fontsize=9)
    fig.suptitle(f"{report.name}: {report.spec['steps']} steps", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


experiment_figure = plotly_figure  # public names (oar_attrib.experiment_figure, ...)
experiment_credit_figure = credit_figure
