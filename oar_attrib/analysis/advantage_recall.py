"""Advantage recall: do a method's step scores follow the policy's own advantage, and does its
reshaping move GRPO's training signal towards it (`advantage_oracle`)?

Traces come in groups, as GRPO sees them: G answers per problem sampled at the policy's
temperature, graded, each given its group-normalised advantage A_i (`rollouts.group_advantages`);
groups whose answers are not all equally right are taken first (only they carry a signal).
Each trace's steps are labelled by the oracle's dV_k, and per method:

- `spearman`: within a trace, the Spearman correlation of the method's step scores
  (`ranking_scores` pooled per step, `VIEW_STEP_POOL`) with |dV|; `partial_spearman` the same
  with the step index held fixed, `position_spearman` the scores' correlation with earliness.
  `earliest_first` (the step index, earlier first) is scored beside the methods as the
  reference a method must beat; `longest_first` (the step's length in tokens) as a second one,
  outside the Holm family: a step score pooled by its tokens' max grows with the step's length
  (the random method's does: E[max of n uniforms] = n / (n + 1)), so a method that follows
  |dV| only as length does is no better than it. A trace whose scores or |dV| are constant has no Spearman: it
  is counted apart (`undefined`), never as 0.
- `credit_agreement`: per group (a batch of GRPO), over every step token of its traces, the
  Pearson correlation of the reshaped token advantage A_i * w_t with its step's dV, minus that
  of GRPO's own A_i (positive: the reshaping moves the training signal towards the advantage);
  `credit_correlation` the first correlation alone. Undefined for a group whose A are all 0.

Each is summarised over traces (groups for credit) by `estimate`: mean, 95% interval, a p-value
against 0, Holm-adjusted across the methods. The label's own reliability (`split_half`) says
how much agreement is possible; on the arithmetic world the positive control asks whether |dV|
ranks the world's causal steps (`step_recall.step_sets`: `chain`, every step on the answer's
dependency path, and `direct`) first: their recall@|set| among the steps ranked by |dV|.

Resumable in one JSON Lines cache (`graded_recall.GradedCache`): each group's answers, each
group's attribution (steps, step scores, token advantages, seconds) and each boundary's
continuation rewards are appended as soon as they are made, keyed by the model's identity and
everything else that made them; a rerun with the same cache calls the model for nothing done.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..attribution import analysis_params, attribute
from ..defaults import PROBE, VIEW_STEP_POOL
from ..errors import InputError
from ..inputs.grading import grade
from ..inputs.steps import pool_steps
from ..methods import available_methods, ranking_scores
from ..records.record import json_safe
from ..records.settings_record import model_dtype, model_identity, settings_record
from ..rollouts import decode_answers, group_advantages
from ..weights.metrics import partial_spearman, random_recall, recall_at_k, spearman
from ..weights.settings import ReshapeSettings
from .advantage_oracle import AdvantageSettings, AdvantageTrace, advantage_oracle, prefix_seed, split_half
from .counterfactual_recall import encode_prompt_ids, record_prompt
from .graded_recall import EARLIEST, GradedCache, cache_key
from .sets import ADVANTAGE
from .stats import count_undefined, holm, t_interval, t_test_p
from .step_recall import overlaps

LONGEST = "longest_first"  # the reference ranking by step length (module docstring)
TRACE_METRICS = ("spearman", "partial_spearman", "position_spearman")
GROUP_METRICS = ("credit_agreement", "credit_correlation")
GRPO = "grpo"  # the credit correlation of A_i itself


def estimate(columns: dict[str, list[float]]) -> dict[str, dict]:
    """{name: {"mean", "low", "high" (95% t-interval, `stats.t_interval`), "p" (two-sided
    one-sample t-test against 0, `stats.t_test_p`), "p_holm" (`stats.holm` over the names with
    a p), "n" (finite values), "undefined" (NaN values, `stats.count_undefined`)}}: the
    analysis statistics' owner applied per column, nothing computed here. The interval is the
    t-test's own, so it excludes 0 exactly when p < 0.05: at a few traces or groups a
    percentile bootstrap is far too narrow (2 groups gave [+0.202, +0.284] at p 0.11)."""
    out = {}
    for name, values in columns.items():
        x = np.asarray(values, dtype=np.float64)
        interval = t_interval(x)
        out[name] = {"mean": interval["mean"], "low": interval["low"], "high": interval["high"],
                     "p": t_test_p(x), "p_holm": None, "n": interval["n"], "undefined": count_undefined(x)}
    adjusted, _ = holm({name: row["p"] for name, row in out.items()})
    for name, value in adjusted.items():
        out[name]["p_holm"] = value
    return json_safe(out)


def trace_metrics(step_scores: dict[str, np.ndarray], dv: np.ndarray) -> dict[str, dict]:
    """{method: {metric: value of TRACE_METRICS}} of one trace: its (S,) step scores against
    |dV| (module docstring); NaN where undefined."""
    target, earliness = np.abs(dv), -np.arange(len(dv), dtype=np.float64)
    out = {}
    for method, s in step_scores.items():
        ok = len(dv) >= 2 and np.isfinite(s).all()
        nan = float("nan")
        out[method] = {"spearman": spearman(s, target) if ok else nan,
                       "partial_spearman": partial_spearman(s, target, earliness) if ok else nan,
                       "position_spearman": spearman(s, earliness) if ok else nan}
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def credit_metrics(token_advantages: dict[str, list[np.ndarray]], advantages: list[float],
                   labels: list[np.ndarray]) -> dict[str, dict]:
    """One group's credit agreement per method (module docstring). token_advantages: {method:
    per trace its (n_i,) A_i * w_t over its step tokens}; advantages: the traces' A_i; labels:
    per trace the (n_i,) dV of each step token's step."""
    y = np.concatenate(labels) if labels else np.zeros(0)
    grpo = np.concatenate([np.full(len(l), a) for a, l in zip(advantages, labels)]) if labels else y
    base = _pearson(grpo, y)
    out = {GRPO: {"credit_correlation": base, "credit_agreement": 0.0 if np.isfinite(base) else base}}
    for method, rows in token_advantages.items():
        r = _pearson(np.concatenate(rows), y) if rows else float("nan")
        out[method] = {"credit_correlation": r, "credit_agreement": r - base}
    return out


def _numbers(values) -> bool:
    return isinstance(values, list) and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          and math.isfinite(v)) for v in values)


# The advantage oracle's kinds in the shared cache (`GradedCache(checks=...)`): anything else is refused.
CACHE_CHECKS = {
    "attribution": ("a list of traces, each with token ids, steps and step scores",
                    lambda e: isinstance(e.get("traces"), list) and all(
                        isinstance(t, dict) and isinstance(t.get("token_ids"), list) and isinstance(t.get("steps"), list)
                        and isinstance(t.get("step_scores"), dict) and isinstance(t.get("token_advantages"), dict)
                        and all(_numbers(v) for v in t["step_scores"].values())
                        and all(_numbers(v) for v in t["token_advantages"].values()) for t in e["traces"])),
    "prefix": ("a non-empty list of finite rewards", lambda e: _numbers(e.get("rewards")) and bool(e["rewards"])
               and None not in e["rewards"]),
}


@dataclass
class _Run:
    model: object
    tokenizer: object
    cache: GradedCache
    settings: AdvantageSettings
    progress: bool
    oracle_seconds: dict = field(default_factory=dict)  # per prefix key: seconds when made

    def record(self, **extra) -> dict:
        return {"model": model_identity(self.model), "dtype": model_dtype(self.model), **extra}


def advantage_cache(path: str | Path | None) -> GradedCache:
    """The advantage oracle's cache at `path` (`--cf-cache`), read and checked now (before a
    model loads)."""
    return GradedCache(path, checks=CACHE_CHECKS)


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


def _group(run: _Run, ids: list[int], size: int, max_new_tokens: int) -> list[str]:
    """One problem's `size` answers sampled at the policy's temperature (cached)."""
    record = run.record(answer="sampled", samples=size, temperature=run.settings.temperature,
                        seed=run.settings.seed, max_new_tokens=max_new_tokens)
    key = cache_key(record, ids)
    hit = run.cache.get("group", key)
    if hit is None:
        torch.manual_seed(prefix_seed(key))
        answers = decode_answers(run.model, run.tokenizer, [(ids, None)], samples=size, greedy=False,
                                 temperature=run.settings.temperature, max_new_tokens=max_new_tokens)[0]
        hit = run.cache.put("group", key, {"texts": [text for text, _, _ in answers]})
    return hit["texts"]


def _sample_groups(run: _Run, prompt_ids: list, rewards_of: list, wanted: int, size: int, max_new_tokens: int,
                   progress: bool) -> tuple[list[list[str]], list[list[float]]]:
    """Each candidate problem's group of `size` answers and their rewards, sampled in order until
    `wanted` groups mix right and wrong answers (only those carry GRPO's signal) or the
    candidates run out; `choose_groups` then takes the same groups it would from all of them."""
    texts, rewards = [], []
    for ids, reward_of in tqdm(list(zip(prompt_ids, rewards_of)), desc="groups", disable=not progress):
        texts.append(_group(run, ids, size, max_new_tokens))
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


def _attribution(run: _Run, prompt, ids, texts, rewards, methods, reshape, params) -> dict:
    """One group's attribution (cached): per trace its token ids, steps, step scores per method,
    token advantages over step tokens per method, and seconds per method."""
    record = settings_record(reshape, methods, analysis_params(methods, params), model=run.model)
    key = cache_key(record, ids, texts, rewards)
    hit = run.cache.get("attribution", key)
    if hit is not None:
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
                     "token_advantages": {m: _finite([trace.token_advantages[m][t] for t in tokens]) for m in methods},
                     "seconds": {m: trace.timings.get(m) for m in methods}})
    return run.cache.put("attribution", key, {"traces": rows})


def _finite(values) -> list:
    return [float(v) if np.isfinite(v) else None for v in values]


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _oracle(run: _Run, ids, row: dict, reward_of, reward: float) -> AdvantageTrace:
    record = run.record(oracle=ADVANTAGE, **dataclasses.asdict(run.settings))

    def lookup(prefix, compute):
        key = cache_key(record, prefix)
        hit = run.cache.get("prefix", key)
        if hit is None:
            start = time.perf_counter()
            rewards = compute(prefix_seed(key))
            hit = run.cache.put("prefix", key, {"rewards": rewards, "seconds": time.perf_counter() - start})
        run.oracle_seconds[key] = hit.get("seconds", 0.0)
        return hit["rewards"]

    steps = [tuple(s) for s in row["steps"]]
    return advantage_oracle(run.model, run.tokenizer, ids, row["token_ids"], steps, reward_of, reward,
                            run.settings, lookup=lookup)


def control_recall(dv: np.ndarray, step_chars: list, oracle) -> dict[str, float]:
    """The positive control of one arithmetic-world trace: recall@|set| of the `chain` and
    `direct` steps (`step_recall.step_sets`'s overlap rule) among its steps ranked by |dV|,
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
    """What `oar recall advantage --json` prints (`as_dict`), the per-trace rows kept."""

    methods: dict
    reference: dict
    grpo: dict
    reliability: dict
    positive_control: dict
    oracle: dict
    n: int
    n_scored: int
    groups: dict
    skipped: dict
    cache: dict
    per_trace: list = field(default_factory=list)
    per_group: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return json_safe(dataclasses.asdict(self))


def advantage_recall(model, tokenizer, records: list[dict], *, n: int, methods=None, probe: str = PROBE,
                     settings: AdvantageSettings = AdvantageSettings(), group_size: int = 4,
                     max_new_tokens: int = 256, cache: str | Path | GradedCache | None = None,
                     method_params: dict | None = None, min_steps: int = 1,
                     progress: bool = False) -> AdvantageReport:
    """Advantage recall of every method on about `n` traces (whole groups of `group_size`)
    answering `records` (candidates: a question or prompt and its gold `answer`, or an
    arithmetic-world `problem`), module docstring. A trace with fewer than `min_steps` steps
    keeps its place in its group's advantages but gets no oracle (counted in `skipped`)."""
    if group_size < 2:
        raise InputError(f"group_size={group_size}: GRPO's advantage needs groups of at least 2 answers")
    methods = list(methods or available_methods())
    run = _Run(model, tokenizer, cache if isinstance(cache, GradedCache) else advantage_cache(cache),
               settings, progress)
    prompts = [record_prompt(r, tokenizer) for r in records]
    prompt_ids = [encode_prompt_ids(tokenizer, p) for p in prompts]
    rewards_of = [reward_function(r) for r in records]
    texts, rewards = _sample_groups(run, prompt_ids, rewards_of, math.ceil(n / group_size), group_size,
                                    max_new_tokens, progress)
    records = records[:len(texts)]  # the candidates: those sampled
    chosen = choose_groups(rewards, n, group_size)
    reshape = ReshapeSettings(probe=probe, seed=settings.seed)
    per_trace, per_group, oracles, skipped = [], [], [], {"no_steps": 0, "few_steps": 0}
    bar = tqdm(total=len(chosen) * group_size, desc="advantage oracle", disable=not progress)
    for g in chosen:
        rows = _attribution(run, prompts[g], prompt_ids[g], texts[g], rewards[g], methods, reshape,
                            method_params or {})["traces"]
        credit_rows, labels, advantages = {m: [] for m in methods}, [], []
        for row, text, reward in zip(rows, texts[g], rewards[g]):
            bar.update(1)
            if len(row["steps"]) < max(min_steps, 1):
                skipped["no_steps" if not row["steps"] else "few_steps"] += 1
                continue
            oracle = _oracle(run, prompt_ids[g], row, rewards_of[g], reward)
            oracles.append(oracle)
            per_trace.append(_trace_row(row, oracle, records[g], text, methods, g))
            dv = oracle.dv()
            labels.append(np.concatenate([np.full(b - a, dv[k]) for k, (a, b) in enumerate(row["steps"])]))
            advantages.append(row["advantage"])
            for m in methods:
                credit_rows[m].append(_floats(row["token_advantages"][m]))
        if labels:  # a group none of whose traces has enough steps is not a unit of credit agreement
            per_group.append({"group": g, "rewards": rewards[g], **credit_metrics(credit_rows, advantages, labels)})
    bar.close()
    return _report(run, records, methods, chosen, rewards, per_trace, per_group, oracles, skipped, group_size)


def _trace_row(row: dict, oracle: AdvantageTrace, record: dict, text: str, methods, group: int) -> dict:
    dv = oracle.dv()
    scores = {m: _floats(row["step_scores"][m]) for m in methods}
    scores[EARLIEST] = -np.arange(len(dv), dtype=np.float64)
    lengths = [b - a for a, b in row["steps"]]
    scores[LONGEST] = np.asarray(lengths, dtype=np.float64)
    out = {"group": group, "reward": oracle.reward, "values": oracle.values().tolist(), "dv": dv.tolist(),
           "step_tokens": lengths, "step_scores": {m: scores[m].tolist() for m in methods},
           "metrics": trace_metrics(scores, dv), "seconds": row["seconds"]}
    if min((len(r) for r in oracle.rewards), default=0) >= 2:  # the label's halves: its reliability recomputes
        out["dv_halves"] = [half.tolist() for half in oracle.halves()]
    problem = record.get("problem")
    if problem is not None and hasattr(problem, "oracle"):
        world = problem.oracle(text)
        if hasattr(world, "chain"):
            out["control"] = control_recall(dv, row["step_chars"], world)
    return out


def _report(run: _Run, records, methods, chosen, rewards, per_trace, per_group, oracles, skipped,
            group_size) -> AdvantageReport:
    names = [*methods, EARLIEST]
    summary = {}
    for metric in TRACE_METRICS:
        column = estimate({m: [t["metrics"][m][metric] for t in per_trace] for m in names})
        for m in names:
            summary.setdefault(m, {})[metric] = column[m]
    for metric in GROUP_METRICS:
        column = estimate({m: [g[m][metric] for g in per_group] for m in methods})
        for m in methods:
            summary[m][metric] = column[m]
    for m in methods:
        seconds = [t["seconds"].get(m) for t in per_trace]
        summary[m]["seconds_per_trace"] = float(np.mean(seconds)) if seconds and None not in seconds else None
    reference = {EARLIEST: summary.pop(EARLIEST)}
    # its own family of one: it joined after the methods' (module docstring)
    reference[LONGEST] = {metric: estimate({LONGEST: [t["metrics"][LONGEST][metric] for t in per_trace]})[LONGEST]
                          for metric in TRACE_METRICS}
    grpo = estimate({"credit_correlation": [g[GRPO]["credit_correlation"] for g in per_group]})
    controls = [t["control"] for t in per_trace if "control" in t]
    # Each set's recall, a random ranking's expectation and their paired difference per trace
    # (the control passes when that gain's interval is above 0).
    control = estimate({**{k: [c[k] for c in controls] for k in ("chain", "random_chain", "direct", "random_direct")},
                        **{f"{k}_gain": [c[k] - c[f"random_{k}"] for c in controls] for k in ("chain", "direct")}}
                       ) if controls else {}
    made = sum(run.oracle_seconds.values())
    oracle = {**dataclasses.asdict(run.settings), "boundaries": sum(len(o.rewards) for o in oracles),
              "seconds_per_trace": made / len(oracles) if oracles else None,
              "mean_abs_dv": float(np.mean([np.abs(o.dv()).mean() for o in oracles])) if oracles else None}
    mixed = sum(len(set(rewards[g])) > 1 for g in chosen)
    return AdvantageReport(
        methods=summary, reference=reference, grpo=grpo["credit_correlation"],
        reliability=split_half(oracles) if run.settings.n >= 2 else {"r": None, "spearman_brown": None},
        positive_control=control, oracle=oracle, n=len(chosen) * group_size, n_scored=len(per_trace),
        groups={"size": group_size, "analysed": len(chosen), "mixed": mixed, "candidates": len(records)},
        skipped=skipped, cache=run.cache.counts, per_trace=per_trace, per_group=per_group)
