"""Files named on the command line: inputs read only when they are regular files, outputs
checked before any work, and the partial last line a kill leaves in an appended JSONL.

A path given as input may name anything: a folder, a FIFO (whose open blocks until a writer
comes, and ignores Ctrl-C while it waits), a device such as /dev/zero (endless), a socket, or a
link to one of these. `check_file` judges a path by `os.stat` alone, never opening it;
`open_regular` opens with O_NONBLOCK (a FIFO's open returns at once) and checks the open
descriptor again, so a file swapped for a FIFO between the two is refused too (`feed_file`
hashes a file through it); `folder_files` lists a folder's matching files, skipping with one
line each what is not a regular file or is a link out of the folder. `check_writable` refuses an output path that cannot be created or
appended (a folder, a FIFO, no permission) before anything runs; `drop_partial_tail` cuts the
line a kill left without its newline, so a resumed JSONL holds whole records only.

Whole files have one writer, as appends have one (`jsonl.AppendLog`): `replacing` gives a
temporary path in the destination's folder, fsyncs what was written there and replaces the
destination with it in one `os.replace`, so a reader sees the old file or the new one, never a
half-written one; `write_file` writes text or bytes through it, and `move_into_place` puts a
finished folder where it belongs. `os.replace` and `os.rename` are called nowhere else in the
package (`tests/test_architecture.py` holds the rule).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from .errors import InputError, OutputError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def not_regular(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file (`a FIFO (named pipe)`, ...)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_file(path: str | Path, flag: str = "", hint: str = "") -> Path:
    """`path` as a Path when it is a readable regular file (links followed), else InputError
    naming what it is: missing, a folder, a FIFO, a device, unreadable. `flag` prefixes the
    message (`--data`), `hint` ends it (what to pass instead). Nothing is opened."""
    path = Path(path)
    where = f"{flag} {path}" if flag else str(path)
    tail = f"; {hint}" if hint else ""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{where} does not exist{tail}") from None
    except OSError as err:
        raise InputError(f"{where} cannot be read ({err.strerror}){tail}") from None
    kind = not_regular(mode)
    if kind is not None:
        raise InputError(f"{where} is {kind}, not a regular file{tail}")
    if not os.access(path, os.R_OK):
        raise InputError(f"{where} is not readable; check its permissions")
    return path


def open_regular(path: str | Path, flag: str = "") -> BinaryIO:
    """`path` opened for reading in binary, or InputError when it is not a regular file. The
    open never blocks (O_NONBLOCK), and the kind is checked on the open descriptor."""
    where = f"{flag} {path}" if flag else str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{where} is a folder, not a regular file") from None
    except OSError as err:
        raise InputError(f"{where} cannot be opened ({err.strerror})") from None
    kind = not_regular(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise InputError(f"{where} is {kind}, not a regular file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def feed_file(digest, path: str | Path):
    """`digest` (a hashlib object) updated with the bytes of the regular file `path`
    (`open_regular`), read in 1 MB blocks; returned."""
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest


def folder_files(folder: Path, names: Iterable[Path], report: Callable[[str], None]) -> list[Path]:
    """The paths of `names` (found in `folder`) that are regular files inside it: each link
    out of the folder and each thing that is not a regular file is passed to `report` as one
    line `PATH: skipped: why` and left out. Judged by lstat and stat, never opened."""
    root = folder.resolve()
    kept = []
    for path in names:
        try:
            own = os.lstat(path).st_mode
            if stat.S_ISLNK(own):
                target = path.resolve(strict=True)
                if not target.is_relative_to(root):
                    report(f"{path}: skipped: a link out of {folder} (to {target})")
                    continue
            kind = not_regular(os.stat(path).st_mode)
        except (OSError, RuntimeError) as err:  # a dangling link, a loop of links, no permission
            report(f"{path}: skipped: cannot be read ({err.strerror or err})")
            continue
        if kind is not None:
            report(f"{path}: skipped: {kind}, not a regular file")
            continue
        kept.append(path)
    return kept


def check_writable(path: Path, flag: str = "--out") -> None:
    """Raise OutputError unless a file can be created or appended at `path`."""
    if path.is_dir():
        raise OutputError(f"{flag} {path} is a folder; pass a file path ending in .jsonl or .db")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise OutputError(f"{flag} {path}: the folder {parent} does not exist; create it first "
                          "or pass a path in an existing folder")
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: {parent} is a file, not a folder; pass a path in a folder")
    kind = not_regular(path.stat().st_mode) if path.exists() else None
    if kind is not None:  # a FIFO's open would block, a device's never end
        raise OutputError(f"{flag} {path} is {kind}, not a regular file; pass a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{flag} {path} is not writable; pass another path or change its permissions")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot create files in {parent} (no permission); "
                          "pass a path in a folder you can write")


def drop_partial_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline (it was never a full record)."""
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        block, end = 1 << 16, size
        while end > 0:
            start = max(0, end - block)
            handle.seek(start)
            cut = handle.read(end - start).rfind(b"\n")
            if cut >= 0:
                handle.truncate(start + cut + 1)
                return
            end = start
        handle.truncate(0)


# ------------------------------------------------------------------ whole files


def _fsync(path: Path) -> None:
    """Flush `path` (a file, or every file of a folder) to the disk."""
    for one in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
        fd = os.open(one, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _mode(path: Path) -> int:
    """The permissions a rewritten `path` gets: its own, or a new file's under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` (same folder, so the replace is one rename on one file
    system) for the caller to write the whole new file to; on a clean exit it is fsynced and
    replaces `path` (`os.replace`: atomic), on an error it is removed and `path` is left as it
    was. The folder must exist."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, _mode(path))
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_file(path: str | Path, data: str | bytes, encoding: str = "utf-8") -> None:
    """Write `data` (text in `encoding`, or bytes) as the whole of `path`, through `replacing`."""
    with replacing(path) as tmp:
        tmp.write_bytes(data.encode(encoding) if isinstance(data, str) else data)


def move_into_place(new: str | Path, out: str | Path, replace: bool = False) -> None:
    """Move the finished file or folder `new` to `out` (one rename, flushed first). With
    `replace`, an existing `out` is moved aside first and deleted after, so that `out` is never
    half written; without it a rename onto an existing folder fails (OSError), as it should
    when another process got there first."""
    new, out = Path(new), Path(out)
    _fsync(new)
    if not replace or not out.exists():
        os.rename(new, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
    os.rename(out, aside / out.name)
    os.rename(new, out)
    shutil.rmtree(aside, ignore_errors=True)
