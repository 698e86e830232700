"""End to end in a real headless Chromium: the trace page's heatmap and Plotly charts, switching
the method recolours the tokens, the tooltip, the report's charts, hostile text staying text,
and no browser console error (a CSP violation or a script error would show there).

Needs the `chromium` binary and its `chromedriver` (Debian: `apt-get install chromium
chromium-driver`) and the `selenium` package (dev extra). Skipped only when no Chromium is
installed; nothing is ever downloaded (Selenium Manager is kept offline).
"""
import pytest

from oar_attrib.store import Store
from webtools import HOSTILE_RESPONSE, console_errors, needs_chromium, serve, stop, wait

pytestmark = [pytest.mark.slow, needs_chromium()]


@pytest.fixture(scope="module")
def server(store_path, world):
    """The web app over the test store (with the tiny model for live attribution)."""
    from oar_attrib.webapp import create_app

    _, tokenizer, model = world
    *running, url = serve(create_app(store_path, model=(model, tokenizer)))
    yield url
    stop(*running)


def _colours(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#heatmap .tok[data-i]')]"
        ".map(e => getComputedStyle(e).backgroundColor);")


def _assert_not_blank(png_path):
    from PIL import Image

    image = Image.open(png_path).convert("RGB")
    assert image.size[0] >= 800 and image.size[1] >= 600
    colours = image.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) blank"
    most = max(count for count, _ in colours)
    assert most < 0.97 * image.size[0] * image.size[1], "one colour fills the screenshot"


def test_trace_page_heatmap_charts_and_method_switch(server, browser, ids, store_path, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    trace_id = ids["demo_traces"][0]
    with Store(store_path, readonly=True) as store:
        n_tokens = store.trace(trace_id).row.n_tokens
    browser.get(f"{server}/traces/{trace_id}?method=oar_p")
    tokens = browser.find_elements(By.CSS_SELECTOR, "#heatmap .tok[data-i]")
    assert len(tokens) == n_tokens
    lines = "#chart-scores .scatterlayer .trace"
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, lines)) == 3,
          message="the Plotly scores chart did not render its three method lines")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-advantage .main-svg")
    before = _colours(browser)
    assert len(set(before)) > 3, "the heatmap is not coloured"

    Select(browser.find_element(By.ID, "method-select")).select_by_value("entropy")
    wait(browser, lambda d: _colours(d) != before, message="colours did not change")
    shown = browser.execute_script("return document.getElementById('heatmap').dataset.method")
    assert shown == "entropy"
    assert "method=entropy" in browser.current_url

    ActionChains(browser).move_to_element(tokens[2]).perform()
    tip = browser.find_element(By.ID, "tooltip")
    wait(browser, lambda d: tip.is_displayed(), message="no tooltip on hover")
    assert "score" in tip.text and "weight" in tip.text and "reshaped advantage" in tip.text

    shot = tmp_path / "trace.png"
    assert browser.save_screenshot(str(shot))
    _assert_not_blank(shot)
    assert console_errors(browser) == []


def test_the_legend_follows_the_colour_mode(server, browser, ids):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{server}/traces/{ids['demo_traces'][1]}?method=oar_p")
    legend = browser.find_element(By.ID, "colour-legend")
    wait(browser, lambda d: legend.get_attribute("data-colour") == "importance", message="no legend painted")
    assert "low importance" in legend.text
    colour = Select(browser.find_element(By.ID, "colour-select"))
    colour.select_by_value("advantage")
    wait(browser, lambda d: legend.get_attribute("data-colour") == "advantage", message="legend kept its mode")
    assert "negative A·w_t (blue)" in legend.text and "positive" in legend.text
    swatches = legend.find_elements(By.CSS_SELECTOR, ".swatch")
    blue = browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor", swatches[0])
    assert blue.startswith("rgba(31, 78, 154")  # the colour negative tokens are painted in
    Select(browser.find_element(By.ID, "scale-select")).select_by_value("rank")
    wait(browser, lambda d: "(rank)" in legend.text, message="the rank scale is not in the legend")
    colour.select_by_value("importance")
    wait(browser, lambda d: "low importance (rank)" in legend.text, message="legend did not come back")
    assert console_errors(browser) == []


def test_report_page_renders_its_charts(server, browser, ids, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/runs/{ids['demo']}/report")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-recall .barlayer .point"),
          message="the recall chart has no bars")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-agreement .heatmaplayer image, "
                                                              "#chart-agreement .hm"),
          message="the agreement heatmap did not render")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-credit .barlayer .point")
    rows = browser.find_elements(By.CSS_SELECTOR, "#recall tbody tr")
    assert len(rows) == 4  # three methods and the random expectation
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    _assert_not_blank(shot)
    assert console_errors(browser) == []


def test_hostile_text_stays_text_in_the_browser(server, browser, ids):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/traces/{ids['hostile_response']}")
    heatmap = browser.find_element(By.ID, "heatmap")
    assert heatmap.text == HOSTILE_RESPONSE
    assert not browser.find_elements(By.CSS_SELECTOR, "#heatmap img, #heatmap script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no alert() ran


def test_live_attribution_page_draws_a_heatmap(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/attribute")
    browser.find_element(By.CSS_SELECTOR, "#attribute-form button[type=submit]").click()
    wait(browser, lambda d: d.find_element(By.ID, "attribute-status").text.startswith("done"),
          timeout=60, message="the live attribution did not finish")
    assert browser.find_elements(By.CSS_SELECTOR, "#attribute-result .tok[data-i]")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-scores .scatterlayer .trace"))
    assert console_errors(browser) == []


# --------------------------------------------------------------------------- a 4000-token trace

@pytest.fixture(scope="module")
def long_server(long_store):
    from oar_attrib.webapp import create_app

    *running, url = serve(create_app(long_store))
    yield url
    stop(*running)


def _step_colours(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#steps .step')].map(e => getComputedStyle(e).backgroundColor);")


def _in_view(driver, element) -> bool:
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight;",
        element)


def test_long_trace_step_view_method_switch_strip_and_offline_export(long_server, browser, tmp_path):
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{long_server}/traces/1?method=grail")
    step_view = browser.find_element(By.ID, "step-view")
    assert step_view.is_displayed() and not browser.find_element(By.ID, "heatmap").is_displayed()
    steps = json.loads(browser.find_element(By.ID, "step-data").get_attribute("textContent"))
    blocks = browser.find_elements(By.CSS_SELECTOR, "#steps .step")
    assert len(blocks) == len(steps["steps"]) > 50
    n_tokens = steps["steps"][-1][1]
    assert n_tokens >= 4000
    before = _step_colours(browser)
    assert len(set(before)) > 10, "the steps are not coloured by their scores"
    assert browser.find_elements(By.CSS_SELECTOR, "#steps .tok.top")
    assert "answer" in blocks[-1].get_attribute("class")

    # A click opens the step's tokens in place, each coloured by its own score.
    k = 3
    blocks[k].click()
    wait(browser, lambda d: "open" in blocks[k].get_attribute("class"), message="the step did not open")
    a, b = steps["steps"][k]
    token_colours = browser.execute_script(
        "return [...arguments[0].querySelectorAll('.tok[data-i]')].map(e => getComputedStyle(e).backgroundColor);",
        blocks[k])
    assert len(token_colours) == b - a and len(set(token_colours)) > 1

    # Switching the method changes the steps' colours.
    Select(browser.find_element(By.ID, "method-select")).select_by_value("ig")
    wait(browser, lambda d: _step_colours(d) != before, message="step colours did not change")
    assert browser.find_element(By.ID, "steps").get_attribute("data-method") == "ig"

    # The overview strip scrolls to a step far down.
    target = len(blocks) - 5
    browser.execute_script("window.scrollTo(0, 0)")
    assert not _in_view(browser, blocks[target])
    browser.find_element(By.CSS_SELECTOR, f'#overview .cell[data-step="{target}"]').click()
    wait(browser, lambda d: _in_view(d, blocks[target]), message="the strip did not scroll to the step")

    shot = tmp_path / "steps.png"
    browser.execute_script("window.scrollTo(0, document.getElementById('step-view').offsetTop)")
    assert browser.save_screenshot(str(shot))
    _assert_not_blank(shot)
    assert console_errors(browser) == []

    _check_the_offline_export(browser, tmp_path, steps, k)


def _check_the_offline_export(browser, tmp_path, steps: dict, k: int) -> None:
    """The export downloads one file that opens offline and shows the same step scores (of
    `steps`, the page's step data), step `k` opening to its tokens."""
    from selenium.webdriver.common.by import By

    a, b = steps["steps"][k]
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow",
                                                            "downloadPath": str(downloads)})
    browser.find_element(By.ID, "export-html").click()
    path = downloads / "trace-1-view.html"
    wait(browser, lambda d: path.exists() and path.stat().st_size > 0, message="no download")
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        browser.get(path.as_uri())
        assert browser.find_element(By.ID, "export-method").text == "ig"
        shown = [e.get_attribute("data-score") for e in browser.find_elements(By.CSS_SELECTOR, "details.step")]
        assert len(shown) == len(steps["steps"])
        for got, want in zip(shown, steps["scores"]["ig"]):
            assert (got == "n/a" and want is None) or float(got) == pytest.approx(want, rel=1e-3)
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
        details = browser.find_elements(By.CSS_SELECTOR, "details.step")[k]
        details.find_element(By.TAG_NAME, "summary").click()
        assert details.get_attribute("open") is not None
        assert len(details.find_elements(By.CSS_SELECTOR, ".tokens span[title]")) == b - a
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
