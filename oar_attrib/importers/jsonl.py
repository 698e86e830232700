"""Plain JSON Lines rollouts: one line per response with `prompt` (text or chat messages),
`response`, and optionally `reward`, `group` (any JSON scalar; lines with the same value share
a group), `step`, `advantage`, `answer` or `gold` (the reference answer) and `correct`.
Without `group`, consecutive lines with the same prompt are a group.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..jsonl import NotJSON, iter_jsonl
from .rows import BadRow, Rollout, as_reward, check_text, consecutive_groups

_KNOWN = ("prompt", "response", "reward", "group", "step", "advantage", "answer", "gold", "correct")


def _rollout(path: Path, number: int, record) -> Rollout | BadRow:
    if isinstance(record, NotJSON):
        return BadRow(path.name, number, record.kind, str(record))
    if not isinstance(record, dict):
        return BadRow(path.name, number, "fields", "is not a JSON object")
    why = check_text(record.get("prompt"), record.get("response"))
    if why:
        return BadRow(path.name, number, "fields", why)
    values = {k: as_reward(record.get(k)) for k in ("reward", "advantage")}
    for key, value in values.items():
        if isinstance(value, str):
            return BadRow(path.name, number, f"bad_{key}", value.replace("reward", key))
    group, step, correct = record.get("group"), record.get("step"), record.get("correct")
    if group is not None and not isinstance(group, (str, int, float)):
        return BadRow(path.name, number, "fields", "the group must be a string or a number")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return BadRow(path.name, number, "fields", f"the step {step!r} is not an integer")
    gold = record.get("answer", record.get("gold"))
    return Rollout(source=path.name, row=number, prompt=record["prompt"],
                   response=record["response"], reward=values["reward"],
                   group=None if group is None else ("group", group), step=step,
                   advantage=values["advantage"], gold=None if gold is None else str(gold),
                   correct=correct if isinstance(correct, bool) else None,
                   extra={"logged": {k: v for k, v in record.items() if k not in _KNOWN}}
                   if set(record) - set(_KNOWN) else {})


def read_jsonl(paths: Sequence[str | Path]):
    """A reader (see rows.Reader) of plain JSONL rollouts."""
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise InputError(f"{path} is not a file; pass JSONL files of prompt/response lines")

    def read():
        for path in files:
            yield from consecutive_groups(_rollout(path, n, r) for n, r in iter_jsonl(path))

    return read, files
