"""The files an import reads, each known by its content, never by its name.

Two runs' logs share file names (every TRL run writes `completions/completions_00001.parquet`,
every verl run `1.jsonl`), so a row is identified by its file's content hash (`Source.id`)
and its row number: the same file named twice (or two copies of it) is read once, two runs'
groups are never merged, and a rerun resumes each file exactly where it stopped. Only regular
files are read: in a folder, FIFOs, devices, folders and links out of it are skipped with one
line each (`files.folder_files`); a path given that is not a regular file is an InputError.
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import InputError
from ..files import check_file, feed_file, folder_files

ID_CHARS = 16  # hex digits of the content hash kept as a source's id


@dataclass(frozen=True)
class Source:
    """One file to import: `path` as found (shown in reports) and `id`, the first ID_CHARS
    hex digits of the sha256 of its bytes (what rows are keyed by)."""

    path: Path
    id: str

    @property
    def shown(self) -> str:
        return str(self.path)


def content_id(path: Path) -> str:
    """The sha256 of the bytes of the regular file `path`, first ID_CHARS hex digits."""
    return feed_file(hashlib.sha256(), path).hexdigest()[:ID_CHARS]


def find_sources(paths: Sequence[str | Path], in_folder: Callable[[Path], list[Path]], *,
                 empty: str, missing: str, report: Callable[[str], None]) -> list[Source]:
    """The sources of the paths given: a folder's files as `in_folder` lists them (only the
    regular files inside it; InputError `empty` when none), a file as it is (InputError
    ending in `missing` when it is not a regular file). A file already taken (the same
    content) is reported once and read once."""
    files: list[Path] = []
    for given in map(Path, paths):
        try:
            is_folder = stat.S_ISDIR(os.stat(given).st_mode)
        except OSError:
            is_folder = False
        if is_folder:
            found = folder_files(given, in_folder(given), report)
            if not found:
                raise InputError(f"{given} {empty}")
            files += found
        else:
            files.append(check_file(given, hint=missing))
    return _once(files, report)


def _once(files: Iterable[Path], report: Callable[[str], None]) -> list[Source]:
    out: list[Source] = []
    seen: dict[str, Path] = {}
    for path in files:
        ident = content_id(path)
        if ident in seen:
            if path.resolve() != seen[ident].resolve():  # named twice: silent, read once
                report(f"{path}: skipped: the same content as {seen[ident]}, imported once")
            continue
        seen[ident] = path
        out.append(Source(path, ident))
    return out
