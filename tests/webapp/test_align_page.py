"""The gradient-alignment pages (/align): a result folder made from known vectors, its
statistics as the API serves them, and a hostile method label rendered as text."""
import json
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

from oar_attrib.reports.align import summarise
from oar_attrib.store import Store
from oar_attrib.webapp import WebSettings, create_app
from align_data import random_batches, write_store

HOSTILE = "<img src=x onerror=alert(1)>"
BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("align")
    rng = np.random.default_rng(0)
    star = rng.normal(size=30)
    halves = (star + 0.3 * rng.normal(size=30), star - 0.3 * rng.normal(size=30))
    batches = random_batches(rng, 24, 30, methods=("none", "oar_g", HOSTILE))
    for batch in batches:  # gradients with signal along g*, so that the ratios to GRPO's are defined
        batch.update({m: (pos + 0.3 * star, neg) for m, (pos, neg) in batch.items()})
    write_store(root / "smollm2", star, batches, pool_halves=halves)
    (root / "unfinished").mkdir()
    (root / "unfinished" / "record.json").write_text("{}")  # no reference yet: not listed
    return root


@pytest.fixture(scope="module")
def client(folders, tmp_path_factory):
    store = tmp_path_factory.mktemp("db") / "empty.db"
    Store(store).close()
    with TestClient(create_app(store, settings=WebSettings(align_results=(str(folders),))), base_url=BASE) as c:
        yield c


def test_the_list_links_finished_results_only(client):
    page = client.get("/align")
    assert page.status_code == 200 and 'href="/align/smollm2"' in page.text and "unfinished" not in page.text
    assert client.get("/api/align").json() == ["smollm2"]


def test_the_page_shows_the_paired_differences_and_the_api_mirrors_them(client, folders):
    api = client.get("/api/align/smollm2").json()
    assert api["methods"]["oar_g"]["delta_cos"] == summarise(folders / "smollm2", n_boot=2000)["methods"]["oar_g"]["delta_cos"]
    page = client.get("/align/smollm2")
    assert page.status_code == 200
    for table in ("align-methods", "align-bias", "align-power"):
        assert f'id="{table}"' in page.text
    mean = api["methods"]["oar_g"]["delta_cos"]["mean"]
    assert f"{mean:+.4f}" in page.text
    payload = re.search(r'<script type="application/json" id="align-data">(.*?)</script>', page.text, re.S).group(1)
    assert json.loads(payload)["methods"].keys() == api["methods"].keys()


def test_the_page_shows_the_step_the_signs_and_gstar_noise(client):
    """The step table (ratios and the words that read them), the by-sign t-tests and the g*-noise
    table with where its variance came from, each figure as the API serves it."""
    from oar_attrib.reports.align_reading import step_sentence

    api = client.get("/api/align/smollm2").json()
    page = client.get("/align/smollm2").text
    for table in ("align-step", "align-sign", "align-gstar", "align-words"):
        assert f'id="{table}"' in page
    step = api["methods"]["oar_g"]["step"]
    for key in ("signal_ratio", "second_moment_ratio", "gain"):
        c = step[key]
        assert f"×{c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}]" in page
    assert step_sentence("oar_g", step).replace("'", "&#39;") in page
    pos = api["methods"]["oar_g"]["pos"]["delta_cos"]
    assert f"{pos['p_t_holm']:.4f}" in page and api["by_sign"]["family"] == 4
    noise = api["methods"]["oar_g"]["delta_cos"]["with_gstar_noise"]
    assert noise["gstar_from"] in ("estimate", "spread") and f"{noise['gstar_sd']:.4f}" in page


def test_a_hostile_method_label_is_text(client):
    page = client.get("/align/smollm2").text
    assert HOSTILE not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_unknown_result_is_404(client):
    assert client.get("/align/nope").status_code == 404
    assert client.get("/api/align/nope").status_code == 404
