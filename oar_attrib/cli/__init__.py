"""The `oar` command line: one subcommand per job, one module per subcommand.

`oar --help`, `oar COMMAND --help` and `oar models` answer at once: every subcommand module
(and every plugin's, below) imports only the standard library and the package's light modules
at its top, and the stack (torch, transformers, TRL, the web framework, pandas, plotly) inside
the function that runs the command. tests/cli/test_cli_imports.py holds every command to it.
"""
from __future__ import annotations

import argparse
import functools
import sys

from ..commands import (INTERRUPTED, DefaultsHelpFormatter, quiet_library_deprecations,  # noqa: F401  (this module's names too)
                        run_command)
from ..console import say


def _add_plugin_commands(sub) -> None:
    """Subcommands of the other packages of the distribution (`oar demo`, `oar web`,
    `oar train`, `oar experiment`, `oar align`), found through the `oar_attrib.commands` entry
    points so that the core never imports `training` or `webapp` itself. A core subcommand is
    never a plugin's: an entry point of its name (an install made before `oar generate` became
    one) is not loaded."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="oar_attrib.commands"), key=lambda e: e.name):
        if entry.name not in sub.choices:
            entry.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    # The subcommands are imported here, not with the package, so that a Ctrl-C while they load
    # is caught by `main` like any other (one line, exit 130).
    from . import attribute, evaluate, generate, importing, models, recall

    parser = argparse.ArgumentParser(prog="oar", description="Outcome-grounded Advantage Reshaping")
    # Every subcommand's --help shows the defaults.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        argparse.ArgumentParser, formatter_class=DefaultsHelpFormatter))
    for command in (attribute, evaluate, generate, importing, models, recall):
        command.add_parser(sub)
    _add_plugin_commands(sub)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of a parser that `build_parser` made, by name."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def main(argv: list[str] | None = None) -> int:
    quiet_library_deprecations()
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        from .recall import old_spelling  # `oar recall`'s one-command spelling: one line naming the new

        line = old_spelling(argv)
        if line is not None:
            say(line)
            return 2
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the plugins' commands were imported
        say("oar: interrupted")
        return INTERRUPTED
    return run_command(args, command_name(parser, args), parser)


def command_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command's name in its messages, subcommands included (`recall world`)."""
    from ..commands import command_parser

    return command_parser(parser, args).prog.removeprefix(parser.prog).strip() or args.command

