"""griffe extension for the API pages: the project's plain docstrings, read as markdown.

The docstrings describe arguments and fields as lines `name: what it is` (several names may
share a line, `tau, beta, w_min: ...`), continued by indented lines. Markdown would run them
together into one paragraph; this extension turns each such line, when its names are the
object's own parameters or members, into a list item with the names in code, and keeps its
continuation lines with it. Nothing else in a docstring changes.
"""
from __future__ import annotations

import re

from griffe import Extension, Object

_ITEM = re.compile(r"^(?P<names>[A-Za-z_]\w*(?:, [A-Za-z_]\w*)*): (?=\S)")


def _own_names(obj: Object) -> set[str]:
    names = set(getattr(obj, "members", {}) or {})
    for holder in (obj, getattr(obj, "members", {}).get("__init__")):
        parameters = getattr(holder, "parameters", None) if holder is not None else None
        if parameters is not None:
            names |= {p.name for p in parameters}
    return names


def as_list(text: str, names: set[str]) -> str:
    """`text` with its `name: ...` lines (names in `names`) as markdown list items."""
    out: list[str] = []
    in_item = False
    for line in text.splitlines():
        found = _ITEM.match(line)
        if found and set(found.group("names").split(", ")) <= names:
            if not in_item and out and out[-1].strip():
                out.append("")  # a list must not continue the paragraph before it
            listed = ", ".join(f"`{n}`" for n in found.group("names").split(", "))
            out.append(f"- {listed}: {line[found.end():]}")
            in_item = True
        elif in_item and line.startswith((" ", "\t")) and line.strip():
            out.append("  " + line.strip())
        else:
            if in_item and line.strip():
                out.append("")  # the list ends before the next paragraph
            out.append(line)
            in_item = False
    return "\n".join(out)


class PlainArguments(Extension):
    """Runs `as_list` on every docstring once the object tree is complete."""

    def on_object(self, *, obj: Object, **kwargs) -> None:
        if obj.docstring is not None and not obj.is_alias:
            obj.docstring.value = as_list(obj.docstring.value, _own_names(obj))
