"""One writer per output: an exclusive `flock` on a lock file beside it, `<output>.lock`.

The lock belongs to the open file description, so the kernel drops it when the process ends
in any way (a SIGKILL included): a lock file left by a dead writer is simply free, and the
next writer takes it over. The holder writes its pid into the file so that a refused writer
can name it. The file itself stays (deleting a lock file that another process may have just
opened would let two writers hold two different files). On systems without `fcntl` no lock is
taken.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import StoreWriteError, WriterBusyError


def lock_path(path: str | Path) -> Path:
    return Path(f"{path}.lock")


class WriterLock:
    """The exclusive writer lock of `path`, taken on construction (WriterBusyError when
    another live process holds it), released by `release()` or the process's end."""

    def __init__(self, path: str | Path, what: str = "--out"):
        self.path = lock_path(path)
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:  # a read-only folder or file system, a full disk
            raise StoreWriteError(f"{what} {path}: cannot make its lock file {self.path.name} "
                                  f"({err.strerror}); pass a path in a folder you can write") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise WriterBusyError(
                f"{what} {path} is being written by {who} (pid in {self.path.name}); wait for it "
                "to end, or pass another path") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
