"""TRL's completion logs: `GRPOTrainer` with `log_completions=True` writes, at each logging
step, `<output_dir>/completions/completions_<step:05d>.parquet` with the columns `step`,
`prompt` (text or chat messages), `completion` (text or messages), one column per reward
function (its unweighted reward), any columns a reward function logged (`log_extra`), and
`advantage` (the sequence advantage TRL trained with).

The reward of a row is the sum of its reward columns: every numeric column other than `step`
and `advantage` unless `reward_columns` names them (TRL's default reward_weights are all 1).
A prompt's samples are consecutive rows (TRL's RepeatSampler), which makes the groups.
Parquet is read in record batches, never whole.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import InputError
from .rows import BadRow, Rollout, as_reward, check_text, consecutive_groups

_FIXED = ("step", "prompt", "completion", "advantage")


def find_files(paths: Sequence[str | Path]) -> list[Path]:
    """The parquet files of TRL output folders (their `completions/`) and of files given."""
    out: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted(given.glob("completions/completions_*.parquet")) or sorted(
                given.glob("completions_*.parquet"))
            if not found:
                raise InputError(f"{given} holds no completions_*.parquet (nor completions/ with "
                                 "them); train with GRPOConfig(log_completions=True)")
            out += found
        elif given.is_file():
            out.append(given)
        else:
            raise InputError(f"{given} does not exist; pass a TRL output_dir or its parquet files")
    return out


def _text(value) -> str | None:
    """A completion's text: the string, or the joined contents of its messages."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return "".join(str(m.get("content") or "") for m in value)
    return None


def _reward_columns(schema, wanted: Sequence[str] | None) -> list[str]:
    import pyarrow.types as pat

    if wanted:
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise InputError(f"no reward column {missing} in the log (columns: {schema.names})")
        return list(wanted)
    return [f.name for f in schema if f.name not in _FIXED
            and (pat.is_floating(f.type) or pat.is_integer(f.type))]


def _rows(path: Path, reward_columns: Sequence[str] | None) -> Iterator[Rollout | BadRow]:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        yield BadRow(path.name, 0, "not_parquet", f"cannot be read as parquet ({err})")
        return
    columns = _reward_columns(handle.schema_arrow, reward_columns)
    if "completion" not in handle.schema_arrow.names or "prompt" not in handle.schema_arrow.names:
        yield BadRow(path.name, 0, "fields", "has no 'prompt' and 'completion' columns; "
                     "is it a TRL completions log?")
        return
    number = 0
    for record_batch in handle.iter_batches(batch_size=256):
        for row in record_batch.to_pylist():
            number += 1
            yield _rollout(path.name, number, row, columns)


def _rollout(source: str, number: int, row: dict, columns: list[str]) -> Rollout | BadRow:
    response = _text(row.get("completion"))
    why = check_text(row.get("prompt"), response)
    if why:
        return BadRow(source, number, "fields", why)
    parts = [as_reward(row.get(c)) for c in columns]
    bad = next((p for p in parts if isinstance(p, str)), None)
    if bad:
        return BadRow(source, number, "bad_reward", bad)
    known = [p for p in parts if p is not None]
    advantage = as_reward(row.get("advantage"))
    if isinstance(advantage, str):
        return BadRow(source, number, "bad_advantage", advantage.replace("reward", "advantage"))
    step = row.get("step")
    logged = {k: v for k, v in row.items() if k not in _FIXED and k not in columns
              and isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and math.isnan(v))}
    return Rollout(source=source, row=number, prompt=row["prompt"], response=response,
                   reward=sum(known) if known else None, step=None if step is None else int(step),
                   advantage=advantage,
                   extra={"rewards": {c: p for c, p in zip(columns, parts)}, **({"logged": logged} if logged else {})})


def read_trl(paths: Sequence[str | Path], reward_columns: Sequence[str] | None = None):
    """A reader (see rows.Reader) of TRL completion logs."""
    files = find_files(paths)

    def read():
        for path in files:
            yield from consecutive_groups(_rows(path, reward_columns))

    return read, files
