"""One writer per output: an exclusive `flock` on a lock file beside it, `<output>.lock`.

The lock belongs to the open file description, so the kernel drops it when the process ends
in any way (a SIGKILL included): a lock file left by a dead writer is simply free, and the
next writer takes it over. The holder writes its pid into the file so that a refused writer
can name it, and deletes the file when it lets go (`release`: a clean exit, an error, Ctrl-C).
It unlinks the path while it still holds the lock, and a writer that takes a lock then checks
that the file it holds is still the one at the path (else it opened a file just unlinked, and
tries again), so two writers never hold two different files. Only a killed writer leaves its
file behind.

The path is never trusted. It is opened without following a link (O_NOFOLLOW) and without
blocking (a FIFO's open would wait for a writer), and it must be a regular file with one name
(not a hard link to another file) holding nothing but a pid: a link, a FIFO, a folder or
another file named like the lock is an OutputError in one line, and is left as it is (it is
never truncated or written). On systems without `fcntl` no lock is taken.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from ..errors import OutputError
from ..files import not_regular
from .errors import StoreWriteError, WriterBusyError

_OPEN = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
         | getattr(os, "O_CLOEXEC", 0))
_TRIES = 16  # a lock file replaced this often while we take it: another writer is at work
_PID_BYTES = 32


def lock_path(path: str | Path) -> Path:
    return Path(f"{path}.lock")


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class WriterLock:
    """The exclusive writer lock of `path`, taken on construction (WriterBusyError when
    another live process holds it; OutputError when `<path>.lock` is not a lock file),
    released, and its file deleted, by `release()`; released by the process's end."""

    def __init__(self, path: str | Path, what: str = "--out"):
        self.path = lock_path(path)
        self._fd: int | None = None
        self._where = f"{what} {path}"
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return
        for _ in range(_TRIES):
            fd = self._open()
            try:
                taken = self._take(fcntl, fd)
            except BaseException:
                os.close(fd)
                raise
            if taken:
                self._fd = fd
                return
            os.close(fd)  # the file was unlinked by a holder letting go: take the new one
        raise WriterBusyError(f"{self._where}: its lock file {self.path.name} was replaced {_TRIES} times "
                              "while this process took it; wait for the other writers to end")

    def _refuse(self, what: str) -> OutputError:
        return OutputError(f"{self._where}: its lock file {self.path} is {what}; nothing is written "
                           "through it (it is left as it is): move it away, or pass another path")

    def _open(self) -> int:
        """The lock file's descriptor: created, or a regular file of one name opened as it is."""
        try:
            fd = os.open(self.path, _OPEN, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP or os.path.islink(self.path):
                raise self._refuse("a symbolic link") from None
            if err.errno == errno.EISDIR:
                raise self._refuse("a folder") from None
            # a read-only folder or file system, a full disk
            raise StoreWriteError(f"{self._where}: cannot make its lock file {self.path.name} "
                                  f"({err.strerror}); pass a path in a folder you can write") from None
        found = os.fstat(fd)
        kind = not_regular(found.st_mode)
        if kind is not None or found.st_nlink != 1:
            os.close(fd)
            raise self._refuse(kind or f"a file with {found.st_nlink} names (a hard link)")
        return fd

    def _take(self, fcntl, fd: int) -> bool:
        """Lock `fd` and write this pid into it; False when the file is no longer the one at
        the path (its holder let go and unlinked it meanwhile)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise WriterBusyError(
                f"{self._where} is being written by {who} (pid in {self.path.name}); wait for it "
                "to end, or pass another path") from None
        try:
            if not _same_file(os.fstat(fd), os.lstat(self.path)):
                return False
        except FileNotFoundError:
            return False
        held = os.pread(fd, _PID_BYTES + 1, 0)
        if held.strip() and not (len(held) <= _PID_BYTES and held.strip().isdigit()):
            raise self._refuse("not a lock file (it holds something other than a pid)")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def release(self) -> None:
        """Delete the lock file (while still holding it) and let go; a second call does nothing."""
        if self._fd is None:
            return
        try:
            if _same_file(os.fstat(self._fd), os.lstat(self.path)):
                os.unlink(self.path)
        except OSError:  # gone already, or its folder is read-only now: left behind, and free
            pass
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
