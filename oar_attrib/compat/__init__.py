"""Compatibility with the libraries oar-attrib builds on, one module per dependency family:
its supported range (`<LIB>_MIN`, `<LIB>_MAX`, what pyproject.toml requires; a test holds them
equal), the version it was checked on (`<LIB>_CHECKED_ON`), the private names it reaches and the
adaptors between versions, in one place.

- `compat.transformers`: transformers (the chat template's sandbox, the KV cache's keyword and
  layers, `logits_to_keep`), used from the inputs up;
- `training.compat`: TRL (the `GRPOTrainer` internals the trainer hooks), training only;
- `training.verl.verl_private`: verl (the plugin's seam), its extra only.

This module is the checker they share: `private_names_missing` says which listed private names
the installed library lacks, `version_line` is the one line a missing name is refused with.
"""
from __future__ import annotations

import importlib
import inspect
import re
from typing import Sequence


def _owner(module: str, path: list[str]):
    owner = importlib.import_module(module)
    for part in path:
        owner = getattr(owner, part, None)
    return owner


def _present(name: str) -> bool:
    """Whether `module:Owner.attr` exists: an attribute of the module or the class, or an
    attribute the class's module assigns to its instances (`self.attr = ...`)."""
    module, dotted = name.split(":")
    *path, attr = dotted.split(".")
    owner = _owner(module, path)
    if owner is None:
        return False
    if hasattr(owner, attr):
        return True
    source = inspect.getsource(inspect.getmodule(owner)) if inspect.isclass(owner) else ""
    return re.search(rf"\bself\.{re.escape(attr)}\s*(:[^=\n]*)?=[^=]", source) is not None


def private_names_missing(names: Sequence[str]) -> list[str]:
    """The names of `names` (`module:attr` or `module:Class.attr`) the installed library lacks."""
    return [name for name in names if not _present(name)]


def version_line(library: str, checked_on: str, missing: Sequence[str]) -> str:
    """The one line a missing private name gets: which names, the installed version and the
    versions the seam was checked on."""
    installed = importlib.import_module(library).__version__
    return (f"{library} {installed} lacks {', '.join(missing)}, private names oar-attrib reaches "
            f"(checked on {library} {checked_on}); install a {library} version it was checked on")
