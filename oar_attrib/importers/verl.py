"""verl's rollout dumps: with `trainer.rollout_data_dir=DIR` set, verl's PPO trainer writes,
at each training step, `DIR/<global_step>.jsonl`, one line per rollout with `input` (the
prompt as decoded text, chat template applied), `output` (the response text), `score` (its
sequence reward), `step`, and, in newer versions, `gts` (the ground truth) and every key of
the reward function's extra info (e.g. `acc`). That is the layout read here; verl logs no
advantage, so it is recomputed from the scores by the group rule.

The groups: verl's v1 trainer (its default since 0.8) writes `uid`, `{sample}_{rollout}_{output}`,
sorted by it, and no reward extras. A group is the sample part of `uid` (one prompt's rollouts,
however many samples of the batch repeat its text), and a rollout of several outputs (a
multi-turn agent loop) is its last output, the one verl's GRPO reads. Older dumps have no
`uid`: a group is a run of consecutive lines of the same prompt text (verl repeats the batch
interleaved), so two samples of one prompt text side by side merge into one group; the import
says which rule it read each dump with. Every value is checked on its line: one bad line (a
400-digit step, a score that is a list, a `uid` not of that form) is skipped and named, the
rest of the dump imported.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..jsonl import NotJSON, iter_jsonl
from . import sources
from .rows import BadRow, Rollout, consecutive_groups
from .sources import Source
from .values import Bad, as_gold, as_number, as_step, as_verdict, check_text, loggable

_FIXED = ("input", "output", "score", "step", "gts")
UID_RULE = ("grouped by the sample part of uid ({sample}_{rollout}_{output}, verl's v1 dumps); "
            "a rollout of several outputs is its last output")
TEXT_RULE = ("grouped by consecutive lines of the same prompt text (dumps without uid, before "
             "verl's v1 trainer: two samples of one prompt side by side share a group)")


def _step_order(path: Path) -> tuple:
    return (not path.stem.isdigit(), int(path.stem) if path.stem.isdigit() else 0, path.name)


def find_sources(paths: Sequence[str | Path], report: Callable[[str], None] = print) -> list[Source]:
    """The `<step>.jsonl` files of rollout_data_dir folders (in step order) and files given."""
    return sources.find_sources(
        paths, lambda folder: sorted(folder.glob("*.jsonl"), key=_step_order), report=report,
        empty="holds no *.jsonl rollout dumps; set trainer.rollout_data_dir in verl to write them",
        missing="pass verl's rollout_data_dir or its files")


def parse_uid(value) -> tuple[str, int, int] | Bad:
    """(sample, rollout, output) of a v1 `uid`, `{sample}_{rollout}_{output}`."""
    parts = value.rsplit("_", 2) if isinstance(value, str) else []
    if len(parts) != 3 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        return Bad(f"uid {str(value)[:80]!r} is not {{sample}}_{{rollout}}_{{output}}")
    return parts[0], int(parts[1]), int(parts[2])


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
    uid = parse_uid(record["uid"]) if "uid" in record else None
    step, gold = as_step(record.get("step")), as_gold(record.get("gts"))
    for bad in (step, gold, uid):
        if isinstance(bad, Bad):
            return BadRow.of(source, number, "fields", bad)
    if step is None and source.path.stem.isdigit():
        step = as_step(int(source.path.stem))
        step = None if isinstance(step, Bad) else step
    info = {k: loggable(v) for k, v in record.items() if k not in _FIXED}
    return Rollout(source=source.shown, source_id=source.id, row=number, prompt=record["input"],
                   response=record["output"], reward=score, step=step, gold=gold,
                   group=None if uid is None else (source.id, "uid", uid[0]),
                   correct=as_verdict(record.get("acc")), extra={"logged": info} if info else {})


def _rows(source: Source) -> Iterator[tuple[Rollout | BadRow, tuple | None]]:
    """Each row of a dump and, for a good row with a uid, its (sample, rollout, output)."""
    for number, record in iter_jsonl(source.path):
        item = _rollout(source, number, record)
        uid = parse_uid(record["uid"]) if isinstance(item, Rollout) and "uid" in record else None
        yield item, uid


def last_outputs(rows: Iterable[tuple[Rollout | BadRow, tuple | None]]) -> Iterator[Rollout | BadRow]:
    """The rows of one dump (`_rows`) with each rollout reduced to its last output: the outputs
    of a rollout `{sample}_{rollout}_*` are consecutive lines (v1 sorts its dump by uid); a
    rollout met again after other rows is a bad row."""
    held, seen = None, set()  # held: (item, uid) of the rollout being read
    for item, uid in rows:
        if uid is not None and held is not None and uid[:2] == held[1][:2]:
            held = (item, uid) if uid[2] >= held[1][2] else held
            continue
        if held is not None:
            yield held[0]
            held = None
        if uid is None:
            yield item
        elif uid[:2] in seen:
            yield BadRow(item.source, item.row, "fields", f"rollout {uid[0]}_{uid[1]} again after other "
                                                          "rows (a v1 dump lists a rollout's outputs together)")
        else:
            seen.add(uid[:2])
            held = (item, uid)
    if held is not None:
        yield held[0]


def dump_rule(source: Source) -> str:
    """UID_RULE when the dump's first usable line has a uid, else TEXT_RULE."""
    for _, record in iter_jsonl(source.path):
        if isinstance(record, dict):
            return UID_RULE if "uid" in record else TEXT_RULE
    return TEXT_RULE


def read_verl(paths: Sequence[str | Path], report: Callable[[str], None] = print,
              said: Callable[[str], None] = print):
    """A reader (see rows.Reader) of verl rollout dumps, and the sources it reads; `report` gets
    the files left out, `said` one line per grouping rule, naming how many dumps it reads."""
    found = find_sources(paths, report)
    rules: dict[str, int] = {}
    for source in found:
        rule = dump_rule(source)
        rules[rule] = rules.get(rule, 0) + 1
    for rule, count in rules.items():
        said(f"oar import: {count} verl dump{'s' if count > 1 else ''} {rule}")

    def read():
        for source in found:
            yield from consecutive_groups(last_outputs(_rows(source)))

    return read, found
