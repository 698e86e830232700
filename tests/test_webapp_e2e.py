"""End to end in a real headless Chromium: the trace page's heatmap and Plotly charts, switching
the method recolours the tokens, the tooltip, the report's charts, hostile text staying text,
and no browser console error (a CSP violation or a script error would show there).

Needs the `chromium` binary and its `chromedriver` (Debian: `apt-get install chromium
chromium-driver`) and the `selenium` package (dev extra). Skipped only when no Chromium is
installed; nothing is ever downloaded (Selenium Manager is kept offline).
"""
import os
import shutil
import socket
import threading
import time

import pytest

from oar_attrib.store import Store
# The store the TestClient tests use (built by the demo's writer from a tiny in-code model).
from test_webapp import ids, store_path, world  # noqa: F401 - pytest fixtures

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVER_NAMES = ("chromedriver", "chromium.chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1800")

CHROMIUM = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason=(
        "no Chromium binary on PATH (looked for " + ", ".join(CHROMIUM_NAMES) + "); on Debian/"
        "Ubuntu: apt-get install -y chromium chromium-driver")),
]


@pytest.fixture(scope="module")
def server(store_path, world):
    """The web app over the test store, served by uvicorn on a free loopback port."""
    import uvicorn

    from oar_attrib.webapp import create_app

    _, tokenizer, model = world
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = create_app(store_path, model=(model, tokenizer))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=30)
    sock.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = next(filter(None, map(shutil.which, DRIVER_NAMES)), None)
    assert driver_path, ("Chromium is installed but chromedriver is not; on Debian/Ubuntu: "
                         "apt-get install -y chromium-driver")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=30.0, message=""):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition, message)


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


def _console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


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
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, lines)) == 3,
          message="the Plotly scores chart did not render its three method lines")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-advantage .main-svg")
    before = _colours(browser)
    assert len(set(before)) > 3, "the heatmap is not coloured"

    Select(browser.find_element(By.ID, "method-select")).select_by_value("entropy")
    _wait(browser, lambda d: _colours(d) != before, message="colours did not change")
    shown = browser.execute_script("return document.getElementById('heatmap').dataset.method")
    assert shown == "entropy"
    assert "method=entropy" in browser.current_url

    ActionChains(browser).move_to_element(tokens[2]).perform()
    tip = browser.find_element(By.ID, "tooltip")
    _wait(browser, lambda d: tip.is_displayed(), message="no tooltip on hover")
    assert "score" in tip.text and "weight" in tip.text and "reshaped advantage" in tip.text

    shot = tmp_path / "trace.png"
    assert browser.save_screenshot(str(shot))
    _assert_not_blank(shot)
    assert _console_errors(browser) == []


def test_report_page_renders_its_charts(server, browser, ids, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/runs/{ids['demo']}/report")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-recall .barlayer .point"),
          message="the recall chart has no bars")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-agreement .heatmaplayer image, "
                                                              "#chart-agreement .hm"),
          message="the agreement heatmap did not render")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-credit .barlayer .point")
    rows = browser.find_elements(By.CSS_SELECTOR, "#recall tbody tr")
    assert len(rows) == 4  # three methods and the random expectation
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    _assert_not_blank(shot)
    assert _console_errors(browser) == []


def test_hostile_text_stays_text_in_the_browser(server, browser, ids):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    from test_webapp import HOSTILE_RESPONSE

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
    _wait(browser, lambda d: d.find_element(By.ID, "attribute-status").text.startswith("done"),
          timeout=60, message="the live attribution did not finish")
    assert browser.find_elements(By.CSS_SELECTOR, "#attribute-result .tok[data-i]")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-scores .scatterlayer .trace"))
    assert _console_errors(browser) == []
