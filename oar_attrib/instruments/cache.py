"""`OracleCache`: the one cache of every instrument's oracles and everything else it computes.

One JSON Lines file (`--cf-cache`): a first line `{"record": ..., "shard": "K/N"}` naming what
wrote it (the instrument's cache record: the model's identity and dtype and the settings its
entries depend on; the shard when a `--shard` run wrote it), then one entry a line, `{"kind",
"key", ...}`, keyed by a hash of the record of everything that made it and the data it was
applied to (`cache_key`), appended as soon as it is made (`jsonl.AppendLog`). The rules of the
caches it replaces are kept:

- it is read and checked before any model loads: a path that is a link or not a regular file,
  and an entry of a kind the instrument does not know or of the wrong shape (its `checks`:
  kind -> (what it must hold, check)), are one InputError naming the file, the line and what
  to do; a line a kill cut short is left out and cut before the next append;
- a cache written under another record (another model or dtype, other settings) is refused
  before the model loads (`records.settings_record.check_resume`), naming the fields as the
  command's flags; a cache written before records existed has none and is read as it is;
- the counterfactual oracle's lines of before (`{"key", "causal"}`, no kind) read as kind
  `causal`.

One writer at a time: the first `put` takes the writer lock of the file (`store.lock`,
`<cache>.lock`; a second process is refused in one line naming the first), so two processes
never compute and write the same entries twice; `--shard` gives each process its own file.
`counts` says per kind how many entries were read back and how many computed.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import math
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from ..jsonl import NotJSON, append_jsonl, check_log_path, iter_jsonl

LEGACY_KIND = "causal"  # the counterfactual oracle's lines before kinds: {"key", "causal"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _oracle_row(row) -> bool:
    """[position, draws, flips]: a position, its drawn token ids and one 0/1 flip per draw."""
    return (isinstance(row, list) and len(row) == 3 and type(row[0]) is int and row[0] >= 0
            and isinstance(row[1], list) and isinstance(row[2], list) and 0 < len(row[1]) == len(row[2])
            and all(type(d) is int for d in row[1]) and all(type(f) is int and f in (0, 1) for f in row[2]))


def causal_pairs(value) -> bool:
    """Whether a `causal` entry's value is a list of [position, causal] pairs."""
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and type(p[0]) is int and p[0] >= 0 and isinstance(p[1], bool)
        for p in value)


# The kinds every cache knows, each with what an entry must hold to be reused (anything else is
# refused, never reused): the model's answers, a problem's sampled group, a method's scores of a
# trace, a trace's graded oracle. An instrument adds its own (`checks`).
COMMON_CHECKS = {
    "answer": ("a text", lambda e: isinstance(e.get("text"), str)),
    "group": ("a list of texts", lambda e: isinstance(e.get("texts"), list)
              and all(isinstance(t, str) for t in e["texts"])),
    "scores": ("a method and a list of finite scores or null", lambda e: isinstance(e.get("method"), str)
               and isinstance(e.get("scores"), list) and all(v is None or _number(v) for v in e["scores"])),
    "oracle": ("positions of [position, draws, 0/1 flips]", lambda e: isinstance(e.get("positions"), list)
               and all(_oracle_row(r) for r in e["positions"])
               and isinstance(e.get("decode", {}), dict)),
}
# The counterfactual oracle of one trace: its tested positions, each causal or not.
CAUSAL_CHECKS = {LEGACY_KIND: ("a list of [position, true|false] pairs", lambda e: causal_pairs(e.get("causal")))}


def cache_key(record: dict, *parts) -> str:
    """A stable key of a record and the data it was applied to (token id lists, text)."""
    return hashlib.sha256(json.dumps([record, *parts], sort_keys=True).encode()).hexdigest()[:32]


# The writer locks this process holds, by the cache's resolved path: [lock, holders]. The lock
# keeps other processes out; two caches of one path in one process (a rerun in a notebook, a
# test) share it.
_HELD: dict[Path, list] = {}


def _take_lock(path: Path, flag: str) -> Path:
    from ..store.lock import WriterLock

    key = path.resolve()
    if key not in _HELD:
        _HELD[key] = [WriterLock(path, flag), 0]
    _HELD[key][1] += 1
    return key


def _give_lock(key: Path) -> None:
    held = _HELD.get(key)
    if held is not None:
        held[1] -= 1
        if held[1] <= 0:
            held[0].release()
            del _HELD[key]


def _let_go(keys) -> None:
    """Give back the locks held under `keys`, whoever holds them, each file deleted."""
    for key in list(keys):
        _HELD.pop(key)[0].release()


@contextmanager
def locks_let_go():
    """Every cache lock taken inside the block is given back, its file deleted, when the block
    ends however it ends: a command's caches (`oar recall`), so that a clean run, an error or
    Ctrl-C leaves no lock file beside its cache, in the command's process or a caller's."""
    before = set(_HELD)
    try:
        yield
    finally:
        _let_go(k for k in list(_HELD) if k not in before)


@atexit.register
def _give_every_lock() -> None:
    """At the process's end (a clean exit, an error, Ctrl-C; not a kill) every cache's lock
    file is deleted, as every other writer's is: the end alone would let go of the lock but
    leave its file behind."""
    _let_go(_HELD)


class OracleCache:
    """An instrument's cache at `path` (None: in memory only), read and checked now (module
    docstring). `checks`: the instrument's own kinds beside `COMMON_CHECKS`, {kind: (what an
    entry must hold, check)}; `record`: the cache record written as a new file's first line
    and, with `check_record`, one a stored record must match (a cache may then hold one
    model's entries only); `shard`: "K/N" written beside it."""

    def __init__(self, path: str | Path | None, flag: str = "--cf-cache", checks: dict | None = None, *,
                 record: dict | None = None, check_record: bool = False, shard: str | None = None):
        self.path = None if path is None else check_log_path(path, flag)
        self.flag, self.checks, self.shard = flag, {**COMMON_CHECKS, **(checks or {})}, shard
        self.items: dict[tuple[str, str], dict] = {}
        self.counts = {kind: {"cached": 0, "computed": 0} for kind in self.checks}
        self.stored_record: dict | None = None
        self._lock = None
        if self.path is not None and self.path.exists():
            for number, value in iter_jsonl(self.path, whole_lines=True):
                self._take(number, value)
        self.record = record
        if check_record and record is not None and self.stored_record is not None:
            from ..records.settings_record import check_resume

            check_resume(f"{flag} {self.path}", self.stored_record, record, f"pass a new {flag}")

    def refuse(self, what: str) -> InputError:
        """The one line that refuses an entry read back that its instrument cannot have made:
        the cache, what is wrong, what to do."""
        return InputError(f"{self.flag} {self.path}: {what}; pass a new {self.flag}, or delete that entry's line to "
                          "have it computed again")

    def _bad(self, number: int, problem: str) -> InputError:
        return InputError(f"{self.flag} {self.path}:{number}: {problem}; pass a new {self.flag}, or "
                          "delete that line to have it computed again")

    def _take(self, number: int, value) -> None:
        if isinstance(value, dict) and "kind" not in value and isinstance(value.get("record"), dict):
            if self.stored_record is None:
                self.stored_record = value["record"]
            return
        if isinstance(value, dict) and "kind" not in value and LEGACY_KIND in self.checks and "key" in value:
            value = {"kind": LEGACY_KIND, **value}
        if isinstance(value, NotJSON) or not isinstance(value, dict) or value.get("kind") not in self.checks \
                or not isinstance(value.get("key"), str):
            raise self._bad(number, str(value) if isinstance(value, NotJSON) else "not a cache entry (kind, key, ...)")
        what, check = self.checks[value["kind"]]
        if not check(value):
            raise self._bad(number, f"a {value['kind']} entry must hold {what}")
        self.items[(value["kind"], value["key"])] = value

    def get(self, kind: str, key: str) -> dict | None:
        found = self.items.get((kind, key))
        if found is not None:
            self.counts[kind]["cached"] += 1
        return found

    def put(self, kind: str, key: str, value: dict) -> dict:
        """Keep the entry and append it to the file (the first put takes the writer lock and,
        in a new file, writes the record line first)."""
        entry = {"kind": kind, "key": key, **value}
        self.items[(kind, key)] = entry
        self.counts[kind]["computed"] += 1
        if self.path is not None:
            self._claim()
            append_jsonl(self.path, [entry], self.flag, allow_nan=False)
        return entry

    def _claim(self) -> None:
        """Take the file's writer lock (once, again after `locks_let_go` gave it back) and give
        a new file its record line."""
        if self._lock is not None and self._lock in _HELD:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _take_lock(self.path, self.flag)
        if self.record is not None and self.stored_record is None and \
                (not self.path.exists() or self.path.stat().st_size == 0):
            head = {"record": self.record, **({"shard": self.shard} if self.shard else {})}
            append_jsonl(self.path, [head], self.flag, allow_nan=False)
            self.stored_record = self.record

    def release(self) -> None:
        """Give the writer lock back (the end of its `oar recall` command and the process's end do
        too: `locks_let_go`)."""
        if self._lock is not None:
            _give_lock(self._lock)
            self._lock = None

    def entries(self) -> list[dict]:
        """Every entry held, in the order first read or made."""
        return list(self.items.values())
