"""Plotly figures for notebooks: oracle recall, token heatmaps, method agreement, reshaping.

Every builder returns a `plotly.graph_objects.Figure` whose traces hold the numbers they show
(bar heights, heatmap cells, curve points), so a figure can be checked as data. Token text
goes into the figures exactly as the model wrote it; Plotly renders it as text, so nothing is
built as HTML here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..weights.normalise import log1p_minmax
from .agreement import agreement_matrix

if TYPE_CHECKING:
    from ..attribution import TraceAttribution


def _as_array(values, dtype=np.float64) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=dtype)


# --------------------------------------------------------------------------- recall


def recall_figure(report, sets: Sequence[str] | None = None, methods: Sequence[str] | None = None,
                  title: str = "Oracle recall@|O| (95% bootstrap interval)") -> go.Figure:
    """One bar chart per oracle set: mean recall@|O| per method, error bars to the 95%
    bootstrap interval, and a dashed line at the random-ranking expectation.

    report: a `RecallReport` or its `as_dict()` (the `oar recall world --json` output).
    Methods without a scored trace (recall None) get no bar.
    """
    data = report.as_dict() if hasattr(report, "as_dict") else dict(report)
    methods = list(methods or data["methods"])
    sets = list(sets or next(iter(data["methods"].values()), {}))
    fig = make_subplots(rows=1, cols=len(sets), subplot_titles=sets, shared_yaxes=True)
    for col, name in enumerate(sets, start=1):
        stats = [data["methods"][m][name] for m in methods]
        mean = [s["recall"] for s in stats]
        hi = [None if s["recall"] is None else s["ci95"][1] - s["recall"] for s in stats]
        lo = [None if s["recall"] is None else s["recall"] - s["ci95"][0] for s in stats]
        fig.add_trace(go.Bar(
            x=methods, y=mean, name=name, showlegend=False,
            error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo),
            customdata=[[s["ci95"][0], s["ci95"][1], s["n"], s.get("ap")] for s in stats],
            hovertemplate="%{x}: %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                          "<br>AP %{customdata[3]:.3f}, %{customdata[2]} traces<extra></extra>",
        ), row=1, col=col)
        expected = data["random"][name]["recall"]
        if expected is not None:
            fig.add_hline(y=expected, line_dash="dash", line_color="grey", row=1, col=col,
                          annotation_text=f"random {expected:.3f}", annotation_position="top left")
    fig.update_yaxes(range=[0, 1], title_text="recall@|O|", row=1, col=1)
    return fig.update_layout(title=title, bargap=0.3)


# --------------------------------------------------------------------------- heatmap


def normalise_scores(scores, scored) -> np.ndarray:
    """(T,) scores min-max normalised to [0, 1] over the scored tokens, NaN elsewhere.

    A row whose scored values are all equal is 0 there (no token stands out); a row with a
    non-finite scored value is NaN throughout (the method failed on it, see `flags`).
    """
    x, s = _as_array(scores), _as_array(scored, bool)
    out = np.full(x.shape, np.nan)
    if not s.any() or not np.isfinite(x[s]).all():
        return out
    lo, hi = x[s].min(), x[s].max()
    out[s] = (x[s] - lo) / (hi - lo) if hi > lo else 0.0
    return out


def token_heatmap(trace: TraceAttribution, methods: Sequence[str] | None = None,
                  title: str | None = None) -> go.Figure:
    """Rows are methods, columns the response tokens; colour is each method's score normalised
    over the scored (reasoning) tokens, blank off them. Hover gives the token text, its
    segment and the raw score; x tick labels are the tokens."""
    methods = list(methods or trace.scores)
    scored = trace.scored
    positions = list(range(len(trace.tokens)))
    z = np.array([normalise_scores(trace.scores[m], scored) for m in methods]).reshape(
        len(methods), len(positions))
    custom = [[[tok, seg, float(score)] for tok, seg, score in
               zip(trace.tokens, trace.segments, trace.scores[m])] for m in methods]
    heat = go.Heatmap(
        z=z, x=positions, y=methods, customdata=custom, zmin=0.0, zmax=1.0,
        colorscale="Viridis", colorbar=dict(title="score<br>(row-normalised)"),
        hovertemplate="%{y}, token %{x}: %{customdata[0]}<br>%{customdata[1]}"
                      "<br>score %{customdata[2]:.4g} (normalised %{z:.3f})<extra></extra>",
    )
    fig = go.Figure(heat)
    fig.update_xaxes(tickmode="array", tickvals=positions, ticktext=list(trace.tokens), tickangle=-90)
    fig.update_yaxes(autorange="reversed")
    answer = f"answer {trace.answer_text!r}" if trace.span_found else "no answer span"
    return fig.update_layout(title=title or f"Token importances ({answer})",
                             height=160 + 40 * len(methods))


# --------------------------------------------------------------------------- agreement


def method_agreement(traces: Sequence[TraceAttribution], methods: Sequence[str] | None = None,
                     title: str = "Method agreement (mean Spearman over scored tokens)") -> go.Figure:
    """Heatmap of `agreement_matrix`: do two methods rank the same tokens high?"""
    methods, matrix, counts = agreement_matrix(traces, methods)
    text = [["n/a" if np.isnan(v) else f"{v:.2f}" for v in row] for row in matrix]
    heat = go.Heatmap(
        z=matrix, x=methods, y=methods, zmin=-1.0, zmax=1.0, colorscale="RdBu",
        text=text, texttemplate="%{text}", customdata=counts,
        hovertemplate="%{y} vs %{x}: %{z:.3f} over %{customdata} traces<extra></extra>",
    )
    fig = go.Figure(heat)
    fig.update_yaxes(autorange="reversed")
    return fig.update_layout(title=title, width=160 + 70 * len(methods), height=120 + 60 * len(methods))


# --------------------------------------------------------------------------- reshaping


def normalised_importance(importance, mask=None) -> np.ndarray:
    """(T,) I^ of the gate (METHOD.md section 6, steps 1-2): log1p(I) min-max normalised over
    the scored tokens; NaN off them, 0 where every scored importance is equal."""
    imp = _as_array(importance)
    return log1p_minmax(imp, np.ones(imp.shape, bool) if mask is None else _as_array(mask, bool))


def weights_figure(importance, weights: Mapping[str, Sequence[float]], mask=None,
                   title: str = "Token weight against normalised importance") -> go.Figure:
    """Weight curves of one response: for each labelled weight vector (e.g. one per tau/beta,
    or another reshaper's), the weights of the scored tokens against their normalised
    importance I^, sorted by I^. A dotted line marks w = 1, the unreshaped weight.

    importance: (T,) importances; weights: label -> (T,) weights; mask: (T,) bool, S.
    """
    ihat = normalised_importance(importance, mask)
    scored = np.isfinite(ihat)
    order = np.argsort(ihat[scored], kind="stable")
    x = ihat[scored][order]
    fig = go.Figure()
    for label, w in weights.items():
        y = _as_array(w)[scored][order]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=str(label),
                                 hovertemplate="I^ %{x:.3f}: w %{y:.3f}<extra>%{fullData.name}</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    fig.update_xaxes(title_text="normalised importance I^ (scored tokens)", range=[-0.02, 1.02])
    fig.update_yaxes(title_text="weight w_t")
    return fig.update_layout(title=title)
