"""The instrument wing's functions, read from the source with `ast` (issue 49): none takes more
than MAX_PARAMETERS parameters and none reads an argparse namespace (`args.x`): a settings
object, the one the parser built, carries the rest. Each check is also run on a planted
violation, to show that it can fail."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WING = ROOT / "oar_attrib" / "instruments"
MAX_PARAMETERS = 8  # self and cls not counted; *args and **kwargs one each


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    given = node.args
    names = [a.arg for a in given.posonlyargs + given.args + given.kwonlyargs]
    bound = bool(names) and names[0] in ("self", "cls")
    return len(names) - bound + (given.vararg is not None) + (given.kwarg is not None)


def _violations(source: str, where: str = "<planted>") -> list[str]:
    """'where:line name: N parameters' for each function over MAX_PARAMETERS and
    'where:line args.x' for each attribute read off a name `args`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) > MAX_PARAMETERS:
            found.append((node.lineno, f"{node.name}: {_parameters(node)} parameters"))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
            found.append((node.lineno, f"args.{node.attr}"))
    return [f"{where}:{line} {what}" for line, what in sorted(found)]


def test_the_check_finds_a_planted_long_signature_and_a_namespace_read():
    planted = ("def wide(a, b, c, d, e, f, g, h, i):\n    return args.model\n"
               "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        return a\n"
               "def star(a, b, c, d, e, f, g, *rest, **more):\n    return rest\n")
    assert _violations(planted) == ["<planted>:1 wide: 9 parameters", "<planted>:2 args.model",
                                    "<planted>:6 star: 9 parameters"]
    assert _violations("def fine(a, b, c, d, e, f, g, *, h):\n    return settings.model\n") == []


def test_no_instrument_function_takes_too_many_parameters_or_reads_args():
    files = sorted(WING.rglob("*.py"))
    assert len(files) > 10  # the wing is read
    found = [v for path in files
             for v in _violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert found == [], "\n".join(found)
