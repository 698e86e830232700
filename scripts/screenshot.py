"""Screenshots of the web app for the README and the docs, in headless Chromium (no network needed).

    oar demo --build-only                  # prints the demo store's path
    python scripts/screenshot.py --store PATH --out docs/img
    python scripts/build_long_store.py --out long.db        # a ~4000-token trace
    python scripts/screenshot.py --long-store long.db --out docs/img

Serves the store on a free loopback port, opens a trace page (the first trace whose answer is
right, else the first) and the run's report, and saves one PNG of each. With --long-store,
saves the step view of that store's first trace (webapp-steps.png), one step opened.
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
    parser.add_argument("--store", help="run store (.db) to show")
    parser.add_argument("--long-store", help="store of long traces: screenshot its step view")
    parser.add_argument("--method", default="oar_p_step", help="method of the step view")
    parser.add_argument("--out", default="docs/img", help="folder of the PNG files")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1100)
    args = parser.parse_args()
    if not (args.store or args.long_store):
        parser.error("pass --store (the demo's pages) and/or --long-store (the step view)")

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

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
        if args.store:
            demo_pages(driver, args.store, out)
        if args.long_store:
            step_view(driver, args.long_store, args.method, out)
    finally:
        driver.quit()


def demo_pages(driver, store_path: str, out: Path) -> None:
    from oar_attrib.store import Store

    with Store(store_path) as store:
        run = store.runs()[0]
        traces = store.trace_ids(run.id)
        right = [i for i in traces if store.trace(i).row.correct]
        trace_id = (right or traces)[0]
    server, url = serve(store_path)
    try:
        for name, path in (("trace", f"/traces/{trace_id}"), ("report", f"/runs/{run.id}/report")):
            driver.get(url + path)
            time.sleep(2.0)  # Plotly draws after load
            driver.save_screenshot(str(out / f"webapp-{name}.png"))
            print(out / f"webapp-{name}.png")
    finally:
        server.should_exit = True


def step_view(driver, store_path: str, method: str, out: Path) -> None:
    from oar_attrib.store import Store

    with Store(store_path) as store:
        trace_id = store.trace_ids(store.runs()[0].id)[0]
    server, url = serve(store_path)
    try:
        driver.get(f"{url}/traces/{trace_id}?method={method}")
        time.sleep(2.0)
        # Open the highest-scoring of the first steps, and show the strip above the steps.
        driver.execute_script("""
            const steps = JSON.parse(document.getElementById('step-data').textContent);
            const method = document.getElementById('method-select').value;
            const first = (steps.levels[method] || []).slice(0, 12);
            const k = first.indexOf(Math.max(...first.filter((v) => v !== null)));
            document.getElementById('step-' + Math.max(k, 0)).click();
            const note = document.getElementById('random-weights');
            window.scrollTo(0, (note || document.querySelector('form.controls')).offsetTop - 10);""")
        time.sleep(1.0)
        driver.save_screenshot(str(out / "webapp-steps.png"))
        print(out / "webapp-steps.png")
    finally:
        server.should_exit = True


if __name__ == "__main__":
    main()
