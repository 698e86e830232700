"""Screenshots of the web app for the README, in headless Chromium (no network needed).

    oar demo --build-only                  # prints the demo store's path
    python scripts/screenshot.py --store PATH --out docs/img

Serves the store on a free loopback port, opens a trace page (the first trace whose answer is
right, else the first) and the run's report, and saves one PNG of each.
"""
from __future__ import annotations

import argparse
import shutil
import socket
import threading
import time
from pathlib import Path


def serve(store: str):
    import uvicorn

    from oar_attrib.webapp import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="run store (.db) to show")
    parser.add_argument("--out", default="docs/img", help="folder of the PNG files")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1100)
    args = parser.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from oar_attrib.store import Store

    with Store(args.store) as store:
        run = store.runs()[0]
        traces = store.trace_ids(run.id)
        right = [i for i in traces if store.trace(i).row.correct]
        trace_id = (right or traces)[0]
    server, url = serve(args.store)
    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={args.width},{args.height}"):
        options.add_argument(flag)
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))))
    options.binary_location = binary
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name, path in (("trace", f"/traces/{trace_id}"), ("report", f"/runs/{run.id}/report")):
            driver.get(url + path)
            time.sleep(2.0)  # Plotly draws after load
            driver.save_screenshot(str(out / f"webapp-{name}.png"))
            print(out / f"webapp-{name}.png")
    finally:
        driver.quit()
        server.should_exit = True


if __name__ == "__main__":
    main()
