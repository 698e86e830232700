"""The folder an alignment run writes, resumed after any kill without redoing finished work.

    record.json          the settings record (refused on resume when it differs)
    screen.jsonl         one line per screened prompt: call, index, prompt, rewards, mixed
    rollouts/call-N.pt   the trainer's generation output of screening call N
    reference/           the pool's running sums (a-N.npy, b-N.npy), pool.jsonl (one line per
                         pool batch: its groups, ||g||^2), gstar.npy, reference.json (g*'s norms
                         and split-half cosine)
    accum/<i>/           method i's running sums of its batch gradients, by batch parity
    results.jsonl        one line per training batch: its groups, every method's endpoint sums
                         and seconds
    mean_gradients.json  the sums over the running sums (bias and variance), at n batches

Commit order (what makes a kill harmless): a screening call's output file is renamed into place
before its lines are appended; a batch's new running sums are written as new files
(`<half>-<n+1>.npy`, renamed into place) before its result line is appended, fsynced; only then
are the old sums deleted. A resume counts the committed lines, keeps the sums of that count,
deletes any newer ones (a batch that was cut short) and goes on from the next batch. One
writer at a time (`store.lock.WriterLock`: the lock file `<folder>.lock` beside it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from oar_attrib.files import drop_partial_tail
from oar_attrib.jsonl import NotJSON, append_jsonl, iter_jsonl
from oar_attrib.records.settings_record import RecordMismatchError, record_differences
from oar_attrib.store.lock import WriterLock

from ..errors import AlignError
from .gradients import CHUNK

HALVES = ("a", "b")  # batches 0, 2, 4, ... and 1, 3, 5, ...: two independent halves


def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _append_line(path: Path, value: dict) -> None:
    append_jsonl(path, [value])


def read_lines(path: Path) -> list[dict]:
    """The complete lines of a JSON Lines file of this store (a line a kill cut short is cut off)."""
    if not path.exists():
        return []
    drop_partial_tail(path)
    return [v for _, v in iter_jsonl(path) if isinstance(v, dict) and not isinstance(v, NotJSON)]


class RunningSum:
    """A sum of (D,) float32 vectors on disk: `<folder>/<name>-<n>.npy` is the sum of the first
    n; adding writes the next file beside the current one (the current is never changed)."""

    def __init__(self, folder: Path, name: str, size: int):
        self.folder, self.name, self.size = folder, name, size
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, n: int) -> Path:
        return self.folder / f"{self.name}-{n}.npy"

    def read(self, n: int) -> np.ndarray:
        """The sum of the first n as a read-only memmap (zeros for n = 0)."""
        if n == 0:
            return np.zeros(self.size, dtype=np.float32)
        if not self.path(n).exists():
            raise AlignError(f"{self.path(n)} is missing: the store lost a committed sum; start "
                             "again in a new --store")
        return np.load(self.path(n), mmap_mode="r")

    def add(self, parts: tuple[torch.Tensor, ...], n: int) -> None:
        """Write sum n+1 = sum n + the sum of the (D,) float32 `parts` (on any device), chunk by chunk."""
        old = self.read(n)
        tmp = self.folder / f"{self.name}-{n + 1}.npy.tmp"
        new = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(self.size,))
        for i in range(0, self.size, CHUNK):
            new[i:i + CHUNK] = old[i:i + CHUNK]
            for part in parts:
                new[i:i + CHUNK] += part[i:i + CHUNK].cpu().numpy()
        new.flush()
        del new
        os.replace(tmp, self.path(n + 1))

    def keep(self, n: int) -> None:
        """Delete every version but sum n (older ones, and newer ones nothing committed)."""
        for path in self.folder.glob(f"{self.name}-*.npy*"):
            if path != self.path(n):
                path.unlink()


class AlignStore:
    """An alignment run's folder (module docstring); `open` checks its record first."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._outputs: dict[int, dict] = {}
        self._lock = None

    # ------------------------------------------------------------------ record and lock

    def open(self, record: dict, spell=None) -> "AlignStore":
        """Take the writer lock and write `record`, or check it against the stored one: a
        difference is a RecordMismatchError naming the fields (as `spell` writes them)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.path, "--store")
        stored_path = self.path / "record.json"
        if not stored_path.exists():
            _write_json(stored_path, record)
            return self
        stored = json.loads(stored_path.read_text(encoding="utf-8"))
        fields = record_differences(stored, record)
        if fields:
            self.close()
            err = RecordMismatchError(f"--store {self.path}", fields, stored, record,
                                      "pass another --store, or the settings it was made with")
            raise AlignError(err.line(spell)) from None
        return self

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def record(self) -> dict:
        return json.loads((self.path / "record.json").read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ screen

    def screen_lines(self) -> list[dict]:
        """The lines of the screening calls whose output is stored (a call cut short before its
        lines were written is screened again)."""
        return [line for line in read_lines(self.path / "screen.jsonl")
                if (self.path / "rollouts" / f"call-{line['call']}.pt").exists()]

    def add_screen_call(self, call: int, output: dict, lines: list[dict]) -> None:
        folder = self.path / "rollouts"
        folder.mkdir(exist_ok=True)
        tmp = folder / f"call-{call}.pt.tmp"
        torch.save(output, tmp)
        os.replace(tmp, folder / f"call-{call}.pt")
        append_jsonl(self.path / "screen.jsonl", ({"call": call, **line} for line in lines))

    def call_output(self, call: int) -> dict:
        if call not in self._outputs:
            if len(self._outputs) > 64:
                self._outputs.clear()
            self._outputs[call] = torch.load(self.path / "rollouts" / f"call-{call}.pt", weights_only=True)
        return self._outputs[call]

    # ------------------------------------------------------------------ running sums

    def sums(self, kind: str, size: int) -> dict[str, RunningSum]:
        """The two running sums (halves a, b) of `kind`: 'reference' or a method's index."""
        folder = self.path / ("reference" if kind == "reference" else f"accum/{kind}")
        return {h: RunningSum(folder, h, size) for h in HALVES}

    def lines(self, kind: str) -> list[dict]:
        """The committed lines of the pool ('pool') or of the training batches ('results')."""
        return read_lines(self.path / ("reference/pool.jsonl" if kind == "pool" else "results.jsonl"))

    def commit(self, kind: str, line: dict) -> None:
        (self.path / "reference").mkdir(exist_ok=True)
        _append_line(self.path / ("reference/pool.jsonl" if kind == "pool" else "results.jsonl"), line)

    # ------------------------------------------------------------------ reference and summaries

    def json(self, name: str) -> dict | None:
        path = self.path / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def write(self, name: str, value: dict) -> None:
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        _write_json(self.path / name, value)

    def gstar(self) -> np.ndarray:
        return np.load(self.path / "reference" / "gstar.npy", mmap_mode="r")

    def write_gstar(self, vector: np.ndarray) -> None:
        tmp = self.path / "reference" / "gstar.npy.tmp"
        with open(tmp, "wb") as handle:
            np.save(handle, vector.astype(np.float32))
        os.replace(tmp, self.path / "reference" / "gstar.npy")


# The files the statistics are made from (kilobytes, not the gigabytes of running sums and
# rollouts): what a results folder under docs/experiments/ holds.
RESULT_FILES = ("record.json", "screen.jsonl", "reference/reference.json", "reference/pool.jsonl",
                "results.jsonl", "mean_gradients.json")


def export(store: str | Path, dest: str | Path) -> list[Path]:
    """Copy a store's `RESULT_FILES` into `dest` (made if needed); returns the copies."""
    import shutil

    out = []
    for name in RESULT_FILES:
        source = Path(store) / name
        if source.exists():
            target = Path(dest) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            out.append(target)
    return out
