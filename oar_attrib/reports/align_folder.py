"""`AlignFolder`: the one owner of an `oar align` result folder's layout, reads and writes.

    settings_record.json the settings record (`records.settings_record`; its `align` key is
                         align's own settings; `record.json` in stores made before)
    screen.jsonl         one line per screened prompt: call, group, index, prompt, rewards, mixed
    reference/           reference.json (g*'s norms, split-half cosine, fingerprint), pool.jsonl
                         (one line per pool batch); a measuring store also keeps the vectors and
                         running sums there (`training.align.store`)
    results.jsonl        one line per training batch: its groups, every method's endpoint sums
    mean_gradients.json  the sums over the methods' running sums (bias and variance)

Torch-free: the writer (`training.align.store`), the statistics (`align`) and the web
app read and write the folder through it, and no other module joins its file names. Every read
is checked: a file that is not what the writer writes (cut short, another type, a number
written as text) is an `AlignFolderError`, one line naming the file, the line and what to do,
and nothing is changed. A JSON Lines file's last line cut by a kill (no newline) is passed over
(the writer measures that batch again on resume); any whole line that cannot be read (not
JSON, nested too deeply) is refused, the last one too.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from ..errors import InputError
from ..files import write_file
from ..jsonl import LogOwner, NotJSON, append_jsonl, iter_jsonl
from ..records.settings_record import RECORD_FILE

RECORD = RECORD_FILE  # settings_record.json, as beside a training run
OLD_RECORD = "record.json"  # the name align stores had before: still read
SCREEN = "screen.jsonl"
REFERENCE_JSON = "reference/reference.json"
POOL = "reference/pool.jsonl"
RESULTS = "results.jsonl"
MEAN_GRADIENTS = "mean_gradients.json"
# The files the statistics are made from (kilobytes): what a result folder under
# docs/experiments/ holds and `oar align --export` copies.
RESULT_FILES = (RECORD, OLD_RECORD, SCREEN, REFERENCE_JSON, POOL, RESULTS, MEAN_GRADIENTS)
SUM_FIELDS = ("dot_star", "sq", "dot_grpo", "sign_star")
PARTS = ("all", "pos", "neg")
HALVES = ("a", "b")  # batches 0, 2, 4, ... and 1, 3, 5, ...: two independent halves
DAMAGED = "restore it from where it was committed or exported, or measure into a new --store"


class AlignFolderError(InputError):
    """A file of an align result folder that is not what `oar align` writes: `file` (its name
    in the folder), `line` and `why` say which and what is wrong, so that a reader may name
    the folder its own way (`said`: the web app by the result's name, not its path)."""

    def __init__(self, folder: Path, file: str, why: str, line: int | None = None):
        self.folder, self.file, self.why, self.line = folder, file, why, line
        super().__init__(self.said(str(folder)))

    def said(self, folder: str) -> str:
        """The one line, the folder named `folder`."""
        where = f"{folder}/{self.file}" + (f" line {self.line}" if self.line is not None else "")
        return f"{where}: {self.why}; {DAMAGED}"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class AlignFolder:
    """An align result folder at `path` (module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        """The path of one of the folder's files (`RESULT_FILES`, or the store's own)."""
        return self.path / name

    def record_file(self) -> Path:
        """The record's path: `RECORD`, or the old name where only that is there."""
        return self.file(OLD_RECORD if self.file(OLD_RECORD).exists() and not self.file(RECORD).exists() else RECORD)

    def has_record(self) -> bool:
        return self.record_file().exists()

    def is_results(self) -> bool:
        """Whether the folder holds a result: a record and a finished reference."""
        return self.record_file().is_file() and self.file(REFERENCE_JSON).is_file()

    def _bad(self, name: str, why: str, line: int | None = None) -> AlignFolderError:
        return AlignFolderError(self.path, name, why, line)

    # ------------------------------------------------------------------ checked reads

    def _json(self, name: str):
        path = self.file(name)
        if not path.exists():
            return None
        if not path.is_file():
            raise self._bad(name, "is not a file")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise self._bad(name, f"is not JSON (cut short?): {type(err).__name__}") from None

    def _object(self, name: str, check) -> dict | None:
        """JSON file `name` of the folder (None when absent), a JSON object that `check`
        finds nothing wrong with (its one-line problem, else None)."""
        value = self._json(name)
        if value is None:
            return None
        why = "is not a JSON object" if not isinstance(value, dict) else check(value)
        if why:
            raise self._bad(name, why)
        return value

    def _lines(self, name: str, check) -> list[dict]:
        path = self.file(name)
        if not path.exists():
            return []
        if not path.is_file():
            raise self._bad(name, "is not a file")
        out = []
        # A last line a kill cut short has no newline: passed over. Every whole line is judged,
        # the last one too (a line nested too deeply to read is not a cut line).
        for number, value in iter_jsonl(path, whole_lines=True):
            if isinstance(value, NotJSON):
                raise self._bad(name, f"is not JSON ({value})", number)
            why = "is not a JSON object" if not isinstance(value, dict) else check(value)
            if why:
                raise self._bad(name, why, number)
            out.append(value)
        return out

    def record(self) -> dict | None:
        """The settings record (under its old name `record.json` too), checked:
        an object whose `align` object names the batches, the pool, the seed and the methods."""
        return self._object(self.record_file().name, _record_problem)

    def reference(self) -> dict | None:
        """reference/reference.json, checked: g*'s norms and split-half cosine are numbers."""
        return self._object(REFERENCE_JSON, _reference_problem)

    def mean_gradients(self) -> dict | None:
        """mean_gradients.json, checked: the halves' counts and each method's five sums."""
        return self._object(MEAN_GRADIENTS, _mean_gradients_problem)

    def screen(self) -> list[dict]:
        """screen.jsonl's lines, checked."""
        return self._lines(SCREEN, _screen_problem)

    def pool(self) -> list[dict]:
        """reference/pool.jsonl's lines, checked."""
        return self._lines(POOL, _pool_problem)

    def results(self) -> list[dict]:
        """results.jsonl's lines, checked, and numbered 0, 1, ... as the batches they hold."""
        lines = self._lines(RESULTS, _result_problem)
        for k, line in enumerate(lines):
            if line["batch"] != k:
                raise self._bad(RESULTS, f"holds batch {line['batch']} where batch {k} belongs", k + 1)
        return lines

    # ------------------------------------------------------------------ writes

    def write_json(self, name: str, value) -> None:
        """Write a JSON file of the folder whole (a temporary file renamed into place)."""
        path = self.file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, json.dumps(value, indent=1, ensure_ascii=False))

    def append(self, name: str, lines: list[dict]) -> None:
        """Append lines to one of the folder's JSON Lines files (the project's one append-only
        log), which must be the folder's own: its first line one that the file's check takes."""
        path = self.file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        check = _LINE_CHECKS[name]
        append_jsonl(path, lines, owner=LogOwner(f"the {name} of an oar align folder",
                                                 lambda v: isinstance(v, dict) and check(v) is None))

    def export(self, dest: str | Path) -> list[Path]:
        """Copy the `RESULT_FILES` that exist into the folder `dest` (made if needed)."""
        out = []
        for name in RESULT_FILES:
            source = self.file(name)
            if source.is_file():
                target = Path(dest) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                out.append(target)
        return out


def _record_problem(value: dict) -> str | None:
    own = value.get("align")
    if not isinstance(own, dict):
        return "is not an align settings record (no 'align' object)"
    for key in ("batches", "pool_batches"):
        if (key == "batches" or key in own) and (not _count(own.get(key)) or own[key] < 1):
            return f"align.{key} is {own.get(key)!r}, not a count"
    if not isinstance(own.get("methods"), dict) or not own["methods"]:
        return "align.methods is not an object naming the methods"
    return None


def _reference_problem(value: dict) -> str | None:
    for key in ("sq", "l1", "split_half_cos", "signal_sq", "batch_sq_mean"):
        if not _number(value.get(key)):
            return f"{key} is {value.get(key)!r}, not a number"
    if not _count(value.get("pool_batches")):
        return f"pool_batches is {value.get('pool_batches')!r}, not a count"
    halves = value.get("halves_sq")
    if halves is not None and not (isinstance(halves, dict) and all(_number(halves.get(h)) for h in HALVES)):
        return "halves_sq is not two numbers a and b"
    return None


def _mean_gradients_problem(value: dict) -> str | None:
    halves = value.get("halves")
    if not (isinstance(halves, dict) and all(_count(halves.get(h)) for h in HALVES)):
        return "has no counts of the halves a and b"
    methods = value.get("methods")
    if not isinstance(methods, dict):
        return "has no methods object"
    for label, sums in methods.items():
        if not (isinstance(sums, dict) and all(_number(sums.get(k)) for k in ("ab", "aa", "bb", "star", "cross_grpo"))):
            return f"the sums of {label!r} are not five numbers"
    return None


def _screen_problem(line: dict) -> str | None:
    if not all(_count(line.get(k)) for k in ("call", "group")) or not isinstance(line.get("mixed"), bool):
        return "has no call and group counts and mixed flag"
    rewards = line.get("rewards")
    if not isinstance(rewards, list) or not all(_number(r) for r in rewards):
        return "rewards are not a list of numbers"
    for key in ("seconds", "cpu_seconds"):
        if key in line and not _number(line[key]):
            return f"{key} is {line[key]!r}, not a number"
    return None


def _pool_problem(line: dict) -> str | None:
    if not _count(line.get("pool_batch")) or line.get("half") not in HALVES:
        return "has no pool_batch count and half a or b"
    for key in ("sq", "seconds"):
        if not _number(line.get(key)):
            return f"{key} is {line.get(key)!r}, not a number"
    return None


def _result_problem(line: dict) -> str | None:
    if not _count(line.get("batch")) or line.get("half") not in HALVES or not _count(line.get("rows")):
        return "has no batch and rows counts and half a or b"
    methods = line.get("methods")
    if not isinstance(methods, dict) or not methods:
        return "has no methods object"
    for label, entry in methods.items():
        if not isinstance(entry, dict):
            return f"method {label!r} is not an object"
        for part in PARTS:
            sums = entry.get(part)
            if not isinstance(sums, dict):
                return f"method {label!r} has no {part!r} sums"
            for key, value in sums.items():
                if (key in SUM_FIELDS or key.startswith("dot_star_")) and not _number(value):
                    return f"{label} {part} {key} is {value!r}, not a number"
            if any(key not in sums for key in SUM_FIELDS):
                return f"method {label!r} {part} lacks one of {', '.join(SUM_FIELDS)}"
        seconds = entry.get("seconds")
        if not isinstance(seconds, dict) or not all(_number(v) for v in seconds.values()):
            return f"method {label!r} seconds are not numbers"
    return None


_LINE_CHECKS = {SCREEN: _screen_problem, POOL: _pool_problem, RESULTS: _result_problem}
