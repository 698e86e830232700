"""Packages that export names without importing them until first use (PEP 562), and still
declare every export statically.

A package's `__init__` lists its exports once, as ordinary imports under `if TYPE_CHECKING:`
(type checkers, IDEs and the API reference read them there) and in `__all__`; at run time
`lazy_exports` reads that block from the package's own source and imports a name's module
when the name is first used. So `import oar_attrib` loads no torch, `oar --help` builds its
parsers without the web framework or TRL, and what a package exports is written in one place.
A name whose module needs an optional extra that is not installed is refused with the line
that names the extra (`extras.require_extra`).
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path


def declared_exports(source: str, package: str) -> dict[str, str]:
    """name -> absolute module of each `from MODULE import name` in the `if TYPE_CHECKING:`
    blocks of a package's `__init__` source (`package`: the package's dotted name)."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    base = package.rsplit(".", imp.level - 1)[0] if imp.level > 1 else package
                    module = f"{base}.{imp.module}" if imp.level else imp.module
                    found |= {alias.asname or alias.name: module for alias in imp.names}
    return found


def lazy_exports(package: str, init_file: str, extras: dict[str, str] | None = None):
    """(`__getattr__`, `__dir__`) for the package `package` whose `__init__` is `init_file`:
    each name of its TYPE_CHECKING imports loads on first use; `extras` maps a module to the
    extra it needs (`extras.EXTRAS`)."""
    exports = declared_exports(Path(init_file).read_text(encoding="utf-8"), package)
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = exports[name]
        extra = (extras or {}).get(module)
        if extra is not None:
            from .extras import require_extra

            require_extra(extra, f"{package}.{name}")
        found = importlib.import_module(module)
        # `from .analysis import stats` exports a submodule, which its package need not import
        value = getattr(found, name) if hasattr(found, name) else importlib.import_module(f"{module}.{name}")
        namespace[name] = value  # the next use is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
