"""Fixtures shared across the suite."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct in float32, loaded once per run
    through the project's own catalogue (`load_model("smollm2-135m")`)."""
    from oar_attrib.models import load_model

    return load_model("smollm2-135m")
