"""`oar recall intervention`: the advantage oracle's positive control, one that makes a step
matter. The advantage oracle labels a step by how much writing it moved V, the expected reward
of the policy's continuations; whether that label can see a step that matters is tested here by
making one matter.

A site is an intermediate step of a trace that writes a number: the trace is cut after the step
and the step's number is corrupted (+`--by`, 1). V is estimated from N continuations of the
intact prefix and of the corrupted one (`advantage_oracle.prefix_rewards`, the oracle's own
sampler), and the site's label is the drop dV = V(intact) - V(corrupted). A `chain` site's
number lies on the answer's dependency path: corrupting it should move V. A `distractor`
site's number is one the answer never uses: corrupting it should not. Or, with `--negative
placebo`, every chain site's intact prefix is estimated a second time from other seeds, and its
|V - V'| is the negative: the oracle's own noise at that site (for a world or a model whose
traces hold no distractor steps).

- On the arithmetic world (`--preset`, default `default`) the trace is the problem's reference
  solution (always right) and a site is each written step `name=a op b=result` (`world.
  shift_result` corrupts the result); chain and distractor come from the world's oracle.
- On `--data` (wordworld:<preset> or a JSONL of questions and gold answers) the trace is the
  model's own greedy answer, kept only when it is right (V has something to lose); a site is
  each step but the last (`inputs.steps`) whose last number the value oracle marks (a word
  problem's quantities) or, without a word problem, any number: chain when it names a quantity
  on the path (direct, upstream, or the answer), distractor when it names a distractor.

Reported: `auc`, the probability that a chain site's |dV| exceeds a negative's (ties half),
pooled over every site, with a 95% percentile bootstrap over traces (`stats.bootstrap_index`:
the sites of a trace move together); the oracle passes when its low end is above 0.5.
`drop`: the mean dV of each kind of site with the same bootstrap. Too few traces (below
`stats.MIN_UNITS`) are never read as a pass. Resumable through `--cf-cache` (the answers and
every prefix's rewards, `OracleCache`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..commands import MAX_COUNT, option
from ..defaults import PROBE
from ..methods.knobs import KNOBS
from .base import register_instrument
from .graded import SampledRecall, sampled_records

INTERVENTION_GROUP = "the intervention control"
NEGATIVES = ("distractor", "placebo")
KINDS = ("chain", "distractor", "placebo")


@dataclass(frozen=True, kw_only=True)
class InterventionRecall(SampledRecall):
    """`oar recall intervention`: the advantage oracle's positive control: corrupt one number of
    an intermediate step and estimate V with and without it; the AUC of |dV| for chain against
    distractor (or placebo) sites, and the mean V drop of each."""

    methods: tuple[str, ...] | None = option(None, flag=None)  # it scores no method
    probe: str = option(PROBE, flag=None)
    preset: str | None = option("default", "world preset of the held-out problems when --data is not given "
                                           "(their reference solutions are the traces)")
    continuations: int = option(32, "continuations sampled per side of a site (V's denominator)",
                                group=INTERVENTION_GROUP, bounds=(1, MAX_COUNT))
    temperature: float = option(1.0, "the policy's sampling temperature of the continuations",
                                group=INTERVENTION_GROUP, bounds=(0.0, 100.0))
    by: int = option(1, "what a corruption adds to the step's number", group=INTERVENTION_GROUP,
                     bounds=(1, 1000))
    negative: str = option("distractor", "the sites a chain site's |dV| is ranked against: distractor steps, or "
                                         "placebo (the same chain prefix estimated again from other seeds: the "
                                         "oracle's own noise)", choices=NEGATIVES, group=INTERVENTION_GROUP)
    max_new_tokens: int | None = option(None, "longest answer the model writes to a --data question (default: "
                                              "the model's catalogue answering length)", group=INTERVENTION_GROUP,
                                        bounds=(1, MAX_COUNT))
    cf_cache: str | None = option(None, "JSONL cache of the model's answers and every prefix's continuation "
                                        "rewards: a rerun reads back what it holds", group=INTERVENTION_GROUP)

    @property
    def oracle(self):
        """The advantage oracle's `AdvantageSettings` that estimate V: --continuations, --temperature, --seed."""
        from .advantage.oracle import AdvantageSettings

        return AdvantageSettings(n=self.continuations, temperature=self.temperature, seed=self.seed)


@dataclass(frozen=True)
class Site:
    """One intervention: trace `trace`'s step `step` of kind `kind`, the response cut after it
    (`intact`) and the same with the step's number corrupted (`corrupt`)."""

    trace: int
    step: int
    kind: str
    intact: str
    corrupt: str


def world_sites(problem, trace: int, by: int = 1) -> list[Site]:
    """The sites of an arithmetic-world problem's reference solution: every written step on the
    answer's path (chain) or off it (distractor), its result shifted by `by`."""
    from .steps.recall import overlaps
    from ..world.oracle import STEP_RE, shift_result

    text, oracle = problem.solution, problem.oracle(problem.solution)
    out = []
    for k, match in enumerate(STEP_RE.finditer(text)):
        span = match.span()
        kind = "chain" if overlaps(span, oracle.chain) else "distractor" if overlaps(span, oracle.distractor) else None
        if kind:
            out.append(Site(trace, k, kind, text[:span[1]], text[:span[0]] + shift_result(match.group(0), by)))
    return out


def trace_sites(text: str, trace: int, problem=None, by: int = 1) -> list[Site]:
    """The sites of a model's own trace: every step but the last (`inputs.steps`, auto unit)
    whose last number (`world.find_numbers`: digits or words) names a quantity (a word problem's
    value oracle: chain on the path or the answer, distractor off it) or, without a word
    problem, whose last number is a whole number (chain); the number written `by` more."""
    from ..inputs.steps import resolve_unit, step_spans
    from ..world.value_oracle import find_numbers, value_oracle

    kinds = {}
    if problem is not None:
        found = value_oracle(problem, text)
        for name, kind in (("direct", "chain"), ("upstream", "chain"), ("answer", "chain"), ("distractor", "distractor")):
            kinds.update({span: kind for span in getattr(found, name)})
    out = []
    for k, (a, b) in enumerate(step_spans(text, resolve_unit(text))[:-1]):
        numbers = [m for m in find_numbers(text[:b]) if m.start >= a and m.value == int(m.value)]
        if problem is not None:
            numbers = [m for m in numbers if (m.start, m.end) in kinds]
        if not numbers:
            continue
        last = numbers[-1]
        kind = kinds.get((last.start, last.end), "chain")
        out.append(Site(trace, k, kind, text[:b], text[:last.start] + str(int(last.value) + by) + text[last.end:b]))
    return out


def site_values(model, tokenizer, prompt_ids: list[int], trace: str, sites: list[Site], reward_of, store,
                placebo=None) -> list[dict]:
    """Per site of `trace` (its whole text) {"trace", "step", "kind", "intact", "corrupt", "drop"}
    (V of the intact prefix, of the corrupted one, their difference), V estimated with the
    continuations of `store` (`advantage.oracle.Boundaries`: the oracle's settings, where the
    rewards are kept), and with a second store `placebo` the same intact prefix's V from that
    store's seeds ("placebo": its difference from the first). A continuation may write the rest
    of the trace plus the oracle's margin; every prefix of the trace's sites decodes together
    (`advantage.oracle.prefix_rewards`)."""
    from .advantage.oracle import prefix_rewards

    texts = [t for s in sites for t in (s.intact, s.corrupt)]
    heads = [tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    whole = len(tokenizer(trace, add_special_tokens=False).input_ids)
    budgets = [max(whole - len(h), 1) + store.settings.margin for h in heads]

    def graded(i: int, tail: list[int]) -> float:
        return reward_of(tokenizer.decode(heads[i] + tail, skip_special_tokens=True))

    prefixes = [prompt_ids + h for h in heads]
    rewards, _ = prefix_rewards(model, tokenizer, prefixes, budgets, graded, store)
    again = prefix_rewards(model, tokenizer, prefixes[0::2], budgets[0::2], lambda i, t: graded(2 * i, t),
                           placebo)[0] if placebo is not None else None
    out = []
    for j, site in enumerate(sites):
        v, w = float(np.mean(rewards[2 * j])), float(np.mean(rewards[2 * j + 1]))
        row = {"trace": site.trace, "step": site.step, "kind": site.kind, "intact": v, "corrupt": w, "drop": v - w}
        if again is not None:
            row["placebo"] = v - float(np.mean(again[j]))
        out.append(row)
    return out


def pooled_auc(rows: list[dict], negative: str, n_boot: int = 2000, seed: int = 0) -> dict:
    """The probability that a chain site's |drop| exceeds a negative's (ties half: `stats.
    auc_or_none`), pooled over every site, with a 95% percentile bootstrap over traces (a
    trace's sites resampled together): {"mean", "low", "high", "negative", "chain", "negatives"
    (sites), "traces", "too_few", "passes" (low above 0.5 over enough traces)}."""
    from ..analysis.stats import auc_or_none, bootstrap_index, too_few

    def negatives(r: dict) -> list[float]:
        if negative == "placebo":
            return [abs(r["placebo"])] if r["kind"] == "chain" and "placebo" in r else []
        return [abs(r["drop"])] if r["kind"] == "distractor" else []

    def sides(chosen: list[list[dict]]) -> tuple[np.ndarray, np.ndarray]:
        chain = [abs(r["drop"]) for rs in chosen for r in rs if r["kind"] == "chain"]
        other = [v for rs in chosen for r in rs for v in negatives(r)]
        return np.asarray(chain, dtype=np.float64), np.asarray(other, dtype=np.float64)

    def auc(chosen) -> float | None:
        chain, other = sides(chosen)
        scores = np.concatenate([chain, other])
        return auc_or_none(scores, np.arange(scores.size) < chain.size, np.arange(scores.size) >= chain.size)

    traces = sorted({r["trace"] for r in rows})
    by_trace = [[r for r in rows if r["trace"] == t] for t in traces]
    chain, other = sides(by_trace)
    mean = auc(by_trace)
    boots = [auc([by_trace[i] for i in index]) for index in bootstrap_index(len(by_trace), n_boot, seed)] \
        if by_trace else []
    boots = np.array([b for b in boots if b is not None], dtype=np.float64)
    low, high = (np.quantile(boots, [0.025, 0.975]).tolist() if boots.size else (None, None))
    few = too_few(len(traces))
    return {"mean": mean, "low": low, "high": high, "negative": negative, "chain": int(chain.size),
            "negatives": int(other.size), "traces": len(traces), "too_few": few,
            "passes": bool(mean is not None and low is not None and low > 0.5 and not few)}


def mean_drops(rows: list[dict], n_boot: int = 2000, seed: int = 0) -> dict:
    """Per kind of site (and the placebo where estimated) the mean dV with a 95% percentile
    bootstrap over traces: {kind: {"mean", "low", "high", "sites", "traces"}}."""
    from ..analysis.stats import bootstrap_index

    columns = {kind: [(r["trace"], r["drop"]) for r in rows if r["kind"] == kind] for kind in ("chain", "distractor")}
    columns["placebo"] = [(r["trace"], r["placebo"]) for r in rows if "placebo" in r]
    out = {}
    for kind, pairs in columns.items():
        traces = sorted({t for t, _ in pairs})
        sums = np.array([[sum(v for u, v in pairs if u == t), sum(1 for u, _ in pairs if u == t)] for t in traces],
                        dtype=np.float64).reshape(-1, 2)
        if not traces:
            out[kind] = {"mean": None, "low": None, "high": None, "sites": 0, "traces": 0}
            continue
        picked = sums[bootstrap_index(len(traces), n_boot, seed)]  # (n_boot, traces, 2)
        boots = picked[..., 0].sum(1) / picked[..., 1].sum(1)
        low, high = np.quantile(boots, [0.025, 0.975]).tolist()
        out[kind] = {"mean": float(sums[:, 0].sum() / sums[:, 1].sum()), "low": low, "high": high,
                     "sites": len(pairs), "traces": len(traces)}
    return out


@dataclass
class InterventionReport:
    """What `oar recall intervention --json` prints: the AUC and the drops, the counts, the
    oracle's settings and work, the cache's counts and every site's row (each figure recomputes
    from `per_site`)."""

    auc: dict
    drop: dict
    n: int
    traces: int
    skipped: dict
    oracle: dict
    cache: dict
    per_site: list = field(default_factory=list)

    def as_dict(self) -> dict:
        from dataclasses import asdict

        from ..records.record import json_safe

        return json_safe(asdict(self))


def _traces(settings: InterventionRecall, records: list[dict], model, tokenizer, cache) -> tuple[list, dict]:
    """Per record (its prompt ids, its trace, its sites, its reward function), and the counts of
    records left out: the arithmetic world's reference solutions, or the model's own greedy
    answers to --data, kept when right and holding a site."""
    from .advantage.recall import reward_function
    from .data.recall import encode_prompt_ids, record_prompt
    from .answers import greedy_answers
    from .base import Run
    from ..models.catalogue import answering

    prompts = [encode_prompt_ids(tokenizer, record_prompt(r, tokenizer)) for r in records]
    world = settings.data is None
    if world:
        texts = [r["problem"].solution for r in records]
    else:
        run = Run(model, tokenizer, cache, progress=settings.progress)
        texts = greedy_answers(run, prompts, settings.max_new_tokens or answering(settings.model)[0].max_new_tokens)
    out, skipped = [], {"wrong": 0, "no_sites": 0}
    for i, (record, ids, text) in enumerate(zip(records, prompts, texts)):
        reward_of = reward_function(record)
        if not world and reward_of(text) < 1.0:
            skipped["wrong"] += 1
            continue
        problem = record.get("problem") or record.get("word_problem")
        sites = world_sites(problem, i, settings.by) if world else trace_sites(text, i, problem, settings.by)
        if not sites:
            skipped["no_sites"] += 1
            continue
        out.append((ids, text, sites, reward_of))
    return out, skipped


@register_instrument("intervention", InterventionRecall, "the advantage oracle's positive control: corrupt a step's "
                     "number, AUC of |dV| for chain against distractor steps", own_knobs=tuple(KNOBS))
def run_intervention(settings: InterventionRecall) -> int:
    """The intervention control (module docstring); a `--shard` takes its share of the records."""
    import time

    from tqdm.auto import tqdm

    from .advantage.recall import CACHE_CHECKS, CachedBoundaries
    from ..models.catalogue import bundled
    from ..models import load_model
    from ..records.settings_record import model_dtype, model_identity
    from .cache import OracleCache
    from .data import open_cache

    oracle = settings.oracle
    records = sampled_records(settings, settings.n, world_problems=True)
    records = settings.shard.take(records) if settings.shard else records
    cache = open_cache(settings, "intervention", lambda path, **kw: OracleCache(path, checks=CACHE_CHECKS, **kw))
    if bundled(settings.model):
        import torch

        torch.set_num_threads(1)  # a 1.1M-parameter model's decode steps are too small to share (advantage's)
    model, tokenizer = load_model(settings.model, device=settings.device, dtype=settings.dtype)
    traces, skipped = _traces(settings, records, model, tokenizer, cache)
    base = {"model": model_identity(model), "dtype": model_dtype(model), "oracle": "intervention", **oracle.record()}
    seconds: dict = {}
    store = CachedBoundaries(cache, base, oracle, seconds)
    placebo = CachedBoundaries(cache, {**base, "replica": 1}, oracle, seconds) if settings.negative == "placebo" else None
    rows, start = [], time.perf_counter()
    for ids, text, sites, reward_of in tqdm(traces, desc="intervention", disable=not settings.progress):
        rows += site_values(model, tokenizer, ids, text, sites, reward_of, store, placebo)
    report = InterventionReport(
        auc=pooled_auc(rows, settings.negative, seed=settings.seed), drop=mean_drops(rows, seed=settings.seed),
        n=len(records), traces=len(traces), skipped=skipped,
        oracle={**oracle.record(), "by": settings.by, "negative": settings.negative, "sites": len(rows),
                "seconds_made": sum(seconds.values()), "seconds": time.perf_counter() - start},
        cache=cache.counts, per_site=rows)
    if settings.json:
        print(json.dumps({**report.as_dict(), "intervention": intervention_record(settings),
                          "reading": reading(report, settings)}, allow_nan=False))
        return 0
    print("\n".join(text_report(report, settings)))
    return 0


def intervention_record(settings: InterventionRecall) -> dict:
    """The settings record of the run: the model, dtype, seed and the control's own settings."""
    from ..records.settings_record import model_identity

    own = ("data", "preset", "n", "seed", "continuations", "temperature", "by", "negative", "max_new_tokens")
    return {"model": model_identity(settings.model), "dtype": settings.dtype,
            **{name: getattr(settings, name) for name in own}}


def _cell(row: dict) -> str:
    if row.get("mean") is None:
        return "n/a"
    return f"{row['mean']:+.3f} [{row['low']:+.3f},{row['high']:+.3f}]" if row.get("low") is not None \
        else f"{row['mean']:+.3f}"


def text_report(report: InterventionReport, settings: InterventionRecall) -> list[str]:
    """The text form: counts, the oracle, the AUC, the drops and the reading."""
    o, a = report.oracle, report.auc
    lines = [f"traces {report.traces} of {report.n} (left out: {report.skipped['wrong']} wrong answers, "
             f"{report.skipped['no_sites']} without a site); sites {o['sites']}",
             f"oracle: {o['n']} continuations per side at temperature {o['temperature']}, corruption +{o['by']}, "
             f"{o['seconds_made']:.1f} s of decoding when made",
             f"AUC of |dV|, chain ({a['chain']} sites) against {a['negative']} ({a['negatives']}): {_cell(a)} "
             f"over {a['traces']} traces (0.5: no better than chance)"]
    for kind, row in report.drop.items():
        if row["sites"]:
            lines.append(f"mean V drop, {kind} sites ({row['sites']} in {row['traces']} traces): {_cell(row)}")
    return lines + reading(report, settings)


def reading(report: InterventionReport, settings: InterventionRecall) -> list[str]:
    """The result in words: whether the oracle passes, how sure, what to run next (this run's
    command, on twice the questions and continuations)."""
    from ..analysis.stats import MIN_UNITS
    from ..commands import flags_line

    a, chain = report.auc, report.drop["chain"]
    negative = report.drop["placebo" if a["negative"] == "placebo" else "distractor"]
    if a["mean"] is None:
        said = (f"The control cannot be read: it needs chain and {a['negative']} sites ({a['chain']} and "
                f"{a['negatives']} here).")
    elif a["too_few"]:
        said = (f"Too few to read: {a['traces']} traces, fewer than the {MIN_UNITS} a reading needs "
                f"(AUC {a['mean']:.2f}).")
    elif a["passes"]:
        said = (f"The oracle passes: |dV| ranks a step that was made to matter above a {a['negative']} one with "
                f"AUC {_cell(a)}, the interval above 0.5; corrupting a chain step drops V by {_cell(chain)}, a "
                f"{a['negative']} by {_cell(negative)}.")
    else:
        said = (f"The oracle does not pass: the AUC's interval {_cell(a)} reaches 0.5, so |dV| does not "
                f"resolve a step made to matter from a {a['negative']} one at {report.oracle['n']} continuations "
                f"(chain drop {_cell(chain)}, {a['negative']} {_cell(negative)}).")
    source = ("data",) if settings.data else ("preset",)
    more = "oar recall intervention " + flags_line(
        settings, ("model", *source, "n", "seed", "continuations", "temperature", "by", "negative", "max_new_tokens"),
        n=max(2 * report.n, 40), continuations=2 * report.oracle["n"])
    return ["Reading:", f"  {said}", f"Next: {more} (narrower intervals)"]
