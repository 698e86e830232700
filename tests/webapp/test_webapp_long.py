"""The trace browser at real length: a ~4000-token trace of real MATH-500 + GSM8K solutions
(Qwen2.5 tokenizer, a random 2-layer Qwen2), its step view, step x method table, exports,
and escaping of hostile step texts and method names in every page and export format."""
import csv
import io
import json
import re
from html import unescape
from html.parser import HTMLParser

import numpy as np
import pytest
from fastapi.testclient import TestClient

from oar_attrib.attribution import TraceAttribution
from oar_attrib.records import write_html
from oar_attrib.records.export import EXPORT_KINDS, render_html, rows_csv, step_rows, token_rows
from oar_attrib.records.step_view import display_levels, step_table, trace_steps
from oar_attrib.inputs.steps import pool_steps
from oar_attrib.store import Store
from oar_attrib.store.records import TraceRecord
from oar_attrib.webapp import create_app
from longtrace import long_responses, qwen_tokenizer
from shared_data import shared_folder
from webtools import BASE, LONG_METHODS

SHARED = shared_folder()  # ../shared, or the trimmed copy vendored under tests/data
pytestmark = [pytest.mark.slow]
SCRIPT = "<script>alert('step')</script>"
IMG = '<img src=x onerror="alert(1)">'
HOSTILE_STEPS = f"First {SCRIPT} step.\n=cmd|' /C calc'!A0 then {IMG}\n</pre></div>x=1. #### 7"
HOSTILE_METHOD = '<b onmouseover="alert(2)">m</b>'


@pytest.fixture(scope="module")
def long_record(long_store) -> TraceRecord:
    with Store(long_store, readonly=True) as store:
        return store.trace(store.trace_ids(store.runs()[0].id)[0])


@pytest.fixture(scope="module")
def long_client(long_store):
    with TestClient(create_app(long_store), base_url=BASE) as c:
        yield c


def hostile_record() -> TraceRecord:
    """A hand-made trace whose step texts and one method name are hostile."""
    text = HOSTILE_STEPS
    cuts = [m.start() for m in re.finditer(r"\S+", text)]
    offsets = [(a, next((b for b in cuts if b > a), len(text))) for a in cuts]
    offsets = [(a, a + len(text[a:b].rstrip())) for a, b in offsets]
    n = len(offsets)
    segments = ["reasoning"] * (n - 2) + ["bridge", "answer"]
    rng = np.random.default_rng(0)
    scores = {m: rng.random(n).tolist() for m in ("oar_p", HOSTILE_METHOD)}
    attribution = TraceAttribution(
        prompt=f"{SCRIPT} prompt", response=text, token_ids=list(range(n)),
        tokens=[text[a:b] for a, b in offsets], offsets=offsets, segments=segments,
        span_found=True, answer_span=offsets[-1], answer_text="7", probe="as_mean",
        scores=scores, weights={m: [1.0] * n for m in scores})
    return TraceRecord.from_attribution(attribution, trace_id=1)


# --------------------------------------------------------------------------- the fixture


def test_long_responses_join_real_solutions_to_the_target_length():
    tokenizer = qwen_tokenizer(SHARED)
    pairs = long_responses(SHARED, tokenizer, 2, target_tokens=1500)
    first_gsm8k = json.loads((SHARED / "data" / "gsm8k_test.jsonl").open().readline())
    assert pairs[0][0] == first_gsm8k["question"]
    assert first_gsm8k["solution"].split("####")[0].strip() in pairs[0][1]
    for prompt, response in pairs:
        n = len(tokenizer(response, add_special_tokens=False)["input_ids"])
        assert 1500 <= n < 1500 + 1200  # one GSM8K + one MATH-500 solution past the target
        assert "####" not in response  # the one answer marker is the last \boxed{}
    assert pairs[0][1] != pairs[1][1]


def test_the_long_store_says_its_weights_are_random(long_store, long_record, long_client):
    with Store(long_store, readonly=True) as store:
        run = store.runs()[0]
    assert run.config["random_weights"] is True
    assert 4000 <= long_record.row.n_tokens < 5200
    assert sorted(long_record.attributions) == sorted(LONG_METHODS)
    html = long_client.get(f"/traces/{long_record.id}").text
    assert 'id="random-weights"' in html and "random weights" in html


# --------------------------------------------------------------------------- steps


def test_steps_cover_every_token_once_and_end_with_the_answer(long_record):
    steps = trace_steps(long_record)
    assert steps[0].start == 0 and steps[-1].end == long_record.row.n_tokens
    assert all(a.end == b.start for a, b in zip(steps, steps[1:]))
    assert [s.answer for s in steps] == [False] * (len(steps) - 1) + [True]
    assert 60 <= len(steps) <= 400
    for s in steps[:-1]:  # a reasoning step is one line of the text
        assert "\n" not in long_record.response[s.char_start:s.char_end].strip()


@pytest.mark.parametrize("pool, reduce", [("max", np.max), ("sum", np.sum), ("mean", np.mean)])
def test_step_scores_pool_their_tokens_and_levels_span_0_1(long_record, pool, reduce):
    table = step_table(long_record, pool)
    ranges = [(s["start"], s["end"]) for s in table["steps"] if not s["answer"]]
    assert ranges == [tuple(r) for r in long_record.steps]
    for method, a in long_record.attributions.items():
        expected = [float(reduce(np.asarray(a.scores[x:y], dtype=np.float64))) for x, y in ranges]
        got = table["scores"][method]
        assert got[-1] is None  # the answer step is not scored
        np.testing.assert_allclose(got[:-1], expected, rtol=1e-9)
        assert got[:-1] == pool_steps(a.scores, ranges, pool)
        levels = [v for v in table["levels"][method] if v is not None]
        assert min(levels) == 0.0 and max(levels) == 1.0
        for step, top in zip(table["steps"], table["top"][method]):
            if step["answer"]:
                assert top == []
                continue
            inside = np.asarray(a.scores[step["start"]:step["end"]])
            assert all(step["start"] <= i < step["end"] for i in top)
            if inside.max() > inside.min():
                assert max(a.scores[i] for i in top) == inside.max()
            else:  # a constant step has no token that stands out
                assert top == []


def test_display_levels_are_the_gates_normalisation():
    import torch

    from oar_attrib.weights.gating import normalise_importance

    values = [0.5, None, 3.0, float("nan"), 0.0, 12.0]
    ok = torch.tensor([True, False, True, False, True, True])
    x = torch.tensor([0.5, 0.0, 3.0, 0.0, 0.0, 12.0])
    ihat, _ = normalise_importance(x[None], ok[None])
    got = display_levels(values)
    assert got[1] is None and got[3] is None
    np.testing.assert_allclose([got[i] for i in (0, 2, 4, 5)], ihat[0, [0, 2, 4, 5]].numpy(), atol=1e-6)
    assert display_levels([2.0, 2.0]) == [0.0, 0.0]


def test_rank_agreement_is_symmetric_with_a_unit_diagonal(long_record):
    agreement = step_table(long_record)["agreement"]
    rho = np.array(agreement["spearman"], dtype=float)
    assert agreement["methods"] == list(long_record.attributions)
    np.testing.assert_allclose(np.diag(rho), 1.0)
    np.testing.assert_allclose(rho, rho.T)


# --------------------------------------------------------------------------- the page


def test_a_long_trace_opens_in_the_step_view_within_budget(long_client, long_record):
    r = long_client.get(f"/traces/{long_record.id}")
    assert r.status_code == 200
    html = r.text
    assert len(r.content) < 2_000_000
    assert re.search(r'<section id="step-view" >', html) and 'id="token-view" hidden' in html
    steps = trace_steps(long_record)
    blocks = re.findall(r'<div class="step[^"]*" id="step-(\d+)"', html)
    assert [int(k) for k in blocks] == list(range(len(steps)))
    cells = re.findall(r'<span class="cell[^"]*" data-step="(\d+)"', html)
    assert len(cells) == len(steps)
    texts = re.findall(r'<span class="step-text">(.*?)</span></div>', html, re.S)
    assert [unescape(t) for t in texts] == [long_record.response[s.char_start:s.char_end].strip()
                                           for s in steps]
    pieces = json.loads(re.search(r'id="token-pieces">(.*?)</script>', html, re.S).group(1))
    assert "".join(text for _, text, _ in pieces) == long_record.response
    assert [i for i, _, _ in pieces if i is not None] == list(range(long_record.row.n_tokens))
    assert len(re.findall(r'<tr data-step=', html)) == len(steps)
    # Long traces leave the token spans, their colours and tooltips to the script.
    assert '<div class="heatmap" id="heatmap"></div>' in html and ' title="token' not in html


def test_the_page_payload_is_rounded_but_faithful(long_client, long_record):
    html = long_client.get(f"/traces/{long_record.id}").text
    payload = json.loads(re.search(r'id="trace-data">(.*?)</script>', html, re.S).group(1))
    steps = json.loads(re.search(r'id="step-data">(.*?)</script>', html, re.S).group(1))
    for m, a in long_record.attributions.items():
        got = np.array([np.nan if v is None else v for v in payload["scores"][m]])
        np.testing.assert_allclose(got, a.scores, rtol=5e-4, atol=1e-30)
    table = step_table(long_record)
    assert steps["steps"] == [[s["start"], s["end"]] for s in table["steps"]]
    assert steps["answer_step"] == len(table["steps"]) - 1


# --------------------------------------------------------------------------- exports


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_every_export_downloads_as_an_attachment(long_client, long_record, kind):
    r = long_client.get(f"/api/traces/{long_record.id}/export/{kind}")
    assert r.status_code == 200
    assert r.headers["content-disposition"] == f'attachment; filename="trace-{long_record.id}-{kind}"'
    if kind.endswith(".json"):
        rows = r.json()
    elif kind.endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(r.text)))
    else:
        assert r.headers["content-type"].startswith("text/html")
        return
    n = long_record.row.n_tokens if kind.startswith("tokens") else len(trace_steps(long_record))
    assert len(rows) == n


def test_token_and_step_tables_hold_the_stored_scores(long_record):
    tokens = token_rows(long_record)
    for m, a in long_record.attributions.items():
        assert [r[f"score.{m}"] for r in tokens] == [float(v) for v in a.scores]
        assert [r[f"weight.{m}"] for r in tokens] == [float(v) for v in a.weights]
    steps = step_rows(long_record)
    table = step_table(long_record)
    assert [r["text"] for r in steps] == table["texts"]
    assert [tokens[i]["step"] for i in range(len(tokens))] == [
        k for k, s in enumerate(table["steps"]) for _ in range(s["start"], s["end"])]
    parsed = list(csv.DictReader(io.StringIO(rows_csv(steps))))
    m = next(iter(long_record.attributions))
    assert [float(r[f"score.{m}"]) if r[f"score.{m}"] else None for r in parsed] == table["scores"][m]


def test_the_html_view_is_self_contained_and_shows_the_step_scores(long_client, long_record):
    html = long_client.get(f"/api/traces/{long_record.id}/export/view.html?method=grail&pool=mean").text
    assert 'id="export-pool">mean<' in html
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)="(?!#)', html)  # links only to its own anchors
    assert re.search(r"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'", html)
    assert 'id="export-method">grail<' in html
    shown = [None if s == "n/a" else float(s) for s in re.findall(r'data-score="([^"]*)"', html)]
    expected = step_table(long_record, "mean")["scores"]["grail"]
    assert len(shown) == len(expected)
    for a, b in zip(shown, expected):
        assert (a is None and b is None) or a == pytest.approx(b, rel=1e-5)
    assert "random weights" in html


def test_trace_attribution_to_html_writes_the_same_view(tmp_path, long_record):
    attribution = long_record.to_attribution()
    path = write_html(attribution, tmp_path / "trace.html", method="ig")
    expected = render_html(TraceRecord.from_attribution(attribution), "ig")
    assert "<title>Trace · oar-attrib</title>" in expected
    assert path.read_text(encoding="utf-8") == expected


# --------------------------------------------------------------------------- escaping


class _Tags(HTMLParser):
    """Every tag and attribute of a document, and its text nodes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


EXPORT_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "b", "code", "pre",
               "div", "a", "details", "summary", "span", "table", "thead", "tbody", "tr", "th", "td"}


def test_hostile_step_texts_and_method_names_stay_text_in_the_html_export():
    record = hostile_record()
    for method in ("oar_p", HOSTILE_METHOD):
        parsed = _Tags()
        parsed.feed(render_html(record, method))
        assert set(parsed.tags) <= EXPORT_TAGS, set(parsed.tags) - EXPORT_TAGS
        assert not [a for a in parsed.attrs if a[1].startswith("on")]
        text = "".join(parsed.text)
        assert SCRIPT in text and IMG in text and HOSTILE_METHOD in text  # shown, as text


def test_hostile_texts_in_csv_and_json_exports_are_data():
    record = hostile_record()
    rows = step_rows(record)
    assert json.loads(json.dumps(rows)) == rows
    assert any(SCRIPT in r["text"] for r in rows)
    parsed = list(csv.DictReader(io.StringIO(rows_csv(rows))))
    assert [r["text"] for r in parsed] == [("'" + r["text"]) if r["text"][:1] in "=+-@" else r["text"]
                                         for r in rows]
    tokens = list(csv.DictReader(io.StringIO(rows_csv(token_rows(record)))))
    assert "'=cmd|'" in [t["token"] for t in tokens]  # a spreadsheet would run "=cmd|'..."
    assert f"score.{HOSTILE_METHOD}" in tokens[0]


def test_hostile_steps_on_the_trace_page_and_its_step_table(tmp_path):
    record = hostile_record()
    path = tmp_path / "hostile.db"
    with Store(path) as store:
        run = store.add_run("hostile steps", model="none")
        trace_id = store.add_trace(run, record.to_attribution())
    with TestClient(create_app(path), base_url=BASE) as client:
        html = client.get(f"/traces/{trace_id}").text
        exports = {kind: client.get(f"/api/traces/{trace_id}/export/{kind}?method=oar_p")
                   for kind in EXPORT_KINDS}
    for kind, r in exports.items():  # every format carries the hostile text as data, intact
        assert r.status_code == 200
        if kind.endswith(".json"):
            values = [v for row in r.json() for v in row.values()] + [k for k in r.json()[0]]
        elif kind.endswith(".csv"):
            rows = list(csv.DictReader(io.StringIO(r.text)))
            values = [v for row in rows for v in row.values()] + list(rows[0])
        else:
            parsed = _Tags()
            parsed.feed(r.text)
            assert set(parsed.tags) <= EXPORT_TAGS
            assert not [a for a in parsed.attrs if a[1].startswith("on")]
            values = parsed.text
        text = " ".join(str(v) for v in values)
        assert HOSTILE_METHOD in text
        assert SCRIPT in text  # one token here: the hand-made trace cuts tokens at spaces
    for raw in (SCRIPT, IMG, HOSTILE_METHOD, "</pre></div>"):
        assert raw not in html
    matrix = html[html.index('id="step-matrix"'):html.index("</table>", html.index('id="step-matrix"'))]
    assert "&lt;script&gt;alert(&#39;step&#39;)&lt;/script&gt;" in matrix
    assert "&lt;b onmouseover=&#34;alert(2)&#34;&gt;m&lt;/b&gt;" in matrix
    steps = html[html.index('id="steps"'):html.index('id="token-view"')]
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in steps


def test_a_constant_step_has_no_top_tokens():
    record = hostile_record()
    a = record.attributions["oar_p"]
    first = record.steps[0]
    a.scores[first[0]:first[1]] = 0.25  # a step-level method: one score per step
    a.scores[first[1]] = 0.9
    tops = step_table(record)["top"]["oar_p"]
    assert tops[0] == []
    assert first[1] in tops[1]
