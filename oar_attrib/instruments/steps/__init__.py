"""`oar recall steps`: every method's scores pooled per step on the arithmetic world, recall of
the `direct` steps and the AUC of ranking an `upstream` step above a distractor
(`recall`)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ...commands import MAX_COUNT, option
from ...defaults import RESAMPLE_SAMPLES, VIEW_STEP_POOL
from ...inputs.steps import STEP_POOLS
from ..base import InstrumentSettings, register_instrument
from ..world import world_model


@dataclass(frozen=True, kw_only=True)
class StepRecall(InstrumentSettings):
    """`oar recall steps`: every method's scores pooled per step, recall of the `direct` steps
    and the AUC of ranking an `upstream` step above a distractor."""

    preset: str | None = option(None, "world preset (default: upstream, which has a step on the answer's path "
                                      "that the answer does not read)")
    step_pool: str = option(VIEW_STEP_POOL, "how a method's token scores pool into a step score",
                            choices=STEP_POOLS)
    resample_samples: int = option(RESAMPLE_SAMPLES, "method resample: continuations per side and step", bounds=(1, MAX_COUNT))
    intervention_samples: int = option(0, "also measure the upstream AUC of shifting each step's result and "
                                          "regenerating (how far the model itself carries upstream results), "
                                          "at this many continuations per side and step; 0: off",
                                       bounds=(0, MAX_COUNT))
    cf_cache: str | None = option(None, "JSONL cache of each problem's answer and scored row: a rerun reads back "
                                        "what it holds, and the caches of a --shard run merge into one "
                                        "(`oar recall merge`)")


@register_instrument("steps", StepRecall, "recall of steps on the arithmetic world (direct steps, upstream AUC)",
                     own_knobs=("resample",))
def run_steps(settings: StepRecall) -> int:
    """Direct-step recall and upstream AUC per method; a `--shard` scores its share of the problems."""
    from ...analysis.recall_reading import paired_comparisons
    from .recall import STEP_METRICS, step_recall
    from ..data import open_cache
    from ..text import print_reading, recall_record, stats_cell, stats_table
    from ..units import unit_cache

    cache = open_cache(settings, "steps", unit_cache)  # read and checked before the model loads
    model, tokenizer = world_model(settings)
    report = step_recall(model, tokenizer, settings, cache=cache)
    if settings.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(settings, "steps")}))
        return 0
    print(f"preset={report.preset} {report.counts_line()} step pool={report.pool}")
    print(stats_table(report, STEP_METRICS, "mean"))
    if report.intervention:
        cell = stats_cell(report.intervention["upstream"], "mean")
        print(f"{'result-shift intervention (the model itself, no method)':<20} upstream {cell}")
    print_reading(report, paired_comparisons(report, STEP_METRICS, settings.seed), "oar recall steps")
    return 0
