"""A settings field with help text is written one way, by the one field helper
(`defaults.option`: default, help, flag, bounds, choices): no `dataclasses.field(metadata=...)`
is left in the package but the helper's own, so help, bounds and flags are read from one place."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "oar_attrib" / "defaults.py"


def _raw_fields(source: str) -> list[int]:
    """Lines of each `field(..., metadata=...)` / `dataclasses.field(..., metadata=...)` call."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "field"
            and any(k.arg == "metadata" for k in node.keywords)]


def test_the_check_finds_a_planted_raw_field():
    planted = ("from dataclasses import field, dataclass\nimport dataclasses\n"
               "x: int = field(default=1, metadata={'help': 'a'})\n"
               "y: int = dataclasses.field(default=2, metadata={'help': 'b'})\nz: int = field(default=3)\n")
    assert _raw_fields(planted) == [3, 4]


def test_every_field_with_help_is_made_by_the_one_helper():
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "oar_attrib").rglob("*.py")) if p != HELPER
             for lines in [_raw_fields(p.read_text(encoding="utf-8"))] if lines}
    assert found == {}
