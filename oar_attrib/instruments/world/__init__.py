"""`oar recall world`: token recall of every method on the arithmetic world's held-out problems
against its oracle sets (`direct`, `chain`, ...) and the model's own counterfactual oracle
(`recall`, `data.oracle`)."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ...analysis.sets import DEFAULT_SETS, RECALL_SETS
from ...commands import MAX_COUNT, option
from ...defaults import CF_POSITIONS, REPLACEMENT
from ..base import InstrumentSettings, register_instrument

COUNTERFACTUAL_GROUP = "the counterfactual oracle (--sets counterfactual)"


@dataclass(frozen=True, kw_only=True)
class CounterfactualRecall(InstrumentSettings):
    """Recall that may score the model's own counterfactual oracle (`world`, `data`)."""

    cf_positions: int = option(CF_POSITIONS, "counterfactual set: scored positions tested per trace (one greedy "
                                   "regeneration each; more are thinned to this many, spread over the trace)",
                               group=COUNTERFACTUAL_GROUP, bounds=(1, MAX_COUNT))
    # The choices are `data.oracle.REPLACEMENTS`, which imports torch: not at parse time.
    replace: str = option(REPLACEMENT, "counterfactual set: what replaces a tested token, the pad token or a token "
                                 "drawn from the model at that position (not the original, seeded); on chat "
                                 "models whose pad is the end-of-turn token, pad ends the turn",
                          choices=("pad", "resample"), group=COUNTERFACTUAL_GROUP)


@dataclass(frozen=True, kw_only=True)
class WorldRecall(CounterfactualRecall):
    """`oar recall world`: token recall on the arithmetic world's held-out problems."""

    preset: str | None = option(None, "world preset (default: recall, whose final results are written once "
                                      "so `direct` is exact)")
    sets: tuple[str, ...] | None = option(
        None, "oracle sets to score against (default: direct chain) (results = direct; names: the final "
              "steps' names; counterfactual: the positions whose replacement changes the model's "
              "regenerated answer)", choices=RECALL_SETS)


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

    settings = dataclasses.replace(settings, sets=settings.sets or tuple(DEFAULT_SETS))
    model, tokenizer = world_model(settings)
    report = oracle_recall(model, tokenizer, n=settings.n, seed=settings.seed, preset=settings.preset or "recall",
                           methods=settings.methods, probe=settings.probe, progress=settings.progress,
                           sets=settings.sets, cf_positions=settings.cf_positions, replacement=settings.replace,
                           method_params=settings.params(), shard=settings.shard)
    if settings.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(settings, "world")}))
        return 0
    print(report.counts_line())
    print(stats_table(report, settings.sets, "recall"))
    print_reading(report, paired_comparisons(report, settings.sets, settings.seed), "oar recall world")
    return 0
