"""The `oar` command line: one subcommand per job, one module per subcommand."""
from __future__ import annotations

import argparse
import functools
import sys
import warnings

from ..configs import DefaultsHelpFormatter
from ..console import safe_warnings, say
from ..errors import OARError


def _add_plugin_commands(sub) -> None:
    """Subcommands of the other packages of the distribution (`oar demo`, `oar web`,
    `oar train`), found through the `oar_attrib.commands` entry points so that the core
    never imports `training` or `webapp` itself."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="oar_attrib.commands"), key=lambda e: e.name):
        entry.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    # The subcommands (and torch with them) are imported here, not with the package, so that a
    # Ctrl-C while they load is caught by `main` like any other (one line, exit 130).
    from . import attribute, importing, models, recall

    parser = argparse.ArgumentParser(prog="oar", description="Outcome-grounded Advantage Reshaping")
    # Every subcommand's --help shows the defaults.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        argparse.ArgumentParser, formatter_class=DefaultsHelpFormatter))
    for command in (attribute, importing, models, recall):
        command.add_parser(sub)
    _add_plugin_commands(sub)
    return parser


INTERRUPTED = 130  # the shell's status of a command ended by Ctrl-C (128 + SIGINT)


def run_command(args: argparse.Namespace, name: str) -> int:
    """Run a parsed command (`args.func`), the same for every entry point: an OARError becomes
    one line `oar NAME: error: ...` on stderr and exit status 2; Ctrl-C one line
    `oar NAME: interrupted...` (what was kept, when the command says) and exit status 130.
    Both lines, and every warning, are made safe for the terminal (`console.terminal_safe`):
    the messages quote file names, model metadata and rollout text."""
    quiet_library_deprecations()
    safe_warnings()
    try:
        return args.func(args)
    except OARError as err:
        say(f"oar {name}: error: {err}")
        return 2
    except KeyboardInterrupt as err:
        # A bare Ctrl-C carries no message; a command that keeps work raises one that says so.
        say(f"oar {name}: {str(err) or 'interrupted'}")
        return INTERRUPTED


def quiet_library_deprecations() -> None:
    """Hide the libraries' FutureWarning and DeprecationWarning about how this project calls
    them (a user of the command cannot act on them; the tests show them to us), unless the
    user asked for warnings with -W or PYTHONWARNINGS. The project's own warnings still show."""
    if sys.warnoptions:
        return
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module="oar_attrib")


def main(argv: list[str] | None = None) -> int:
    quiet_library_deprecations()
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # while the plugins' commands were imported
        say("oar: interrupted")
        return INTERRUPTED
    return run_command(args, args.command)

