"""`oar recall advantage`: every method against the Monte-Carlo advantage oracle, registered
through the thinnest adapter: its settings object, built by the parser, handed to
`recall.advantage_recall` (the oracle is `oracle`, the figures `metrics`, the report and its
reading in words `text`).

A `--shard K/N` samples every candidate group (cached, each seeded by its key, so every shard
samples the same texts), chooses the groups an unsharded run analyses, and analyses the chosen
groups of index i % N == K - 1; the merged caches hold every group's attribution and oracle."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from ...commands import MAX_COUNT, option
from ...defaults import ADVANTAGE_CONTINUATIONS, ADVANTAGE_LABELS, REGENERATION_MARGIN
from ...errors import InputError
from ..base import register_instrument
from ..data import open_cache
from ..graded import SampledRecall, sampled_records

ADVANTAGE_GROUP = "the advantage oracle"
DEFAULT_GROUP = 4  # answers per problem (GRPO's group), also when --group-samples is 0
CANDIDATES = 6  # candidate problems per group analysed (`advantage_recall` samples only those it needs)


@dataclass(frozen=True, kw_only=True)
class AdvantageRecall(SampledRecall):
    """`oar recall advantage`: every method against the Monte-Carlo advantage oracle."""

    methods: tuple[str, ...] | None = option(
        None, "methods (default: on a bundled model the cheap reading methods, else every reading method "
              "but resample)", type=SampledRecall.__dataclass_fields__["methods"].metadata["type"])
    group_samples: int = option(DEFAULT_GROUP, "the GRPO group size: answers sampled per problem (0: "
                                               f"{DEFAULT_GROUP})", group=ADVANTAGE_GROUP, bounds=(0, MAX_COUNT))
    continuations: int = option(ADVANTAGE_CONTINUATIONS, "continuations sampled per step boundary (V_k's denominator)",
                                group=ADVANTAGE_GROUP, bounds=(1, MAX_COUNT))
    temperature: float = option(1.0, "the policy's sampling temperature (groups and continuations)",
                                group=ADVANTAGE_GROUP, bounds=(0.0, 100.0))
    min_steps: int = option(1, "traces with fewer steps are left out of the within-trace figures (they stay in "
                               "their group's advantages and, with --label all, in its credit agreement)",
                            group=ADVANTAGE_GROUP, bounds=(0, MAX_COUNT))
    label: str = option("all", "which traces of an analysed group get the oracle: all (every trace with a step, "
                               "so every group counts for credit agreement) or scored (only those of at least "
                               "--min-steps steps: cheaper, as the first SmolLM2 run)",
                        choices=ADVANTAGE_LABELS, group=ADVANTAGE_GROUP)
    max_new_tokens: int | None = option(None, "longest sampled answer (default: the model's catalogue "
                                              "answering length, 128 on arith-tiny)", group=ADVANTAGE_GROUP,
                                        bounds=(1, MAX_COUNT))
    cf_cache: str | None = option(None, "JSONL cache of every group of answers, every group's attribution and "
                                        "every step boundary's continuation rewards: a rerun reads back what it "
                                        "holds", group=ADVANTAGE_GROUP)

    margin: int = option(REGENERATION_MARGIN, flag=None)  # the oracle's (`AdvantageSettings.margin`), no flag
    groups: int | None = option(None, flag=None)  # groups analysed (default: --n over the group size, rounded
    #                                               up); a --shard's run is given its share

    @property
    def size(self) -> int:
        return self.group_samples or DEFAULT_GROUP

    @property
    def wanted(self) -> int:
        """The groups analysed: `groups`, else --n traces in whole groups."""
        return math.ceil(self.n / self.size) if self.groups is None else self.groups

    @property
    def oracle(self):
        """The `AdvantageSettings` of this run's oracle: --continuations, --temperature, --seed, the margin."""
        from .oracle import AdvantageSettings

        return AdvantageSettings(n=self.continuations, temperature=self.temperature, seed=self.seed,
                                 margin=self.margin)

    def methods_run(self) -> list[str]:
        """--methods, else the default for --model (`text.default_methods`)."""
        from .text import default_methods

        return list(self.methods or default_methods(self.model))

    def answer_tokens(self) -> int:
        """--max-new-tokens, else the model's catalogue answering length."""
        from ...models.catalogue import answering

        return self.max_new_tokens or answering(self.model)[0].max_new_tokens

    def check(self) -> None:
        """InputError, before any work: the oracle's own checks (`AdvantageSettings`: a
        temperature of 0 is refused) and a group GRPO cannot normalise (fewer than 2 answers)."""
        self.oracle.record()
        if self.size < 2:
            raise InputError(f"--group-samples {self.size}: GRPO's advantage needs groups of at least 2 answers")


@register_instrument("advantage", AdvantageRecall, "the Monte-Carlo advantage oracle (dV per step, credit agreement)")
def run_advantage(settings: AdvantageRecall) -> int:
    from .recall import CACHE_CHECKS, advantage_recall
    from ..cache import OracleCache
    from .text import reading, text_report
    from ...models import load_model
    from ...models.catalogue import bundled

    settings.check()
    # Up to CANDIDATES times the groups needed are candidates, sampled in order until enough of
    # them mix right and wrong answers (a model right 15% of the time mixes about half its groups).
    records = sampled_records(settings, CANDIDATES * settings.wanted, world_problems=True)
    cache = open_cache(settings, "advantage", lambda path, **kw: OracleCache(path, checks=CACHE_CHECKS, **kw))
    if bundled(settings.model):
        # A 1.1M-parameter model's decode steps are too small to share: threads only contend
        # (measured on 2 busy cores: the oracle 8.1 s a trace with the default threads, 0.15 s with one).
        import torch

        torch.set_num_threads(1)
    model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
    run = settings
    if settings.shard is not None:
        records, groups = shard_groups(model, tokenizer, records, settings, cache)
        run = replace(settings, groups=groups)
    report = advantage_recall(model, tokenizer, records, run, cache=cache)
    if settings.json:
        print(json.dumps({**report.as_dict(), "record": advantage_record(settings, settings.methods_run()),
                          "reading": reading(report, settings)}, allow_nan=False))
        return 0
    print("\n".join(text_report(report, settings)))
    return 0


def advantage_record(settings: AdvantageRecall, methods: list[str]) -> dict:
    """The settings record of an `oar recall advantage` run: `text.recall_record`'s (the methods
    run, with their parameters, probe, seed, model, dtype) and the instrument's own settings,
    so a committed report names what made it."""
    from ..text import recall_record

    own = ("data", "preset", "group_samples", "continuations", "temperature", "min_steps", "label", "max_new_tokens")
    return {**recall_record(replace(settings, methods=tuple(methods)), "advantage"),
            "advantage": {name: getattr(settings, name) for name in own}}


def shard_groups(model, tokenizer, records, settings: AdvantageRecall, cache) -> tuple[list, int]:
    """(records of this shard's groups, how many): the groups an unsharded run chooses
    (`choose_groups`, over every candidate group sampled), those of index i % N == K - 1 in that
    order."""
    from . import recall as adv
    from ..data.recall import encode_prompt_ids, record_prompt

    run = adv.AdvantageRun(model, tokenizer, cache, settings.oracle, settings.progress)
    prompt_ids = [encode_prompt_ids(tokenizer, record_prompt(r, tokenizer)) for r in records]
    rewards_of = [adv.reward_function(r) for r in records]
    _, rewards = adv.sample_groups(run, prompt_ids, rewards_of, settings.wanted, settings.size,
                                   settings.answer_tokens(), settings.progress)
    chosen = settings.shard.take(adv.choose_groups(rewards, settings.n, settings.size))
    return [records[g] for g in chosen], len(chosen)
