"""Hostile text in the web app, round 2: method names that are markup reach Plotly as text (one
helper, static/text.js's plotlyLabel, for every label), run names and model text with bidi
overrides and invisible controls are isolated from the page's own text and shown as markers,
and the small defects of the issue (experiments on a store without their tables, a
whitespace-only live response, resample off the live page's default list, a loopback --host
keeping the Host check)."""
import re

import pytest
from fastapi.testclient import TestClient

from oar_attrib.records.export import is_invisible
from oar_attrib.store import Store
from oar_attrib.webapp import WebSettings, create_app
from oar_attrib.webapp.demo import DemoConfig, write_problem_run
from webtools import BASE, console_errors, needs_chromium, serve, stop, wait

LINK = '<a href="https://evil.example/">oar_p</a>'
STYLED = '<b style="font-size:40px;color:red">big</b>'
# Each control the issue names: the right-to-left override, the four isolates, ZWJ and ZWSP.
CONTROLS = "\u202e\u2066\u2067\u2068\u2069\u200d\u200b"
RUN_NAME = "demo 1 race\u202e"
HOSTILE = ("a=1+2=3. total = \u202e0001$ yap ok \u2066x\u2069 \u2067y\u2068z\u2069 w\u200dv\u200bu. "
           "#### 9")


@pytest.fixture(scope="module")
def markup_store(tmp_path_factory, world):
    """One run named RUN_NAME, scored by entropy and two methods named as markup, over right
    and wrong answers and the HOSTILE response, with the oracle and summaries."""
    from oar_attrib.methods import register_method, unregister_method

    problems, tokenizer, model = world

    def constant(model, batch, *, probe="as_mean", generator=None):
        return (batch.scored_mask & batch.has_answer[:, None]).float()

    def position(model, batch, *, probe="as_mean", generator=None):
        return (batch.scored_mask & batch.has_answer[:, None]).float().cumsum(-1)

    register_method(LINK)(constant)
    register_method(STYLED)(position)
    try:
        owners = [p for p in problems[:2] for _ in (0, 1)] + [problems[4]]
        texts = [t for p in problems[:2] for t in (p.solution, p.solution.replace("####", "#### 1"))]
        path = tmp_path_factory.mktemp("markup") / "web.db"
        with Store(path) as store:
            run = write_problem_run(store, model, tokenizer, owners, texts + [HOSTILE],
                                    name=RUN_NAME, config=DemoConfig(
                                        model="tiny", methods=("entropy", LINK, STYLED)))
            hostile = store.trace_ids(run)[-1]
        yield path, run, hostile
    finally:
        unregister_method(LINK)
        unregister_method(STYLED)


@pytest.fixture(scope="module")
def markup_client(markup_store, world):
    _, tokenizer, model = world
    settings = WebSettings(max_live_tokens=120, live_methods=("entropy",))
    with TestClient(create_app(markup_store[0], model=(model, tokenizer), settings=settings),
                    base_url=BASE) as client:
        yield client


def _shown(html: str) -> str:
    """The page as drawn: without its JSON data blocks (read by the scripts, never shown)."""
    return re.sub(r'<script type="application/json"[^>]*>.*?</script>', "", html, flags=re.S)


def test_the_views_pieces_hold_the_controls(markup_store):
    from oar_attrib.records.step_view import text_pieces

    path, _, hostile = markup_store
    with Store(path, readonly=True) as store:
        record = store.trace(hostile)
    # else the views below would test nothing (a byte-level tokenizer splits each control)
    assert record.response == HOSTILE
    assert "".join(p["text"] for p in text_pieces(record.response, record.offsets)) == HOSTILE


@pytest.mark.parametrize("page", ["/", "/runs/{run}", "/runs/{run}/report", "/runs/{run}/profiles",
                                  "/traces/{trace}"])
def test_no_control_reaches_a_page_and_the_run_name_is_isolated(markup_client, markup_store, page):
    _, run, hostile = markup_store
    html = markup_client.get(page.format(run=run, trace=hostile)).text
    shown = _shown(html)
    assert not [c for c in shown if is_invisible(c)], page
    name = 'demo 1 race<span class="ctl" title="U+202E RIGHT-TO-LEFT OVERRIDE">\u25c7</span>'
    # Among the page's own words (a heading, the breadcrumb) the name is isolated; a table cell
    # (the runs page) is a bidi paragraph of its own.
    assert (f"<bdi>{name}</bdi>" if page != "/" else f'">{name}</a></td>') in shown
    assert "<a href=\"https://evil.example/\">" not in shown and "<b style" not in shown


def test_the_trace_page_marks_every_control_of_the_response(markup_client, markup_store):
    _, _, hostile = markup_store
    heatmap = re.search(r'<div class="heatmap" dir="auto" id="heatmap">(.*?)</div>',
                        markup_client.get(f"/traces/{hostile}").text, flags=re.S).group(1)
    titles = re.findall(r'<span class="ctl" title="(U\+[0-9A-F]{4})[^"]*">', heatmap)
    assert titles == [f"U+{ord(c):04X}" for c in HOSTILE if c in CONTROLS]


# ------------------------------------------------------------------ in a real Chromium

@pytest.fixture(scope="module")
def markup_server(markup_store):
    *running, url = serve(create_app(markup_store[0]))
    yield url
    stop(*running)


SVG_MARKUP = """
const svg = [...document.querySelectorAll('svg.main-svg')];
const styled = svg.flatMap((s) => [...s.querySelectorAll('tspan[style], a, b')])
  .filter((e) => e.tagName.toLowerCase() !== 'tspan' || /bold|40px|red/.test(e.getAttribute('style')));
return {n_svg: svg.length, markup: styled.map((e) => e.outerHTML),
        text: svg.map((s) => s.textContent).join(' ')};
"""


@pytest.mark.slow
@needs_chromium()
@pytest.mark.parametrize("page", ["/traces/{trace}?method=entropy", "/runs/{run}/report"])
def test_markup_method_names_are_text_in_every_plotly_chart(markup_server, browser, markup_store,
                                                           page):
    _, run, hostile = markup_store
    browser.get(markup_server + page.format(run=run, trace=hostile))
    wait(browser, lambda d: d.execute_script(
        "return document.querySelectorAll('svg.main-svg .trace').length > 0"))
    drawn = browser.execute_script(SVG_MARKUP)
    assert drawn["n_svg"] > 0 and drawn["markup"] == []
    assert LINK in drawn["text"] and STYLED in drawn["text"]  # shown as the text it is
    assert console_errors(browser) == []


@pytest.mark.slow
@needs_chromium()
def test_the_browser_shows_each_control_as_a_marker(markup_server, browser, markup_store):
    from selenium.webdriver.common.by import By

    _, run, hostile = markup_store
    browser.get(f"{markup_server}/traces/{hostile}")
    for view in ("#heatmap", "#steps"):  # the token view and the step view the script builds
        root = browser.find_element(By.CSS_SELECTOR, view)
        titles = [e.get_attribute("title") for e in root.find_elements(By.CSS_SELECTOR, ".ctl")]
        assert [t.split()[0] for t in titles] == [f"U+{ord(c):04X}" for c in HOSTILE if c in CONTROLS]
        text = browser.execute_script("return arguments[0].textContent", root)
        assert not [c for c in text if is_invisible(c)], view
    crumbs = browser.find_element(By.CSS_SELECTOR, ".crumbs").text
    assert crumbs.index("runs") < crumbs.index("demo 1 race") < crumbs.index("trace")  # in order


# ------------------------------------------------------------------ the small items


def test_experiments_on_a_store_without_their_tables_are_404(markup_client):
    for url in ("/api/experiments/foo", "/experiments/foo"):
        r = markup_client.get(url)
        assert r.status_code == 404, (url, r.status_code)
    assert "holds no experiments" in markup_client.get("/api/experiments/foo").json()["detail"]
    assert markup_client.get("/api/experiments").json() == []


@pytest.mark.parametrize("response", [" ", "  \n\t ", "\u3000\n"])  # "": the schema's 422
def test_a_whitespace_only_live_response_is_refused_like_oar_attribute(markup_client, response):
    r = markup_client.post("/api/attribute", json={"prompt": "a=1. find a.\n", "response": response,
                                                        "methods": ["entropy"]})
    assert r.status_code == 422
    assert r.json()["detail"] == "the response is empty; there is nothing to attribute"


def test_resample_is_not_on_the_live_pages_default_list():
    from oar_attrib.methods import available_methods

    live = WebSettings().live_methods
    assert "resample" in available_methods() and "resample" not in live
    assert "oar_p" in live and "entropy" in live


@pytest.mark.parametrize("host", ["127.0.0.2", "127.1.2.3", "::1", "localhost"])
def test_a_loopback_host_keeps_the_host_check(host, capsys):
    from oar_attrib.webapp.cli import _settings

    settings = _settings(host)
    shown = f"[{host}]" if ":" in host else host
    assert "*" not in settings.allowed_hosts and shown in settings.allowed_hosts
    assert capsys.readouterr().err == ""
    public = _settings("0.0.0.0")
    assert public.allowed_hosts == ("*",) and "anyone who can reach" in capsys.readouterr().err


def test_a_token_tooltip_names_its_controls():
    from oar_attrib.webapp.views import token_title

    title = token_title("a\u202eb\u200b", 0.5, 1.0, None)
    assert title.startswith('token "a\u27e8U+202E\u27e9b\u27e8U+200B\u27e9" | score 0.5')
    assert not [c for c in title if is_invisible(c)]


@pytest.mark.parametrize("request_bytes", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nbad header\r\n\r\n"])
def test_uvicorns_own_400_carries_the_security_headers(markup_store, request_bytes):
    """A request uvicorn cannot parse never reaches the app's middleware; `oar web`'s server
    (`server_config`) answers it with the same headers as every other answer."""
    import socket
    import threading
    import time

    import uvicorn

    from oar_attrib.webapp.cli import server_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = uvicorn.Server(server_config(create_app(markup_store[0])))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.create_connection(sock.getsockname(), timeout=10) as client:
            client.sendall(request_bytes)
            answer = b""
            while chunk := client.recv(65536):
                answer += chunk
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
    head = answer.split(b"\r\n\r\n")[0].decode().lower().split("\r\n")
    assert head[0] == "http/1.1 400 bad request", head
    assert "x-frame-options: deny" in head and "x-content-type-options: nosniff" in head
    assert any(h.startswith("content-security-policy: default-src 'self'") for h in head)
