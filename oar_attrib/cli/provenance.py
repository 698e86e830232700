"""Which model made a file or a run, so that a command takes it when `--model` is left out.

- A JSONL of `oar generate` names its model and sampling settings on every line (`sampling`,
  `rollouts.SamplingSettings.record`): `generated_by` reads them from its first line.
  `oar attribute --input` and `oar import jsonl` then default to that model and answer format.
- A run folder of TRL holds its policy: the final `save_model` output (config.json,
  *.safetensors and the tokenizer files at the top) or its checkpoints (`checkpoint-N/`), or at
  least the tokenizer (`tokenizer_config.json`); verl saves a Hugging Face copy under
  `global_step_N/actor/huggingface/`. `run_policy` finds it for `oar import`.

Each command says in one line which model it took and from where.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..models.catalogue import TOKENIZER_FILES
from ..defaults import ANSWER_FORMAT
from ..jsonl import iter_jsonl

# The most lines read for the first line that names its model.
_PEEK_LINES = 16


def generated_by(path: str | Path) -> dict | None:
    """The `sampling` record (`model`: {name, weights_sha256}, answer_format, temperature, ...)
    of the first `oar generate` line among the first lines of the JSONL `path`; None when they
    name none (a file of another program)."""
    for number, record in iter_jsonl(path):
        if number > _PEEK_LINES:
            return None
        sampling = record.get("sampling") if isinstance(record, dict) else None
        if isinstance(sampling, dict):
            model = sampling.get("model")
            name = model.get("name") if isinstance(model, dict) else model
            if isinstance(name, str) and name:
                return {**sampling, "model": model if isinstance(model, dict) else {"name": name}}
    return None


@dataclass(frozen=True)
class Policy:
    """The model a run folder holds: `folder`, and whether it has the weights (`weights`:
    a checkpoint `load_model` takes) or only the tokenizer."""

    folder: Path
    weights: bool

    def says(self, command: str) -> str:
        """The one line a command says when it takes this policy."""
        if self.weights:
            return (f"oar {command}: the model and tokenizer of {self.folder} (found in the run "
                    "folder); --model picks another")
        return (f"oar {command}: the tokenizer of {self.folder} (found in the run folder, which "
                "holds no weights: pass --model to `oar attribute --store` to score the run)")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors")) and _has_tokenizer(folder)


def _step(folder: Path) -> int:
    found = re.search(r"(\d+)$", folder.name)
    return int(found.group(1)) if found else -1


def _candidates(folder: Path) -> list[Path]:
    """Where a policy may be in a run folder, the newest first: the folder itself (TRL's final
    save), its checkpoints by step (TRL), verl's Hugging Face copies by step."""
    checkpoints = sorted((p for p in folder.glob("checkpoint-*") if p.is_dir()), key=_step, reverse=True)
    verl = sorted((p for p in folder.glob("global_step_*/actor/huggingface") if p.is_dir()),
                  key=lambda p: _step(p.parent.parent), reverse=True)
    return [folder, *checkpoints, *verl]


def _run_folders(sources: Sequence[str | Path]) -> list[Path]:
    """The run folders of the sources: a folder given, or the folder a log file sits in (and,
    for TRL's `completions/completions_N.parquet`, the output_dir above it)."""
    out = []
    for source in map(Path, sources):
        if source.is_dir():
            out.append(source)
        elif source.parent.name == "completions":
            out.append(source.parent.parent)
        else:
            out.append(source.parent)
    return list(dict.fromkeys(out))


def run_policy(sources: Sequence[str | Path]) -> Policy | None:
    """The policy the run folders of `sources` hold: the newest checkpoint with weights, else
    the newest folder with a tokenizer; None when they hold neither."""
    candidates = [c for folder in _run_folders(sources) for c in _candidates(folder)]
    for folder in candidates:
        if _has_weights(folder):
            return Policy(folder, True)
    for folder in candidates:
        if _has_tokenizer(folder):
            return Policy(folder, False)
    return None


def input_defaults(args, path: str | Path, default_model: str, command: str) -> str | None:
    """Fill in `args.model` and `args.answer_format` where the command line left them out
    (None): the model and answer format `path` was generated with (`generated_by`), else
    `default_model` and auto. Returns the one line that says what was taken from the file
    (and whether the model's weights are still those that wrote it), None when nothing was."""
    from ..records.settings_record import model_identity

    named = generated_by(path) if None in (args.model, args.answer_format) else None
    taken = []
    if args.model is None and named is not None:
        args.model = named["model"]["name"]
        taken.append(f"--model {args.model}")
    if args.answer_format is None and named is not None and isinstance(named.get("answer_format"), str):
        args.answer_format = named["answer_format"]
        taken.append(f"--answer-format {args.answer_format}")
    args.model = args.model or default_model
    args.answer_format = args.answer_format or ANSWER_FORMAT
    if not taken:
        return None
    line = f"oar {command}: {' '.join(taken)}, as {Path(path).name} was generated (its lines' `sampling`)"
    wrote = named["model"].get("weights_sha256")
    if taken[0].startswith("--model") and wrote:
        now = model_identity(args.model)["weights_sha256"]
        if now != wrote:
            line += (f"; but {args.model} now has other weights ({str(now)[:12]}, the file's "
                     f"{wrote[:12]}): pass --model with the checkpoint that wrote it")
    return line
