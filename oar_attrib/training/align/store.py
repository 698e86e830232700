"""The folder an alignment run writes, resumed after any kill without redoing finished work.

`AlignStore` is a `reports.align_folder.AlignFolder` (the result files' layout and checked
reads) with what a measuring run keeps beside them:

    rollouts/call-N.pt   the trainer's generation output of screening call N
    reference/           the pool's running sums (a-N.npy, b-N.npy), pool.jsonl (one line per
                         pool batch: its groups, ||g||^2), gstar.npy and the half pools'
                         gstar_a.npy, gstar_b.npy, reference.json (g*'s norms, split-half
                         cosine, fingerprint), vectors.json (each vector's shape, dtype and
                         sha256, checked whenever a vector is read back)
    accum/<i>/           method i's running sums of its batch gradients, by batch parity

Commit order (what makes a kill harmless): a screening call's output file is renamed into place
before its lines are appended; a batch's new running sums are written as new files
(`<half>-<n+1>.npy`, renamed into place) before its result line is appended, fsynced; only then
are the old sums deleted. A resume counts the committed lines, keeps the sums of that count,
deletes any newer ones (a batch that was cut short) and goes on from the next batch. One
writer at a time (`store.lock.WriterLock`: the lock file `<folder>.lock` beside it).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from oar_attrib.reports.align_folder import (
    HALVES,
    POOL,
    RECORD,
    RESULTS,
    SCREEN,
    AlignFolder,
)
from oar_attrib.files import drop_partial_tail, feed_file, replacing
from oar_attrib.records.settings_record import RecordMismatchError, record_differences
from oar_attrib.store.lock import WriterLock

from ..errors import AlignError
from .gradients import CHUNK


def _drop_cut_line(path: Path) -> None:
    """Cut a last line a kill left without its newline (the writer's resume only)."""
    if path.is_file():
        drop_partial_tail(path)


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
        with replacing(self.path(n + 1)) as tmp:
            new = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(self.size,))
            for i in range(0, self.size, CHUNK):
                new[i:i + CHUNK] = old[i:i + CHUNK]
                for part in parts:
                    new[i:i + CHUNK] += part[i:i + CHUNK].cpu().numpy()
            new.flush()
            del new

    def keep(self, n: int) -> int:
        """Delete every version but sum n (older ones, and newer ones nothing committed) and
        return n; where sum n is gone but n + 1 is there (its batch was committed and its
        result line lost afterwards: a cut copy), keep n + 1 and return it: the batch is
        measured again without being added twice."""
        if n > 0 and not self.path(n).exists() and self.path(n + 1).exists():
            n += 1
        for path in self.folder.glob(f"{self.name}-*.npy*"):
            if path != self.path(n):
                path.unlink()
        return n


class AlignStore(AlignFolder):
    """An alignment run's folder (module docstring); `open` checks its record first."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        self._outputs: dict[int, dict] = {}
        self._vectors: dict[str, np.ndarray] = {}  # the reference vectors checked so far
        self._lock = None
        self._made = False  # whether `open` made the folder (`close(discard=True)`)

    # ------------------------------------------------------------------ record and lock

    def open(self, record: dict, spell=None) -> "AlignStore":
        """Take the writer lock and write `record`, or check it against the stored one: a
        difference is a RecordMismatchError naming the fields (as `spell` writes them)."""
        if self.path.exists() and not self.path.is_dir():
            raise AlignError(f"--store {self.path} is not a folder: pass a folder (new or of a run)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = WriterLock(self.path, "--store")  # before the folder: a refused lock makes none
        self._made = not self.path.exists()
        try:
            self.path.mkdir(exist_ok=True)
            stored = self.record()
        except BaseException:
            self.close(discard=True)
            raise
        if stored is None:
            self.write_json(RECORD, record)
            return self
        fields = record_differences(stored, record)
        if fields:
            self.close(discard=True)
            err = RecordMismatchError(f"--store {self.path}", fields, stored, record,
                                      "pass another --store, or the settings it was made with")
            raise AlignError(err.line(spell)) from None
        return self

    def close(self, discard: bool = False) -> None:
        """Let go of the writer lock (deleting its file); with `discard`, a folder this open
        made is removed again when it holds nothing but its record (a run refused before it
        measured anything leaves no folder)."""
        if discard and self._made:
            self.file(RECORD).unlink(missing_ok=True)
            try:
                self.path.rmdir()
            except OSError:  # something else is in it: kept
                pass
            self._made = False
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # ------------------------------------------------------------------ screen

    def screen_lines(self) -> list[dict]:
        """The lines of the screening calls (a call cut short before its lines were written is
        screened again; a call whose lines are here but whose rollouts are not, as on a fresh
        machine given the committed files, is sampled again and checked: `has_call`)."""
        _drop_cut_line(self.file(SCREEN))
        return self.screen()

    def has_call(self, call: int) -> bool:
        return (self.path / "rollouts" / f"call-{call}.pt").is_file()

    def restore_call(self, call: int, output: dict) -> None:
        """Put back the rollouts of a screened call (its lines are already in screen.jsonl)."""
        folder = self.path / "rollouts"
        folder.mkdir(exist_ok=True)
        with replacing(folder / f"call-{call}.pt") as tmp:
            torch.save(output, tmp)

    def add_screen_call(self, call: int, output: dict, lines: list[dict]) -> None:
        self.restore_call(call, output)
        self.append(SCREEN, [{"call": call, **line} for line in lines])

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
        """The committed lines of the pool ('pool') or of the training batches ('results'); a
        last line a kill cut short is cut off the file (its batch is measured again)."""
        _drop_cut_line(self.file(POOL if kind == "pool" else RESULTS))
        return self.pool() if kind == "pool" else self.results()

    def commit(self, kind: str, line: dict) -> None:
        self.append(POOL if kind == "pool" else RESULTS, [line])

    def vector_file(self, name: str) -> Path:
        return self.path / "reference" / f"{name}.npy"

    def vector(self, name: str, size: int) -> np.ndarray:
        """A (D,) float32 vector of the reference (`gstar`, `gstar_a`, `gstar_b`) as a
        read-only memmap, checked as read back (once per open): an array of `size` float32
        values, every one finite, whose file has the sha256 `PRINTS` recorded when it was
        written (a store made before prints were kept has none: `printed` says so, and
        `run.check_reference` judges it by reference.json). Anything else is an AlignError,
        one line naming the file and what to do, and nothing is changed."""
        if name in self._vectors:
            return self._vectors[name]
        path = self.vector_file(name)
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:  # cut, not .npy, an object array
            raise self.bad_vector(name, f"cannot be read as a float32 array ({type(err).__name__})") from None
        if array.dtype != np.float32 or array.shape != (size,):
            raise self.bad_vector(name, f"is a {array.dtype} array of shape {array.shape}, not the float32 "
                                         f"vector of {size} values of this model's gradient")
        if not all(np.isfinite(array[i:i + CHUNK]).all() for i in range(0, size, CHUNK)):
            raise self.bad_vector(name, "holds NaN or infinite values")
        recorded = self._prints().get(name)
        if recorded is not None and recorded != _print(path):
            raise self.bad_vector(name, f"is not the vector this store wrote (its sha256 differs from {PRINTS})")
        self._vectors[name] = array
        return array

    def printed(self, name: str) -> bool:
        """Whether `PRINTS` holds the print of vector `name` (stores made before it: not)."""
        return name in self._prints()

    def bad_vector(self, name: str, why: str) -> AlignError:
        return AlignError(f"--store {self.path}: reference/{name}.npy {why}; the folder is left as it is: "
                          "delete reference/gstar*.npy and rerun to have them recomputed from the seeds and "
                          "checked against reference/reference.json, or start a new --store")

    def _prints(self) -> dict:
        path = self.file(PRINTS)
        try:
            found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, UnicodeDecodeError, ValueError):
            raise AlignError(f"--store {self.path}: {PRINTS} is not JSON; delete it (the vectors are then "
                             "judged by reference/reference.json) or start a new --store") from None
        return found if isinstance(found, dict) else {}

    def has_vector(self, name: str) -> bool:
        return self.vector_file(name).is_file()

    def write_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Write reference vectors (float32) and record their prints: the old prints of those
        names are dropped first and the new ones recorded last, so a kill in between leaves a
        vector with no print (judged by reference.json), never one with another's."""
        prints = {k: v for k, v in self._prints().items() if k not in vectors}
        self.write_json(PRINTS, prints)
        for name, vector in vectors.items():
            with replacing(self.vector_file(name)) as tmp, open(tmp, "wb") as handle:
                np.save(handle, np.asarray(vector, dtype=np.float32))
            self._vectors.pop(name, None)
            prints[name] = _print(self.vector_file(name))
        self.write_json(PRINTS, prints)

    def record_prints(self, names) -> None:
        """Record the prints of vectors judged sound another way (a store made before prints)."""
        self.write_json(PRINTS, {**self._prints(), **{n: _print(self.vector_file(n)) for n in names}})


PRINTS = "reference/vectors.json"  # the store's own: each reference vector's shape, dtype and sha256


def _print(path: Path) -> dict:
    """The print of an .npy vector file: its shape, dtype and the sha256 of all its bytes."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    return {"shape": list(array.shape), "dtype": str(array.dtype),
            "sha256": feed_file(hashlib.sha256(), path).hexdigest()}


def export(store: str | Path, dest: str | Path) -> list[Path]:
    """Copy a store's result files into `dest` (made if needed); returns the copies."""
    return AlignFolder(store).export(dest)
