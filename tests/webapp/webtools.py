"""What the web tests share beside their fixtures (tests/webapp/conftest.py): the hostile texts
of the test store, the loopback server, and the headless-Chromium helpers."""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

METHODS = ("entropy", "oar_p", "random")
SCRIPT = "<script>alert('owned')</script>"
IMG = '<img src=x onerror="alert(1)">'
HOSTILE_RESPONSE = f"a=1+2=3. {SCRIPT} b=3*2=6. {IMG} #### 9"
HOSTILE_PROMPT = f"{SCRIPT}</pre>{IMG} find a+b.\n"
BASE = "http://127.0.0.1"
# The 4000-token store's methods, the fast ones: OAR-P, step-level OAR-P and the full-vocabulary
# entropy each cost minutes at 4000 tokens on a CPU (scripts/build_long_store.py runs them all);
# what the pages draw does not depend on which methods filled the store.
LONG_METHODS = ("oar_g", "grail", "ig", "random")

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVER_NAMES = ("chromedriver", "chromium.chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1800")
CHROMIUM = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
NO_CHROMIUM = ("no Chromium binary on PATH (looked for " + ", ".join(CHROMIUM_NAMES) + "); on "
               "Debian/Ubuntu: apt-get install -y chromium chromium-driver")
# CI installs Chromium (.ci/run) and sets OAR_REQUIRE_BROWSER=1: there a missing browser fails
# the browser tests instead of skipping them, so they can never pass by not running.
REQUIRE_BROWSER = os.environ.get("OAR_REQUIRE_BROWSER") == "1"


def needs_chromium():
    """The mark of a browser test: skipped without Chromium, unless REQUIRE_BROWSER (then it
    runs, and the `browser` fixture fails it)."""
    return pytest.mark.skipif(CHROMIUM is None and not REQUIRE_BROWSER, reason=NO_CHROMIUM)


def serve(app):
    """(server, thread, socket, url) of `app` served by uvicorn on a free loopback port."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    return server, thread, sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def stop(server, thread, sock) -> None:
    server.should_exit = True
    thread.join(timeout=30)
    sock.close()


def wait(driver, condition, timeout=30.0, message=""):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition, message)


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
