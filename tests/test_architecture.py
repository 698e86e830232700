"""The package's shape, read from the source with `ast` (nothing is imported): the core never
imports training or the web app, the store sits below the analysis and the attribution, the
pipeline modules know nothing of the world or the analysis, the wings along the data flow
(inputs -> methods -> weights -> records) import only downward and records never the store, no
import cycle counting every import (function-level ones too), no long file."""
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


def _type_checking(node: ast.AST) -> bool:
    """An `if TYPE_CHECKING:` block: read by type checkers only, never imported at run time."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _walk(nodes):
    """Every node under `nodes`, function bodies included, except `if TYPE_CHECKING:` blocks."""
    for node in nodes:
        if _type_checking(node):
            yield from _walk(node.orelse)
            continue
        yield node
        yield from _walk(ast.iter_child_nodes(node))


def _imports(module: str, top_level_only: bool = False) -> set[str]:
    """Every oar_attrib module `module` imports (a `from x import y` counts x.y when y is a
    module), anywhere in the file (inside functions too) or, with `top_level_only`, at module
    level; imports under `if TYPE_CHECKING:` never run and do not count."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if not _type_checking(n)] if top_level_only else _walk(tree.body)
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


def test_every_package_import_names_a_module_that_exists():
    """A moved module leaves no import of its old place behind (an import of a missing
    `oar_attrib` module would otherwise be dropped by `_imports` unseen)."""
    missing = []
    for module, path in MODULES.items():
        for node in _walk(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, path, node)
                if base.startswith("oar_attrib") and base not in MODULES:
                    missing.append((module, base))
            elif isinstance(node, ast.Import):
                missing += [(module, a.name) for a in node.names
                            if a.name.startswith("oar_attrib") and a.name not in MODULES]
    assert missing == []


def test_the_module_list_is_read():
    assert {"oar_attrib.attribution", "oar_attrib.store.core", "oar_attrib.training.trainer"} <= set(MODULES)
    assert "oar_attrib.records.traces" in _imports("oar_attrib.attribution")
    assert "oar_attrib.weights.pipeline" in _imports("oar_attrib.training.reshaping")


def test_the_core_imports_neither_training_nor_the_web_app():
    bad = [(m, i) for m in MODULES if not (_inside(m, "oar_attrib.training") or _inside(m, "oar_attrib.webapp"))
           for i in _imports(m) if _inside(i, "oar_attrib.training") or _inside(i, "oar_attrib.webapp")]
    assert bad == []


def test_the_store_imports_neither_the_analysis_nor_the_attribution():
    bad = [(m, i) for m in MODULES if _inside(m, "oar_attrib.store") for i in _imports(m)
           if _inside(i, "oar_attrib.analysis") or i == "oar_attrib.attribution"]
    assert bad == []


def test_pipeline_modules_import_neither_the_world_nor_the_analysis():
    pipeline = [m for m in MODULES if _wing(m) is not None]
    assert {"oar_attrib.methods.oar_p", "oar_attrib.inputs.spans", "oar_attrib.weights.gating",
            "oar_attrib.records.traces"} <= set(pipeline)
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


def _graph() -> dict[str, set[str]]:
    # A package's __init__ runs before its modules: importing a sub-module imports it too, so
    # an edge from a module to its own package is no cycle.
    return {module: {i for i in _imports(module) if not _inside(module, i)} for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of `graph`, found one by one (each found cycle's closing edge removed)."""
    graph = {k: set(v) for k, v in graph.items()}
    found = []
    while (cycle := _cycle(graph)) is not None:
        found.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return found


def test_imports_inside_functions_are_followed():
    assert "oar_attrib.records.record" in _imports("oar_attrib.records.export")  # `write_html`, lazily
    assert "oar_attrib.records.record" not in _imports("oar_attrib.records.export", top_level_only=True)
    assert "oar_attrib.world.generator" not in _imports("oar_attrib.world.oracle")  # TYPE_CHECKING only


def test_no_import_cycle_counting_every_import():
    assert _cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}) == [["a", "b", "a"], ["b", "c", "b"]]
    assert _cycles(_graph()) == []


def test_the_method_registry_imports_none_of_its_members():
    assert _imports("oar_attrib.methods.registry") <= {"oar_attrib.errors"}
    members = {"oar_attrib.methods.oar_p", "oar_attrib.methods.oar_g", "oar_attrib.methods.baselines.random"}
    assert all("oar_attrib.methods.registry" in _imports(m) and "oar_attrib.methods" not in _imports(m)
               for m in members)


# The wings along the data flow, lowest first; a module belongs to the first wing whose name
# (a module, or a package with everything under it) it falls under.
WINGS = {
    "base": ["errors", "jsonl", "defaults"],
    "inputs": ["inputs"],
    "methods": ["methods", "lm", "budget", "generation"],
    "weights": ["weights"],
    "records": ["records"],
}
ORDER = list(WINGS)


def _wing(module: str) -> str | None:
    for wing, names in WINGS.items():
        if any(_inside(module, f"oar_attrib.{name}") for name in names):
            return wing
    return None


def test_the_wings_cover_the_pipeline_modules():
    assert _wing("oar_attrib.weights.pipeline") == "weights" and _wing("oar_attrib.methods.baselines.ig") == "methods"
    assert _wing("oar_attrib.store.core") is None and _wing("oar_attrib.training.trainer") is None
    unplaced = [m for m, p in MODULES.items()
                if p.parent == PACKAGE and p.name != "__init__.py" and _wing(m) is None]
    assert set(unplaced) == {"oar_attrib.attribution", "oar_attrib.configs", "oar_attrib.models", "oar_attrib.catalogue",
                             "oar_attrib.rollouts"}  # rollouts: questions -> graded answers, above the wings


def test_no_wing_imports_a_higher_one():
    upward = [(m, i) for m in MODULES if _wing(m) for i in _imports(m)
              if _wing(i) and ORDER.index(_wing(i)) > ORDER.index(_wing(m))]
    assert upward == []


def test_records_import_nothing_from_the_store():
    assert "oar_attrib.records.record" in _imports("oar_attrib.store.records")  # the reverse way
    found = [(m, i) for m in MODULES if _wing(m) == "records" for i in _imports(m)
             if _inside(i, "oar_attrib.store")]
    assert found == []


SOURCES = sorted(p for p in ROOT.rglob("*.py")
                 if not {"tests", ".venv", ".venv-floors", ".git", "build"} & set(p.relative_to(ROOT).parts))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_source_file_is_over_the_line_limit(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES
