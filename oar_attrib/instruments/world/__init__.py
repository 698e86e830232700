"""`oar recall world`: token recall of every method on the arithmetic world's held-out problems
against its oracle sets (`direct`, `chain`, ...) and the model's own counterfactual oracle
(`recall`, `data.oracle`)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ...analysis.sets import DEFAULT_SETS, RECALL_SETS
from ...commands import option
from ..base import InstrumentSettings, register_instrument
from ..data import CounterfactualRecall, open_cache


@dataclass(frozen=True, kw_only=True)
class WorldRecall(CounterfactualRecall):
    """`oar recall world`: token recall on the arithmetic world's held-out problems."""

    preset: str | None = option(None, "world preset (default: recall, whose final results are written once "
                                      "so `direct` is exact)")
    sets: tuple[str, ...] | None = option(
        None, "oracle sets to score against (default: direct chain) (results = direct; names: the final "
              "steps' names; counterfactual: the positions whose replacement changes the model's "
              "regenerated answer)", choices=RECALL_SETS)
    cf_cache: str | None = option(None, "JSONL cache of each problem's answer and scored row: a rerun reads back "
                                        "what it holds, and the caches of a --shard run merge into one "
                                        "(`oar recall merge`)")


def world_model(settings: InstrumentSettings):
    """The model and tokenizer of `world` and `steps`, an arithmetic-world model's (checked
    before its weights load)."""
    from ...cli.choices import check_servable
    from ...models import load_model

    check_servable(settings.model)
    return load_model(settings.model, device=settings.device, dtype=settings.dtype)


@register_instrument("world", WorldRecall, "token recall on the arithmetic world's held-out problems")
def run_world(settings: WorldRecall) -> int:
    """Recall@|O| of every method against the arithmetic world's oracle sets (and the model's
    own counterfactual oracle); a `--shard` scores its share of the problems."""
    from .recall import oracle_recall
    from ...analysis.recall_reading import paired_comparisons
    from ..text import print_reading, recall_record, stats_table
    from ..units import unit_cache

    settings = dataclasses.replace(settings, sets=settings.sets or tuple(DEFAULT_SETS))
    cache = open_cache(settings, "world", unit_cache)  # read and checked before the model loads
    model, tokenizer = world_model(settings)
    report = oracle_recall(model, tokenizer, settings, cache=cache)
    if settings.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(settings, "world")}))
        return 0
    print(report.counts_line())
    print(stats_table(report, settings.sets, "recall"))
    print_reading(report, paired_comparisons(report, settings.sets, settings.seed), "oar recall world")
    return 0
