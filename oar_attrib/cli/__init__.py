"""The `oar` command line: one subcommand per job, one module per subcommand."""
from __future__ import annotations

import argparse
import functools
import sys

from ..configs import DefaultsHelpFormatter
from ..errors import OARError
from . import attribute, importing, recall


def _add_plugin_commands(sub) -> None:
    """Subcommands of the other packages of the distribution (`oar demo`, `oar web`,
    `oar train`), found through the `oar_attrib.commands` entry points so that the core
    never imports `training` or `webapp` itself."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="oar_attrib.commands"), key=lambda e: e.name):
        entry.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oar", description="Outcome-grounded Advantage Reshaping")
    # Every subcommand's --help shows the defaults.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        argparse.ArgumentParser, formatter_class=DefaultsHelpFormatter))
    for command in (attribute, importing, recall):
        command.add_parser(sub)
    _add_plugin_commands(sub)
    return parser


def run_command(args: argparse.Namespace, name: str) -> int:
    """Run a parsed command (`args.func`): an OARError becomes one line `oar NAME: error: ...`
    on stderr and exit status 2, the same for every entry point."""
    try:
        return args.func(args)
    except OARError as err:
        print(f"oar {name}: error: {err}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, args.command)

