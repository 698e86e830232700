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

from ..commands import INTERRUPTED, quiet_library_deprecations, run_command  # noqa: F401  (this module's names too)
from ..configs import DefaultsHelpFormatter


def _add_plugin_commands(sub) -> None:
    """Subcommands of the other packages of the distribution (`oar demo`, `oar web`,
    `oar train`), found through the `oar_attrib.commands` entry points so that the core
    never imports `training` or `webapp` itself."""
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="oar_attrib.commands"), key=lambda e: e.name):
        entry.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    # The subcommands are imported here, not with the package, so that a Ctrl-C while they load
    # is caught by `main` like any other (one line, exit 130).
    from . import attribute, importing, models, recall

    parser = argparse.ArgumentParser(prog="oar", description="Outcome-grounded Advantage Reshaping")
    # Every subcommand's --help shows the defaults.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=functools.partial(
        argparse.ArgumentParser, formatter_class=DefaultsHelpFormatter))
    for command in (attribute, importing, models, recall):
        command.add_parser(sub)
    _add_plugin_commands(sub)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of a parser that `build_parser` made, by name."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser that parsed `args`: down the subcommands `args` names."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return command_parser(chosen, args)
    return parser


def record_flag(parser: argparse.ArgumentParser, field: str) -> str:
    """How the command line of `parser` spells a dotted settings-record field
    (`records.settings_record`): the option string of the action whose dest the field names
    (`settings.tau` -> --tau, `methods.oar_g.n_noise` -> --oar-g-n-noise, `methods` ->
    --methods or --method, `model.weights_sha256` -> --model), else the `key=` of a settings
    override (`oar_tau`), else the field itself."""
    from ..weights.settings import ReshapeSettings, config_name

    parts = field.split(".")
    dests = [f"knob__{parts[1]}__{parts[2]}"] if parts[0] == "methods" and len(parts) == 3 else []
    dests += [parts[-1]] if parts[0] == "settings" else [parts[0], parts[0].rstrip("s")]
    options = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    found = next((options[d] for d in dests if d in options), None)
    if found is not None:
        return found
    if parts[0] == "settings" and parts[-1] in ReshapeSettings.__dataclass_fields__:
        return config_name(parts[-1])
    return field


def explain_with_flags(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """`run_command`'s `explain` for the `oar` command line: a resume refused for other
    settings names the fields that differ as the command's flags (`record_flag`)."""

    def explain(err) -> str:
        from ..records.settings_record import RecordMismatchError

        if not isinstance(err, RecordMismatchError):
            return str(err)
        sub = command_parser(parser, args)
        return err.line(lambda field: record_flag(sub, field))

    return explain


def main(argv: list[str] | None = None) -> int:
    quiet_library_deprecations()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the plugins' commands were imported
        print("oar: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run_command(args, args.command, explain=explain_with_flags(parser, args))

