"""Fixtures shared across the suite, and each worker's share of the cores."""
from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct in float32, loaded once per run
    through the project's own catalogue (`load_model("smollm2-135m")`)."""
    from oar_attrib.models import load_model

    return load_model("smollm2-135m")
