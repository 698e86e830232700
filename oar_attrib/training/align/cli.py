"""`oar align`: does a method's credit give the trainer a better gradient? Measured on shared batches.

    oar align --model arith-tiny --methods none oar_g oar_p_step random --quick
    oar align --preset smollm2-words --pilot temperature=0.5 threads=1
    oar align --preset smollm2-words --store runs/align/smollm2 --batches 100 --pool-batches 24
    oar align --store runs/align/smollm2 --report      # the batches so far, while it runs

Every method's gradient is the one the trainer of --preset applies on the same rollouts; each is
compared with a reference gradient g* (the mean GRPO gradient of an independent pool) and with
GRPO's on the same batch. A rerun with the same --store resumes (nothing finished is redone);
one with other settings is refused. docs/guide/align.md explains the endpoints.

`add_align_command(subparsers)` registers the subcommand on the `oar` parser; it imports
neither torch nor the trainer until the command runs.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from oar_attrib.commands import DefaultsHelpFormatter, add_dataclass_args, dataclass_from_args, option, run_command
from oar_attrib.extras import require_extra

from ..errors import AlignError
from .settings import QUICK, AlignSettings

PILOT_BATCHES = 12
BOOT_RANGE = (100, 100_000)  # fewer cannot place a 95% percentile interval; more is memory, not precision
MAX_EFFECT = 2.0  # a difference of two cosines is at most 2
SETTING = re.compile(r"^[A-Za-z_][\w.]*=")  # key=value; a method's keywords follow a colon
EPILOG = """settings: key=value pairs override the preset's trainer and run settings as in `oar train`
(temperature=0.5 num_generations=8 max_completion_length=96 threads=1).
--quick: a tiny pool and 3 batches (minutes on a CPU). --pilot: 12 batches unless --batches is
given, and the power table says how many batches an effect needs (docs/guide/align.md)."""


def _sized(name: str) -> str:
    """The help of the --batches or --pool-batches flag: the setting's, with its default and --quick's."""
    setting = AlignSettings.__dataclass_fields__[name]
    return f"{setting.metadata['help']} (default: {setting.default}; --quick: {QUICK[name]})"


@dataclass(frozen=True)
class AlignCommand:
    """The flags of `oar align` beside `AlignSettings`' own: the command line's spelling of the
    settings it fills in (`settings_from_args`), where the run is stored and what is reported."""

    batches: int | None = option(None, _sized("batches"))
    pool_batches: int | None = option(None, _sized("pool_batches"))
    store: str | None = option(None, "folder the run is written to and resumed from (default: "
                                     "runs/align/<preset>[-quick|-pilot])")
    quick: bool = option(False, "a tiny pool and 3 batches: a smoke test", action="store_true")
    pilot: bool = option(False, f"{PILOT_BATCHES} batches unless --batches is given; read the power table",
                         action="store_true")
    report: bool = option(False, "print the statistics of --store as it stands (the batches committed so "
                                 "far; a run may still be writing it), measuring and changing nothing. "
                                 "Before the planned batches are in, blinded: the noise, the power table "
                                 "and the cost, no estimate", action="store_true")
    unblind: bool = option(False, "with --report: show the estimates of an unfinished store too (an interim "
                                  "look, which a plan fixed in advance may forbid)", action="store_true")
    json: bool = option(False, "print the summary as one JSON object on stdout instead of the text (progress "
                               "goes to stderr); its `reading` holds the text's sentences", action="store_true")
    summary: str | None = option(None, "also write the summary JSON there (with its `reading`)", metavar="PATH")
    export: str | None = option(None, "also copy the files the statistics are made from (kilobytes) to DIR, "
                                      "e.g. docs/experiments/align/NAME", metavar="DIR")
    n_boot: int = option(10_000, f"bootstrap resamples of the batches ({BOOT_RANGE[0]} to {BOOT_RANGE[1]})")
    effects: tuple[float, ...] | None = option(None, "effects in delta cos the power table sizes batches for "
                                                     "(default: 0.002 0.005 0.01 0.02 0.05)")
    # Each help says its default in words: argparse's "(default: True)" on a --no-* switch reads
    # as if the switch were on.
    mean_gradients: bool = option(True, "sum no running means of the methods' gradients (no bias-or-variance "
                                        "estimates; a real model's run then resumes from its result files "
                                        "alone; default: summed)", flag="--no-mean-gradients", action="store_false")
    progress: bool = option(True, "no progress bars (default: shown)", flag="--no-progress", action="store_false")
    overrides: tuple[str, ...] | None = option(None, "preset settings overrides", flag="overrides", nargs="*",
                                               metavar="KEY=VALUE")


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_dataclass_args(parser, AlignSettings)
    add_dataclass_args(parser, AlignCommand)
    parser.set_defaults(func=run_align)
    return parser


def add_align_command(subparsers) -> argparse.ArgumentParser:
    """Register `align` on the subparsers of the `oar` command line."""
    parser = subparsers.add_parser("align", help="gradient alignment of credit methods on shared batches",
                                   description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                   formatter_class=DefaultsHelpFormatter)
    return _configure(parser)


def settings_from_args(args: argparse.Namespace) -> AlignSettings:
    """The AlignSettings of a parsed command line (--quick and --pilot filled in)."""
    sizes = {}
    for name in ("batches", "pool_batches"):
        value = getattr(args, name)
        if value is None and args.quick:
            value = QUICK[name]
        if value is None and name == "batches" and args.pilot:
            value = PILOT_BATCHES
        sizes[name] = AlignSettings.__dataclass_fields__[name].default if value is None else value
    # `--methods a b key=value`: argparse gives the settings after the methods to --methods.
    methods = [m for m in args.methods or () if not SETTING.match(m)]
    overrides = [m for m in args.methods or () if SETTING.match(m)] + list(args.overrides)
    return dataclass_from_args(AlignSettings, args, overrides=tuple(overrides), methods=tuple(methods), **sizes)


def default_store(settings: AlignSettings, command: AlignCommand) -> Path:
    suffix = "-quick" if command.quick else ("-pilot" if command.pilot else "")
    return Path("runs") / "align" / f"{Path(settings.preset).stem}{suffix}"


def check_numbers(command: AlignCommand) -> None:
    """AlignError for a --n-boot or --effects out of its bounds (before anything is written)."""
    import math

    if not BOOT_RANGE[0] <= command.n_boot <= BOOT_RANGE[1]:
        raise AlignError(f"--n-boot must be between {BOOT_RANGE[0]} and {BOOT_RANGE[1]}, got {command.n_boot}; "
                         "10000 is the default")
    for effect in command.effects or ():
        if not (math.isfinite(effect) and 0 < effect <= MAX_EFFECT):
            raise AlignError(f"--effects must be differences of cosines above 0 and at most {MAX_EFFECT:g}, "
                             f"got {effect}; e.g. --effects 0.005 0.01")


def _kind(path: Path) -> str | None:
    """What `path` is when it exists ('a folder', 'a regular file', 'a FIFO (named pipe)', ...)."""
    import os

    from oar_attrib.files import not_regular

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return not_regular(mode) or "a regular file"


def _store_above(path: Path, store: Path) -> Path | None:
    """The align store that `path` lies inside (`store`, made or not, or any folder above
    `path` that holds an align settings record), else None."""
    from oar_attrib.reports.align_folder import AlignFolder

    target = path.resolve()
    if target.is_relative_to(store.resolve()):
        return store
    return next((p for p in target.parents if AlignFolder(p).has_record()), None)


def check_paths(command: AlignCommand, store: Path) -> None:
    """AlignError, before anything is read or written, for a --store that is not a folder, a
    --summary that is not a file path and an --export that would overwrite: a file, the store
    itself or a folder inside a store, a folder that already holds files (another run's results
    are never replaced), or an empty --export or --summary (never silently ignored)."""
    kind = _kind(store)
    if kind not in (None, "a folder"):
        raise AlignError(f"--store {store} is {kind}, not a folder; pass the folder of an align run "
                         "(or a new path to start one)")
    if command.report and kind is None:
        raise AlignError(f"--store {store} does not exist; pass the folder of an align run to report")
    for flag, value in (("--summary", command.summary), ("--export", command.export)):
        if value is not None and not value.strip():
            raise AlignError(f"{flag} is empty; pass a path, or leave {flag} out")
    kind = _kind(Path(command.summary)) if command.summary else None
    if kind not in (None, "a regular file"):
        raise AlignError(f"--summary {command.summary} is {kind}; pass a file path")
    if command.summary and Path(command.summary).is_symlink():
        raise AlignError(f"--summary {command.summary} is a symbolic link; nothing is written through "
                         "a link: pass the file itself or a new path")
    if not command.export:
        return
    export, kind = Path(command.export), _kind(Path(command.export))
    if export.resolve() == store.resolve():
        raise AlignError(f"--export {export} is the store itself; pass another folder")
    holder = _store_above(export, store)
    if holder is not None:
        raise AlignError(f"--export {export} is inside the align store {holder} (a store's files are "
                         "never mixed with a copy); pass a folder outside it")
    if kind not in (None, "a folder"):
        raise AlignError(f"--export {export} is {kind}, not a folder; pass a new folder")
    if kind == "a folder" and any(export.iterdir()):
        raise AlignError(f"--export {export} already holds files (another run's results are never "
                         "replaced); pass a new or empty folder, or delete it first")


def run_align(args: argparse.Namespace) -> int:
    """`oar align` on the two objects the parser built: its settings (`settings_from_args`)
    and the command's own flags (`AlignCommand`)."""
    return align_command(settings_from_args(args), dataclass_from_args(AlignCommand, args))


def align_command(settings: AlignSettings, command: AlignCommand) -> int:
    """Measure (or, with `report`, read) the store and print its summary (module docstring)."""
    require_extra("train", "oar align")
    from oar_attrib.reports.align import DEFAULT_EFFECTS, blinded, format_summary, summarise
    from oar_attrib.reports.align_reading import reading
    from oar_attrib.console import show

    from .run import align
    from .settings import resolve_methods

    if command.unblind and not command.report:
        raise AlignError("--unblind goes with --report (a finished run's summary shows every estimate)")
    check_numbers(command)
    check_paths(command, Path(command.store or default_store(settings, command)))
    if not command.report:
        resolve_methods(settings.methods)  # every method and keyword checked before the store is touched
    if command.report:  # the store's own record says what it measures (its seed too): the other settings are moot
        store = Path(command.store or default_store(settings, command))
    else:
        store = align(settings, command.store or default_store(settings, command), progress=command.progress)
    summary = summarise(store, n_boot=command.n_boot, effects=tuple(command.effects or DEFAULT_EFFECTS))
    if command.report and not command.unblind and summary["batches"] < summary["planned_batches"]:
        summary = blinded(summary)
    summary["reading"] = reading(summary)  # the text form's sentences, for a reader of the JSON
    text = json.dumps(summary)
    if command.export:
        from .store import export

        export(store, command.export)
    if command.summary:
        Path(command.summary).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if command.json:
        sys.stdout.flush()
        print(text, flush=True)  # JSON: its strings are escaped already
    else:
        show(format_summary(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _configure(argparse.ArgumentParser(prog="oar align", description=__doc__.split("\n\n")[0],
                                                epilog=EPILOG, formatter_class=DefaultsHelpFormatter))
    return run_command(parser.parse_args(argv), "align")


if __name__ == "__main__":
    sys.exit(main())
