"""The `oar` command line: one subcommand per job, one module per subcommand."""
from __future__ import annotations

import argparse
import functools
import sys
import warnings

from ..configs import DefaultsHelpFormatter
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


def run_command(args: argparse.Namespace, name: str, parser: argparse.ArgumentParser | None = None) -> int:
    """Run a parsed command (`args.func`), the same for every entry point: an OARError becomes
    one line `oar NAME: error: ...` on stderr and exit status 2 (a resume refused for other
    settings names the fields as `parser`'s flags); Ctrl-C one line `oar NAME:
    interrupted...` (what was kept, when the command says) and exit status 130."""
    from ..records.settings_record import RecordMismatchError

    quiet_library_deprecations()
    try:
        return args.func(args)
    except RecordMismatchError as err:
        sub = command_parser(parser, args) if parser is not None else None
        line = err.line(None if sub is None else lambda field: record_flag(sub, field))
        print(f"oar {name}: error: {line}", file=sys.stderr)
        return 2
    except OARError as err:
        print(f"oar {name}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        # A bare Ctrl-C carries no message; a command that keeps work raises one that says so.
        print(f"oar {name}: {str(err) or 'interrupted'}", file=sys.stderr)
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
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the plugins' commands were imported
        print("oar: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run_command(args, args.command, parser)

