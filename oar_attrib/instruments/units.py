"""Per-problem results of the instruments that score a whole problem at once (`world`,
`steps`): one cache entry a problem (kind "unit": the model's answer and the problem's scored
row), so that a rerun reads back what it holds, a `--shard` keeps its problems in its own file,
and `oar recall merge` joins the shards' into one that the unsharded command reads back whole.

A unit is keyed by the record of everything that made its row (the model's identity and
dtype, the methods with their parameters, the probe and seed, the instrument's own settings)
and by the problem's index in the drawn order and its prompt. A row's undefined values (NaN) are
kept as null and read back as NaN.
"""
from __future__ import annotations

import math

from .cache import OracleCache, cache_key

UNIT = "unit"
# The entry an instrument of whole problems keeps per problem: its answer and its row.
UNIT_CHECKS = {UNIT: ("a problem's text, whether it was right, its status and its row (or null)",
                      lambda e: isinstance(e.get("text"), str) and isinstance(e.get("correct"), bool)
                      and isinstance(e.get("status"), str) and (e.get("row") is None or isinstance(e["row"], dict)))}


def to_json(value):
    """`value` with every NaN as None (a row's undefined figures), for the cache."""
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def from_json(value):
    """`to_json`'s inverse on a row of figures: None is NaN again."""
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return float("nan") if value is None else value


def drawn_share(settings, preset: str) -> list[tuple[int, object]]:
    """(index, problem) of this run's share (`settings.shard`; all without one) of the
    `settings.n` held-out problems of `settings.preset` (else `preset`) drawn with
    `settings.seed`, in the drawn order: the units of `world` and `steps`."""
    from ..world import generate_problems

    index = (settings.shard.take if settings.shard else list)(range(settings.n))
    drawn = generate_problems(settings.n, settings.preset or preset, seed=settings.seed, split="test")
    return [(i, drawn[i]) for i in index]


def unit_cache(path, record: dict | None = None, shard: str | None = None) -> OracleCache:
    """The cache of `world` or `steps` at `path` (`--cf-cache`), read and checked now."""
    return OracleCache(path, checks=UNIT_CHECKS, record=record, shard=shard)


class Units:
    """The units of one run in `cache` (None: none kept, and `record` may be None), keyed by
    `record` (module docstring)."""

    def __init__(self, cache: OracleCache | None, record: dict | None):
        self.cache, self.record = cache, record

    def _key(self, index: int, prompt: str) -> str:
        return cache_key(self.record, index, prompt)

    def get(self, index: int, prompt: str) -> dict | None:
        """The unit of problem `index`, its row's nulls NaN again, or None."""
        hit = None if self.cache is None else self.cache.get(UNIT, self._key(index, prompt))
        return None if hit is None else {**hit, "row": None if hit["row"] is None else from_json(hit["row"])}

    def fill(self, pairs: list[tuple[int, object]], score) -> tuple[object, list[dict]]:
        """(the traces made now, the unit of each (index, problem) pair): read back where this
        holds it, the others made by `score(their pairs) -> (traces, their units)`."""
        found = [self.get(i, p.prompt) for i, p in pairs]
        todo = [j for j, hit in enumerate(found) if hit is None]
        traces, made = score([pairs[j] for j in todo])
        for j, unit in zip(todo, made):
            found[j] = unit
        return traces, found

    def put(self, index: int, prompt: str, text: str, correct: bool, status: str, row: dict | None, **more) -> None:
        if self.cache is not None:
            self.cache.put(UNIT, self._key(index, prompt), {"text": text, "correct": bool(correct), "status": status,
                                                           "row": None if row is None else to_json(row),
                                                           **to_json(more)})
