"""The project layout page's table of the package, generated from the code: one row per package
(and sub-package) of `oar_attrib` and per module at its top level, with the first sentence of
its docstring and, for a package, its modules.

    python docs/hooks/layout.py          # rewrites the table in docs/guide/layout.md

The table sits between the two marker lines of docs/guide/layout.md; the suite regenerates it
and compares (tests/test_layout_page.py), and as an mkdocs hook it writes the fresh table into
the built page, so neither the file nor the site can drift from the code.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guide" / "layout.md"
BEGIN = "<!-- layout: generated from the docstrings by docs/hooks/layout.py; do not edit by hand -->"
END = "<!-- /layout -->"


def first_sentence(path: Path) -> str:
    """The first sentence of the docstring of `path` (its first paragraph, on one line)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+(?=[A-Z`(])", paragraph)[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def layout_table(package: Path = ROOT / "oar_attrib") -> str:
    """The markdown table: each package (by depth-first path) with its modules, then each
    module at the package's top level."""
    rows = ["| where | what it holds | modules |", "|---|---|---|"]
    for init in sorted(package.rglob("__init__.py")):
        folder = init.parent
        if folder == package:
            continue
        modules = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
        where = f"`{folder.relative_to(ROOT).as_posix()}/`"
        rows.append(f"| {where} | {_cell(first_sentence(init))} | {', '.join(f'`{m}`' for m in modules)} |")
    for module in sorted(package.glob("*.py")):
        if module.name != "__init__.py":
            rows.append(f"| `{module.relative_to(ROOT).as_posix()}` | {_cell(first_sentence(module))} | |")
    return "\n".join(rows)


def with_table(page: str, table: str) -> str:
    """`page` with the text between its markers replaced by `table`."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + table + "\n" + page[end:]


def on_page_markdown(markdown: str, page, config, files) -> str:
    """mkdocs hook: the page that holds the markers gets the table generated now."""
    if BEGIN not in markdown:
        return markdown
    return with_table(markdown, layout_table())


if __name__ == "__main__":
    PAGE.write_text(with_table(PAGE.read_text(encoding="utf-8"), layout_table()), encoding="utf-8")
