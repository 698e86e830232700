"""Plain JSON Lines rollouts: one line per response with `prompt` (text or chat messages),
`response`, and optionally `reward`, `group` (any JSON scalar; lines with the same value share
a group), `step`, `advantage`, `answer` or `gold` (the reference answer) and `correct`.
Without `group`, consecutive lines of a file with the same prompt are a group; a `group` value
names one group across the files of one import. Every value is checked on its line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from ..jsonl import NotJSON, iter_jsonl
from .rows import BadRow, Rollout, consecutive_groups
from .sources import Source, find_sources
from .values import Bad, as_gold, as_group, as_number, as_step, check_text, loggable

_KNOWN = ("prompt", "response", "reward", "group", "step", "advantage", "answer", "gold", "correct")


def _rollout(source: Source, number: int, record) -> Rollout | BadRow:
    if isinstance(record, NotJSON):
        return BadRow.of(source, number, record.kind, str(record))
    if not isinstance(record, dict):
        return BadRow.of(source, number, "fields", "is not a JSON object")
    why = check_text(record.get("prompt"), record.get("response"))
    if why:
        return BadRow.of(source, number, "fields", why)
    values = {k: as_number(record.get(k), k) for k in ("reward", "advantage")}
    for key, value in values.items():
        if isinstance(value, Bad):
            return BadRow.of(source, number, f"bad_{key}", value)
    group, step = as_group(record.get("group")), as_step(record.get("step"))
    gold = as_gold(record.get("answer", record.get("gold")))
    for bad in (group, step, gold):
        if isinstance(bad, Bad):
            return BadRow.of(source, number, "fields", bad)
    logged = {k: loggable(v) for k, v in record.items() if k not in _KNOWN}
    return Rollout(source=source.shown, source_id=source.id, row=number, prompt=record["prompt"],
                   response=record["response"], reward=values["reward"],
                   group=None if group is None else ("group", group), step=step,
                   advantage=values["advantage"], gold=gold,
                   correct=record.get("correct") if isinstance(record.get("correct"), bool) else None,
                   extra={"logged": logged} if logged else {})


def read_jsonl(paths: Sequence[str | Path], report: Callable[[str], None] = print):
    """A reader (see rows.Reader) of plain JSONL rollouts, and the sources it reads."""
    found = find_sources(paths, lambda folder: [], report=report, empty="is a folder; pass JSONL files of prompt/response lines",
                         missing="pass JSONL files of prompt/response lines")

    def read():
        for source in found:
            yield from consecutive_groups(_rollout(source, n, r) for n, r in iter_jsonl(source.path))

    return read, found
