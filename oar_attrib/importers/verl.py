"""verl's rollout dumps: with `trainer.rollout_data_dir=DIR` set, verl's PPO trainer writes,
at each training step, `DIR/<global_step>.jsonl`, one line per rollout with `input` (the
prompt as decoded text, chat template applied), `output` (the response text), `score` (its
sequence reward), `step`, and, in newer versions, `gts` (the ground truth) and every key of
the reward function's extra info (e.g. `acc`). That is the layout read here; verl logs no
advantage, so it is recomputed from the scores by the group rule. A prompt's `n` samples are
consecutive lines (verl repeats the batch interleaved), which makes the groups.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..jsonl import NotJSON, iter_jsonl
from .rows import BadRow, Rollout, as_reward, check_text, consecutive_groups

_FIXED = ("input", "output", "score", "step", "gts")


def find_files(paths: Sequence[str | Path]) -> list[Path]:
    """The `<step>.jsonl` files of rollout_data_dir folders (in step order) and files given."""
    out: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted(given.glob("*.jsonl"), key=lambda p: (not p.stem.isdigit(),
                                                                int(p.stem) if p.stem.isdigit() else 0, p.name))
            if not found:
                raise InputError(f"{given} holds no *.jsonl rollout dumps; set "
                                 "trainer.rollout_data_dir in verl to write them")
            out += found
        elif given.is_file():
            out.append(given)
        else:
            raise InputError(f"{given} does not exist; pass verl's rollout_data_dir or its files")
    return out


def _rollout(path: Path, number: int, record) -> Rollout | BadRow:
    if isinstance(record, NotJSON):
        return BadRow(path.name, number, record.kind, str(record))
    if not isinstance(record, dict):
        return BadRow(path.name, number, "fields", "is not a JSON object")
    why = check_text(record.get("input"), record.get("output"))
    if why:
        return BadRow(path.name, number, "fields", why.replace("prompt", "input")
                      .replace("response", "output"))
    score = as_reward(record.get("score"))
    if isinstance(score, str):
        return BadRow(path.name, number, "bad_reward", score.replace("reward", "score"))
    step = record.get("step")
    if step is None and path.stem.isdigit():
        step = int(path.stem)
    acc = record.get("acc")
    info = {k: v for k, v in record.items() if k not in _FIXED}
    return Rollout(source=path.name, row=number, prompt=record["input"], response=record["output"],
                   reward=score, step=None if step is None else int(step),
                   gold=None if record.get("gts") is None else str(record["gts"]),
                   correct=bool(acc) if isinstance(acc, (bool, int, float)) else None,
                   extra={"logged": info} if info else {})


def read_verl(paths: Sequence[str | Path]):
    """A reader (see rows.Reader) of verl rollout dumps."""
    files = find_files(paths)

    def read():
        for path in files:
            yield from consecutive_groups(_rollout(path, n, r) for n, r in iter_jsonl(path))

    return read, files
