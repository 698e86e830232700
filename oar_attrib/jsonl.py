"""Reading JSON Lines files: one loop for every reader, each deciding what a bad line means."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


class NotJSON(str):
    """The parser's message for a line that is not JSON (yielded in place of its value)."""


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of `path`, numbered from 1; a line
    that does not parse gives a `NotJSON` message instead, so the caller can skip or raise."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                yield number, NotJSON(err.msg)
