"""Notebook figures: the numbers in each figure's data are the numbers they claim to show."""
import json

import numpy as np
import pytest
import torch

import oar_attrib as oa
from oar_attrib.attribution import TraceAttribution
from oar_attrib.analysis.figures import normalise_scores
from oar_attrib.analysis.agreement import spearman

SEGMENTS = ["reasoning"] * 6 + ["bridge", "answer", "tail"]


def make_trace(scores: dict[str, list[float]], segments=SEGMENTS, span_found=True) -> TraceAttribution:
    n = len(segments)
    tokens = ["a", "=", "<b>", "1", " +", "x<3", " ####", " 9", ""][:n]
    offsets = [(i, i + 1) for i in range(n)]
    return TraceAttribution(
        prompt="p", response="".join(tokens), token_ids=list(range(n)), tokens=tokens,
        offsets=offsets, segments=list(segments), span_found=span_found,
        answer_span=(7, 8) if span_found else None, answer_text="9" if span_found else None,
        probe="as_mean", scores=scores, weights={m: [1.0] * n for m in scores},
    )


def test_recall_bars_and_error_bars_equal_the_report():
    report = {
        "methods": {
            "oar_p": {"direct": {"recall": 0.5, "ci95": [0.4, 0.7], "n": 10, "ap": 0.6},
                      "chain": {"recall": 0.8, "ci95": [0.75, 0.82], "n": 10, "ap": 0.7}},
            "random": {"direct": {"recall": 0.2, "ci95": [0.1, 0.25], "n": 10, "ap": 0.3},
                       "chain": {"recall": None, "ci95": [None, None], "n": 0, "ap": None}},
        },
        "random": {"direct": {"recall": 0.15, "ci95": [0.1, 0.2], "n": 10},
                   "chain": {"recall": 0.66, "ci95": [0.6, 0.7], "n": 10}},
        "n": 12, "n_scored": 10, "accuracy": 0.25, "skipped": {},
    }
    fig = oa.recall_figure(report)
    bars = {bar.name: bar for bar in fig.data}
    assert set(bars) == {"direct", "chain"}
    direct = bars["direct"]
    assert list(direct.x) == ["oar_p", "random"] and list(direct.y) == [0.5, 0.2]
    np.testing.assert_allclose(direct.error_y.array, [0.2, 0.05])
    np.testing.assert_allclose(direct.error_y.arrayminus, [0.1, 0.1])
    assert bars["chain"].y[1] is None and bars["chain"].error_y.array[1] is None
    lines = sorted(s.y0 for s in fig.layout.shapes)
    assert lines == [0.15, 0.66] and all(s.y0 == s.y1 for s in fig.layout.shapes)
    json.loads(fig.to_json())


def test_recall_figure_takes_a_report_object():
    from oar_attrib.instruments.world.recall import RecallReport, summarise

    per_trace = [{"m": {"direct": {"recall": r, "ap": r}}, "random_expectation": {"direct": 0.2}}
                 for r in (0.0, 0.5, 1.0, 1.0)]
    summary, rand = summarise(per_trace, ["m"], sets=("direct",))
    report = RecallReport(methods=summary, random=rand, n=4, n_scored=4, accuracy=0.5, skipped={})
    (bar,) = oa.recall_figure(report).data
    stats = summary["m"]["direct"]
    assert bar.y[0] == pytest.approx(0.625) == stats["recall"]
    assert bar.error_y.array[0] == pytest.approx(stats["ci95"][1] - stats["recall"])
    assert bar.error_y.arrayminus[0] == pytest.approx(stats["recall"] - stats["ci95"][0])
    assert bar.y[0] - bar.error_y.arrayminus[0] >= 0 and bar.y[0] + bar.error_y.array[0] <= 1


def test_heatmap_rows_are_methods_normalised_over_scored_tokens():
    scores = {"oar_p": [0.0, 2.0, 4.0, 1.0, 0.5, 3.0, 0.0, 0.0, 0.0],
              "flat": [1.0] * 6 + [0.0] * 3,
              "bad": [1.0, float("nan"), 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]}
    trace = make_trace(scores)
    fig = oa.token_heatmap(trace)
    (heat,) = fig.data
    z = np.array(heat.z, dtype=float)
    assert z.shape == (3, 9) and list(heat.y) == ["oar_p", "flat", "bad"]
    np.testing.assert_allclose(z[0, :6], [0.0, 0.5, 1.0, 0.25, 0.125, 0.75])
    assert np.isnan(z[:, 6:]).all()  # bridge, answer, tail: not scored, not coloured
    assert (z[1, :6] == 0).all() and np.isnan(z[2]).all()
    # The hover and the tick labels carry the model's text unchanged, HTML-like or not.
    assert [c[0] for c in heat.customdata[0]] == trace.tokens
    assert list(fig.layout.xaxis.ticktext) == trace.tokens
    assert [c[2] for c in heat.customdata[0]] == scores["oar_p"]
    json.loads(fig.to_json())


def test_heatmap_of_a_trace_without_answer_span_is_blank():
    trace = make_trace({"oar_p": [1.0] * 9}, segments=["reasoning"] * 9, span_found=False)
    z = np.array(oa.token_heatmap(trace).data[0].z, dtype=float)
    assert z.shape == (1, 9) and np.isnan(z).all()


def test_normalise_scores_bounds_on_random_rows():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, mask = rng.exponential(size=30), rng.random(30) < 0.6
        out = normalise_scores(x, mask)
        assert out[mask].min() == 0.0 and out[mask].max() == 1.0 and np.isnan(out[~mask]).all()
        # Order over S is kept: normalisation is monotone.
        assert (np.argsort(out[mask], kind="stable") == np.argsort(x[mask], kind="stable")).all()


def test_agreement_diagonal_is_one_symmetric_and_a_permutation_disagrees():
    rng = np.random.default_rng(1)
    traces = []
    for _ in range(5):
        a = rng.random(6)
        b = rng.permutation(a)
        scores = {"a": [*a, 0, 0, 0], "a_twice": [*(2 * a), 0, 0, 0], "a_permuted": [*b, 0, 0, 0]}
        traces.append(make_trace(scores))
    methods, matrix, counts = oa.agreement_matrix(traces)
    assert methods == ["a", "a_twice", "a_permuted"]
    np.testing.assert_allclose(np.diag(matrix), 1.0)
    np.testing.assert_allclose(matrix, matrix.T)
    assert matrix[0, 1] == pytest.approx(1.0)  # a monotone rescaling ranks the same
    assert matrix[0, 2] < 1.0
    expected = np.mean([spearman(np.array(t.scores["a"][:6]), np.array(t.scores["a_permuted"][:6]))
                        for t in traces])
    assert matrix[0, 2] == pytest.approx(expected)
    assert (counts == 5).all()
    (heat,) = oa.method_agreement(traces).data
    np.testing.assert_allclose(np.array(heat.z, dtype=float), matrix)
    assert list(heat.x) == list(heat.y) == methods


def test_agreement_skips_constant_scores_and_short_traces():
    flat = make_trace({"a": [1, 2, 3, 4, 5, 6, 0, 0, 0], "flat": [1] * 6 + [0] * 3})
    short = make_trace({"a": [1, 0, 0], "flat": [1, 0, 0]}, segments=["reasoning", "bridge", "answer"])
    methods, matrix, counts = oa.agreement_matrix([flat, short])
    assert np.isnan(matrix[0, 1]) and counts[0, 1] == 0
    assert list(np.diag(counts)) == [1, 1]
    fig = oa.method_agreement([flat, short])
    assert "n/a" in np.array(fig.data[0].text).ravel()
    json.loads(fig.to_json())  # NaN cells serialise (as null)


def test_weights_figure_plots_the_gate_against_normalised_importance():
    gen = torch.Generator().manual_seed(0)
    importance = torch.rand(20, generator=gen) * 3
    mask = torch.ones(20, dtype=torch.bool)
    mask[-3:] = False
    curves = {f"tau={tau}": oa.bilevel_weights(importance, mask, tau=tau) for tau in (0.2, 0.4, 0.8)}
    fig = oa.weights_figure(importance, curves, mask)
    lines = [t for t in fig.data if t.name in curves]
    assert len(lines) == 3
    ihat = np.log1p(importance[mask].numpy())
    ihat = (ihat - ihat.min()) / (ihat.max() - ihat.min())
    order = np.argsort(ihat, kind="stable")
    for line in lines:
        np.testing.assert_allclose(line.x, ihat[order], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(line.y, curves[line.name][mask].numpy()[order], rtol=1e-6)
        # The gate is monotone in I^ and keeps the mean weight at 1 over S.
        assert (np.diff(line.y) >= -1e-6).all()
        assert np.mean(line.y) == pytest.approx(1.0, abs=1e-5)
    assert [s.y0 for s in fig.layout.shapes] == [1.0]
    json.loads(fig.to_json())
