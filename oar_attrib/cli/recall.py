"""`oar recall`: one subcommand per registered instrument (`instruments`), generated from the
registry: each has exactly its settings' flags and the method knobs it offers, and runs its
instrument's function on the settings object the parser built. `oar recall merge OUT IN...`
joins the caches of a `--shard K/N` run (`instruments.shard.merge`).

`oar recall` was once one command whose flags chose the mode (`--granularity step`, `--data`,
`--sets graded`, `--sets advantage`): that spelling is answered with one line that names the
subcommand (`old_spelling`)."""
from __future__ import annotations

import argparse
import dataclasses
import textwrap

from ..commands import DefaultsHelpFormatter, add_dataclass_args, add_model_args, dataclass_from_args, option
from .choices import METHOD_KNOBS, add_method_knobs, method_params_from

RECALL_DESCRIPTION = """\
Oracle recall of every method: how much of a set of tokens known (or tested) to decide the answer
each method ranks first, beside a random ranking, with 95% bootstrap intervals over traces. One
subcommand per instrument; `oar recall NAME --help` lists its flags. A long run splits across
processes with --shard K/N; `oar recall merge` joins the shards' caches."""
MERGE = "merge"


@dataclasses.dataclass(frozen=True)
class MergeSettings:
    """`oar recall merge`: join the caches that the shards of one `--shard K/N` run wrote into
    one, checked first (one record; an entry in several files identical, timings aside); the
    unsharded command then reads every unit back from it."""

    out: str = option(help="the merged cache to write (a new file; then pass it as --cf-cache)", flag="out")
    inputs: tuple[str, ...] = option(help="the shards' caches", flag="inputs", nargs="+")


def knob_methods(own: tuple[str, ...]) -> tuple[str, ...]:
    """The methods whose knobs an instrument offers: every method with knobs but those it sets
    itself (`InstrumentSpec.own_knobs`)."""
    return tuple(dict.fromkeys(m for m, _, _, _ in METHOD_KNOBS if m not in own))


def settings_from_args(cls, args: argparse.Namespace):
    """The instrument settings `cls` of a parsed `oar recall NAME` command line, the method
    knobs given gathered into `method_params` (InputError: a value out of its bounds)."""
    return dataclass_from_args(cls, args, method_params=method_params_from(args))


def run(args: argparse.Namespace) -> int:
    """Build the instrument's settings from the command line and run it."""
    from ..instruments import instrument_spec
    from ..instruments.cache import locks_let_go

    spec = instrument_spec(args.recall_mode)
    with locks_let_go():
        return spec.run(settings_from_args(spec.settings, args))


def run_merge(args: argparse.Namespace) -> int:
    from ..console import say
    from ..instruments import merge

    settings = dataclass_from_args(MergeSettings, args)
    count = merge(settings.out, list(settings.inputs))
    say(f"oar recall merge: {count} entries of {len(settings.inputs)} caches in {settings.out}")
    return 0


def add_parser(sub) -> None:
    from ..instruments import available_instruments, instrument_spec

    rc = sub.add_parser("recall", help="oracle recall of every method, on the arithmetic world or any model's "
                                       "own counterfactual, graded or advantage oracle",
                        description=RECALL_DESCRIPTION)
    names = available_instruments()
    modes = rc.add_subparsers(dest="recall_mode", required=True, metavar="{" + ",".join(names + [MERGE]) + "}")
    for name in names:
        spec = instrument_spec(name)
        said = " ".join(spec.settings.__doc__.split("\n\n")[0].split()).removeprefix(f"`oar recall {name}`: ")
        mode = modes.add_parser(name, help=spec.summary, description=textwrap.fill(said[:1].upper() + said[1:], 96),
                                formatter_class=DefaultsHelpFormatter)
        add_dataclass_args(mode, spec.settings)
        add_method_knobs(mode, knob_methods(spec.own_knobs))
        add_model_args(mode)
        mode.set_defaults(func=run)
    merge = modes.add_parser(MERGE, help="join the caches of a --shard K/N run into one",
                             description=MergeSettings.__doc__, formatter_class=DefaultsHelpFormatter)
    add_dataclass_args(merge, MergeSettings)
    merge.set_defaults(func=run_merge)


# ------------------------------------------------------------------ the one-command spelling of before

def _old_subcommand(argv: list[str]) -> tuple[str, str]:
    """(the subcommand an old one-command `oar recall ...` meant, how the old spelling named it)."""
    sets = []
    for i, a in enumerate(argv):
        if a == "--sets":
            sets = [s for s in argv[i + 1:] if not s.startswith("-")]
        elif a.startswith("--sets="):
            sets = [a.split("=", 1)[1]]
    for mode in ("graded", "advantage"):
        if mode in sets:
            return mode, f"--sets {mode}"
    if any(a == "--data" or a.startswith("--data=") for a in argv):
        return "data", "--data"
    if any(a in ("--granularity=step",) for a in argv) or any(
            a == "--granularity" and argv[i + 1:i + 2] == ["step"] for i, a in enumerate(argv)):
        return "steps", "--granularity step"
    return "world", ""


def old_spelling(argv: list[str]) -> str | None:
    """The one line that answers an `oar recall` command line in the one-command spelling of
    before (no subcommand after `recall`, or graded's old `--cf-positions`), naming the
    subcommand to use; None for any other command line."""
    from ..instruments import available_instruments

    if argv[:1] != ["recall"] or argv[1:2] in (["-h"], ["--help"]) or argv[1:2] == [MERGE]:
        return None
    if argv[1:2] and argv[1] in available_instruments():
        if argv[1] == "graded" and any(a == "--cf-positions" or a.startswith("--cf-positions=") for a in argv):
            return ("oar recall graded: error: --cf-positions is now --positions (tested positions per trace); "
                    "see `oar recall graded --help`")
        return None
    mode, named = _old_subcommand(argv[1:])
    old = f"oar recall {named}".rstrip()
    bare = " without a subcommand" if not named else ""
    extra = " (and --cf-positions is --positions)" if mode == "graded" and "--cf-positions" in " ".join(argv) else ""
    return (f"oar recall: error: `{old}`{bare} is now `oar recall {mode}`{extra}; the flags that chose the mode "
            f"are gone, see `oar recall {mode} --help`")
