"""`--shard K/N` and `oar recall merge`: one instrument run split across processes or machines.

Shard K of N takes the units (traces, records, groups) of the instrument's deterministic order
whose index i has i % N == K - 1, and writes its cache to a file of its own beside the one
named (`shard_path`: `words-cache.jsonl` -> `words-cache.shard-1-of-2.jsonl`), whose first line
records the shard. `merge` joins the shards' caches into one, checked first: every input was
written under the same cache record (the model's identity and dtype, the settings); an entry
present in several files is identical field for field (timings aside: `seconds`, `decode`);
anything else is refused in one line, and nothing is written. The unsharded command then reads
every unit back from the merged cache and prints the report an unsharded run prints.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

TIMINGS = ("seconds", "decode")  # fields that differ between two makings of the same entry


@dataclass(frozen=True)
class Shard:
    """Shard `k` (1-based) of `n`."""

    k: int
    n: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """`K/N` with 1 <= K <= N (argparse's type: ArgumentTypeError otherwise)."""
        k, sep, n = str(text).partition("/")
        if not (sep and k.strip().isdigit() and n.strip().isdigit()) or not 1 <= int(k) <= int(n) <= 10_000:
            raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 1 <= K <= N <= 10000 (e.g. 1/4)")
        return cls(int(k), int(n))

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def owns(self, index: int) -> bool:
        return index % self.n == self.k - 1

    def take(self, units: list) -> list:
        """The units of this shard, in order."""
        return [u for i, u in enumerate(units) if self.owns(i)]


def shard_path(path: str | Path | None, shard: Shard | None) -> Path | None:
    """The cache file of `shard` beside `path` (the path itself when there is no shard)."""
    if path is None or shard is None:
        return None if path is None else Path(path)
    path = Path(path)
    return path.with_name(f"{path.stem}.shard-{shard.k}-of-{shard.n}{path.suffix}")


def _heads_and_entries(path: Path) -> tuple[list[dict], list[tuple[int, dict]]]:
    from ..files import check_file
    from ..jsonl import NotJSON, iter_jsonl

    check_file(path, "merge", "pass a shard's cache (a JSONL file)")
    heads, entries = [], []
    for number, value in iter_jsonl(path, whole_lines=True):
        if isinstance(value, NotJSON) or not isinstance(value, dict):
            raise InputError(f"{path}:{number}: not a cache line ({value if isinstance(value, NotJSON) else 'not an object'}); "
                             "nothing was merged")
        (heads if "record" in value and "kind" not in value else entries).append((number, value))
    return [h for _, h in heads], entries


def _same(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in TIMINGS} == {k: v for k, v in b.items() if k not in TIMINGS}


def merge(out: str | Path, inputs: list[str | Path]) -> int:
    """Join the caches `inputs` into `out` (module docstring); the number of entries written.
    InputError in one line (nothing written) when they were written under different records or
    disagree on an entry; `out` must not exist yet."""
    from ..files import write_file
    from ..records.settings_record import record_differences
    import json

    out = Path(out)
    if out.exists():
        raise InputError(f"merge: {out} exists; merge into a new file (then pass it as --cf-cache)")
    record, merged, where = None, {}, {}
    for path in map(Path, inputs):
        heads, entries = _heads_and_entries(path)
        mine = heads[0]["record"] if heads else None
        if mine is None:
            raise InputError(f"merge: {path} has no record line; only caches a --shard run wrote can be merged")
        if record is None:
            record, first = mine, path
        elif record_differences(record, mine, strict=True):
            fields = ", ".join(record_differences(record, mine, strict=True))
            raise InputError(f"merge: {path} was written under other settings than {first} ({fields}); "
                             "merge shards of one command only")
        for number, entry in entries:
            key = (entry.get("kind"), entry.get("key"))
            if key in merged and not _same(merged[key], entry):
                raise InputError(f"merge: {path}:{number} holds a {key[0]} entry that differs from {where[key]}'s; "
                                 "the shards disagree, so nothing was merged")
            merged.setdefault(key, entry)
            where.setdefault(key, f"{path}:{number}")
    lines = [{"record": record}] + list(merged.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file(out, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))
    return len(merged)
