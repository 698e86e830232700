"""mkdocs hook: the command-line reference, generated from the `oar` parsers themselves.

A page that holds the marker line `<!-- oar-cli-reference -->` gets, in its place, one section
per command and subcommand (`oar attribute`, `oar import trl`, ...): its help line, its usage as
argparse prints it, and a table of its arguments with their defaults, choices and help text.
Nothing is written by hand, so the page cannot drift from `oar --help`.
"""
from __future__ import annotations

import argparse
import html
import re

MARKER = "<!-- oar-cli-reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    from oar_attrib.cli import build_parser

    return markdown.replace(MARKER, cli_reference(build_parser()))


def _cell(text: str) -> str:
    """Text for a markdown table cell: HTML-escaped, pipes escaped, on one line."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    try:  # argparse's own %-expansion of help strings (%(default)s, %(prog)s)
        text = text % {**vars(action), "prog": prog}
    except (KeyError, TypeError, ValueError):
        pass
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return text


def _default(action: argparse.Action) -> str:
    if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
        return ""
    value = action.default
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"`{value}`"


def _commands(parser: argparse.ArgumentParser, path: list[str], summary: str = ""):
    """(path, parser, one-line help) of every command under `parser`, depth first."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if len(path) > 1:
        yield path, parser, summary
    for sub in subs:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            yield from _commands(child, path + [name], helps.get(name, ""))


def _section(path: list[str], parser: argparse.ArgumentParser, summary: str) -> list[str]:
    level = "#" * min(len(path), 4)
    out = [f"{level} `{' '.join(path)}`", ""]
    if summary:
        out += [_cell(summary), ""]
    if parser.description and parser.description != summary:
        out += [html.escape(parser.description, quote=False), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = [a for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if rows:
        out += ["| argument | default | what it does |", "|---|---|---|"]
        for action in rows:
            names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.dest}`"
            default, text = _default(action), _help(action, parser.prog)
            if default or text.endswith("(default: None)"):  # the column says it; some help texts too
                text = re.sub(r"\s*\(default: [^()]*\)\s*$", "", text)
            out.append(f"| {names} | {default} | {_cell(text)} |")
        out.append("")
    return out


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown of every command of `parser` (see the module docstring)."""
    commands = list(_commands(parser, [parser.prog]))
    out = ["| command | what it does |", "|---|---|"]
    for path, _, summary in commands:
        name = " ".join(path)
        out.append(f"| [`{name}`](#{'-'.join(path)}) | {_cell(summary)} |")
    out.append("")
    for path, command, summary in commands:
        out += _section(path, command, summary)
    return "\n".join(out)
