"""The optional extras of the distribution (pyproject.toml's [project.optional-dependencies]):
which modules tell that each is installed, and the one line a use of a missing one gets.

`require_extra("web", "oar web")` raises `MissingExtraError`: "oar web needs the web extra:
pip install 'oar-attrib[web]'"; the command lines print it as it is (exit status 2), and the
lazy package faces (`lazy`) raise it for a name whose module needs the extra. Only the
standard library and `errors` are imported, so every room can ask.
"""
from __future__ import annotations

import importlib.util

from .errors import MissingExtraError

# Each extra and the modules that tell whether it is installed (not PyYAML, which the train
# extra lists but transformers installs with the core); tests/test_extras.py holds this table
# to pyproject.toml.
EXTRAS: dict[str, tuple[str, ...]] = {
    "web": ("fastapi", "uvicorn", "plotly"),
    "train": ("trl", "datasets", "accelerate"),
    "gguf": ("gguf",),
    "figures": ("matplotlib",),
    "verl": ("verl",),
}


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` (`EXTRAS`) that cannot be imported here."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, use: str) -> None:
    """Raise MissingExtraError, one line naming the extra, unless every module of `extra` is
    installed: `use` is what needs it, as the user wrote it ("oar web", "oar_attrib.webapp")."""
    if missing_modules(extra):
        raise MissingExtraError(f"{use} needs the {extra} extra: pip install 'oar-attrib[{extra}]'")
