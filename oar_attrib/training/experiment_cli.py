"""`oar experiment`: run a grid of methods x seeds, resume it, report it.

    oar experiment run arith-tiny-grid --jobs 2
    oar experiment run my-grid.yaml experiment.seeds=[0,1] experiment.steps=3 eval_n=8
    oar experiment report arith-tiny-grid [--json] [--summary docs/experiments/x.json] [--figure x.png]

`add_experiment_command(subparsers)` registers the subcommand on an existing `oar` parser;
`python -m oar_attrib.training.experiment_cli` is the same command line.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from oar_attrib.commands import add_dataclass_args, option, run_command, runs_on
from oar_attrib.extras import require_extra

_EPILOG = """settings: key=value pairs after the experiment override it: experiment.KEY sets the
experiment section (seeds, steps, eval_every, store, ...); other keys are `oar train` settings
applied to every cell (eval_n=50, learning_rate=1e-4, trainer.KEY, run.KEY).
A rerun of `run` skips the cells whose stored curve is complete and restarts the others."""


@dataclass(frozen=True)
class ExperimentFlags:
    """What every `oar experiment` action reads: the experiment and settings that override it."""

    experiment: str = option(help="experiment name (a checkout's training/experiments/NAME.yaml) or a YAML file",
                             flag="experiment")
    overrides: tuple[str, ...] = option(help="settings overrides", flag="overrides", nargs="*", metavar="KEY=VALUE")


@dataclass(frozen=True)
class RunFlags(ExperimentFlags):
    """`oar experiment run`: how many cells at a time, or only the resolved settings."""

    jobs: int = option(1, "cells at a time, each its own process (default 1)")
    dry_run: bool = option(False, "print the resolved settings and the cells; exit", action="store_true")


@dataclass(frozen=True)
class ReportFlags(ExperimentFlags):
    """`oar experiment report`: the metric compared and where the report goes."""

    json: bool = option(False, "print the report as JSON", action="store_true")
    metric: str | None = option(None, "final accuracy key the table compares (default: sampled accuracy "
                                "on the training preset, eval/accuracy_sampled/<first eval preset>)")
    summary: str | None = option(None, "also write the summary JSON (docs/experiments/)", metavar="PATH")
    figure: str | None = option(None, "also write a figure (.png needs matplotlib; .html)", metavar="PATH")


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run (or resume) every cell of the grid", epilog=_EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_args(run, RunFlags)
    run.set_defaults(func=runs_on(RunFlags, run_experiment))
    report = sub.add_parser("report", help="accuracy curves, paired differences from GRPO, credit metrics")
    add_dataclass_args(report, ReportFlags)
    report.set_defaults(func=runs_on(ReportFlags, report_experiment))
    return parser


def add_experiment_command(subparsers) -> argparse.ArgumentParser:
    """Register `experiment` on the subparsers of the `oar` command line."""
    parser = subparsers.add_parser("experiment", help="a grid of training runs (methods x seeds) and its report",
                                   description=__doc__.split("\n\n")[0])
    return _configure(parser)


def run_experiment(flags: RunFlags) -> int:
    """`oar experiment run`: every cell of the grid (or, with `dry_run`, the settings and cells)."""
    require_extra("train", "oar experiment")
    from . import experiment

    experiment.check_jobs(flags.jobs)  # before the grid is read or a cell starts
    spec, base = experiment.load(flags.experiment, flags.overrides)
    if flags.dry_run:
        print(experiment.dump_spec(spec, base), end="")
        for seed in spec.seeds:
            for method in spec.methods:
                experiment.cell_settings(spec, base, method, seed)  # validates every cell
        print(f"# {len(spec.methods)} methods x {len(spec.seeds)} seeds = "
              f"{len(spec.methods) * len(spec.seeds)} cells of {spec.steps} steps")
        return 0
    result = experiment.run(spec, base, jobs=flags.jobs, echo=lambda line: print(line, flush=True))
    print(json.dumps(result))
    return 0 if not result["failed"] and result["finished"] == result["cells"] else 1


def report_experiment(flags: ReportFlags) -> int:
    """`oar experiment report`: the grid's report, its summary and figure when asked for."""
    require_extra("train", "oar experiment")
    from oar_attrib.reports import experiment as analysis

    from . import experiment

    spec, _ = experiment.load(flags.experiment, flags.overrides)
    report = analysis.load_report(spec.store, spec.name, metric=flags.metric)
    if flags.summary:
        analysis.write_summary(report, flags.summary)
    if flags.figure:
        require_extra("web", "oar experiment report --figure")  # plotly draws every figure
        analysis.write_figure(report, flags.figure)
    print(json.dumps(report.to_dict(), indent=1) if flags.json else analysis.format_report(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _configure(argparse.ArgumentParser(prog="oar experiment", description=__doc__.split("\n\n")[0]))
    return run_command(parser.parse_args(argv), "experiment", parser)


if __name__ == "__main__":
    sys.exit(main())
