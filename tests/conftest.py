"""Fixtures shared across the suite, and each worker's share of the cores."""
from __future__ import annotations

import os
import signal
import sys

import pytest


def _share_the_cores() -> None:
    """Under pytest-xdist (pyproject's addopts), give each worker cores / workers threads, for
    itself and the processes its tests start: two workers of two threads each on two cores
    oversubscribe them (torch's OpenMP threads spin). A thread count the user set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = str(max(1, cores // workers))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))


_share_the_cores()


def _let_ctrl_c_through() -> None:
    """A run started in the background (`pytest &`, `nohup`) starts with Ctrl-C (SIGINT)
    ignored, and an ignored signal stays ignored in every process started from there: the
    commands the Ctrl-C tests start would not see it. Python's own handler is put back here, so
    those commands start with the default disposition, as from a terminal."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_let_ctrl_c_through()


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled arith-tiny, loaded once per run through the catalogue."""
    from oar_attrib.models import load_model

    return load_model("arith-tiny")


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct in float32, loaded once per run
    through the project's own catalogue (`load_model("smollm2-135m")`)."""
    from oar_attrib.models import load_model

    return load_model("smollm2-135m")
