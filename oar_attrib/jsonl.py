"""JSON Lines files: one loop for every reader, each deciding what a bad line means, and the one
append-only log every writer of a JSONL appends through (`AppendLog`).

Every line is read as bytes and judged on its own, so one bad line never ends the file: a line
that is not UTF-8 (latin-1, UTF-16, binary), not JSON, longer than `max_bytes` or holding a
lone surrogate (`"\\ud800"`, which no UTF-8 file or database can store) is yielded as a
`NotJSON` message with its `kind`, numbered by its line in the file. A UTF-8 byte order mark
at the start of the file is accepted.

`AppendLog` is the project's only way to append to a file: it refuses a path that is a link
(never written through into what it points to) or not a regular file (a FIFO, a folder, a
device), with one line naming the path and what to do, before anything is written; on open it
cuts a last line that a kill left without its newline (it was never a whole record), so the
next append starts on a line of its own; each `write` is one UTF-8 write of whole lines,
flushed and fsynced. `iter_jsonl(..., whole_lines=True)` reads the complete lines only, so a
reader never takes a line still being written for a record.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import OutputError
from .files import not_regular, open_regular

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


def iter_jsonl(path: str | Path, *, max_bytes: int = MAX_LINE_BYTES,
               whole_lines: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of `path`, numbered from 1; a line
    that cannot be used gives a `NotJSON` message instead, so the caller can skip or raise.
    With `whole_lines`, a last line without its newline (cut by a kill, or still being
    appended) is left out. A path that is not a regular file (a folder, a FIFO, a device) is
    an InputError, never opened for reading (`files.open_regular`)."""
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
            if not raw.strip() or (whole_lines and not raw.endswith(b"\n")):
                continue
            yield number, parse_line(raw, first=number == 1)


# ---------------------------------------------------------------------------- the append-only log


def check_log_path(path: str | Path, flag: str = "") -> Path:
    """`path` as a Path when a log may be appended there: missing, or a regular file that is
    not a link; else OutputError in one line naming it and what to do. Nothing is opened."""
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as err:
        raise OutputError(f"{where} cannot be read ({err.strerror}); pass another path") from None
    if stat.S_ISLNK(mode):
        raise OutputError(f"{where} is a symbolic link (to {os.readlink(path)}); nothing is appended "
                          "through a link: pass the file itself or a new path")
    kind = not_regular(mode)
    if kind is not None:
        raise OutputError(f"{where} is {kind}, not a regular file; pass a file path")
    return path


def _cut_partial_tail(fd: int) -> None:
    """Truncate the open file `fd` after its last newline (a line a kill cut short is dropped)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def _line(record: Any, allow_nan: bool) -> bytes:
    text = json.dumps(record, ensure_ascii=False, allow_nan=allow_nan)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the reader names it (`parse_line`)
        return (json.dumps(record, allow_nan=allow_nan) + "\n").encode("ascii")


class AppendLog:
    """An append-only JSON Lines file, open for appending (module docstring). `flag` names
    the path in messages (`--out`); `allow_nan=False` refuses NaN and infinities (ValueError)
    where a reader needs strict JSON. A context manager; `close` is idempotent."""

    def __init__(self, path: str | Path, flag: str = "", *, allow_nan: bool = True):
        self._fd = None
        self.path, self.flag, self.allow_nan = check_log_path(path, flag), flag, allow_nan
        where = f"{flag} {path}" if flag else str(path)
        flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as err:  # a link or FIFO swapped in since the check: ELOOP, ENXIO
            raise OutputError(f"{where} cannot be appended to ({err.strerror}); pass a regular "
                              "file in a folder you can write") from None
        kind = not_regular(os.fstat(self._fd).st_mode)
        if kind is not None:
            os.close(self._fd)
            raise OutputError(f"{where} is {kind}, not a regular file; pass a file path")
        os.set_blocking(self._fd, True)
        try:
            _cut_partial_tail(self._fd)
        except BaseException:
            self.close()
            raise

    def write(self, records: Iterable[Any]) -> None:
        """Append one line per record, in one write, flushed and fsynced."""
        data = b"".join(_line(r, self.allow_nan) for r in records)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def append_jsonl(path: str | Path, records: Iterable[Any], flag: str = "", *, allow_nan: bool = True) -> None:
    """Append `records` to the log at `path` (`AppendLog`: opened, written, closed)."""
    with AppendLog(path, flag, allow_nan=allow_nan) as log:
        log.write(records)
