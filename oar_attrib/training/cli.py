"""`oar train` / `python -m oar_attrib.training`: reshaped GRPO from a preset, a YAML file and overrides.

    oar train --preset arith-tiny --method oar_g
    oar train --preset math-7b model=/models/Qwen2.5-7B max_steps=500
    accelerate launch --config_file oar_attrib/training/accelerate/ddp.yaml -m oar_attrib.training --preset math-7b

`add_train_command(subparsers)` registers the subcommand on an existing `oar` parser.
"""
from __future__ import annotations

import argparse
import json
import sys

from oar_attrib.errors import OARError

EPILOG = """settings: key=value pairs (YAML values) after the flags override the preset and
--config; a bare key is a field of the run section (model, data, reward, eval_every, ...) or of
OARConfig (learning_rate, oar_tau, num_generations, ...); run.KEY / trainer.KEY name the section.
Multi-GPU: accelerate launch --config_file oar_attrib/training/accelerate/{ddp,zero2,zero3}.yaml -m oar_attrib.training ..."""


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--preset", default="arith-tiny",
                        help="preset name (arith-tiny, math-7b) or a YAML file (default: arith-tiny)")
    parser.add_argument("--config", help="YAML file merged over the preset (same run/trainer sections)")
    parser.add_argument("--method", help="importance method: 'none' (plain GRPO) or a registered "
                        "method that is not analysis-only; an unknown name is refused with the list")
    parser.add_argument("--probe", help="outcome probe after the warm-up; an unknown name is refused "
                        "with the list")
    parser.add_argument("--model", help="bundled model name or local checkpoint folder")
    parser.add_argument("--output-dir", help="where checkpoints, logs and the run store go")
    parser.add_argument("--max-steps", type=int, help="optimizer steps")
    parser.add_argument("--seed", type=int, help="seed of data order, sampling and attribution noise")
    parser.add_argument("--resume", metavar="CHECKPOINT",
                        help="resume from a checkpoint folder, or 'latest' for the newest in the output dir")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved settings and exit")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="settings overrides")
    parser.set_defaults(func=run_train)
    return parser


def add_train_command(subparsers) -> argparse.ArgumentParser:
    """Register `train` on the subparsers of the `oar` command line."""
    parser = subparsers.add_parser(
        "train", help="reshaped GRPO training (OAR) on TRL", description=__doc__.split("\n\n")[0],
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return _configure(parser)


def _flag_overrides(args: argparse.Namespace) -> list[str]:
    pairs = [("trainer.oar_method", args.method), ("trainer.oar_probe", args.probe),
             ("run.model", args.model), ("trainer.output_dir", args.output_dir),
             ("trainer.max_steps", args.max_steps), ("trainer.seed", args.seed)]
    return [f"{key}={json.dumps(value)}" for key, value in pairs if value is not None]


def _check_resume(resume: str | None, settings: dict) -> str | bool | None:
    """The `resume_from_checkpoint` of `--resume`, checked before anything loads."""
    from pathlib import Path

    from .errors import TrainingConfigError

    if resume is None:
        return None
    if resume == "latest":
        out = Path(str(settings["trainer"].get("output_dir") or "."))
        if not any(out.glob("checkpoint-*")):
            raise TrainingConfigError(f"--resume latest: no checkpoint-* folder in {out}; train "
                                      "without --resume first, or pass a checkpoint folder")
        return True
    if not Path(resume).is_dir():
        raise TrainingConfigError(f"--resume {resume}: no checkpoint folder there; pass a "
                                  "checkpoint-N folder of an earlier run, or 'latest'")
    return resume


def run_train(args: argparse.Namespace) -> int:
    from .launch import build_configs, resolve, train

    settings = resolve(args.preset, args.config, list(args.overrides) + _flag_overrides(args))
    if args.dry_run:
        import yaml

        build_configs(settings)  # validates (types included) before anything is printed
        print(yaml.safe_dump(settings, sort_keys=False), end="")
        return 0
    resume = _check_resume(args.resume, settings)
    run, trainer_args = build_configs(settings)
    summary = train(run, trainer_args, resume=resume)
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _configure(argparse.ArgumentParser(
        prog="python -m oar_attrib.training", description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except OARError as err:
        print(f"oar train: error: {err}", file=sys.stderr)
        return 2
