"""`oar train` / `python -m oar_attrib.training`: reshaped GRPO from a preset, a YAML file and overrides.

    oar train --preset arith-tiny --method oar_g
    oar train --preset math-7b model=/models/Qwen2.5-7B max_steps=500
    accelerate launch --config_file training/accelerate/ddp.yaml training/train.py --preset math-7b

`add_train_command(subparsers)` registers the subcommand on an existing `oar` parser.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

from oar_attrib.commands import DefaultsHelpFormatter, add_dataclass_args, option, run_command, runs_on
from oar_attrib.extras import require_extra

_EPILOG = """settings: key=value pairs (YAML values), anywhere among the flags, override the preset
and --config; so does any setting in TRL's spelling, --key value or --key=value (--output_dir,
--learning_rate 1e-6, --bf16 alone means true). A bare key is a field of the run section (model, data, reward, eval_every, ...) or of
OARConfig (learning_rate, oar_tau, num_generations, ...); run.KEY / trainer.KEY name the section.
$OAR_TRAIN_OVERRIDES (key=value pairs) is applied last, e.g. for a short trial of a command.
Multi-GPU, from a checkout: accelerate launch --config_file training/accelerate/{ddp,zero2,zero3}.yaml training/train.py ..."""


_OVERRIDE = re.compile(r"^[A-Za-z_][\w.]*=")


def split_settings(argv: list[str], own: dict[str, argparse.Action]) -> tuple[list[str], list[str]]:
    """(the tokens of this parser's own flags, the settings as key=value strings), in order.

    A settings token is `key=value` anywhere, or a flag that is not one of `own` (the parser's
    option strings): `--key value`, `--key=value`, or `--key` alone (true), TRL's spelling of
    its fields; dashes in the key become underscores. Unknown keys are refused later, by name."""
    kept, settings, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        i += 1
        flag = token.split("=", 1)[0]
        if flag in own:
            kept.append(token)
            takes_value = own[flag].nargs != 0 and "=" not in token
            if takes_value and i < len(argv):
                kept.append(argv[i])
                i += 1
        elif token.startswith("--") and len(token) > 2:
            key, sep, value = token[2:].partition("=")
            if not sep:
                has_value = i < len(argv) and not argv[i].startswith("--") and not _OVERRIDE.match(argv[i])
                value = argv[i] if has_value else "true"
                i += has_value
            settings.append(f"{key.replace('-', '_')}={value}")
        elif _OVERRIDE.match(token):
            settings.append(token)
        else:
            kept.append(token)
    return kept, settings


class TrainArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that takes settings anywhere among its flags (`split_settings`)."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        kept, settings = split_settings(args, self._option_string_actions)
        parsed, extras = super().parse_known_args(kept, namespace)
        parsed.overrides = list(parsed.overrides or []) + settings
        return parsed, extras


@dataclass(frozen=True)
class TrainFlags:
    """The flags of `oar train`: the preset, the YAML merged over it, the settings most runs
    change (each one a key=value setting too, `_flag_overrides`), how to resume, and the
    key=value settings themselves."""

    preset: str = option("arith-tiny", "preset name (arith-tiny, math-7b) or a YAML file")
    config: str | None = option(None, "YAML file merged over the preset (same run/trainer sections)")
    method: str | None = option(None, "importance method: 'none' (plain GRPO) or a registered method "
                                "that is not analysis-only; an unknown name is refused with the list "
                                "(default: the preset's)")
    probe: str | None = option(None, "outcome probe after the warm-up; an unknown name is refused with "
                               "the list (default: the preset's)")
    model: str | None = option(None, "bundled model name or local checkpoint folder (default: the preset's)")
    output_dir: str | None = option(None, "where checkpoints, logs and the run store go (default: the preset's)")
    max_steps: int | None = option(None, "optimizer steps (default: the preset's)")
    seed: int | None = option(None, "seed of data order, sampling and attribution noise (default: the preset's)")
    resume: str | None = option(None, "resume from a checkpoint folder, or 'latest' for the newest in the "
                                "output dir", metavar="CHECKPOINT")
    dry_run: bool = option(False, "print the resolved settings and exit", action="store_true")
    overrides: tuple[str, ...] | None = option(None, "settings overrides", flag="overrides", nargs="*",
                                               metavar="KEY=VALUE")


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_dataclass_args(parser, TrainFlags)
    parser.set_defaults(func=runs_on(TrainFlags, run_train))
    return parser


def evaluate_data(model, tokenizer, path, **settings) -> dict:
    """`oar eval --data`: a JSONL math set scored with the evaluator and rewards training logs
    with (`math_eval.evaluate_math`), loaded when the command runs."""
    from .math_eval import evaluate_math

    return evaluate_math(model, tokenizer, path, **settings)


def add_train_command(subparsers) -> argparse.ArgumentParser:
    """Register `train` on the subparsers of the `oar` command line, and hand the core's
    `oar eval` its evaluator of JSONL math sets (`evaluate_data`, under the parser default the
    command reads), so that the core command line stays free of the training package; returns
    the `train` parser."""
    if "eval" in subparsers.choices:
        subparsers.choices["eval"].set_defaults(evaluate_data=evaluate_data)
    parser = subparsers.add_parser(
        "train", help="reshaped GRPO training (OAR) on TRL", description=__doc__.split("\n\n")[0],
        epilog=_EPILOG, formatter_class=DefaultsHelpFormatter,
    )
    # The subparsers action builds every parser with its own class; this one takes settings
    # among its flags (the `oar` parser hands it its whole tail through parse_known_args).
    parser.__class__ = TrainArgumentParser
    return _configure(parser)


def _flag_overrides(flags: TrainFlags) -> list[str]:
    pairs = [("trainer.oar_method", flags.method), ("trainer.oar_probe", flags.probe),
             ("run.model", flags.model), ("trainer.output_dir", flags.output_dir),
             ("trainer.max_steps", flags.max_steps), ("trainer.seed", flags.seed)]
    return [f"{key}={json.dumps(value)}" for key, value in pairs if value is not None]


def _check_resume(resume: str | None, settings: dict) -> str | None:
    """The `resume_from_checkpoint` of `--resume` (a folder, or the newest checkpoint-N of the
    run's output_dir for 'latest'), checked before anything loads."""
    from pathlib import Path

    from transformers.trainer_utils import get_last_checkpoint

    from .errors import TrainingConfigError

    if resume is None:
        return None
    if resume == "latest":
        out = str(settings["trainer"].get("output_dir") or ".")
        found = get_last_checkpoint(out) if Path(out).is_dir() else None
        if found is None:
            raise TrainingConfigError(
                f"--resume latest: {out} has no checkpoint-N folder to resume from; train without "
                "--resume first, or pass --output-dir of a run that saved checkpoints")
        return found
    if not Path(resume).is_dir():
        raise TrainingConfigError(f"--resume {resume}: no checkpoint folder there; pass a "
                                  "checkpoint-N folder of an earlier run, or 'latest'")
    return resume


OVERRIDES_ENV = "OAR_TRAIN_OVERRIDES"


def env_overrides() -> list[str]:
    """key=value settings from $OAR_TRAIN_OVERRIDES, applied after the command line's: a short
    run of any documented command (`OAR_TRAIN_OVERRIDES="max_steps=2 eval_every=0"`)."""
    import os
    import shlex

    return shlex.split(os.environ.get(OVERRIDES_ENV, ""))


def run_train(flags: TrainFlags) -> int:
    """`oar train`: resolve the preset, the YAML and the settings over it, then train (or print
    them, with `dry_run`); prints the run's summary as one JSON line."""
    require_extra("train", "oar train")
    from .launch import build_configs, resolve, train

    settings = resolve(flags.preset, flags.config,
                       list(flags.overrides or ()) + _flag_overrides(flags) + env_overrides())
    if flags.dry_run:
        import yaml

        build_configs(settings)  # validates (types included) before anything is printed
        print(yaml.safe_dump(settings, sort_keys=False), end="")
        return 0
    resume = _check_resume(flags.resume, settings)
    run, trainer_args = build_configs(settings)
    summary = train(run, trainer_args, resume=resume)
    # One write per line: under a launcher every rank prints its summary to the same pipe. `print`
    # writes the text and its newline apart, and unbuffered (PYTHONUNBUFFERED, `python -u`) each
    # reaches the pipe alone, so the other rank's line could land between them.
    sys.stdout.flush()
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _configure(TrainArgumentParser(
        prog="python -m oar_attrib.training", description=__doc__.split("\n\n")[0], epilog=_EPILOG,
        formatter_class=DefaultsHelpFormatter,
    ))
    return run_command(parser.parse_args(argv), "train", parser)
