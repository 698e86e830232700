"""verl's rollout dumps: with `trainer.rollout_data_dir=DIR` set, verl's PPO trainer writes,
at each training step, `DIR/<global_step>.jsonl`, one line per rollout with `input` (the
prompt as decoded text, chat template applied), `output` (the response text), `score` (its
sequence reward), `step`, and, in newer versions, `gts` (the ground truth) and every key of
the reward function's extra info (e.g. `acc`). That is the layout read here; verl logs no
advantage, so it is recomputed from the scores by the group rule. A prompt's `n` samples are
consecutive lines (verl repeats the batch interleaved), which makes the groups. Every value is
checked on its line: one bad line (a 400-digit step, a score that is a list) is skipped and
named, the rest of the dump imported.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from ..jsonl import NotJSON, iter_jsonl
from . import sources
from .rows import BadRow, Rollout, consecutive_groups
from .sources import Source
from .values import Bad, as_gold, as_number, as_step, as_verdict, check_text, loggable

_FIXED = ("input", "output", "score", "step", "gts")


def _step_order(path: Path) -> tuple:
    return (not path.stem.isdigit(), int(path.stem) if path.stem.isdigit() else 0, path.name)


def find_sources(paths: Sequence[str | Path], report: Callable[[str], None] = print) -> list[Source]:
    """The `<step>.jsonl` files of rollout_data_dir folders (in step order) and files given."""
    return sources.find_sources(
        paths, lambda folder: sorted(folder.glob("*.jsonl"), key=_step_order), report=report,
        empty="holds no *.jsonl rollout dumps; set trainer.rollout_data_dir in verl to write them",
        missing="pass verl's rollout_data_dir or its files")


def _rollout(source: Source, number: int, record) -> Rollout | BadRow:
    if isinstance(record, NotJSON):
        return BadRow.of(source, number, record.kind, str(record))
    if not isinstance(record, dict):
        return BadRow.of(source, number, "fields", "is not a JSON object")
    why = check_text(record.get("input"), record.get("output"), ("input", "output"))
    if why:
        return BadRow.of(source, number, "fields", why)
    score = as_number(record.get("score"), "score")
    if isinstance(score, Bad):
        return BadRow.of(source, number, "bad_reward", score)
    step, gold = as_step(record.get("step")), as_gold(record.get("gts"))
    for bad in (step, gold):
        if isinstance(bad, Bad):
            return BadRow.of(source, number, "fields", bad)
    if step is None and source.path.stem.isdigit():
        step = as_step(int(source.path.stem))
        step = None if isinstance(step, Bad) else step
    info = {k: loggable(v) for k, v in record.items() if k not in _FIXED}
    return Rollout(source=source.shown, source_id=source.id, row=number, prompt=record["input"],
                   response=record["output"], reward=score, step=step, gold=gold,
                   correct=as_verdict(record.get("acc")), extra={"logged": info} if info else {})


def read_verl(paths: Sequence[str | Path], report: Callable[[str], None] = print):
    """A reader (see rows.Reader) of verl rollout dumps, and the sources it reads."""
    found = find_sources(paths, report)

    def read():
        for source in found:
            yield from consecutive_groups(_rollout(source, n, r) for n, r in iter_jsonl(source.path))

    return read, found
