"""What every command line of the package shares: the `oar` subcommands, those the web app and
training register into it, and `python -m oar_attrib.training`.

Flags built from dataclasses (`add_dataclass_args`: every field a flag with its help text), the
flags several commands share (`add_model_args`: `--device`, `--dtype`, `--max-batch-tokens`)
and `--help` with the defaults (`DefaultsHelpFormatter`).

`run_command` runs a parsed command the same way everywhere (an `OARError` is one line and
exit status 2, a refused resume naming the fields as the command's flags (`record_flag`),
Ctrl-C one line and 130); `Interrupted` is a Ctrl-C that says what was kept;
a command whose optional extra is missing (`extras.require_extra`) is answered with the one
line that names it. (An output path is checked by `files.check_writable`.)
At import it loads nothing but the standard library, `console` and `errors`, so any command
line can use it before it parses its arguments.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
import warnings

from .console import safe_warnings, say
from .defaults import (FLOAT32_MAX, MAX_COUNT, SEED, _power, bounds_problem, check_bounds,  # noqa: F401  (the field helper and bounds, named here too)
                       option)
from .errors import InputError, MissingExtraError, OARError

INTERRUPTED = 130  # the shell's status of a command ended by Ctrl-C (128 + SIGINT)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with the line that says what was kept (`oar` prints it and exits 130)."""


def interrupted(out, kept: int) -> Interrupted:
    return Interrupted(f"interrupted; {kept} lines kept in {out}, rerun the same command to resume")


def run_command(args: argparse.Namespace, name: str, parser: argparse.ArgumentParser | None = None) -> int:
    """Run a parsed command (`args.func`), the same for every entry point: an OARError becomes
    one line `oar NAME: error: ...` on stderr and exit status 2 (a resume refused for other
    settings names the fields as `parser`'s flags; a missing extra is the line that names it);
    Ctrl-C one line `oar NAME: interrupted...` (what was kept, when the command says) and exit
    status 130. Every line, and every warning, is made safe for the terminal
    (`console.terminal_safe`): the messages quote file names, model metadata and rollout text."""
    from .records.settings_record import RecordMismatchError

    quiet_library_deprecations()
    quiet_library_progress()
    safe_warnings()
    try:
        if parser is not None:
            check_flag_numbers(command_parser(parser, args), args)
        return args.func(args)
    except MissingExtraError as err:
        say(str(err))
        return 2
    except RecordMismatchError as err:
        sub = command_parser(parser, args) if parser is not None else None
        line = err.line(None if sub is None else lambda field: record_flag(sub, field))
        say(f"oar {name}: error: {line}")
        return 2
    except OARError as err:
        say(f"oar {name}: error: {err}")
        return 2
    except KeyboardInterrupt as err:
        # A bare Ctrl-C carries no message; a command that keeps work raises one that says so.
        say(f"oar {name}: {str(err) or 'interrupted'}")
        return INTERRUPTED


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
    override as `oar train` and `oar experiment run` take them (`oar_tau`, `learning_rate`).
    A field inside a larger settings dict (an experiment cell's `trainer.oar_tau`) is spelled
    by its last part."""
    from .weights.settings import ReshapeSettings, config_name

    parts = field.split(".")
    if "record" in parts:  # a record inside a cell's settings: spelled as the record's own field
        parts = parts[parts.index("record") + 1:]
    dests = [f"knob__{parts[1]}__{parts[2]}"] if parts[0] == "methods" and len(parts) == 3 else []
    dests += [parts[-1]] if parts[0] == "settings" else [parts[0], parts[0].rstrip("s")]
    options = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    found = next((options[d] for d in dests if d in options), None)
    if found is not None:
        return found
    if parts[0] == "settings" and parts[-1] in ReshapeSettings.__dataclass_fields__:
        return config_name(parts[-1])
    return parts[-1] if parts[0] != "methods" else field


def quiet_library_progress() -> None:
    """Hide transformers' own progress bars ("Loading weights" on every model load): a command
    shows its own progress; the Python API keeps the library's. Set before transformers is
    imported, through the variable it reads, so that nothing here imports it."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def quiet_library_deprecations() -> None:
    """Hide the libraries' FutureWarning and DeprecationWarning about how this project calls
    them (a user of the command cannot act on them; the tests show them to us), unless the
    user asked for warnings with -W or PYTHONWARNINGS. The project's own warnings still show."""
    if sys.warnoptions:
        return
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module="oar_attrib")


def number_problem(value, kind: type, bounds: tuple | None = None) -> str | None:
    """Why `value` is not a usable positive `kind` (int or float) setting, or None: a bool or
    text, NaN or an infinity, <= 0, an int above MAX_COUNT, a float past float32's range, or
    outside the setting's own `bounds` (a method knob's: `registry.knob`)."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        return f"must be a{'n integer' if kind is int else ' number'}, got {value!r}"
    if not math.isfinite(value) or not value > 0:
        return f"must be a finite number > 0, got {value!r}"
    if kind is int and value > MAX_COUNT:
        return f"must be at most {MAX_COUNT}, got {value}"
    return bounds_problem(value, bounds, kind)


# The range of an integer flag by the setting it fills (`dest`), when its field declares none
# (`option(bounds=...)`); any other integer flag is a count in [0, MAX_COUNT]. A number flag
# must be finite and within float32, and a temperature >= 0 too.
INT_RANGES = {"seed": SEED, "port": (0, 65535), "run": (1, 2**63 - 1), "n": (0, 10**7),
              "max_bytes": (1, 2**31), "max_batch_tokens": (1, 2**24)}


def flag_number_problem(dest: str, kind: type, value, bounds: tuple | None = None) -> str | None:
    """Why `value` of the int or float flag filling `dest` is out of its range (its field's
    `bounds` when it declares them), or None."""
    if kind is float:
        if bounds is None and dest.endswith("temperature"):
            bounds = (0, None)
        return bounds_problem(value, bounds, float)
    return bounds_problem(value, bounds or INT_RANGES.get(dest, (0, MAX_COUNT)), int)


def check_flag_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """InputError naming the first int or float flag of `parser` whose value in `args` is out
    of its range (`flag_number_problem`): every command's numbers are checked here, before its
    own checks and before anything is read, written or loaded. Values left at their default
    pass (a default None means: the command decides)."""
    for action in parser._actions:
        kind = getattr(action.type, "kind", action.type)
        value = getattr(args, action.dest, None)
        if kind not in (int, float) or not action.option_strings or value is None or value == action.default:
            continue
        for one in value if isinstance(value, list) else [value]:
            problem = flag_number_problem(action.dest, kind, one, getattr(action, "bounds", None))
            if problem:
                raise InputError(f"{action.option_strings[0]} {problem}")


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` that shows each option's default (unless its help already says it, or it has
    none: None, False), descriptions and epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings
                or action.default is None or action.default is False or action.default == argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def add_dataclass_args(parser: argparse.ArgumentParser, cls, names=None) -> None:
    """The flags of the dataclass `cls` (only `names`, when given): one per field, spelled,
    typed and explained by the field's metadata (`option`), with the field's default; every
    command's flags are made here (`tests/test_architecture.py` counts the others)."""
    hints = typing.get_type_hints(cls)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in dataclasses.fields(cls):
        if (names is not None and f.name not in names) or f.metadata.get("flag", True) is None:
            continue
        meta = dict(f.metadata)
        target = parser
        if "group" in meta:
            title = meta.pop("group")
            target = groups.get(title) or groups.setdefault(title, parser.add_argument_group(title))
        action = target.add_argument(*_flag_strings(f, meta), **_flag_keywords(f, meta, hints[f.name]))
        action.bounds = meta.get("bounds")


def _flag_strings(f: dataclasses.Field, meta: dict) -> list[str]:
    flag = meta.get("flag") or "--" + f.name.replace("_", "-")
    return [flag] if isinstance(flag, str) else list(flag)


def _flag_keywords(f: dataclasses.Field, meta: dict, kind) -> dict:
    """The argparse keywords of field `f` (type `kind`) from its metadata (`option`)."""
    positional = not _flag_strings(f, meta)[0].startswith("-")
    keywords = {"help": meta.get("help", "")}
    if not positional:
        keywords["dest"] = f.name
    if f.default is not dataclasses.MISSING:
        keywords["default"] = f.default
    elif f.default_factory is not dataclasses.MISSING:
        keywords["default"] = f.default_factory()
    elif not positional:
        keywords["required"] = True
    if type(None) in typing.get_args(kind):
        kind = next(t for t in typing.get_args(kind) if t is not type(None))
    for key in ("choices", "metavar", "nargs", "required", "action"):
        if key in meta:
            keywords[key] = meta[key]
    if "action" in keywords:
        return keywords
    if kind is bool:
        keywords["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(kind) in (list, tuple):
        keywords.setdefault("nargs", "+")
        keywords["type"] = meta.get("type", typing.get_args(kind)[0])
    else:
        keywords["type"] = meta.get("type", kind)
        default = keywords.get("default")
        if default is not None and "default" not in keywords["help"]:
            keywords["help"] = f"{keywords['help']} (default: {default})"
    return keywords


def dataclass_from_args(cls, args: argparse.Namespace, **extra):
    """The `cls` of the flags in `args` that `add_dataclass_args` made (and `extra` fields)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                  if hasattr(args, f.name) and f.name not in extra}, **extra)


def flags_line(settings, names, **changed) -> str:
    """The flags of `settings`' fields `names` (each as `add_dataclass_args` spells it; `changed`
    in place of the field's value), quoted for a shell: a command's own run, to print as what
    to run next. A None, a False or an empty value is left out."""
    import shlex

    fields = {f.name: f for f in dataclasses.fields(settings)}
    out = []
    for name in names:
        value = changed.get(name, getattr(settings, name))
        if value is None or value is False or value == ():
            continue
        flag = _flag_strings(fields[name], fields[name].metadata)[0]
        if value is True:
            out.append(flag)
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        out.append(" ".join([flag, *(shlex.quote(f"{v:g}" if isinstance(v, float) else str(v)) for v in values)]))
    return " ".join(out)


def runs_on(cls, command):
    """The `func` a parser's defaults hold: `command` called with the `cls` built from the
    parsed flags (`dataclass_from_args`), so that the command runs on its settings object and
    never reads the namespace (as every `oar recall` instrument does)."""
    def run(args: argparse.Namespace) -> int:
        return command(dataclass_from_args(cls, args))

    run.__name__ = run.__qualname__ = command.__name__
    run.__doc__ = command.__doc__
    return run


# Model dtypes a command can load in (names of torch dtypes; torch is not imported to build a
# parser). Probe arithmetic stays float32 whatever the model's dtype.
DTYPES = ("float32", "bfloat16", "float16")


def add_dtype_arg(parser: argparse.ArgumentParser) -> None:
    """`--dtype {float32,bfloat16,float16}`: the dtype the command loads the model in."""
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="dtype of the model's weights and activations (default: float32; "
                             "probe arithmetic stays float32)")


def add_model_args(parser: argparse.ArgumentParser, budget: bool = True) -> None:
    """`--device`, `--dtype` and, with `budget`, `--max-batch-tokens N` (OAR-P's token budget
    per forward, default: auto): where and how a command loads its model and runs it."""
    parser.add_argument("--device", default=None, help="torch device (default: CPU)")
    add_dtype_arg(parser)
    if budget:
        parser.add_argument("--max-batch-tokens", type=int, default=None,
                            help="OAR-P: tokens in one forward (default: sized from the device's "
                                 "free memory and the model's shape; 16384 on CPU)")
