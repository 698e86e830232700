"""TRL's completion logs: `GRPOTrainer` with `log_completions=True` writes, at each logging
step, `<output_dir>/completions/completions_<step:05d>.parquet` with the columns `step`,
`prompt` (text or chat messages), `completion` (text or messages), one column per reward
function (its unweighted reward), any columns a reward function logged (`log_extra`), and
`advantage` (the sequence advantage TRL trained with).

The reward of a row is the sum of its reward columns: every numeric column other than `step`
and `advantage` unless `reward_columns` names them (TRL's default reward_weights are all 1).
A prompt's samples are consecutive rows (TRL's RepeatSampler), which makes the groups.
Parquet is read in record batches, never whole. Every value is checked on its row (a step that
is NaN or a list, a completion that is a number, rewards that sum to inf: that row is skipped
and named, the rest imported).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..errors import InputError
from ..files import open_regular
from . import sources
from .rows import BadRow, Rollout, consecutive_groups
from .sources import Source
from .values import Bad, as_number, as_step, check_text, loggable, total

_FIXED = ("step", "prompt", "completion", "advantage")
# Rows decoded at a time: a batch of long completions stays a few hundred MB at most.
_BATCH_ROWS = 64


def _in_folder(folder: Path) -> list[Path]:
    return sorted(folder.glob("completions/completions_*.parquet")) or sorted(
        folder.glob("completions_*.parquet"))


def find_sources(paths: Sequence[str | Path], report: Callable[[str], None] = print) -> list[Source]:
    """The parquet files of TRL output folders (their `completions/`) and of files given."""
    return sources.find_sources(
        paths, _in_folder, report=report,
        empty="holds no completions_*.parquet (nor completions/ with them); train with "
              "GRPOConfig(log_completions=True)",
        missing="pass a TRL output_dir or its parquet files")


def _text(value):
    """A completion's text: the string, or the joined contents of its messages (each a
    string); anything else is returned as it is, for check_text to name."""
    if isinstance(value, list) and value and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in value):
        return "".join(m["content"] for m in value)
    return value


def _reward_columns(schema, wanted: Sequence[str] | None) -> list[str]:
    import pyarrow.types as pat

    if wanted:
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise InputError(f"no reward column {missing} in the log (columns: {schema.names})")
        return list(wanted)
    return [f.name for f in schema if f.name not in _FIXED
            and (pat.is_floating(f.type) or pat.is_integer(f.type))]


def _rows(source: Source, reward_columns: Sequence[str] | None) -> Iterator[Rollout | BadRow]:
    import pyarrow.parquet as pq

    with open_regular(source.path) as raw:
        try:
            handle = pq.ParquetFile(raw)
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
            yield BadRow.of(source, 0, "not_parquet", f"cannot be read as parquet ({err})")
            return
        columns = _reward_columns(handle.schema_arrow, reward_columns)
        if "completion" not in handle.schema_arrow.names or "prompt" not in handle.schema_arrow.names:
            yield BadRow.of(source, 0, "fields", "has no 'prompt' and 'completion' columns; "
                            "is it a TRL completions log?")
            return
        number = 0
        for record_batch in handle.iter_batches(batch_size=_BATCH_ROWS):
            for row in record_batch.to_pylist():
                number += 1
                yield _rollout(source, number, row, columns)


def _rollout(source: Source, number: int, row: dict, columns: list[str]) -> Rollout | BadRow:
    response = _text(row.get("completion"))
    why = check_text(row.get("prompt"), response, ("prompt", "completion"))
    if why:
        return BadRow.of(source, number, "fields", why)
    parts = {c: as_number(row.get(c), f"reward {c!r}") for c in columns}
    bad = next((p for p in parts.values() if isinstance(p, Bad)), None)
    reward = total([p for p in parts.values() if p is not None]) if bad is None else bad
    if isinstance(reward, Bad):
        return BadRow.of(source, number, "bad_reward", reward)
    advantage = as_number(row.get("advantage"), "advantage")
    if isinstance(advantage, Bad):
        return BadRow.of(source, number, "bad_advantage", advantage)
    step = as_step(row.get("step"))
    if isinstance(step, Bad):
        return BadRow.of(source, number, "fields", step)
    logged = {k: loggable(v) for k, v in row.items() if k not in _FIXED and k not in columns
              and isinstance(v, (str, int, float, bool))}
    logged = {k: v for k, v in logged.items() if v is not None}
    return Rollout(source=source.shown, source_id=source.id, row=number, prompt=row["prompt"],
                   response=response, reward=reward, step=step, advantage=advantage,
                   extra={"rewards": parts, **({"logged": logged} if logged else {})})


def read_trl(paths: Sequence[str | Path], reward_columns: Sequence[str] | None = None,
             report: Callable[[str], None] = print):
    """A reader (see rows.Reader) of TRL completion logs, and the sources it reads."""
    found = find_sources(paths, report)

    def read():
        for source in found:
            yield from consecutive_groups(_rows(source, reward_columns))

    return read, found
