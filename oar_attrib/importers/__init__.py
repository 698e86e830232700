"""Importers of other RL stacks' rollouts into a run store: TRL's completion logs (`trl`),
verl's rollout dumps (`verl`) and plain JSON Lines (`jsonl`); `rows.import_rollouts` writes
them (streaming, resumable, bad rows reported); sources.py knows each file by its content,
values.py checks each value on its row. `oar import` is the command line."""
from .jsonl import read_jsonl
from .rows import (MAX_RECORD_BYTES, BadRow, ImportSummary, RecordLimits, Rollout, group_advantages,
                   import_rollouts)
from .trl import read_trl
from .verl import read_verl

READERS = {"trl": read_trl, "verl": read_verl, "jsonl": read_jsonl}

__all__ = ["MAX_RECORD_BYTES", "READERS", "BadRow", "ImportSummary", "RecordLimits", "Rollout",
           "group_advantages", "import_rollouts", "read_jsonl", "read_trl", "read_verl"]
