"""`oar recall data`: any model's own counterfactual oracle on its greedy answers to a JSONL data
set, and the value oracle's sets on the word-problem world (`recall`; the oracle is `oracle`).
Resumable through `--cf-cache`, whose record (the model and dtype) refuses another model's
cache before the model loads."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ...analysis.sets import COUNTERFACTUAL
from ...commands import MAX_COUNT, option
from ...defaults import CF_POSITIONS, RECALL_MAX_NEW_TOKENS, REPLACEMENT
from ...errors import InputError
from ...world import VALUE_SETS
from ..base import InstrumentSettings, need_cache, register_instrument

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


DATA_SETS = (COUNTERFACTUAL,) + VALUE_SETS  # the sets `data` scores (the value oracle's on wordworld only)


@dataclass(frozen=True, kw_only=True)
class DataRecall(CounterfactualRecall):
    """`oar recall data`: any model's own counterfactual oracle on its greedy answers to a data
    set (and the value oracle's sets on the word-problem world)."""

    data: str | None = option(None, "a JSONL data set (question/problem and optional gold answer, or prompt "
                                    "and response), or wordworld:<preset> (held-out word problems, also scored on "
                                    "the value oracle's direct/upstream/distractor sets)",
                              required=True)  # the command's; `counterfactual_recall` is given its records
    sets: tuple[str, ...] | None = option(
        None, "oracle sets to score against (default: counterfactual, and on wordworld:<preset> also "
              "direct upstream distractor, the value oracle's)", choices=DATA_SETS)
    max_new_tokens: int = option(RECALL_MAX_NEW_TOKENS, "longest greedy answer the model writes to a question",
                                 bounds=(1, MAX_COUNT))
    cf_cache: str | None = option(None, "JSONL cache of each trace's counterfactual oracle; a rerun with it "
                                        "resumes after the traces already computed")


def open_cache(settings: InstrumentSettings, name: str, opener):
    """The instrument's cache (`opener(path, record=, shard=)`), the shard's own file under
    `--shard`, read and checked before the model loads."""
    from ..shard import shard_path
    from ..text import cache_record

    need_cache(settings)
    path = shard_path(settings.cf_cache, settings.shard)
    return opener(path, record=cache_record(settings, name), shard=None if settings.shard is None else str(settings.shard))


@register_instrument("data", DataRecall, "any model's own counterfactual oracle on a JSONL data set or "
                                         "wordworld:<preset>")
def run_data(settings: DataRecall) -> int:
    """Counterfactual recall of every method on the model's own traces of a data set (and
    value-oracle recall on the word-problem world); a `--shard` scores its share of the records."""
    from .recall import causal_cache, counterfactual_recall, data_records, data_sets
    from ...models import load_model

    records = data_records(settings.data, settings.n, settings.seed)
    known = data_sets(records)
    sets = list(settings.sets or known)
    other = [s for s in sets if s not in known]
    if other:
        raise InputError(f"{settings.data} is scored at token granularity on --sets {' '.join(known)} (the "
                         f"value oracle's sets need --data wordworld:<preset>), got --sets {' '.join(sets)}")
    records = settings.shard.take(records) if settings.shard else records
    cache = open_cache(settings, "data", causal_cache)
    model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
    report = counterfactual_recall(model, tokenizer, records, settings, cache=cache)
    print_data(report, settings, sets)
    return 0


def print_data(report, settings: DataRecall, sets: list[str]) -> None:
    from ...analysis.recall_reading import paired_comparisons
    from ...analysis.verdicts import plain
    from ..text import part_table, print_reading, recall_record, stats_table

    if settings.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(settings, "data")}))
        return
    accuracy = "n/a (no gold answers)" if report.accuracy is None else f"{report.accuracy:.3f}"
    print(f"n={report.n} scored={report.n_scored} accuracy={accuracy} skipped: {plain(report.skipped)}; "
          f"oracle: {plain(report.oracle)}")
    print(stats_table(report, sets, "recall"))
    for outcome, part in report.by_outcome.items():
        print(f"{outcome} traces (n={part['n']}):")
        print(part_table(part, sets, "recall"))
    print_reading(report, paired_comparisons(report, sets, settings.seed),
                  f"oar recall data --data {shlex.quote(str(settings.data))}")
