"""Where `oar attribute` writes: a JSON Lines file or a run store, written line by line as
results arrive, and resumed by input line number.

Every record is `{"line": n, **TraceAttribution.to_dict()}` (n the input file's line), so every
line carries the settings record of what made it (`records.settings_record`, the trace's
`params`). A JSONL output is appended to and flushed after each batch; a store output commits
each batch in one transaction, in a run whose config is the record. Opening an output checks
it (before any model loads), read-only: a JSONL that is not an `oar attribute` output (a file
of another program; a line of another shape, with keys no line has, or repeating an input
line) is refused with one line and left byte for byte, and so is one whose record differs
from this command's (`RecordMismatchError`); otherwise it reads the line numbers it already
holds, so a rerun skips them. Nothing is created or changed before the first write (then a
JSONL line cut short by a kill is dropped), so a command refused after its output was opened
(a model that does not load) leaves no file. A JSONL holds one run's settings, so a changed
setting needs a new `--out`; a store takes a new run with `--force-new-run`.

Several processes (`torchrun`, `accelerate launch`) each write a part file next to the output,
`<out>.rank<r>-of-<n>.part` (JSONL, resumable the same way); rank 0 merges the parts into the
output at the end, in line order and without duplicates, and deletes them.

One writer per output: opening one takes its writer lock (`store.lock`, a `<out>.lock` file
beside it, deleted when the output is closed, on any exit but a kill); a second writer is
refused with the first one's pid, and the lock of a killed writer is free at once. A store is
judged read-only before anything is written, so another application's SQLite file is refused
unchanged. A full disk or a read-only place ends the run with one line; every batch written
before is kept, and a rerun resumes.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import json
from pathlib import Path
from typing import Iterable, Iterator, Protocol

from ..commands import Interrupted, interrupted  # noqa: F401  (used through this module too)
from ..errors import OARError, OutputError
from ..files import check_writable, drop_partial_tail  # noqa: F401  (used through this module too)
from ..jsonl import AppendLog, LogOwner, check_log_path, iter_jsonl, parse_line
from ..records.settings_record import check_resume, record_differences, stored_record


def _write_failed(path: Path, err: OSError, kept: int) -> OutputError:
    """The one-line OutputError of a failed write (the lines before it are kept)."""
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EROFS: "the file system is read-only", errno.EACCES: "no permission"}.get(
        err.errno, err.strerror or str(err))
    return OutputError(f"--out {path} cannot be written ({why}); {kept} lines kept; free space or "
                       "fix the place, then rerun the same command to resume")


class Output(Protocol):
    done: set[int]

    def write(self, records: list[dict]) -> None: ...

    def kept(self) -> int:
        """The lines the output holds now, read back from it (a Ctrl-C can land between a
        write and the update of `done`)."""
        ...

    def close(self, finish: bool = True) -> None: ...


def _complete_lines(path: Path, known: int) -> int:
    """The records a rerun keeps after a failed write: the file's complete lines (a failed
    batch may have written some of its own whole); `known` when the file cannot be read."""
    try:
        with open(path, "rb") as handle:
            return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return known


def read_records(path: Path) -> Iterable[dict]:
    """The complete records of an output or part file (other lines are not records); none
    when the file is not there (an output is made at its first write)."""
    if not Path(path).exists():
        return
    for _, record in iter_jsonl(path):
        if isinstance(record, dict) and isinstance(record.get("line"), int):
            yield record


JSONL_REMEDY = "pass a new --out (a JSONL holds the results of one set of settings)"
STORE_REMEDY = "pass a new --out, or --force-new-run to start a new run in it"
_LEFT = "pass a new --out (the file is left as it is)"


def _is_line(value) -> bool:
    """Whether a parsed line has the shape of an `oar attribute` line: an object with its
    input line number (a count from 1) and the trace's settings record (`params`)."""
    return (isinstance(value, dict) and type(value.get("line")) is int and value["line"] >= 1
            and isinstance(value.get("params"), dict) and isinstance(value.get("response"), str))


@functools.lru_cache(maxsize=1)
def line_keys() -> frozenset:
    """Every key an `oar attribute` line may hold: its input line, the trace's own
    (`TraceAttribution`) and the input's labels (`_LABELS`)."""
    from ..records.traces import TraceAttribution

    return frozenset({*_LABELS, *(f.name for f in dataclasses.fields(TraceAttribution))})


def attribute_owner(path: Path, settings: dict) -> LogOwner:
    """The `LogOwner` of an `oar attribute` JSONL made with `settings`: a first line of
    another shape is not its own; one of other settings is a RecordMismatchError."""
    def first(value) -> bool:
        if not _is_line(value):
            return False
        check_resume(f"--out {path}", stored_record(value), settings, JSONL_REMEDY)
        return True

    return LogOwner("an output of oar attribute (one attributed input line per line)", first)


def held_lines(path: Path, settings: dict) -> set[int]:
    """The input line numbers an `oar attribute` JSONL holds, read without changing it; every
    whole line checked (a last line cut by a kill is left out): an OutputError for a line that
    is not one of its records, holds keys none has, or repeats an input line, and a
    RecordMismatchError for one made with other settings."""
    done: dict[int, int] = {}
    checked: set[str] = set()
    if not path.exists():
        return set()
    for number, value in iter_jsonl(path, whole_lines=True):
        where = f"--out {path}:{number}"
        if not _is_line(value):
            raise OutputError(f"{where} is not a line of oar attribute (an object with its input line and "
                              f"settings record); {_LEFT}")
        extra = sorted(set(value) - line_keys())
        if extra:
            raise OutputError(f"{where} holds keys no line of oar attribute has ({', '.join(extra[:4])}); {_LEFT}")
        if value["line"] in done:
            raise OutputError(f"{where} repeats input line {value['line']} (already on line "
                              f"{done[value['line']]}); {_LEFT}")
        key = json.dumps(value["params"], sort_keys=True)
        if key not in checked:
            check_resume(f"--out {path}", stored_record(value), settings, JSONL_REMEDY)
            checked.add(key)
        done[value["line"]] = number
    return set(done)


class JsonlOutput:
    """Appends records to a JSON Lines file, flushed and synced per batch; holds the file's
    writer lock (unless `lock` is false) until closed. `record`: the settings record of what
    is written; a file that is not an `oar attribute` output of that record is refused, left
    as it is (`attribute_owner`, `held_lines`). Nothing is created or changed before the
    first write: a command refused after the output was opened leaves no file."""

    def __init__(self, path: str | Path, record: dict, lock: bool = True):
        from ..store.lock import WriterLock  # here: `oar --help` builds this command without the store

        self.path, self.record = Path(path), record
        check_writable(self.path)
        self._owner = attribute_owner(self.path, record)
        check_log_path(self.path, "--out", self._owner)  # before the lock: a foreign file makes none
        self._lock = WriterLock(self.path, "--out") if lock else None
        self._log = None
        try:
            self.done: set[int] = held_lines(self.path, record)
        except OSError as err:
            self._release()
            if isinstance(err, OARError):
                raise
            raise OutputError(f"--out {self.path} cannot be read ({err.strerror}); pass a "
                              "path in a folder you can write") from None
        except BaseException:
            self._release()
            raise

    def write(self, records: list[dict]) -> None:
        try:
            if self._log is None:  # made (or a line a kill cut short dropped) at the first write
                self._log = AppendLog(self.path, "--out", owner=self._owner)
            self._log.write(records)
        except OARError:
            raise
        except OSError as err:  # a line cut short here is dropped when the run is resumed
            raise _write_failed(self.path, err, _complete_lines(self.path, len(self.done))) from None
        self.done.update(r["line"] for r in records)

    def kept(self) -> int:
        return len({r["line"] for r in read_records(self.path)})

    def close(self, finish: bool = True) -> None:
        self._release()  # every batch was synced already

    def _release(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._lock is not None:
            self._lock.release()


_LABELS = ("line", "gold", "reward", "correct", "group", "graded", "new_tokens")  # record keys that are not the trace's own


def run_record(config: dict) -> dict:
    """The settings record of a run's config: the config itself, or for a run written before
    records existed, the partial record its config held (methods, probe, answer format and
    tau, beta, w_min; what it lacks is not compared)."""
    if config.get("format"):
        return config
    settings = {k: config[k] for k in ("probe", "answer_format", "tau", "beta", "w_min") if k in config}
    return {"methods": {m: {} for m in config.get("methods") or []}, "settings": settings,
            **({"input": config["input"]} if "input" in config else {})}


class StoreOutput:
    """Adds records to a run of a store, one transaction per batch. `config` is the settings
    record of the job, with its `input`; the run is the newest one of that input whose record
    matches (a resumed job) or a new one, made at the first write. Another run of the same
    input with another record is refused (`check_resume`) unless `force_new` (a new run)."""

    def __init__(self, path: str | Path, name: str, model: str, config: dict, lock: bool = True,
                 force_new: bool = False):
        from ..store import Store
        from ..store.lock import WriterLock
        from ..store.schema import identify

        self.path = Path(path)
        check_writable(self.path)
        # Read-only: a newer schema or another program's file fails unchanged; a store that is
        # not there yet (or an empty file) is made at the first write, so a refusal makes none.
        made = identify(self.path) > 0
        self._lock = WriterLock(self.path, "--out") if lock else None
        self.store = None
        try:
            self.name, self.model, self.config = name, model, config
            if made:
                self.store = Store(self.path)
            self.run_id = None if force_new or not made else self._same_job(config)
            self.done = set() if self.run_id is None else set(self._lines(self.run_id))
        except BaseException:
            self.close(finish=False)
            raise

    def _same_job(self, config: dict) -> int | None:
        """The newest run of `config`'s input whose record matches it; None when the input has
        no run; RecordMismatchError (against the newest) when it has only others."""
        runs = [r for r in self.store.runs() if run_record(r.config).get("input") == config.get("input")]
        for run in runs:
            if not record_differences(run_record(run.config), config):
                return run.id
        if runs:
            check_resume(f"--out {self.path}", run_record(runs[0].config), config, STORE_REMEDY)
        return None

    def _lines(self, run_id: int) -> list[int]:
        return [int(line) for (line,) in self.store.trace_extras(run_id, "line") if line is not None]

    def kept(self) -> int:
        return 0 if self.run_id is None else len(set(self._lines(self.run_id)))

    def write(self, records: list[dict]) -> None:
        if not records:
            return
        if self.store is None:
            from ..store import Store

            self.store = Store(self.path)
        if self.run_id is None:
            self.run_id = self.store.add_run(self.name, model=self.model, config=self.config)
        from ..store.core import UNKNOWN

        traces = [{k: v for k, v in r.items() if k not in _LABELS} for r in records]
        # The input's labels (cli.attribute.input_labels): no reward > 0 guess without them.
        self.store.add_traces(
            self.run_id, traces, rewards=[r.get("reward") for r in records],
            correct=[r.get("correct", UNKNOWN) for r in records], groups=[r.get("group") for r in records],
            extras=[{"line": r["line"], **{k: r[k] for k in ("gold", "graded", "new_tokens") if k in r}}
                    for r in records])
        self.done.update(r["line"] for r in records)

    def close(self, finish: bool = True) -> None:
        """Close; with `finish`, first recompute the run's summaries (rank 0's job)."""
        try:
            if finish and self.run_id is not None:
                from ..analysis.run_summary import summarise

                summarise(self.store, self.run_id)
        finally:
            if self.store is not None:
                self.store.close()
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()


def part_path(out: str | Path, rank: int, world: int) -> Path:
    return Path(f"{out}.rank{rank}-of-{world}.part")


def part_files(out: str | Path) -> list[Path]:
    """Part files of `out` left by any earlier sharded run (any number of ranks)."""
    out = Path(out)
    return sorted(out.parent.glob(f"{out.name}.rank*-of-*.part"))


def parts_done(out: str | Path) -> set[int]:
    return {r["line"] for p in part_files(out) for r in read_records(p)}


def _index(part: Path) -> Iterator[tuple[int, int]]:
    """(line, byte offset) of each complete record of a part file, read without keeping them."""
    with open(part, "rb") as handle:
        offset = 0
        for raw in handle:
            value = parse_line(raw) if raw.endswith(b"\n") else None
            if isinstance(value, dict) and isinstance(value.get("line"), int):
                yield value["line"], offset
            offset += len(raw)


def merge_parts(output: Output, out: str | Path, batch: int = 64) -> int:
    """Move the records of `out`'s part files that `output` lacks into it, in line order,
    each line once; then delete the parts. Only (line, offset) pairs are held in memory (a
    resumed part is not in line order). Returns the number of records added."""
    parts = part_files(out)
    found = sorted({line: (line, i, offset) for i, part in enumerate(parts)
                    for line, offset in _index(part) if line not in output.done}.values())
    handles = [open(part, "rb") for part in parts]
    try:
        for start in range(0, len(found), batch):
            records = []
            for _, i, offset in found[start:start + batch]:
                handles[i].seek(offset)
                records.append(json.loads(handles[i].readline()))
            output.write(records)
    finally:
        for handle in handles:
            handle.close()
    for part in parts:
        part.unlink()
    return len(found)
