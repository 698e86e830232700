"""Fixtures of the hostile tests: forty world problems, a guard that fails a test whose model
is loaded before its arguments are checked, and `oar`/`refused`/`snapshot` for a command's
one-line refusal that changes nothing (plain helpers: hostile_helpers.py)."""
import pytest

from oar_attrib import cli
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


@pytest.fixture
def oar(capsys):
    """`oar(*argv)` -> (exit code, the stderr lines that are ours), asserting no traceback."""
    def run(*argv) -> tuple[int, list[str]]:
        code = cli.main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return code, [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]

    return run


@pytest.fixture
def refused(oar):
    """`refused(*argv, words=(...))` -> the one line `oar argv` exits 2 with, holding `words`."""
    def check(*argv, words=()) -> str:
        code, lines = oar(*argv)
        assert code == 2 and len(lines) == 1, (code, lines)
        for word in words:
            assert word in lines[0], lines[0]
        return lines[0]

    return check


@pytest.fixture
def snapshot():
    """`snapshot(folder)` -> {relative path: bytes} of every file under it (nothing changed?)."""
    from pathlib import Path

    def take(folder) -> dict:
        root = Path(folder)
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    return take
