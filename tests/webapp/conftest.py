"""Fixtures of the web tests: the tiny world and its store (right and wrong answers, hostile
text), the 4000-token store, and one headless Chromium for every browser test."""
from __future__ import annotations

import os
import shutil

import pytest

from models import tiny_world, wrong_solution
from shared_data import shared_folder
from webtools import (CHROMIUM, DRIVER_NAMES, FLAGS, HOSTILE_PROMPT, HOSTILE_RESPONSE, LONG_METHODS, METHODS, NO_CHROMIUM,
                      REQUIRE_BROWSER)


@pytest.fixture(scope="module")
def world():
    return tiny_world(n=6, seed=5)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory, world):
    """Run 1 ('demo'): right and wrong answers to 4 problems and one hostile response, with
    the oracle and summaries. Run 2 ('hostile'): a hostile prompt, and a response without an
    answer span."""
    from oar_attrib.attribution import attribute
    from oar_attrib.store import Store
    from oar_attrib.webapp.demo import DemoConfig, write_problem_run

    problems, tokenizer, model = world
    owners = [p for p in problems[:4] for _ in (0, 1)] + [problems[4]]
    texts = [t for p in problems[:4] for t in (p.solution, wrong_solution(p))] + [HOSTILE_RESPONSE]
    path = tmp_path_factory.mktemp("web") / "web.db"
    with Store(path) as store:
        write_problem_run(store, model, tokenizer, owners, texts, group_size=2,
                          config=DemoConfig(model="tiny", methods=METHODS))
        run = store.add_run("hostile <b>run</b>", model="tiny")
        traces = attribute(model, tokenizer, [HOSTILE_PROMPT, problems[5].prompt],
                           [HOSTILE_RESPONSE, "no answer here a=1+1=2."], list(METHODS))
        store.add_traces(run, traces)
    return path


@pytest.fixture(scope="module")
def ids(store_path):
    from oar_attrib.store import Store

    with Store(store_path, readonly=True) as store:
        demo, hostile = sorted(r.id for r in store.runs())
        demo_ids, hostile_ids = store.trace_ids(demo), store.trace_ids(hostile)
    return {"demo": demo, "hostile": hostile, "demo_traces": demo_ids,
            "hostile_response": demo_ids[-1], "hostile_prompt": hostile_ids[0],
            "no_span": hostile_ids[1]}


@pytest.fixture(scope="session")
def long_store(tmp_path_factory):
    """A store of one ~4000-token trace (random weights), built once per session."""
    from longtrace import build_long_store

    path = tmp_path_factory.mktemp("long") / "long.db"
    build_long_store(path, shared=shared_folder(), n_traces=1, methods=LONG_METHODS)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium (Selenium, offline) for a module's browser tests; they skip without
    a Chromium binary."""
    if CHROMIUM is None:
        (pytest.fail if REQUIRE_BROWSER else pytest.skip)(NO_CHROMIUM)
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
