"""Hostile use of the web app, as a user tried it: non-finite and malformed requests, a bad
Host, a damaged or read-only store, a half-sent body, duplicate live methods, and a live model
that does not fit its tokenizer. Every answer carries the security headers and says what is
wrong (never a traceback or an internal message), and nothing stored is changed."""
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from hostile_helpers import ROOT, PY, _checkpoint, _too_many_ids, _demo_store



@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from fastapi.testclient import TestClient

    from oar_attrib.models import load_model
    from oar_attrib.webapp import create_app

    db = _demo_store(tmp_path_factory.mktemp("web"))
    app = create_app(db, model=load_model())
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield app, client


def _secure(response) -> bool:
    return (response.headers.get("x-frame-options") == "DENY"
            and "default-src 'self'" in response.headers.get("content-security-policy", "")
            and response.headers.get("x-content-type-options") == "nosniff")


@pytest.mark.parametrize("body", [
    '{"prompt": "a", "response": "b #### 1", "advantage": NaN}',
    '{"prompt": "a", "response": "b #### 1", "advantage": Infinity}',
    '{"prompt": "a", "response": "b #### 1", "advantage": -Infinity}',
    '{"prompt": "a\\ud800", "response": "b #### 1"}',
    '{"prompt": "a", "response": "b #### 1", "methods": ["oar_p\\udfff"]}',
])
def test_non_finite_numbers_and_surrogates_are_422_with_headers(web, body):
    _, client = web
    r = client.post("/api/attribute", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and _secure(r), r.text
    assert r.json()["detail"]  # valid JSON, saying what is wrong


def test_the_bad_host_reply_and_500s_carry_the_headers(web):
    from oar_attrib.webapp.deps import get_store

    app, client = web
    r = client.get("/", headers={"host": "attacker.example"})
    assert r.status_code == 400 and _secure(r)

    def broken():
        raise RuntimeError("a bug")

    app.dependency_overrides[get_store] = broken
    try:
        page, api = client.get("/"), client.get("/api/runs")
    finally:
        app.dependency_overrides.clear()
    assert page.status_code == 500 and _secure(page) and "internal error" in page.text
    assert api.status_code == 500 and _secure(api) and "a bug" not in api.text
    assert len([h for h in api.headers.raw if h[0] == b"x-frame-options"]) == 1


def test_duplicate_live_methods_run_once(web, monkeypatch):
    app, client = web
    asked = []
    real = app.state.live.run

    def recording(prompt, response, methods, *args):
        asked.append(list(methods))
        return real(prompt, response, methods, *args)

    monkeypatch.setattr(app.state.live, "run", recording)
    r = client.post("/api/attribute", json={"prompt": "a=4. find a.\n", "response": "a=4. #### 4",
                                            "methods": ["entropy"] * 6 + ["oar_p", "entropy"]})
    assert r.status_code == 200 and asked == [["entropy", "oar_p"]]


def test_a_damaged_store_answers_503_and_the_error_page(tmp_path):
    from fastapi.testclient import TestClient

    from oar_attrib.webapp import create_app

    db = _demo_store(tmp_path, n_batches=20)
    data = bytearray(db.read_bytes())
    for page in range(3, len(data) // 4096):  # keep the header and schema pages, damage the rest
        data[page * 4096 + 100: page * 4096 + 4000] = bytes([0xA5]) * 3900
    db.write_bytes(bytes(data))
    with TestClient(create_app(db), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as client:
        page, api = client.get("/"), client.get("/api/runs")
    assert page.status_code == 503 and "the store could not be read" in page.text and _secure(page)
    assert api.status_code == 503 and "could not be read" in api.json()["detail"] and _secure(api)


def _read_runs_without_write_rights(db: Path, root: Path = ROOT) -> subprocess.CompletedProcess:
    """A subprocess that may not write `db`'s folder (root without its file-permission
    capabilities), serving `db` with the web app and listing its runs."""
    code = ("import sys; from fastapi.testclient import TestClient; "
            "from oar_attrib.webapp import create_app; "
            "c = TestClient(create_app(sys.argv[1]), base_url='http://127.0.0.1'); c.__enter__(); "
            "r = c.get('/api/runs'); print(r.status_code, len(r.json()))")
    prefix = []
    if os.geteuid() == 0:
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "--"]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.run([*prefix, PY, "-c", code, str(db)], capture_output=True, text=True,
                          env=env, timeout=120)


def _copy_with_hot_wal(db: Path, folder: Path) -> Path:
    """A copy of `db` as a killed writer leaves it: a commit still only in the -wal file (a
    second run), and no -shm file."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("INSERT INTO runs (name, model, config, created) VALUES ('late', '', '{}', '')")
    shutil.copy(db, folder / "ro.db")
    shutil.copy(f"{db}-wal", folder / "ro.db-wal")
    conn.close()
    return folder / "ro.db"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"),
                    reason="root ignores file permissions and setpriv is missing")
@pytest.mark.parametrize("hot_wal", [False, True])
def test_a_read_only_store_is_served(tmp_path, hot_wal):
    folder = tmp_path / "shared"
    folder.mkdir()
    src = _demo_store(tmp_path)
    db = _copy_with_hot_wal(src, folder) if hot_wal else Path(shutil.copy(src, folder / "ro.db"))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    for p in folder.iterdir():
        os.chmod(p, 0o444)
    os.chmod(folder, 0o555)
    try:
        got = _read_runs_without_write_rights(db)
    finally:
        os.chmod(folder, 0o755)
    # With a hot WAL and no way to make its -shm, the store is read as it was at the last
    # checkpoint (the run still only in the WAL is not shown); without, every run is.
    assert got.returncode == 0 and got.stdout.split() == ["200", "1"], got.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written


def test_a_half_sent_body_is_answered_408():
    import asyncio

    from oar_attrib.webapp.security import BodyLimitMiddleware

    async def app(scope, receive, send):
        raise AssertionError("the app must not run on a partial body")

    sent = []

    async def main():
        parts = [{"type": "http.request", "body": b'{"prompt": ', "more_body": True}]

        async def receive():
            if parts:
                return parts.pop()
            await asyncio.sleep(3600)  # the client never sends the rest

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "headers": [], "path": "/api/attribute"}
        await BodyLimitMiddleware(app, max_bytes=1000, read_timeout=0.05)(scope, receive, send)

    asyncio.run(asyncio.wait_for(main(), 5))
    assert sent[0]["status"] == 408 and b"not received within 0.05 s" in sent[1]["body"]


def test_the_live_api_shares_the_model_check(tmp_path):
    from fastapi.testclient import TestClient

    from oar_attrib.errors import ModelLoadError
    from oar_attrib.models import load_model
    from oar_attrib.webapp import create_app

    db = _demo_store(tmp_path)
    folder = _checkpoint(tmp_path, "ckpt")
    _too_many_ids(folder)
    app = create_app(db, model=str(folder))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        app.state.live_loader.join(60)
        r = client.post("/api/attribute", json={"prompt": "a=1. find a.\n", "response": "a=1. #### 1"})
    assert r.status_code == 503 and "embedding only 317 rows" in r.json()["detail"]
    model, tokenizer = load_model()
    tokenizer.add_tokens(["zzz"])
    with pytest.raises(ModelLoadError, match="embedding only 317 rows"):
        create_app(db, model=(model, tokenizer))


# ------------------------------------------------------------------ round 3: long traces, bidi names


def test_a_trace_past_the_page_limits_is_413_before_it_is_read(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from oar_attrib.store import Store
    from oar_attrib.webapp import WebSettings, create_app

    db = _demo_store(tmp_path)
    with Store(db, readonly=True) as store:
        trace = store.trace_ids(1)[0]
        tokens, chars = store.trace_size(trace)
    assert tokens == len(store.trace(trace).tokens)
    settings = WebSettings(max_trace_tokens=tokens - 1)
    app = create_app(db, settings=settings)

    def never(self, trace_id):
        raise AssertionError("the trace was read")

    monkeypatch.setattr(Store, "trace", never)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get(f"/traces/{trace}")
        api = client.get(f"/api/traces/{trace}")
        export = client.get(f"/api/traces/{trace}/export/tokens.csv")
    assert page.status_code == api.status_code == export.status_code == 413
    assert _secure(page) and len(page.content) < 20_000
    detail = api.json()["detail"]
    assert detail.startswith(f"trace {trace} has {tokens} tokens and {chars} characters, more than the "
                             f"web app shows ({tokens - 1} tokens")
    chars_app = create_app(db, settings=WebSettings(max_trace_chars=chars - 1))
    with TestClient(chars_app, base_url="http://127.0.0.1") as client:
        assert client.get(f"/traces/{trace}").status_code == 413


def test_the_credit_profile_page_isolates_a_bidi_run_name(tmp_path):
    from fastapi.testclient import TestClient

    from oar_attrib.records.export import is_invisible
    from oar_attrib.webapp import create_app

    db = _demo_store(tmp_path)
    with sqlite3.connect(db) as conn:  # the run named as a hostile user names one
        conn.execute("UPDATE runs SET name = ? WHERE id = 1", ("race\u202e / credit",))
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        html = client.get("/runs/1/profiles").text
    crumbs = html[html.index('<p class="crumbs">'):]
    crumbs = crumbs[:crumbs.index("</p>")]
    assert ('<bdi>race<span class="ctl" title="U+202E RIGHT-TO-LEFT OVERRIDE">\u25c7</span> / credit</bdi>'
            in crumbs) and crumbs.endswith("/ credit profiles")
    assert not [c for c in html if is_invisible(c)]
