"""Fixtures of the hostile tests: forty world problems and a guard that fails a test whose
model is loaded before its arguments are checked (helpers: hostile_helpers.py)."""
import pytest

from oar_attrib.world import generate_problems


@pytest.fixture(scope="module")
def problems():
    return generate_problems(40, "default", seed=11)


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if a model is loaded (checks must come first)."""
    import oar_attrib.models

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(oar_attrib.models, "load_model", refuse)
