"""The package's shape, read from the source with `ast` (nothing is imported): the core never
imports training or the web app, the store sits below the analysis and the attribution, the
pipeline modules know nothing of the world or the analysis, no import cycle, no long file."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "oar_attrib"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, top_level_only: bool = False) -> set[str]:
    """Every oar_attrib module `module` imports (a `from x import y` counts x.y when y is a
    module), anywhere in the file or, with `top_level_only`, at module level."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
    return {name for name in found if name in MODULES and name != module}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_module_list_is_read():
    assert {"oar_attrib.attribution", "oar_attrib.store.core", "oar_attrib.training.trainer"} <= set(MODULES)
    assert "oar_attrib.traces" in _imports("oar_attrib.attribution")
    assert "oar_attrib.methods" in _imports("oar_attrib.training.reshaping")


def test_the_core_imports_neither_training_nor_the_web_app():
    bad = [(m, i) for m in MODULES if not (_inside(m, "oar_attrib.training") or _inside(m, "oar_attrib.webapp"))
           for i in _imports(m) if _inside(i, "oar_attrib.training") or _inside(i, "oar_attrib.webapp")]
    assert bad == []


def test_the_store_imports_neither_the_analysis_nor_the_attribution():
    bad = [(m, i) for m in MODULES if _inside(m, "oar_attrib.store") for i in _imports(m)
           if _inside(i, "oar_attrib.analysis") or i == "oar_attrib.attribution"]
    assert bad == []


def test_pipeline_modules_import_neither_the_world_nor_the_analysis():
    pipeline = [m for m, p in MODULES.items() if p.parent == PACKAGE and p.name != "__init__.py"]
    assert "oar_attrib.oar_p" in pipeline
    bad = [(m, i) for m in pipeline for i in _imports(m)
           if _inside(i, "oar_attrib.world") or _inside(i, "oar_attrib.analysis")]
    assert bad == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_known_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_module_level_imports():
    graph = {}
    for module in MODULES:
        # A package's __init__ runs before its modules: importing a sub-module imports it too.
        graph[module] = {i for i in _imports(module, top_level_only=True)
                         if not _inside(module, i)}
    assert _cycle(graph) is None


SOURCES = sorted(p for p in ROOT.rglob("*.py")
                 if not {"tests", ".venv", ".venv-floors", ".git", "build"} & set(p.relative_to(ROOT).parts))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_file_is_over_the_line_limit(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES
