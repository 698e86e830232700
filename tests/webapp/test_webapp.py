"""The web app through FastAPI's TestClient: every route, bad ids, bad and oversized bodies,
escaping of hostile trace text, live attribution limits, and the view models."""
import json
import re
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

from oar_attrib.attribution import attribute
from oar_attrib.store import Store
from oar_attrib.webapp import WebSettings, create_app
from oar_attrib.webapp.demo import DemoConfig, write_problem_run
from oar_attrib.webapp.views import _pieces, heat_colour, importance_levels, token_title
from models import wrong_solution
from webtools import BASE, HOSTILE_RESPONSE, METHODS


@pytest.fixture(scope="module")
def client(store_path, world):
    _, tokenizer, model = world
    settings = WebSettings(max_live_tokens=120, live_methods=("oar_p", "entropy", "random"),
                           page_size=4)
    with TestClient(create_app(store_path, model=(model, tokenizer), settings=settings),
                    base_url=BASE) as c:
        yield c


def _payload(html: str, block: str) -> dict:
    found = re.search(rf'<script type="application/json" id="{block}">(.*?)</script>', html, re.S)
    assert found, f"no {block} block"
    return json.loads(found.group(1))


# --------------------------------------------------------------------------- pages


def test_runs_page_lists_runs_with_links(client, ids):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert f'href="/runs/{ids["demo"]}"' in r.text and f'href="/runs/{ids["demo"]}/report"' in r.text
    assert "hostile &lt;b&gt;run&lt;/b&gt;" in r.text and "<b>run</b>" not in r.text


def test_run_page_filters_sorts_and_pages(client, ids):
    run = ids["demo"]
    r = client.get(f"/runs/{run}")
    assert r.status_code == 200 and "9 matching traces" in r.text and "page 1 of 3" in r.text
    r = client.get(f"/runs/{run}", params={"correct": "wrong", "sort": "reward", "order": "desc"})
    assert "5 matching traces" in r.text
    # An empty form field means "any" rather than a validation error.
    r = client.get(f"/runs/{run}?correct=correct&step=&min_reward=&max_reward=")
    assert r.status_code == 200 and "4 matching traces" in r.text
    r = client.get(f"/runs/{run}", params={"page": 3})
    assert r.status_code == 200 and "page 3 of 3" in r.text and "previous</a>" in r.text


def test_trace_page_draws_a_heatmap_token_per_response_token(client, ids, store_path):
    trace_id = ids["demo_traces"][0]
    r = client.get(f"/traces/{trace_id}")
    assert r.status_code == 200
    with Store(store_path, readonly=True) as store:
        record = store.trace(trace_id)
    spans = re.findall(r'<span class="tok [^"]*" data-i="(\d+)" style="([^"]*)" title="([^"]*)"', r.text)
    assert [int(i) for i, _, _ in spans] == list(range(record.row.n_tokens))
    scored = record.scored
    for (_, style, title), is_scored in zip(spans, scored):
        assert ("background-color: rgba(" in style) == bool(is_scored)
        assert title.startswith("token ") and "reshaped advantage" in title
    assert 'class="tok seg-answer' in r.text and "oracle" in r.text
    data = _payload(r.text, "trace-data")
    assert data["methods"] == list(METHODS) and len(data["tokens"]) == record.row.n_tokens
    assert data["oracle"]["direct"] == record.oracle_mask("direct").tolist()
    assert 'id="chart-scores"' in r.text and 'id="chart-advantage"' in r.text
    assert '<script src="/static/plotly.min.js"></script>' in r.text


def test_the_method_selector_changes_the_colours(client, ids):
    trace_id = ids["demo_traces"][1]
    styles = {}
    for method in ("oar_p", "entropy"):
        r = client.get(f"/traces/{trace_id}", params={"method": method})
        assert f'<option value="{method}" selected>' in r.text
        styles[method] = re.findall(r'data-i="\d+" style="([^"]*)"', r.text)
    assert styles["oar_p"] != styles["entropy"]
    # An unknown method falls back to oar_p rather than failing.
    r = client.get(f"/traces/{trace_id}", params={"method": "nope"})
    assert r.status_code == 200 and '<option value="oar_p" selected>' in r.text


def test_report_page_shows_recall_agreement_and_credit(client, ids):
    r = client.get(f"/runs/{ids['demo']}/report")
    assert r.status_code == 200
    for method in (*METHODS, "random_expectation"):
        assert f"<td>{method}</td>" in r.text
    for chart in ("chart-recall", "chart-agreement", "chart-credit"):
        assert f'id="{chart}"' in r.text
    data = _payload(r.text, "report-data")
    assert data["agreement"]["methods"] == list(METHODS)
    assert {row["subset"] for row in data["recall"]} == {"all"}
    r = client.get(f"/runs/{ids['demo']}/report", params={"subset": "wrong"})
    assert {row["subset"] for row in _payload(r.text, "report-data")["recall"]} == {"wrong"}
    unsummarised = client.get(f"/runs/{ids['hostile']}/report")
    assert unsummarised.status_code == 200 and "no stored summaries" in unsummarised.text


def test_attribute_page_and_docs(client):
    r = client.get("/attribute")
    assert r.status_code == 200 and 'id="attribute-form"' in r.text and "at most 120 tokens" in r.text
    docs = client.get("/docs")
    assert docs.status_code == 200
    for endpoint in ("GET /api/runs", "GET /api/traces/{trace_id}", "POST /api/attribute",
                     "GET /api/runs/{run_id}/report", "GET /api/runs/{run_id}/traces"):
        assert f"<code>{endpoint}</code>" in docs.text
    spec = client.get("/openapi.json").json()
    assert "/api/attribute" in spec["paths"] and "AttributeRequest" in spec["components"]["schemas"]


# --------------------------------------------------------------------------- JSON API


def test_json_api_mirrors_the_store(client, ids, store_path):
    with Store(store_path, readonly=True) as store:
        runs = [r.to_dict() for r in store.runs()]
        record = store.trace(ids["demo_traces"][2]).to_dict()
        report = store.report(ids["demo"])
    assert client.get("/api/runs").json() == runs
    run = client.get(f"/api/runs/{ids['demo']}").json()
    assert run["n_traces"] == 9 and run["methods"] == list(METHODS)
    assert client.get(f"/api/traces/{ids['demo_traces'][2]}").json() == json.loads(json.dumps(record))
    assert client.get(f"/api/runs/{ids['demo']}/report").json() == json.loads(json.dumps(report))
    page = client.get(f"/api/runs/{ids['demo']}/traces", params={"correct": "wrong", "page": 2}).json()
    assert page["total"] == 5 and page["pages"] == 2 and len(page["traces"]) == 1
    assert all(t["correct"] is False for t in page["traces"])


@pytest.mark.parametrize("url", ["/runs/{bad}", "/runs/{bad}/report", "/traces/{bad}",
                                 "/api/runs/{bad}", "/api/runs/{bad}/traces",
                                 "/api/runs/{bad}/report", "/api/traces/{bad}"])
def test_unknown_ids_are_404_and_malformed_ids_422(client, url):
    missing = client.get(url.format(bad=424242))
    assert missing.status_code == 404
    if url.startswith("/api/"):
        assert "424242" in missing.json()["detail"]
    else:
        assert missing.headers["content-type"].startswith("text/html") and "Error 404" in missing.text
    for bad in ("abc", "0", "-3", "1.5", "99999999999999999999999", "1%20OR%201=1"):
        assert client.get(url.format(bad=bad)).status_code == 422, bad


@pytest.mark.parametrize("query", ["correct=maybe", "sort=prompt", "order=sideways", "page=0",
                                   "min_reward=nan", "max_reward=inf", "step=-1", "step=x",
                                   "limit=5"])
def test_bad_filters_are_422(client, ids, query):
    assert client.get(f"/api/runs/{ids['demo']}/traces?{query}").status_code == 422
    assert client.get(f"/runs/{ids['demo']}?{query}").status_code == 422


def test_static_files_are_served_by_name_only(client):
    r = client.get("/static/plotly.min.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert len(r.content) > 1_000_000
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/app.css").status_code == 200
    for name in ("../main.py", "..%2Fmain.py", "%2e%2e/settings.py", "nope.js", "app.py"):
        assert client.get(f"/static/{name}").status_code == 404, name


# --------------------------------------------------------------------------- safety


def test_hostile_response_text_renders_as_text(client, ids):
    for url in (f"/traces/{ids['hostile_response']}", f"/runs/{ids['demo']}?page=3",
                f"/traces/{ids['hostile_prompt']}"):
        r = client.get(url)
        assert r.status_code == 200
        assert "<script>alert" not in r.text and "<img" not in r.text, url
        assert "&lt;" in r.text
    # Inside the JSON block "<" is \u003c, so no "</script>" can close it early.
    r = client.get(f"/traces/{ids['hostile_response']}")
    block = re.search(r'id="trace-data">(.*?)</script>', r.text, re.S).group(1)
    assert "<" not in block and "\\u003c" in block
    assert "".join(_payload(r.text, "trace-data")["tokens"]) == HOSTILE_RESPONSE


def test_hostile_prompt_is_escaped_in_the_prompt_block(client, ids):
    r = client.get(f"/traces/{ids['hostile_prompt']}")
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;&lt;/pre&gt;" in r.text


def test_no_span_trace_says_so(client, ids):
    r = client.get(f"/traces/{ids['no_span']}")
    assert r.status_code == 200 and "No answer span was found" in r.text
    assert "background-color" not in re.search(r'id="heatmap">(.*?)</div>', r.text, re.S).group(1)


def test_pages_load_scripts_only_from_this_app_and_send_a_csp(client, ids):
    for url in ("/", f"/runs/{ids['demo']}", f"/traces/{ids['demo_traces'][0]}",
                f"/runs/{ids['demo']}/report", "/attribute", "/docs"):
        r = client.get(url)
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
        for src in re.findall(r'<script[^>]*src="([^"]*)"', r.text):
            assert src.startswith("/static/"), (url, src)
        assert "cdn" not in r.text.lower()
        # No inline script: only JSON data blocks are allowed without a src.
        for attrs in re.findall(r"<script([^>]*)>", r.text):
            assert "src=" in attrs or 'type="application/json"' in attrs, (url, attrs)


def test_foreign_host_headers_are_refused(client):
    assert client.get("/", headers={"host": "attacker.example"}).status_code == 400
    assert client.get("/", headers={"host": "localhost:8765"}).status_code == 200


# --------------------------------------------------------------------------- live attribution


GOOD = {"prompt": "a=4, b=7. c=a+b, d=c*2. find c+d.\n", "response": "c=4+7=11. d=11*2=22. #### 33",
        "methods": ["oar_p", "entropy"]}


def test_live_attribution_returns_the_attribution_and_its_view(client):
    r = client.post("/api/attribute", json=GOOD)
    assert r.status_code == 200, r.text
    body = r.json()
    tokens = body["attribution"]["tokens"]
    assert "".join(tokens) == GOOD["response"] and body["attribution"]["span_found"]
    assert set(body["attribution"]["scores"]) == {"oar_p", "entropy"}
    pieces = body["view"]["pieces"]
    assert "".join(p["text"] for p in pieces) == GOOD["response"]
    assert body["view"]["payload"]["methods"] == ["oar_p", "entropy"]


def test_trace_page_shows_the_reliability_of_a_ranking_over_draws(tmp_path, world):
    """OAR-G with 8 draws: its split-half reliability on the trace page; with 1 draw the page
    says the figure is undefined and why, instead of a number."""
    problems, tokenizer, model = world
    path = tmp_path / "draws.db"
    with Store(path) as store:
        run = store.add_run("draws", model="tiny")
        for n_noise in (8, 1):
            store.add_traces(run, attribute(model, tokenizer, [problems[0].prompt],
                                            [problems[0].solution], ["oar_g", "entropy"],
                                            method_params={"oar_g": {"n_noise": n_noise}}))
        eight, one = store.trace_ids(run)
        split_half = store.trace(eight).attributions["oar_g"].split_half
    with TestClient(create_app(path), base_url=BASE) as c:
        page = c.get(f"/traces/{eight}").text
        block = re.search(r'<p class="meta" id="reliability">(.*?)</p>', page, re.S).group(1)
        assert f"oar_g {split_half:.2f} over 8 draws" in block and "entropy" not in block
        page = c.get(f"/traces/{one}").text
        block = re.search(r'<p class="meta" id="reliability">(.*?)</p>', page, re.S).group(1)
        assert 'class="reliability noisy"' in block and "undefined with 1 draw" in block


def test_live_attribution_runs_hierarchical_oar_p(store_path, world):
    """`oar_p_hier` is live by default (registered, not analysis-only) and goes through the
    pipeline with the response's steps: GOOD's reasoning has two steps, fewer than its default
    three top steps, so every token is scored exactly and it equals token OAR-P."""
    _, tokenizer, model = world
    settings = WebSettings(max_live_tokens=120)
    assert "oar_p_hier" in settings.live_methods
    with TestClient(create_app(store_path, model=(model, tokenizer), settings=settings),
                    base_url=BASE) as c:
        r = c.post("/api/attribute", json={**GOOD, "methods": ["oar_p_hier", "oar_p"]})
    assert r.status_code == 200, r.text
    scores = r.json()["attribution"]["scores"]
    assert max(scores["oar_p"]) > 0
    assert scores["oar_p_hier"] == pytest.approx(scores["oar_p"], abs=1e-5)


@pytest.mark.parametrize("body, status, message", [
    ({**GOOD, "methods": ["nope"]}, 422, "cannot run live"),
    ({**GOOD, "methods": []}, 422, None),
    ({**GOOD, "probe": "magic"}, 422, None),
    ({**GOOD, "prompt": ""}, 422, None),
    ({**GOOD, "advantage": "lots"}, 422, None),
    ({**GOOD, "extra": 1}, 422, None),
    ({"prompt": "x"}, 422, None),
    ({**GOOD, "response": "1+1=2. " * 60 + "#### 2"}, 413, "tokens"),
])
def test_bad_live_requests(client, body, status, message):
    r = client.post("/api/attribute", json=body)
    assert r.status_code == status, r.text
    if message:
        assert message in r.json()["detail"]


def test_malformed_and_oversized_bodies(client):
    r = client.post("/api/attribute", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    huge = json.dumps({**GOOD, "response": "x" * 70_000})
    r = client.post("/api/attribute", content=huge, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than 64000 bytes" in r.json()["detail"]
    # A chunked body (no Content-Length) is counted as it arrives.
    chunks = iter([huge[i:i + 8192].encode() for i in range(0, len(huge), 8192)])
    r = client.post("/api/attribute", content=chunks, headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_a_second_live_request_while_one_runs_gets_429(client, world):
    _, _, model = world
    entered, release = threading.Event(), threading.Event()

    def hold(module, args):
        entered.set()
        release.wait(timeout=30)

    handle = model.register_forward_pre_hook(hold)
    first: dict = {}
    worker = threading.Thread(target=lambda: first.update(r=client.post("/api/attribute", json=GOOD)))
    try:
        worker.start()
        assert entered.wait(timeout=30)
        r = client.post("/api/attribute", json=GOOD)
        assert r.status_code == 429 and r.headers["retry-after"] == "5"
        assert "retry" in r.json()["detail"]
    finally:
        handle.remove()
        release.set()
        worker.join(timeout=60)
    assert first["r"].status_code == 200


def test_a_method_registered_in_a_test_is_in_the_live_selector_and_runs(store_path, world):
    from oar_attrib.methods import register_method, unregister_method

    _, tokenizer, model = world

    @register_method("test_constant")
    def test_constant(model, batch, *, probe="as_mean", generator=None):
        return (batch.scored_mask & batch.has_answer[:, None]).float() * 2.0

    try:
        app = create_app(store_path, model=(model, tokenizer), settings=WebSettings(max_live_tokens=120))
        with TestClient(app, base_url=BASE) as c:
            page = c.get("/attribute").text
            assert 'name="methods" value="test_constant"' in page
            assert 'name="methods" value="ig"' in page  # every registered method by default
            r = c.post("/api/attribute", json={**GOOD, "methods": ["test_constant"]})
            assert r.status_code == 200, r.text
            scores = r.json()["attribution"]["scores"]["test_constant"]
            assert set(scores) == {0.0, 2.0}
    finally:
        unregister_method("test_constant")
    with pytest.raises(ValueError, match="test_constant"):
        WebSettings(live_methods=("test_constant",))


def test_without_a_model_live_attribution_is_503(store_path):
    with TestClient(create_app(store_path), base_url=BASE) as c:
        r = c.post("/api/attribute", json=GOOD)
        assert r.status_code == 503 and "--model" in r.json()["detail"]
        assert "started without a model" in c.get("/attribute").text


def test_a_named_model_loads_beside_the_pages(store_path, model_dir, tmp_path):
    app = create_app(store_path, model=str(model_dir))
    with TestClient(app, base_url=BASE) as c:
        assert c.get("/").status_code == 200  # pages answer while the model loads
        r = c.post("/api/attribute", json=GOOD)
        assert r.status_code in (200, 503)
        if r.status_code == 503:
            assert r.headers["retry-after"] == "5" and "still loading" in r.json()["detail"]
        app.state.live_loader.join(timeout=120)
        assert c.post("/api/attribute", json=GOOD).status_code == 200
    broken = create_app(store_path, model=str(tmp_path / "no-such-model"))
    with TestClient(broken, base_url=BASE) as c:
        broken.state.live_loader.join(timeout=120)
        r = c.post("/api/attribute", json=GOOD)
        assert r.status_code == 503 and "failed to load" in r.json()["detail"]
        assert "retry-after" not in r.headers


def test_a_bad_store_path_fails_at_creation(tmp_path):
    from oar_attrib.store import StoreError

    with pytest.raises(StoreError, match="no store at"):
        create_app(tmp_path / "missing.db")


# --------------------------------------------------------------------------- view models


def test_importance_levels_are_the_gates_normalisation():
    scores = np.array([0.0, 1.0, 3.0, 0.0, 7.0])
    scored = np.array([False, True, True, True, True])
    levels = importance_levels(scores, scored)
    logged = np.log1p(scores[1:])
    want = (logged - logged.min()) / (logged.max() - logged.min())
    assert levels[0] is None
    np.testing.assert_allclose(levels[1:], want)
    assert importance_levels(np.ones(3), np.ones(3, bool)) == [0.0, 0.0, 0.0]
    assert importance_levels(np.array([np.nan, 1.0]), np.array([True, True]))[0] is None
    assert heat_colour(None) == "" and heat_colour(1.0).endswith("0.900)")


def test_pieces_rebuild_the_text_even_with_gaps_and_shared_characters():
    text = "ab cd€ef"
    offsets = [(0, 2), (3, 5), (5, 6), (5, 6), (6, 8)]  # a gap, and two tokens of one char
    pieces = _pieces(text, offsets)
    assert "".join(p["text"] for p in pieces) == text
    assert [p["index"] for p in pieces] == [0, None, 1, 2, 3, 4]


def test_token_title_shows_whitespace_and_missing_values():
    assert token_title(" \n", 0.5, 1.25, None) == (
        'token " \\n" | score 0.5 | weight 1.250 | reshaped advantage n/a')


# --------------------------------------------------------------------------- demo store and commands


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, world):
    """The tiny model and its tokenizer saved as a local checkpoint folder."""
    _, tokenizer, model = world
    folder = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def _demo_config(model_dir):
    return DemoConfig(model=str(model_dir), n_problems=2, samples=2,
                      methods=("entropy", "ig", "oar_p"), real=False)  # the real stage: test_demo_real.py


def test_demo_store_builds_once_then_comes_from_the_cache(tmp_path, monkeypatch, model_dir, capsys):
    from oar_attrib.webapp import demo, demo_fill

    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    config = _demo_config(model_dir)
    path, built = demo_fill.ensure_demo_store(config, progress=False)
    assert built and path.parent == tmp_path / "cache" and path.is_file()
    # how long the fill takes, said when it starts (ig, deferred, comes after)
    assert "oar demo: arithmetic world: 4 traces to attribute with entropy, oar_p: about " in capsys.readouterr().err
    # The store and its progress file; no partial or temporary files left.
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".progress.json"]
    with Store(path, readonly=True) as store:
        (run,) = store.runs()
        assert run.n_traces == 4 and run.methods == ["entropy", "ig", "oar_p"]
        assert run.config["pending_methods"] == [] and run.config["complete"] is True
        assert store.report(run.id)["summary"] is not None
    assert demo_fill.ensure_demo_store(config, progress=False) == (path, False)
    assert demo.demo_path(DemoConfig(model=str(model_dir), n_problems=3)) != path


def test_deferred_methods_are_completed_later_and_resumable(tmp_path, world):
    import threading

    from oar_attrib.webapp.demo import complete_pending

    problems, tokenizer, model = world
    owners = [p for p in problems[:3] for _ in (0, 1)]
    texts = [t for p in problems[:3] for t in (p.solution, wrong_solution(p))]
    config = DemoConfig(model="tiny", methods=("entropy", "ig"))
    with Store(tmp_path / "d.db") as store:
        run = write_problem_run(store, model, tokenizer, owners, texts, config=config,
                                group_size=2, defer=("ig",), method_params={"ig": {"n_steps": 4}})
        assert store.run(run).methods == ["entropy"]
        assert store.run(run).config["pending_methods"] == ["ig"]
        stopped = threading.Event()
        stopped.set()
        assert complete_pending(store, model, tokenizer, run, stop=stopped) is False
        assert complete_pending(store, model, tokenizer, run, batch=4) is True
        assert store.trace_ids(run, missing="ig") == []
        assert store.run(run).config["pending_methods"] == []
        assert "ig" in store.report(run)["agreement"]["methods"]
        record = store.trace(store.trace_ids(run)[0])
        direct = attribute(model, tokenizer, [record.prompt], [record.response], ["ig"],
                           advantages=[record.row.advantage], method_params={"ig": {"n_steps": 4}})[0]
        np.testing.assert_allclose(record.attributions["ig"].scores, direct.scores["ig"], rtol=1e-5)


def test_the_demo_keeps_groups_with_right_and_wrong_answers_first(world):
    from oar_attrib.webapp.demo import _keep_mixed_groups

    problems = world[0][:4]
    right = [p.solution for p in problems]
    wrong = [wrong_solution(p) for p in problems]
    # Groups of two: all right, mixed, all wrong, mixed.
    texts = [right[0], right[0], right[1], wrong[1], wrong[2], wrong[2], wrong[3], right[3]]
    kept = _keep_mixed_groups(problems, texts, 2, keep=3)
    assert [p for p, _ in kept] == [problems[0], problems[1], problems[3]]
    assert kept[1][1] == [right[1], wrong[1]]


def test_demo_and_web_commands(tmp_path, monkeypatch, model_dir, capsys):
    import argparse

    from oar_attrib.errors import OARError
    from oar_attrib.webapp.cli import _listen, add_web_commands

    monkeypatch.setenv("OAR_CACHE_DIR", str(tmp_path / "cache"))
    parser = argparse.ArgumentParser(prog="oar")
    add_web_commands(parser.add_subparsers(dest="command", required=True))
    argv = ["demo", "--model", str(model_dir), "--n-problems", "2", "--samples", "2",
            "--methods", "entropy", "oar_p", "--build-only", "--no-progress", "--no-real"]  # real: test_demo_real.py
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    assert "built in" in capsys.readouterr().err
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    assert "(cached)" in capsys.readouterr().err
    web = parser.parse_args(["web", "--store", "x.db"])
    assert (web.host, web.port, web.model) == ("127.0.0.1", 8765, None)
    busy = _listen("127.0.0.1", 0)
    try:
        with pytest.raises(OARError, match="pass another --port"):
            _listen("127.0.0.1", busy.getsockname()[1])
    finally:
        busy.close()


def test_web_flags_reach_the_app_through_its_settings_objects(monkeypatch):
    """`oar web --dtype --max-live-tokens --host --align`: the command runs on WebSource,
    ServeSettings and WebSettings, and the app gets each flag's value from them."""
    import argparse

    from oar_attrib.webapp import cli, main

    made = {}
    monkeypatch.setattr(main, "create_app", lambda store, **kw: made.update(store=store, **kw) or "app")
    monkeypatch.setattr(cli, "serve", lambda app, host, port, started=None: made.update(listen=(app, host, port)))
    monkeypatch.setattr(cli, "require_extra", lambda *a: None)
    parser = argparse.ArgumentParser(prog="oar")
    cli.add_web_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["web", "--store", "x.db", "--dtype", "bfloat16", "--max-live-tokens", "99",
                              "--host", "127.0.0.2", "--port", "0", "--align", "a", "b"])
    assert args.func(args) == 0
    settings = made["settings"]
    assert (made["store"], made["dtype"], made["model"]) == ("x.db", "bfloat16", None)
    assert settings.max_live_tokens == 99 and settings.align_results == ("a", "b")
    assert "127.0.0.2" in settings.allowed_hosts and "*" not in settings.allowed_hosts
    assert made["listen"] == ("app", "127.0.0.2", 0)
    made.clear()
    args = parser.parse_args(["web", "--store", "x.db"])
    assert args.func(args) == 0
    assert made["dtype"] == "float32" and made["settings"].max_live_tokens == 256 and made["settings"].align_results == ()


def test_served_connections_send_without_nagle_delay():
    """The server's connections have TCP_NODELAY, as asyncio (and so uvicorn) sets it on the
    sockets `_listen` accepts: keep-alive responses go out at once, not after a delayed ACK."""
    import asyncio
    import socket

    from oar_attrib.webapp.cli import _listen

    async def accepted_nodelay() -> int:
        seen = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=_listen("127.0.0.1", 0))
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0

