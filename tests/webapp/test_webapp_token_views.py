"""The trace page's views beside importance on an imported run: log-probability, entropy, the
reshaped advantage and TRL's entropy top-20% mask as colours and charts, the rank scale, and
method-vs-entropy agreement; through TestClient and in a real headless Chromium."""
import json
import re

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from oar_attrib import cli
from oar_attrib.weights.gating import entropy_topk_mask
from oar_attrib.store import Store
from oar_attrib.webapp import create_app
from oar_attrib.webapp.token_views import rank_levels, token_views
from models import write_verl_dump
from webtools import BASE, console_errors, needs_chromium, serve, stop, wait


@pytest.fixture(scope="module")
def imported_store(tmp_path_factory):
    """A verl-layout dump imported and attributed in place (oar_p, entropy, oar_g) with the
    bundled arith-tiny model; the step-1 file is then imported bare again as run 2 (traces 13-18) (no statistics)."""
    root = tmp_path_factory.mktemp("views")
    write_verl_dump(root / "rollouts", steps=(1, 2))
    db = root / "runs.db"
    assert cli.main(["import", "verl", str(root / "rollouts"), "--out", str(db)]) == 0
    assert cli.main(["attribute", "--store", str(db), "--run", "1",
                     "--methods", "oar_p", "entropy", "oar_g"]) == 0
    assert cli.main(["import", "verl", str(root / "rollouts" / "1.jsonl"), "--out", str(db)]) == 0
    return db


@pytest.fixture(scope="module")
def client(imported_store):
    with TestClient(create_app(imported_store), base_url=BASE) as c:
        yield c


def page_payload(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)
    return json.loads(block.group(1))


def test_rank_levels_by_hand():
    levels = rank_levels([5.0, 0.1, 0.2, 900.0, 0.2, 7.0], [True, True, True, True, True, False])
    # Ranks 4, 1, 2.5, 5, 2.5 of five values: (rank - 1) / 4; the unscored token has none.
    assert levels == [0.75, 0.0, 0.375, 1.0, 0.375, None]
    assert rank_levels([3.0], [True]) == [1.0] and rank_levels([1.0, 2.0], [False, False]) == [None, None]


def test_views_of_a_stored_trace(imported_store):
    with Store(imported_store, readonly=True) as store:
        record = store.trace(1)
    views = token_views(record)
    stats = views["stats"]
    scored = np.asarray(record.scored)
    assert scored.any() and len(stats["logprob"]) == record.row.n_tokens
    want = entropy_topk_mask(torch.as_tensor(record.token_stats["entropy"]), torch.as_tensor(scored), rho=0.2)
    assert stats["entropy_top"] == [bool(w) and bool(s) for w, s in zip(want.tolist(), scored)]
    assert sum(stats["entropy_top"]) == int(np.ceil(0.2 * scored.sum()))
    # The entropy baseline scores the same entropy: a perfect rank agreement.
    assert stats["agreement"]["entropy"] == pytest.approx(1.0)
    assert -1 <= stats["agreement"]["oar_p"] <= 1
    # Surprisal levels: the least likely token is 1, the most likely 0.
    surprisal = -np.asarray(record.token_stats["logprob"])
    assert stats["levels"]["logprob"][int(surprisal.argmax())] == 1.0
    assert stats["levels"]["logprob"][int(surprisal.argmin())] == 0.0


def test_trace_page_carries_the_views(client, imported_store):
    html = client.get("/traces/1").text
    assert 'id="colour-select"' in html and 'id="chart-policy"' in html
    assert 'value="logprob" disabled' not in html
    with Store(imported_store, readonly=True) as store:
        assert page_payload(html)["views"] == json.loads(json.dumps(token_views(store.trace(1))))
    bare = client.get("/traces/13").text  # run 2: imported, never attributed
    assert 'id="no-token-stats"' in bare and 'value="logprob" disabled' in bare
    assert page_payload(bare)["views"]["stats"] is None


# --------------------------------------------------------------------------- in Chromium

@pytest.fixture(scope="module")
def served(imported_store):
    *running, url = serve(create_app(imported_store))
    yield url
    stop(*running)


def _alphas(driver, rgb: str) -> list[float | None]:
    """Each heatmap token's background alpha when its colour is `rgb` ('230, 85, 13'), 0 when
    transparent, None for another colour."""
    colours = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap .tok[data-i]')]"
        ".map(e => getComputedStyle(e).backgroundColor);")
    out = []
    for c in colours:
        m = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", c)
        if c in ("rgba(0, 0, 0, 0)", "transparent"):
            out.append(0.0)
        elif m and ", ".join(m.groups()[:3]) == rgb:
            out.append(float(m.group(4) or 1))
        else:
            out.append(None)
    return out


@pytest.mark.slow
@needs_chromium()
def test_trace_page_shows_logprob_entropy_and_advantage_views(served, browser, imported_store):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with Store(imported_store, readonly=True) as store:
        record = store.trace(2)
    stats = token_views(record)["stats"]
    browser.get(f"{served}/traces/2?method=oar_p")
    browser.find_element(By.ID, "view-tokens").click()
    lines = "#chart-policy .scatterlayer .trace"
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, lines)) == 3,
          message="the policy chart did not draw log-probability, entropy and the top-20% marks")
    names = browser.execute_script(
        "return document.getElementById('chart-policy').data.map(t => t.name);")
    assert names == ["log-probability", "entropy (nats)", "entropy top 20%"]
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-advantage .scatterlayer .trace")
    assert "oar_p vs entropy" in browser.find_element(By.ID, "entropy-agreement").text
    colour_by = Select(browser.find_element(By.ID, "colour-select"))

    for view in ("logprob", "entropy"):
        colour_by.select_by_value(view)
        want = [0.06 + 0.84 * v for v in stats["levels"][view]]
        wait(browser, lambda d: _alphas(d, "230, 85, 13") == pytest.approx(want, abs=0.01),
              message=f"the tokens are not coloured by {view}")

    colour_by.select_by_value("entropy_top")
    want = [0.9 if k else 0.0 for k in stats["entropy_top"]]
    wait(browser, lambda d: [a or 0.0 for a in _alphas(d, "230, 85, 13")] == pytest.approx(want, abs=0.01),
          message="the entropy top-20% tokens are not the coloured ones")

    # Reshaped advantage: orange where A·w_t > 0, blue where < 0, the largest |A·w_t| darkest.
    colour_by.select_by_value("advantage")
    adv = np.asarray(record.attributions["oar_p"].token_advantages)
    assert record.row.advantage != 0
    hue = "230, 85, 13" if record.row.advantage > 0 else "31, 78, 154"
    wait(browser, lambda d: max(a or 0 for a in _alphas(d, hue)) == pytest.approx(0.9, abs=0.01),
          message="the reshaped-advantage view did not colour the tokens")
    alphas = _alphas(browser, hue)
    scored = np.asarray(record.scored)
    assert int(np.argmax(np.where(scored, np.abs(adv), -1))) == int(np.argmax([a or 0 for a in alphas]))

    # The rank scale spreads the colours: as many distinct shades as distinct values.
    colour_by.select_by_value("importance")
    Select(browser.find_element(By.ID, "scale-select")).select_by_value("rank")
    ranks = token_views(record)["rank"]["oar_p"]
    wait(browser, lambda d: [a for a, r in zip(_alphas(d, "230, 85, 13"), ranks) if r is not None]
          == pytest.approx([0.06 + 0.84 * r for r in ranks if r is not None], abs=0.01),
          message="the rank scale did not recolour the tokens")
    assert console_errors(browser) == []


def test_profiles_page_and_exports(client, imported_store):
    import io

    import pandas as pd

    from oar_attrib.analysis.profiles import credit_profile, profile_rows

    with Store(imported_store, readonly=True) as store:
        want = credit_profile(store.iter_traces(1), "oar_g", bins=10)
    got = client.get("/api/runs/1/profiles?method=oar_g&bins=10").json()
    assert {k: got[k] for k in want} == json.loads(json.dumps(want))
    assert got["steps"] == [1, 2] and got["n_traces"] == 12
    table = pd.read_csv(io.StringIO(client.get("/api/runs/1/profiles.csv?method=oar_g&bins=10").text))
    rows = pd.DataFrame(profile_rows(want))
    assert table.shape == rows.shape
    np.testing.assert_allclose(table["mean_weight"].astype(float), rows["mean_weight"].astype(float))
    html = client.get("/runs/1/profiles?method=oar_g&bins=10").text
    assert 'id="chart-position"' in html and 'id="chart-step-position"' in html
    assert 'href="/runs/1/profiles"' in client.get("/runs/1").text
    assert 'id="no-profile"' in client.get("/runs/2/profiles").text
    assert client.get("/runs/1/profiles?method=%3Cb%3E").status_code == 422
    assert client.get("/api/runs/1/profiles?bins=0").status_code == 422


@pytest.mark.slow
@needs_chromium()
def test_profiles_page_draws_its_charts(served, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/runs/1/profiles?method=oar_p")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#chart-position .scatterlayer .trace")) == 4,
          message="the positional profile did not draw all, correct, wrong and uniform")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-step-position .hm, "
                                                              "#chart-step-position .heatmaplayer image"),
          message="the step x position heatmap did not render")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-concentration .scatterlayer .trace")
    assert console_errors(browser) == []


def test_token_table_as_parquet(client, imported_store):
    import io

    import pandas as pd

    table = pd.read_parquet(io.BytesIO(client.get("/api/runs/1/tokens.parquet").content))
    with Store(imported_store, readonly=True) as store:
        tokens = store.frame("tokens", run_id=1)
        records = list(store.iter_traces(1))
    assert len(table) == len(tokens) == sum(r.row.n_tokens for r in records)
    for column in ("trace_id", "token", "segment", "score_oar_p", "weight_oar_g", "advantage_entropy"):
        assert table[column].tolist() == pytest.approx(tokens[column].tolist()) \
            if table[column].dtype.kind == "f" else table[column].tolist() == tokens[column].tolist()
    np.testing.assert_allclose(table["logprob"], np.concatenate([r.token_stats["logprob"] for r in records]))
    assert table["step"].tolist() == [r.row.step for r in records for _ in range(r.row.n_tokens)]
    bare = pd.read_parquet(io.BytesIO(client.get("/api/runs/2/tokens.parquet").content))
    assert len(bare) and bare["logprob"].isna().all() and "score_oar_p" not in bare
    assert client.get("/api/runs/99/tokens.parquet").status_code == 404
