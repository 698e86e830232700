"""JSON Lines files: one loop for every reader, each deciding what a bad line means, and the one
append-only log every writer of a JSONL appends through (`AppendLog`).

Every line is read as bytes and judged on its own, so one bad line never ends the file: a line
that is not UTF-8 (latin-1, UTF-16, binary), not JSON, longer than `max_bytes` or holding a
lone surrogate (`"\\ud800"`, which no UTF-8 file or database can store) is yielded as a
`NotJSON` message with its `kind`, numbered by its line in the file. A UTF-8 byte order mark
at the start of the file is accepted.

`AppendLog` is the project's only way to append to a file, and it appends only to a file that
is its writer's own. It refuses a path that is a link (never written through into what it
points to) or not a regular file (a FIFO, a folder, a device); and a file that is not empty
must be the writer's own output: its first line a whole line that its `LogOwner` takes (an
`oar attribute` record with this command's settings record, an `oar generate` answer, a
cache's record line; `OBJECTS`, a JSON object, where a caller says nothing more). Anything
else (a one-line `json.dump` file with no newline, a file of another program, an output of
other settings) is refused in one line naming the path and what to do, and left byte for
byte. `check_log_path` makes the same judgement without opening anything for writing, so a
command refuses before its model loads. Only then does `AppendLog` cut a last line that a kill
left without its newline (it was never a whole record), so the next append starts on a line
of its own; each `write` is one UTF-8 write of whole lines, flushed and fsynced (a write that
fails half way takes back its own bytes). `iter_jsonl(..., whole_lines=True)` reads the
complete lines only, so a reader never takes a line still being written for a record.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

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


@dataclass(frozen=True)
class LogOwner:
    """Whose log a file is. `what` names the writer's output in messages (`an oar attribute
    output`); `first(value)` says whether a parsed first line is one of its own, and may raise
    its own OARError for a line that is its own but made with other settings (a
    RecordMismatchError naming the fields)."""

    what: str
    first: Callable[[Any], bool]


OBJECTS = LogOwner("a JSON Lines log of oar-attrib", lambda value: isinstance(value, dict))


def _where(path, flag: str) -> str:
    return f"{flag} {path}" if flag else str(path)


def _first_line(read_at: Callable[[int, int], bytes], size: int) -> bytes | None:
    """The first line of a file of `size` bytes (with its newline), None when it has none
    within `MAX_LINE_BYTES`; `read_at(n, offset)` reads n bytes."""
    held, offset = b"", 0
    while offset < min(size, MAX_LINE_BYTES + 1):
        block = read_at(min(1 << 16, size - offset), offset)
        if not block:
            break
        cut = block.find(b"\n")
        if cut >= 0:
            return held + block[:cut + 1]
        held, offset = held + block, offset + len(block)
    return None


def _judge(read_at: Callable[[int, int], bytes], size: int, where: str, flag: str,
           owner: LogOwner) -> None:
    """OutputError (one line; the file is not touched) unless a file of `size` bytes is empty
    or its first line is a whole line that `owner` takes (module docstring)."""
    if size == 0:
        return
    remedy = f"pass a new {flag}" if flag else "pass another path"
    line = _first_line(read_at, size)
    if line is None:
        raise OutputError(f"{where} holds no whole line ({size} bytes and no newline), so it is not "
                          f"{owner.what}; nothing is written to it (it is left as it is): {remedy}")
    value = parse_line(line[len(_BOM):] if line.startswith(_BOM) else line, first=True)
    if isinstance(value, NotJSON) or not owner.first(value):
        raise OutputError(f"{where} is not {owner.what} (its first line is not one); nothing is "
                          f"written to it (it is left as it is): {remedy}")


def check_log_path(path: str | Path, flag: str = "", owner: LogOwner | None = OBJECTS) -> Path:
    """`path` as a Path when a log may be appended there: missing, or a regular file that is
    not a link and is empty or `owner`'s own (`LogOwner`; None: not judged); else OutputError
    in one line naming it and what to do. Nothing is opened for writing."""
    path = Path(path)
    where = _where(path, flag)
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
    if owner is not None:
        with open_regular(path, flag) as handle:
            fd = handle.fileno()
            _judge(lambda n, at: os.pread(fd, n, at), os.fstat(fd).st_size, where, flag, owner)
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
    """An append-only JSON Lines file of `owner`'s (`LogOwner`), open for appending (module
    docstring). `flag` names the path in messages (`--out`); `allow_nan=False` refuses NaN and
    infinities (ValueError) where a reader needs strict JSON. A context manager; `close` is
    idempotent."""

    def __init__(self, path: str | Path, flag: str = "", *, owner: LogOwner = OBJECTS,
                 allow_nan: bool = True):
        self._fd = None
        self.path, self.flag, self.allow_nan = check_log_path(path, flag, None), flag, allow_nan
        where = _where(path, flag)
        flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            self._fd = os.open(self.path, flags, 0o644)
        except OSError as err:  # a link or FIFO swapped in since the check: ELOOP, ENXIO
            raise OutputError(f"{where} cannot be appended to ({err.strerror}); pass a regular "
                              "file in a folder you can write") from None
        try:
            kind = not_regular(os.fstat(self._fd).st_mode)
            if kind is not None:
                raise OutputError(f"{where} is {kind}, not a regular file; pass a file path")
            os.set_blocking(self._fd, True)
            fd = self._fd
            _judge(lambda n, at: os.pread(fd, n, at), os.fstat(fd).st_size, where, flag, owner)
            _cut_partial_tail(self._fd)
        except BaseException:
            self.close()
            raise

    def write(self, records: Iterable[Any]) -> None:
        """Append one line per record, in one write, flushed and fsynced. A write that fails
        part way (a full disk) takes back the bytes it wrote, where nothing was appended since."""
        data = b"".join(_line(r, self.allow_nan) for r in records)
        start, view = os.fstat(self._fd).st_size, memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except BaseException:
            written = len(data) - len(view)
            try:
                if written and os.fstat(self._fd).st_size == start + written:
                    os.ftruncate(self._fd, start)
            except OSError:
                pass  # the cut line is dropped on the next open instead
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def append_jsonl(path: str | Path, records: Iterable[Any], flag: str = "", *, owner: LogOwner = OBJECTS,
                 allow_nan: bool = True) -> None:
    """Append `records` to `owner`'s log at `path` (`AppendLog`: opened, written, closed)."""
    with AppendLog(path, flag, owner=owner, allow_nan=allow_nan) as log:
        log.write(records)
