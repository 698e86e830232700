"""Advantage recall: do a method's step weights follow the policy's own advantage, and does its
reshaping move GRPO's training signal towards it (`advantage_oracle`)?

Traces come in groups, as GRPO sees them: G answers per problem sampled at the policy's
temperature, graded, each given its group-normalised advantage A_i (`rollouts.group_advantages`);
groups whose answers are not all equally right are taken first (only they carry a signal).
With `label="all"` every trace of an analysed group that has a step gets the oracle's dV_k, so
every mixed group is a unit of credit agreement; the within-trace figures read the traces of at
least `min_steps` steps (the family). `label="scored"` gives the oracle to the family alone (the
first SmolLM2 run's rule: a group with one such trace has no credit agreement).

What is measured, per method and per reference ranking (`earliest_first`, `longest_first`), is
`metrics`': the within-trace Spearman correlation of the mean of the method's weights
over each step (what training applies) with the signed label sign(A_i) * dV (primary: the
target of a multiplicative reshaping) and with |dV|; the same with step length and position
held fixed (a within-trace rank regression, standard errors clustered by trace); the label's
ceiling; and per group the credit agreement. Holm runs across the methods; each reference is a
family of its own. On the arithmetic world the positive control asks whether |dV| ranks the
world's causal steps (`steps.recall.step_sets`: `chain`, every step on the answer's dependency
path, and `direct`) first: their recall@|set| among the steps ranked by |dV|
(`oar recall intervention` is the control that makes a step matter).

Resumable in one JSON Lines cache (`instruments.cache.OracleCache`): each group's answers, each
group's attribution (steps, step scores and weights, token advantages, seconds) and each
boundary's continuation rewards are appended as soon as they are made, keyed by the model's
identity and everything else that made them; a rerun with the same cache calls the model for
nothing done. What is read back is checked against what could have made it: a boundary's
rewards are N values in the reward's range [0, 1] (N the settings'), a group's answers are G
texts whose hash is kept beside them, an attribution's advantages are finite.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ...attribution import analysis_params, attribute
from ...defaults import ADVANTAGE_LABELS as LABELS, VIEW_STEP_POOL
from ...errors import InputError
from ...inputs.grading import grade
from ...inputs.steps import pool_steps
from ...methods import ranking_scores
from ...records.record import json_safe
from ...records.settings_record import settings_record
from ...rollouts import group_advantages
from ...weights.metrics import random_recall, recall_at_k
from ...weights.settings import ReshapeSettings
from .oracle import AdvantageSettings, AdvantageTrace, Boundaries, prefix_seed, split_half
from ..data.recall import encode_prompt_ids, record_prompt
from .metrics import (EARLIEST, GRPO, GROUP_METRICS, LONGEST, POOLING, REFERENCES, TRACE_METRICS, TARGETS,
                      credit_metrics, estimate, label_ceiling, partials, trace_metrics)
from ..answers import sampled_group
from ..base import Run, settings_of
from ..cache import OracleCache, cache_key
from ...analysis.sets import ADVANTAGE
from ...analysis.stats import CORRELATION
from ..steps.recall import overlaps

REWARD_RANGE = (0.0, 1.0)  # a graded reward's range: a cached continuation reward outside it is refused


def _numbers(values) -> bool:
    return isinstance(values, list) and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          and math.isfinite(v)) for v in values)


# The advantage oracle's kinds in the shared cache (`OracleCache(checks=...)`): anything else is refused.
def _rewards(values) -> bool:
    return _numbers(values) and bool(values) and None not in values and all(
        REWARD_RANGE[0] <= v <= REWARD_RANGE[1] for v in values)


# The advantage oracle's kinds in the shared cache (`OracleCache(checks=...)`): anything else is
# refused. What depends on the settings (a boundary's N, a group's G) is checked where it is read.
CACHE_CHECKS = {
    "attribution": ("a list of traces, each with token ids, steps, step scores, token advantages and a finite "
                    "advantage",
                    lambda e: isinstance(e.get("traces"), list) and all(
                        isinstance(t, dict) and isinstance(t.get("token_ids"), list) and isinstance(t.get("steps"), list)
                        and isinstance(t.get("step_scores"), dict) and isinstance(t.get("token_advantages"), dict)
                        and _numbers([t.get("advantage")]) and t.get("advantage") is not None
                        and all(_numbers(v) for v in t["step_scores"].values())
                        and all(_numbers(v) for v in t.get("step_weights", {}).values())
                        and all(_numbers(v) for v in t["token_advantages"].values()) for t in e["traces"])),
    "prefix": (f"a non-empty list of rewards in [{REWARD_RANGE[0]:g}, {REWARD_RANGE[1]:g}]", lambda e: _rewards(e.get("rewards"))),
}


@dataclass
class AdvantageRun(Run):
    """An advantage recall's run (`base.Run`; its settings the oracle's `AdvantageSettings`):
    the methods scored, the group size, and each boundary's seconds when it was made."""

    methods: list = field(default_factory=list)
    size: int = 0
    oracle_seconds: dict = field(default_factory=dict)  # per prefix key: seconds when made


def advantage_cache(path: str | Path | None) -> OracleCache:
    """The advantage oracle's cache at `path` (`--cf-cache`), read and checked now (before a
    model loads)."""
    return OracleCache(path, checks=CACHE_CHECKS)


def reward_function(record: dict):
    """text -> reward of a record: its problem's own reward (a world problem), else `grade`
    against its gold `answer`."""
    problem = record.get("problem") or record.get("word_problem")
    if problem is not None and hasattr(problem, "reward"):
        return problem.reward
    if "answer" not in record:
        raise InputError("the advantage oracle grades continuations against the gold answer: every "
                         "record needs `answer`")
    return lambda text: grade(text, record["answer"]).reward


def sample_groups(run: AdvantageRun, prompt_ids: list, rewards_of: list, wanted: int, size: int,
                  max_new_tokens: int, progress: bool) -> tuple[list[list[str]], list[list[float]]]:
    """Each candidate problem's group of `size` answers and their rewards, sampled in order until
    `wanted` groups mix right and wrong answers (only those carry GRPO's signal) or the
    candidates run out; `choose_groups` then takes the same groups it would from all of them."""
    texts, rewards = [], []
    for ids, reward_of in tqdm(list(zip(prompt_ids, rewards_of)), desc="groups", disable=not progress):
        texts.append(sampled_group(run, ids, size, run.settings.temperature, max_new_tokens))
        rewards.append([float(reward_of(t)) for t in texts[-1]])
        if sum(len(set(r)) > 1 for r in rewards) >= wanted:
            break
    return texts, rewards


def choose_groups(rewards: list[list[float]], n: int, size: int) -> list[int]:
    """Indices of the groups to analyse: those with unequal rewards first, in order, then the
    others, until ceil(n / size) groups."""
    mixed = [i for i, r in enumerate(rewards) if len(set(r)) > 1]
    rest = [i for i, r in enumerate(rewards) if len(set(r)) <= 1]
    return sorted((mixed + rest)[:math.ceil(n / size)])


def _attribution(run: AdvantageRun, prompt, ids, texts, rewards, methods, reshape, params) -> dict:
    """One group's attribution (cached): per trace its token ids, steps, step scores per method
    (`ranking_scores` pooled by VIEW_STEP_POOL, the trace page's), the mean of each method's
    weights over each step (`step_weights`), token advantages over step tokens per method, and
    seconds per method."""
    record = settings_record(reshape, methods, analysis_params(methods, params), model=run.model)
    key = cache_key(record, ids, texts, rewards)
    hit = run.cache.get("attribution", key)
    if hit is not None:
        if len(hit["traces"]) != len(texts):
            raise run.cache.refuse(f"an attribution ({key}) holds {len(hit['traces'])} traces for a group of {len(texts)}")
        return hit
    size = len(texts)
    advantages = group_advantages(torch.tensor([rewards]))[0].tolist()
    done = attribute(run.model, run.tokenizer, [prompt] * size, texts, methods, reshape, method_params=params,
                     advantages=advantages, groups=[0] * size, correct=[r > 0 for r in rewards])
    rows = []
    for trace in done:
        steps = [list(s) for s in trace.steps] if trace.span_found else []
        tokens = [t for a, b in steps for t in range(a, b)]
        rows.append({"token_ids": trace.token_ids, "steps": steps, "advantage": trace.advantage,
                     "step_chars": [[trace.offsets[a][0], trace.offsets[b - 1][1]] for a, b in steps],
                     "step_scores": {m: _finite(pool_steps(ranking_scores(m, np.asarray(trace.scores[m], dtype=np.float64)),
                                                           steps, VIEW_STEP_POOL)) for m in methods} if steps else {},
                     "step_weights": {m: _finite(pool_steps(np.asarray(trace.weights[m], dtype=np.float64), steps,
                                                            POOLING)) for m in methods} if steps else {},
                     "token_advantages": {m: _finite([trace.token_advantages[m][t] for t in tokens]) for m in methods},
                     "seconds": {m: trace.timings.get(m) for m in methods}})
    return run.cache.put("attribution", key, {"traces": rows})


def _finite(values) -> list:
    return [float(v) if np.isfinite(v) else None for v in values]


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def step_weights(row: dict, method: str) -> np.ndarray:
    """(S,) the mean of `method`'s weights over each step of a cached trace: kept since 0.2.0,
    else recovered from its token advantages A_i * w_t (exact up to rounding) when A_i is not
    0; NaN (no score) for a trace of an older cache whose A_i is 0."""
    if method in row.get("step_weights", {}):
        return _floats(row["step_weights"][method])
    ta, out, at = _floats(row["token_advantages"][method]), [], 0
    for a, b in row["steps"]:
        out.append(float(np.mean(ta[at:at + b - a])) / row["advantage"] if row["advantage"] else np.nan)
        at += b - a
    return np.asarray(out, dtype=np.float64)


class CachedBoundaries(Boundaries):
    """Prefixes' continuation rewards in an instrument's cache (kind "prefix"): keyed and seeded
    by `record` (the model's identity, the oracle's settings and whatever else makes them) and
    the prefix ids; a read-back entry of another N than the settings' is refused. `seconds`, when
    given, gets each prefix's work when it was made, by key."""

    def __init__(self, cache: OracleCache, record: dict, settings: AdvantageSettings, seconds: dict | None = None):
        super().__init__(settings)
        self.cache, self.record, self.seconds = cache, record, seconds if seconds is not None else {}

    def seed(self, prefix):
        return prefix_seed(cache_key(self.record, prefix))

    def get(self, prefix):
        key = cache_key(self.record, prefix)
        hit = self.cache.get("prefix", key)
        if hit is None:
            return None
        if len(hit["rewards"]) != self.settings.n:
            raise self.cache.refuse(f"a prefix's continuations ({key}) hold {len(hit['rewards'])} rewards where "
                                     f"--continuations is {self.settings.n}")
        self.seconds[key] = hit.get("seconds", 0.0)
        return hit["rewards"]

    def put(self, prefix, rewards, seconds):
        key = cache_key(self.record, prefix)
        self.cache.put("prefix", key, {"rewards": rewards, "seconds": seconds})
        self.seconds[key] = seconds


def _oracle(run: AdvantageRun, ids, row: dict, reward_of, reward: float) -> AdvantageTrace:
    steps = [tuple(s) for s in row["steps"]]
    store = CachedBoundaries(run.cache, run.record(oracle=ADVANTAGE, **run.settings.record()), run.settings,
                             run.oracle_seconds)
    return store.oracle(run.model, run.tokenizer, ids, row["token_ids"], steps, reward_of, reward)


def control_recall(dv: np.ndarray, step_chars: list, oracle) -> dict[str, float]:
    """The positive control of one arithmetic-world trace: recall@|set| of the `chain` and
    `direct` steps (`steps.recall.step_sets`'s overlap rule) among its steps ranked by |dV|,
    and a random ranking's expectation of each."""
    everything = np.ones(len(dv), dtype=bool)
    out = {}
    for name in ("chain", "direct"):
        mask = np.array([overlaps(c, getattr(oracle, name)) for c in step_chars], dtype=bool)
        ok = mask.any() and len(dv) >= 2
        out[name] = float(recall_at_k(np.abs(dv), mask, everything)) if ok else float("nan")
        out[f"random_{name}"] = float(random_recall(mask, everything)) if ok else float("nan")
    return out


@dataclass
class AdvantageReport:
    """What `oar recall advantage --json` prints (`as_dict`), the per-trace and per-group rows
    kept (every summary figure recomputes from them). `n_scored`: the traces of the family
    (at least `min_steps` steps), the within-trace figures' units; `n_labelled`: every trace
    given the oracle; `groups["credit"]`: the groups with a credit agreement, its units."""

    methods: dict
    reference: dict
    grpo: dict
    ceiling: dict
    reliability: dict
    positive_control: dict
    oracle: dict
    n: int
    n_scored: int
    n_labelled: int
    groups: dict
    skipped: dict
    cache: dict
    per_trace: list = field(default_factory=list)
    per_group: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return json_safe(dataclasses.asdict(self))


# `advantage_recall`'s keywords that are spelled otherwise in its settings (`AdvantageRecall`).
_KEYWORDS = {"group_size": "group_samples"}
# Its settings object before 0.2.0 was the oracle's: where that one's fields go now.
_ORACLE_FIELDS = ("the oracle's settings are AdvantageRecall's fields continuations, temperature, seed and "
                  "margin (AdvantageSettings(n=2, margin=0) is continuations=2, margin=0)")


def advantage_recall(model, tokenizer, records: list[dict], settings=None, *,
                     cache: str | Path | OracleCache | None = None, **keywords) -> AdvantageReport:
    """Advantage recall of every method on about `settings.n` traces (whole groups of the group
    size) answering `records` (candidates: a question or prompt and its gold `answer`, or an
    arithmetic-world `problem`), module docstring. `label`: "all" gives the oracle to every
    trace of an analysed group with a step, "scored" only to those of at least `min_steps`
    steps (the others keep their place in their group's advantages; counted in `skipped`).

    settings: the `instruments.advantage.AdvantageRecall` `oar recall advantage` runs on (its
    `oracle` is the `AdvantageSettings` of the oracle); or its fields as keywords (`n`,
    `methods`, `probe`, `seed`, `continuations`, `temperature`, `margin`, `group_samples` or
    `group_size`, `max_new_tokens`, `min_steps`, `label`, `method_params`, `progress`). Left
    out, `methods` and `max_new_tokens` are the command's defaults for the settings' model
    name (`AdvantageRecall.methods_run`, `answer_tokens`), not for the `model` passed: with
    keywords that name is arith-tiny's (its cheap methods, 128 tokens)."""
    from . import AdvantageRecall

    settings = settings_of(AdvantageRecall, settings, keywords, "advantage_recall", _KEYWORDS, _ORACLE_FIELDS)
    settings.check()
    if settings.label not in LABELS:
        raise InputError(f"label={settings.label!r}: one of {', '.join(LABELS)}")
    size = settings.size
    run = AdvantageRun(model, tokenizer, cache if isinstance(cache, OracleCache) else advantage_cache(cache),
                       settings.oracle, settings.progress, methods=settings.methods_run(), size=size)
    prompts = [record_prompt(r, tokenizer) for r in records]
    prompt_ids = [encode_prompt_ids(tokenizer, p) for p in prompts]
    rewards_of = [reward_function(r) for r in records]
    texts, rewards = sample_groups(run, prompt_ids, rewards_of, settings.wanted, size, settings.answer_tokens(),
                                   settings.progress)
    records = records[:len(texts)]  # the candidates: those sampled
    chosen = choose_groups(rewards, settings.wanted * size, size)
    reshape = ReshapeSettings(probe=settings.probe, seed=settings.seed)
    per_trace, per_group, oracles, skipped = [], [], [], {"no_steps": 0, "few_steps": 0}
    least = max(settings.min_steps, 1)
    bar = tqdm(total=len(chosen) * size, desc="advantage oracle", disable=not settings.progress)
    for g in chosen:
        rows = _attribution(run, prompts[g], prompt_ids[g], texts[g], rewards[g], run.methods, reshape,
                            settings.params() or {})["traces"]
        credit_rows, labels, advantages = {m: [] for m in run.methods}, [], []
        for row, text, reward in zip(rows, texts[g], rewards[g]):
            bar.update(1)
            if len(row["steps"]) < least:
                skipped["no_steps" if not row["steps"] else "few_steps"] += 1
                if not row["steps"] or settings.label == "scored":
                    continue
            oracle = _oracle(run, prompt_ids[g], row, rewards_of[g], reward)
            oracles.append(oracle)
            per_trace.append(_trace_row(row, oracle, records[g], text, run.methods, g, len(row["steps"]) >= least))
            dv = oracle.dv()
            labels.append(np.concatenate([np.full(b - a, dv[k]) for k, (a, b) in enumerate(row["steps"])]))
            advantages.append(row["advantage"])
            for m in run.methods:
                credit_rows[m].append(_floats(row["token_advantages"][m]))
        if labels:  # a group none of whose traces has a label is not a unit of credit agreement
            per_group.append({"group": g, "rewards": rewards[g], "traces": len(labels),
                              **credit_metrics(credit_rows, advantages, labels)})
    bar.close()
    return _report(run, records, chosen, rewards, per_trace, per_group, oracles, skipped)


def _trace_row(row: dict, oracle: AdvantageTrace, record: dict, text: str, methods, group: int,
               family: bool) -> dict:
    """A labelled trace's row: its reward, advantage, V and dV, step lengths, each method's mean
    step weights and each reference's scores (`step_scores`), the within-trace metrics
    (`metrics.trace_metrics`), seconds, the label's halves, and on the arithmetic
    world the positive control; `family`: whether the within-trace figures read it."""
    dv = oracle.dv()
    lengths = [b - a for a, b in row["steps"]]
    scores = {m: step_weights(row, m) for m in methods}
    scores[EARLIEST] = -np.arange(len(dv), dtype=np.float64)
    scores[LONGEST] = np.asarray(lengths, dtype=np.float64)
    out = {"group": group, "family": family, "reward": oracle.reward, "advantage": row["advantage"],
           "values": oracle.values().tolist(), "dv": dv.tolist(), "step_tokens": lengths,
           "step_scores": {m: s.tolist() for m, s in scores.items()},
           "metrics": trace_metrics(scores, dv, row["advantage"], np.asarray(lengths)), "seconds": row["seconds"]}
    if min((len(r) for r in oracle.rewards), default=0) >= 2:  # the label's halves: its reliability recomputes
        out["dv_halves"] = [half.tolist() for half in oracle.halves()]
    problem = record.get("problem")
    if problem is not None and hasattr(problem, "oracle"):
        world = problem.oracle(text)
        if hasattr(world, "chain"):
            out["control"] = control_recall(dv, row["step_chars"], world)
    return out


def summarise(per_trace: list[dict], per_group: list[dict], methods: list[str]) -> tuple[dict, dict, dict]:
    """(methods, references, GRPO's own credit correlation) from the rows: per method and
    metric `estimate` over the family's traces (Holm across the methods; each reference a
    family of one), the `partial` coefficients per target, credit agreement and correlation
    over the groups (with their count, `groups`), seconds per trace."""
    family = [t for t in per_trace if t.get("family", True)]

    def column(name, metric):
        return [t["metrics"][name][metric] for t in family]

    summary = {m: {} for m in methods}
    reference = {r: {} for r in REFERENCES}
    for metric in TRACE_METRICS:
        for name, row in estimate({m: column(m, metric) for m in methods}).items():
            summary[name][metric] = row
        for r in REFERENCES:
            reference[r][metric] = estimate({r: column(r, metric)})[r]
    for target in TARGETS:
        for name, row in partials(family, methods, target).items():
            summary[name].setdefault("partial", {})[target] = row
        for r in REFERENCES:
            reference[r].setdefault("partial", {})[target] = partials(family, [r], target)[r]
        for row in (*summary.values(), *reference.values()):
            row[target]["pooling"] = POOLING
    for metric in GROUP_METRICS:
        for name, row in estimate({m: [g[m][metric] for g in per_group] for m in methods},
                                  bounds=(-2.0, 2.0) if metric == "credit_agreement" else CORRELATION).items():
            summary[name][metric] = {**row, "groups": row["n"]}
    for m in methods:
        seconds = [t["seconds"].get(m) for t in family]
        summary[m]["seconds_per_trace"] = float(np.mean(seconds)) if seconds and None not in seconds else None
    grpo = estimate({GRPO: [g[GRPO]["credit_correlation"] for g in per_group]})[GRPO]
    return summary, reference, {**grpo, "groups": grpo["n"]}


def _report(run: AdvantageRun, records, chosen, rewards, per_trace, per_group, oracles, skipped) -> AdvantageReport:
    summary, reference, grpo = summarise(per_trace, per_group, run.methods)
    family = [t for t in per_trace if t["family"]]
    controls = [t["control"] for t in family if "control" in t]
    # Each set's recall, a random ranking's expectation and their paired difference per trace
    # (the control passes when that gain's interval is above 0).
    control = {**estimate({k: [c[k] for c in controls] for k in ("chain", "random_chain", "direct", "random_direct")},
                          bounds=(0.0, 1.0)),
               **estimate({f"{k}_gain": [c[k] - c[f"random_{k}"] for c in controls] for k in ("chain", "direct")})
               } if controls else {}
    made = sum(run.oracle_seconds.values())
    oracle = {**run.settings.record(), "boundaries": sum(len(o.rewards) for o in oracles),
              "seconds_per_trace": made / len(oracles) if oracles else None,
              "mean_abs_dv": float(np.mean([np.abs(o.dv()).mean() for o in oracles])) if oracles else None}
    mixed = sum(len(set(rewards[g])) > 1 for g in chosen)
    return AdvantageReport(
        methods=summary, reference=reference, grpo=grpo, ceiling=label_ceiling(family),
        reliability=split_half(oracles) if run.settings.n >= 2 else {"r": None, "spearman_brown": None},
        positive_control=control, oracle=oracle, n=len(chosen) * run.size, n_scored=len(family),
        n_labelled=len(per_trace),
        groups={"size": run.size, "analysed": len(chosen), "mixed": mixed, "credit": len(per_group),
                "credit_defined": grpo["n"], "candidates": len(records)},
        skipped=skipped, cache=run.cache.counts, per_trace=per_trace, per_group=per_group)
