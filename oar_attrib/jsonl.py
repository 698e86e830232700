"""Reading JSON Lines files: one loop for every reader, each deciding what a bad line means.

Every line is read as bytes and judged on its own, so one bad line never ends the file: a line
that is not UTF-8 (latin-1, UTF-16, binary), not JSON, longer than `max_bytes` or holding a
lone surrogate (`"\\ud800"`, which no UTF-8 file or database can store) is yielded as a
`NotJSON` message with its `kind`, numbered by its line in the file. A UTF-8 byte order mark
at the start of the file is accepted.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from .files import open_regular

# Longest line read in full (a longer one is skipped without being held in memory).
MAX_LINE_BYTES = 64 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class NotJSON(str):
    """The message for a line that cannot be used (yielded in place of its value); `kind` is
    one of not_utf8, not_json, surrogate, too_long."""

    kind = "not_json"

    def __new__(cls, message: str, kind: str = "not_json") -> "NotJSON":
        self = super().__new__(cls, message)
        self.kind = kind
        return self


def has_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a lone surrogate anywhere (key or string)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    return False


def parse_line(raw: bytes, first: bool = False) -> Any:
    """The value of one line's bytes (without a BOM), or a `NotJSON` saying why it has none;
    `first` says it is the file's first line (where a UTF-16 BOM is recognised)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        hint = " (the file looks UTF-16)" if first and raw[:2] in _UTF16_BOMS else ""
        return NotJSON(f"not UTF-8{hint}: byte 0x{raw[err.start]:02x} at column {err.start + 1}; "
                       "save the file as UTF-8", "not_utf8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return NotJSON(f"{err.msg} at column {err.colno}", "not_json")
    except RecursionError:
        return NotJSON("nested too deeply", "not_json")
    except ValueError as err:  # an integer of more digits than Python converts (4300)
        return NotJSON(f"holds a number Python cannot read ({str(err).split(':')[0]})", "not_json")
    if has_surrogate(value):
        return NotJSON("holds a lone surrogate (an unpaired \\ud800-\\udfff escape); "
                       "fix the text that produced it", "surrogate")
    return value


def iter_jsonl(path: str | Path, *, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of `path`, numbered from 1; a line
    that cannot be used gives a `NotJSON` message instead, so the caller can skip or raise.
    A path that is not a regular file (a folder, a FIFO, a device) is an InputError, never
    opened for reading (`files.open_regular`)."""
    with open_regular(path) as handle:
        number = 0
        while True:
            raw = handle.readline(max_bytes + 1)
            if not raw:
                return
            number += 1
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the overlong line
                    raw = handle.readline(1 << 20)
                yield number, NotJSON(f"longer than {max_bytes} bytes", "too_long")
                continue
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if not raw.strip():
                continue
            yield number, parse_line(raw, first=number == 1)
