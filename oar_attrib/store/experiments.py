"""Experiments in the run store: a grid of training cells (method x seed) and their curves.

Three tables of their own, created on first use beside the store's schema (an additive change:
files without them are still version-1 stores, and the trace tables are untouched):

    experiments       one row per experiment: name (unique), the resolved spec (JSON)
    experiment_cells  one row per (experiment, method, seed): its settings, attempts, timings
    experiment_points one row per (cell, step, key): a number of the cell's curve, e.g.
                      eval/accuracy_sampled/default, oar/ess_ratio, entropy, step_seconds

Whether a cell is finished is read from its points (`finished_cells`): every step 1..steps has
a `step_seconds` point and the last step has every expected evaluation key. A cell that was
interrupted keeps a partial curve, which `reset_cell` removes before it runs again.

    with ExperimentStore("runs/experiments.db") as db:
        exp = db.ensure_experiment("grid", spec)
        cell = db.ensure_cell(exp, "oar_g", 0, settings)
        db.add_points(cell, 5, {"eval/accuracy/default": 0.61})
"""
from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

from . import schema
from ..records.settings_record import check_resume
from .errors import NotFoundError, StoreError
from .records import json_safe

_DDL = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    spec TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS experiment_cells (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    method TEXT NOT NULL,
    seed INTEGER NOT NULL,
    settings TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    started TEXT,
    UNIQUE (experiment_id, method, seed)
);
CREATE TABLE IF NOT EXISTS experiment_points (
    cell_id INTEGER NOT NULL REFERENCES experiment_cells(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    key TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (cell_id, step, key)
);
"""
STEP_KEY = "step_seconds"  # one per optimizer step: the wall time of the step, evaluation excluded


@dataclass(frozen=True)
class Cell:
    """One (method, seed) training run of an experiment."""

    id: int
    experiment_id: int
    method: str
    seed: int
    settings: dict
    attempts: int
    started: str | None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


class ExperimentStore:
    """The experiment tables of a run store file (one connection; one per process)."""

    def __init__(self, path: str | Path, *, readonly: bool = False, timeout: float = 60.0):
        self.path = Path(path)
        self.readonly = readonly
        self.conn = schema.connect(self.path, readonly=readonly, timeout=timeout)
        if readonly:
            have = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "experiments" not in have:
                self.conn.close()
                raise NotFoundError(f"{self.path} holds no experiments; run one with `oar experiment run`")
        else:
            self._write(lambda c: [c.execute(s) for s in _DDL.split(";") if s.strip()])

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "ExperimentStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, work):
        if self.readonly:
            raise StoreError(f"{self.path} is open read-only")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(self.conn)
            except BaseException:
                if self.conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as err:
            raise schema.explain(err, self.path) or err from None
        return result

    # ------------------------------------------------------------------ writing

    def ensure_experiment(self, name: str, spec: dict) -> int:
        """The id of experiment `name`, created with `spec`; an existing one must have the
        same spec (a changed grid needs a new name, or its cells would not be comparable)."""
        text = json.dumps(json_safe(spec), sort_keys=True, allow_nan=False)

        def work(conn):
            got = conn.execute("SELECT id, spec FROM experiments WHERE name = ?", (name,)).fetchone()
            if got is None:
                return int(conn.execute("INSERT INTO experiments (name, spec, created) VALUES (?, ?, ?)",
                                        (name, text, _now())).lastrowid)
            check_resume(f"experiment {name!r} in {self.path.name}", json.loads(got[1]), json.loads(text),
                         "give this grid another name (experiment.name=...) or use another store", strict=True)
            return int(got[0])
        return self._write(work)

    def ensure_cell(self, experiment_id: int, method: str, seed: int, settings: dict) -> int:
        text = json.dumps(json_safe(settings), sort_keys=True, allow_nan=False)

        def work(conn):
            conn.execute("INSERT OR IGNORE INTO experiment_cells (experiment_id, method, seed, settings) "
                         "VALUES (?, ?, ?, ?)", (experiment_id, method, int(seed), text))
            cid, stored = conn.execute("SELECT id, settings FROM experiment_cells WHERE experiment_id = ? "
                                       "AND method = ? AND seed = ?", (experiment_id, method, int(seed))).fetchone()
            check_resume(f"cell {method} seed {seed} in {self.path.name}", json.loads(stored), json.loads(text),
                         "give the changed method another label, or the grid another name", strict=True)
            return int(cid)
        return self._write(work)

    def reset_cell(self, cell_id: int) -> None:
        """Remove a cell's points (an interrupted attempt) and count a new attempt."""
        def work(conn):
            conn.execute("DELETE FROM experiment_points WHERE cell_id = ?", (cell_id,))
            conn.execute("UPDATE experiment_cells SET attempts = attempts + 1, started = ? WHERE id = ?",
                         (_now(), cell_id))
        self._write(work)

    def add_points(self, cell_id: int, step: int, values: Mapping[str, float]) -> None:
        """Numbers of one step of a cell's curve (NaN and inf are stored as NULL)."""
        rows = [(cell_id, int(step), str(k), _number(v)) for k, v in values.items()]
        self._write(lambda conn: conn.executemany(
            "INSERT OR REPLACE INTO experiment_points (cell_id, step, key, value) VALUES (?, ?, ?, ?)", rows))

    # ------------------------------------------------------------------ reading

    def experiments(self) -> list[tuple[int, str]]:
        return [(int(i), n) for i, n in self.conn.execute("SELECT id, name FROM experiments ORDER BY id")]

    def experiment(self, name_or_id: str | int) -> tuple[int, str, dict]:
        """(id, name, spec) of an experiment by name or id."""
        column = "id" if isinstance(name_or_id, int) else "name"
        got = self.conn.execute(f"SELECT id, name, spec FROM experiments WHERE {column} = ?",
                                (name_or_id,)).fetchone()
        if got is None:
            known = ", ".join(n for _, n in self.experiments()) or "none"
            raise NotFoundError(f"no experiment {name_or_id!r} in {self.path.name} (known: {known})")
        return int(got[0]), got[1], json.loads(got[2])

    def cells(self, experiment_id: int) -> list[Cell]:
        rows = self.conn.execute(
            "SELECT id, experiment_id, method, seed, settings, attempts, started FROM experiment_cells "
            "WHERE experiment_id = ? ORDER BY id", (experiment_id,))
        return [Cell(int(i), int(e), m, int(s), json.loads(c), int(a), st) for i, e, m, s, c, a, st in rows]

    def cell(self, cell_id: int) -> Cell:
        for cell in self.cells_by_ids([cell_id]):
            return cell
        raise NotFoundError(f"no experiment cell {cell_id} in {self.path.name}")

    def cells_by_ids(self, ids: Iterable[int]) -> list[Cell]:
        ids = [int(i) for i in ids]
        rows = self.conn.execute(
            f"SELECT id, experiment_id, method, seed, settings, attempts, started FROM experiment_cells "
            f"WHERE id IN ({','.join('?' * len(ids))})", ids) if ids else []
        return [Cell(int(i), int(e), m, int(s), json.loads(c), int(a), st) for i, e, m, s, c, a, st in rows]

    def points(self, experiment_id: int) -> list[tuple[int, int, str, float | None]]:
        """Every (cell_id, step, key, value) of an experiment, ordered by cell, step, key."""
        return [(int(c), int(s), k, v) for c, s, k, v in self.conn.execute(
            "SELECT p.cell_id, p.step, p.key, p.value FROM experiment_points p JOIN experiment_cells c "
            "ON c.id = p.cell_id WHERE c.experiment_id = ? ORDER BY p.cell_id, p.step, p.key",
            (experiment_id,))]

    def finished_cells(self, experiment_id: int, steps: int, eval_keys: Iterable[str]) -> set[int]:
        """Cells whose stored curve is complete: a step time for each step 1..steps and every
        key of `eval_keys` at the last step."""
        eval_keys = sorted(set(eval_keys))
        done = set()
        for cell in self.cells(experiment_id):
            n_steps = self.conn.execute(
                "SELECT count(*) FROM experiment_points WHERE cell_id = ? AND key = ? AND step BETWEEN 1 AND ?",
                (cell.id, STEP_KEY, steps)).fetchone()[0]
            have = {k for (k,) in self.conn.execute(
                "SELECT key FROM experiment_points WHERE cell_id = ? AND step = ? AND value IS NOT NULL",
                (cell.id, steps))}
            if n_steps == steps and set(eval_keys) <= have:
                done.add(cell.id)
        return done


def open_readonly(path: str | Path) -> ExperimentStore:
    """An experiment store for reading (the report, the web page, notebooks)."""
    try:
        return ExperimentStore(path, readonly=True)
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{path} is not a readable store: {err}") from None
