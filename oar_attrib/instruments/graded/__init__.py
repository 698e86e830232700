"""`oar recall graded`: each method's Spearman and tercile AUC against the graded oracle's flip
rates, K replacements per tested position (`oracle`, `recall`),
resumable through `--cf-cache` (answers, scores, KTAE's groups, oracles)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ...commands import MAX_COUNT, option
from ...defaults import GRADED_K, GRADED_POSITIONS
from ..base import InstrumentSettings, register_instrument
from ...defaults import RECALL_MAX_NEW_TOKENS, REGENERATION_MARGIN
from ..data import open_cache

GRADED_GROUP = "the graded oracle"


@dataclass(frozen=True, kw_only=True)
class SampledRecall(InstrumentSettings):
    """The problems of the sampled oracles (`graded`, `advantage`): a data set's, or held-out
    arithmetic-world problems."""

    preset: str | None = option(None, "world preset of the held-out problems when --data is not given "
                                      "(default: recall)")
    data: str | None = option(None, "a JSONL data set (question/problem and optional gold answer), or "
                                    "wordworld:<preset>: its problems instead of the arithmetic world's")


@dataclass(frozen=True, kw_only=True)
class GradedRecall(SampledRecall):
    """`oar recall graded`: each method's Spearman and tercile AUC against the graded oracle's
    flip rates (K replacements per tested position)."""

    positions: int = option(GRADED_POSITIONS, "tested positions per trace (one per stratum of the scored reasoning, so "
                                "they span it); was --cf-positions", group=GRADED_GROUP, bounds=(1, MAX_COUNT))
    graded_k: int = option(GRADED_K, "replacement tokens drawn from the model per tested position (each regenerated "
                              "greedily; the label is the share that change the answer)", group=GRADED_GROUP,
                           bounds=(1, MAX_COUNT))
    max_new_tokens: int = option(RECALL_MAX_NEW_TOKENS, "longest greedy answer the model writes to a question",
                                 group=GRADED_GROUP, bounds=(1, MAX_COUNT))
    cf_cache: str | None = option(None, "JSONL cache of the model's answers, every method's scores, KTAE's "
                                        "groups and each trace's oracle: a rerun computes nothing it holds",
                                  group=GRADED_GROUP)
    group_samples: int = option(0, "answers sampled per problem to form the group KTAE compares (with the "
                                   "greedy trace); 0: KTAE does not apply", group=GRADED_GROUP,
                                bounds=(0, MAX_COUNT))
    margin: int = option(REGENERATION_MARGIN, flag=None)  # the oracle's (`GradedSettings.margin`), no flag

    @property
    def oracle(self):
        """The `GradedSettings` of this run's oracle: --graded-k, --positions, --seed, the margin,
        its rows within --max-batch-tokens (default: the CPU budget)."""
        from .oracle import GradedSettings
        from ...models.budget import CPU_BATCH_TOKENS

        return GradedSettings(k=self.graded_k, positions=self.positions, seed=self.seed, margin=self.margin,
                              max_batch_tokens=self.max_batch_tokens or CPU_BATCH_TOKENS)


def sampled_records(settings: SampledRecall, n: int, world_problems: bool = False) -> list[dict]:
    """The records a sampled oracle scores: `--data`'s, or n held-out arithmetic-world problems
    (their prompt and gold answer, and with `world_problems` the problem, whose reward grades
    and whose structural oracle is the advantage oracle's positive control)."""
    from ..data.recall import data_records
    from ...cli.choices import check_servable
    from ...world import generate_problems

    if settings.data is not None:
        return data_records(settings.data, n, settings.seed)
    check_servable(settings.model)
    return [{"prompt": p.prompt, "answer": str(p.answer), **({"problem": p} if world_problems else {})}
            for p in generate_problems(n, settings.preset or "recall", seed=settings.seed, split="test")]


@register_instrument("graded", GradedRecall, "the graded counterfactual oracle (flip rates per tested position)")
def run_graded(settings: GradedRecall) -> int:
    """Graded recall of every method; a `--shard` scores its share of the records."""
    from .recall import graded_cache, graded_recall
    from ...models import load_model

    records = sampled_records(settings, settings.n)
    records = settings.shard.take(records) if settings.shard else records
    cache = open_cache(settings, "graded", graded_cache)  # read and checked before the model loads
    model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
    report = graded_recall(model, tokenizer, records, settings, cache=cache)
    if settings.json:
        print(json.dumps(report.as_dict()))
        return 0
    print("\n".join(graded_text(report)))
    return 0


def graded_text(report) -> list[str]:
    """The text report: counts, the oracle and its work, the table and the reading in words."""
    from .recall import RANDOM_RANKING
    from ...analysis.recall_reading import graded_comparisons
    from ...analysis.verdicts import plain
    from ..text import RANDOM_EXPECTED, reading_lines, stats_cell

    accuracy = "n/a (no gold answers)" if report.accuracy is None else f"{report.accuracy:.3f}"
    lines = [f"n={report.n} scored={report.n_scored} accuracy={accuracy} skipped: {plain(report.skipped)}",
             f"oracle: {plain(report.oracle)}", f"decode: {plain(report.decode)}; cache: {plain(report.cache)}"]
    width = max([len(m) for m in report.methods] + [len(RANDOM_EXPECTED)])
    heads = ("spearman", "tercile AUC", "spearman - random", "spearman | position", "early first")
    lines.append(f"{'method':<{width}} " + " ".join(f"{h:>22}" for h in heads))
    for method, stats in report.methods.items():
        versus = stats.get("vs_random", {}).get("spearman")
        cells = [stats_cell(stats["spearman"], "mean"), stats_cell(stats["auc"], "mean"),
                 stats_cell(versus, "mean") if versus else "",
                 stats_cell(stats["partial_spearman"], "mean"), stats_cell(stats["position_spearman"], "mean")]
        lines.append(f"{method:<{width}} " + " ".join(f"{c:>22}" for c in cells))
    expected = ("spearman", "auc", None, "partial_spearman", "position_spearman")
    lines.append(f"{RANDOM_EXPECTED:<{width}} " + " ".join(
        f"{'':>22}" if k is None else f"{RANDOM_RANKING[k]:>22.3f}" for k in expected))
    lines.append("spearman | position: with position held fixed (partial); early first: the scores' "
                 "Spearman with earliness (earliest_first: 1)")
    return lines + reading_lines(report, graded_comparisons(report), "oar recall graded")
