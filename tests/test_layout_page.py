"""The project layout page's table is generated from the code (docs/hooks/layout.py): the
committed page holds exactly what the generator writes now, every package and top-level module
has a row with the first sentence of its docstring, and the generator replaces only the text
between its markers."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

import layout  # noqa: E402


def test_the_committed_layout_page_is_what_the_code_generates():
    page = layout.PAGE.read_text(encoding="utf-8")
    assert layout.with_table(page, layout.layout_table()) == page, \
        "docs/guide/layout.md is stale: run python docs/hooks/layout.py"


def test_every_package_and_top_level_module_has_a_row_with_its_docstring():
    package = ROOT / "oar_attrib"
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[1] for line in layout.layout_table().splitlines()[2:]}
    folders = {f"oar_attrib/{p.parent.relative_to(package).as_posix()}/" for p in package.rglob("__init__.py")
               if p.parent != package}
    modules = {f"oar_attrib/{p.name}" for p in package.glob("*.py") if p.name != "__init__.py"}
    assert set(rows) == folders | modules
    assert {"oar_attrib/models/", "oar_attrib/methods/baselines/", "oar_attrib/attribution.py"} <= set(rows)
    assert all(text.strip() for text in rows.values()), [k for k, v in rows.items() if not v.strip()]
    assert rows["oar_attrib/rollouts.py"] == "Rollouts: from questions to graded groups of answers with GRPO advantages."


def test_the_first_sentence_is_cut_at_a_sentence_end(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Text for the terminal. Every message\npasses through it.\n\nMore."""\n')
    assert layout.first_sentence(module) == "Text for the terminal."
    module.write_text('"""One sentence over\ntwo lines, e.g. `x.y`."""\n')
    assert layout.first_sentence(module) == "One sentence over two lines, e.g. `x.y`."


def test_only_the_text_between_the_markers_is_replaced():
    page = f"# Title\n\nkept\n{layout.BEGIN}\nold | table\n{layout.END}\n\nalso kept\n"
    assert layout.with_table(page, "| new |") == f"# Title\n\nkept\n{layout.BEGIN}\n| new |\n{layout.END}\n\nalso kept\n"
    assert layout.on_page_markdown("no markers here", None, None, None) == "no markers here"
