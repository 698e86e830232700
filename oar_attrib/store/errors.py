"""Errors of the run store, one type per failure family."""
from __future__ import annotations

import sqlite3

from ..errors import OARError

# What SQLite raises on a damaged or replaced file, under the store's name, so that a reader
# (the web app) catches it without knowing the store is SQLite.
DatabaseError = sqlite3.DatabaseError


class StoreError(OARError, RuntimeError):
    """A store file that cannot be opened, read or written as asked."""


class SchemaVersionError(StoreError):
    """A store written by a newer (or an unknown) version of the schema."""


class NotFoundError(StoreError, LookupError):
    """A run or trace id that is not in the store."""


class WriterBusyError(StoreError):
    """An output (store or JSONL file) that another live process is writing."""


class StoreWriteError(StoreError):
    """A store that cannot be written where it lies: a full disk, a read-only folder or file
    system. Nothing committed before is lost."""
