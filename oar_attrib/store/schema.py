"""The store's SQLite schema, its version, and opening connections.

One file per store, in WAL mode: one writer and any number of readers work at the same time
(readers see the last committed state and never block the writer). `PRAGMA user_version`
holds SCHEMA_VERSION; a file written by a newer version is refused rather than misread.
`PRAGMA application_id` holds APPLICATION_ID, so a store is known by its header; stores made
before it was set are known by their tables. An existing file is judged through a read-only
connection before any writer opens it (`identify`): another application's SQLite file is
refused unchanged, whatever its user_version.

The run table's sort indexes (`SORT_INDEXES`) are made by every writable open that finds them
missing, so a store written before they existed gains them the first time a writer opens it. They
hold no data of their own, so they leave SCHEMA_VERSION alone: older readers still read the file,
and a read-only open of a store without them works (its pages are sorted without an index).

Version 2 adds the `token_stats` table (the policy's per-token log-probability and entropy of
each response token, one teacher-forced forward). A writable open of a version-1 store adds it
(`MIGRATIONS`) and raises the version; a read-only open of a version-1 store reads it as it is,
without token statistics (`has_table`).

Version 3 adds two columns to `attributions`: `draws`, the number of random draws a method
averaged (OAR-G's noise draws), and `split_half`, the split-half reliability of its ranking
(`weights.metrics.split_half_reliability`); NULL for other methods and for rows written before.
A read-only open of an older store reads them as NULL (`has_column`).
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .errors import SchemaVersionError, StoreError, StoreWriteError

SCHEMA_VERSION = 3
APPLICATION_ID = 0x4F415231  # "OAR1" in the file header's application id field
_STORE_TABLES = {"runs", "traces", "tokens", "attributions"}  # a store made before APPLICATION_ID

# Per-token lists are blobs (see codec.py); JSON text columns hold dicts and lists that are
# read whole. Every child row cascades from its run.
_DDL = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    config TEXT NOT NULL DEFAULT '{}',
    created TEXT NOT NULL
);
CREATE TABLE traces (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER,
    grp INTEGER,
    prompt TEXT NOT NULL,
    response TEXT NOT NULL,
    reward REAL,
    advantage REAL,
    answer_text TEXT,
    correct INTEGER,
    span_found INTEGER NOT NULL,
    answer_start INTEGER,
    answer_end INTEGER,
    n_tokens INTEGER NOT NULL,
    n_scored INTEGER NOT NULL,
    probe TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    flags TEXT NOT NULL DEFAULT '[]',
    oracle_complete INTEGER,
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX traces_by_run ON traces(run_id, step);
CREATE TABLE tokens (
    trace_id INTEGER PRIMARY KEY REFERENCES traces(id) ON DELETE CASCADE,
    ids BLOB NOT NULL,
    offsets BLOB NOT NULL,
    segments BLOB NOT NULL,
    texts TEXT NOT NULL
);
CREATE TABLE attributions (
    trace_id INTEGER NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    method TEXT NOT NULL,
    probe TEXT NOT NULL,
    scores BLOB NOT NULL,
    weights BLOB NOT NULL,
    token_advantages BLOB,
    ess_ratio REAL,
    top10_mass REAL,
    seconds REAL,
    draws INTEGER,
    split_half REAL,
    PRIMARY KEY (trace_id, method)
);
CREATE TABLE oracle (
    trace_id INTEGER NOT NULL REFERENCES traces(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    spans TEXT NOT NULL,
    PRIMARY KEY (trace_id, name)
);
CREATE TABLE summaries (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    created TEXT NOT NULL,
    n_traces INTEGER NOT NULL,
    n_used INTEGER NOT NULL,
    skipped TEXT NOT NULL,
    n_boot INTEGER NOT NULL
);
CREATE TABLE recall (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    subset TEXT NOT NULL,
    oracle TEXT NOT NULL,
    method TEXT NOT NULL,
    mean REAL,
    lo REAL,
    hi REAL,
    ap REAL,
    n INTEGER NOT NULL,
    PRIMARY KEY (run_id, subset, oracle, method)
);
CREATE TABLE token_stats (
    trace_id INTEGER PRIMARY KEY REFERENCES traces(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    logprob BLOB NOT NULL,
    entropy BLOB NOT NULL
);
CREATE TABLE agreement (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    method_a TEXT NOT NULL,
    method_b TEXT NOT NULL,
    spearman REAL,
    n INTEGER NOT NULL,
    PRIMARY KEY (run_id, method_a, method_b)
);
"""

# version -> the statements that bring a store of that version to the next one.
MIGRATIONS = {
    1: [_DDL[_DDL.index("CREATE TABLE token_stats"):_DDL.index("CREATE TABLE agreement")]],
    2: ["ALTER TABLE attributions ADD COLUMN draws INTEGER",
        "ALTER TABLE attributions ADD COLUMN split_half REAL"],
}


# The run table's sort keys (`Store.traces`) and filter columns. Each sort gets an index in the
# table's exact order, `key ASC|DESC, id ASC` after run_id, so that a page is read in index order
# and OFFSET skips index entries only; the filter columns ride along in every index so that a
# filtered page is decided from the index too, without reading a trace's row (whose reward and
# correct lie past its prompt and response text). id is unique: one index serves both directions.
SORT_KEYS = ("id", "step", "reward", "advantage", "n_tokens")
FILTER_COLUMNS = ("correct", "step", "reward")


def _sort_indexes() -> dict[str, str]:
    """Index name -> its `CREATE INDEX IF NOT EXISTS` statement, for every sort of SORT_KEYS."""
    out = {"traces_sort_id": "CREATE INDEX IF NOT EXISTS traces_sort_id ON traces "
                             f"(run_id, id, {', '.join(FILTER_COLUMNS)})"}
    for key in SORT_KEYS[1:]:
        carried = ", ".join(c for c in FILTER_COLUMNS if c != key)
        for direction in ("ASC", "DESC"):
            name = f"traces_sort_{key}_{direction.lower()}"
            out[name] = (f"CREATE INDEX IF NOT EXISTS {name} ON traces "
                         f"(run_id, {key} {direction}, id, {carried})")
    return out


SORT_INDEXES = _sort_indexes()


def _open(path: Path, readonly: bool, timeout: float) -> sqlite3.Connection:
    """A writer's connection, or a reader's that never writes: `mode=ro`, and where that
    cannot open (a WAL store whose -shm file cannot be made beside it, in a folder this user
    cannot write) `immutable=1` too, which SQLite reads without any lock file."""
    # check_same_thread off only so that Store.close() can close every thread's connection;
    # each connection is still used by the one thread that opened it (threading.local).
    options = {"timeout": timeout, "isolation_level": None, "check_same_thread": False}
    if not readonly:
        return sqlite3.connect(path, **options)
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, **options)
    try:
        conn.execute("PRAGMA user_version").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if os.access(Path(path).resolve().parent, os.W_OK):
            raise
    return sqlite3.connect(uri + "&immutable=1", uri=True, **options)


def explain(err: sqlite3.Error, path: Path) -> StoreError | None:
    """The StoreWriteError of an SQLite error that says the file's place cannot be written
    (a full disk, a read-only folder or file system), else None."""
    text = str(err).lower()
    if "disk is full" in text:
        return StoreWriteError(f"{path}: the disk is full; nothing already committed is lost; free "
                               "some space and rerun the same command")
    if "readonly database" in text or "read-only file system" in text:
        return StoreWriteError(f"{path} cannot be written here (a read-only file, folder or file "
                               "system); pass a path you can write")
    return None


def _unreadable(err: sqlite3.Error, path: Path) -> StoreError:
    return explain(err, path) or StoreError(
        f"{path} is not a readable SQLite store ({err}); pass the path of a store")


def identify(path: Path, timeout: float = 30.0) -> int:
    """Judge an existing file through a read-only connection, writing nothing: its store
    schema version (0: an empty SQLite file, or no file, which a writer may make a store), or
    StoreError (not SQLite) / SchemaVersionError (another application's file, a newer store)."""
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    try:
        conn = _open(path, True, timeout)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            # Both read from the header; the schema's pages only for files without our id
            # (a damaged page further on is then the pages' error, not the open's).
            tables = set() if app_id == APPLICATION_ID else {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:
        raise _unreadable(err, path) from None
    if app_id == 0 and version == 0 and not tables:
        return 0
    ours = app_id == APPLICATION_ID or (
        app_id == 0 and ((0 < version <= SCHEMA_VERSION and _STORE_TABLES <= tables)
                         or (version > SCHEMA_VERSION and "runs" in tables)))
    if not ours:
        raise SchemaVersionError(
            f"{path} is an SQLite file not written by oar-attrib (not a run store); it was left "
            "unchanged; pass the path of a store, or a new file name to make one")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has store schema v{version}, newer than this oar-attrib's v{SCHEMA_VERSION}; "
            "upgrade oar-attrib to read it")
    return version


def connect(path: Path, *, readonly: bool, timeout: float) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), schema checked.

    The writer creates the file and the schema; a reader refuses a missing file. Either judges
    an existing file read-only first (`identify`).
    """
    if readonly and not path.is_file():
        raise StoreError(f"no store at {path}; build one with `oar demo` or `oar attribute --out`")
    version = identify(path, timeout)
    if readonly and version == 0:
        raise StoreError(f"{path} is empty, not a store; build one with `oar demo`")
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = _open(path, readonly, timeout)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            _create(conn, path)
        elif version < SCHEMA_VERSION and not readonly:
            _migrate(conn, path)
        if not readonly:
            ensure_indexes(conn, path)
            # FULL: a committed trace survives even an OS crash, not only a killed process; the
            # cost is one fsync per commit, and writers commit per batch of traces.
            conn.execute("PRAGMA synchronous = FULL")
        else:
            conn.execute("PRAGMA query_only = ON")
    except sqlite3.DatabaseError as err:
        raise _unreadable(err, path) from None
    return conn


def _create(conn: sqlite3.Connection, path: Path) -> None:
    """Make the schema in a new (or empty) file: WAL mode, the tables, the header's ids."""
    # WAL is a property of the file: set once here, every later connection uses it.
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another writer may have created the schema while this one waited for the lock.
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise SchemaVersionError(
                    f"{path} is an SQLite file not written by oar-attrib (not a run store); "
                    "pass the path of a store, or a new file name to make one")
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        conn.close()
        raise


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring an older store to SCHEMA_VERSION, one version per step, in one transaction (all
    or nothing: a failed migration leaves the store as it was)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the lock: another writer may have migrated it meanwhile.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            while version < SCHEMA_VERSION:
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
                version += 1
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as err:
        conn.close()
        raise StoreError(f"{path}: cannot upgrade the store to schema v{SCHEMA_VERSION} ({err}); "
                         "open it with readonly=True to read it as it is") from None


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the store has table `name` (a read-only open of an older store may lack one)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (name,)).fetchone() is not None


def has_column(conn: sqlite3.Connection, table: str, name: str) -> bool:
    """Whether `table` has column `name` (a read-only open of an older store may lack one)."""
    return any(row[1] == name for row in conn.execute(f"PRAGMA table_info({table})"))


def ensure_indexes(conn: sqlite3.Connection, path: Path) -> None:
    """Create the SORT_INDEXES this store lacks, in one transaction that reads every trace row
    once; a single read of the schema when none is missing."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    if have >= SORT_INDEXES.keys():
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # IF NOT EXISTS: another writer may have made them while this one waited for the lock.
            for statement in SORT_INDEXES.values():
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as err:
        conn.close()
        raise explain(err, path) or StoreError(f"{path}: cannot add the run table's sort indexes ({err}); open it with "
                         "readonly=True to read it, or wait for the writer that holds it") from None
