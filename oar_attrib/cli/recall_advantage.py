"""`oar recall advantage`: every method against the Monte-Carlo advantage oracle
(`analysis.advantage_recall`), its text report ending in a reading in words."""
from __future__ import annotations

import argparse
import json
import math

from .choices import method_params_from
from .recall_settings import DEFAULT_GROUP

CANDIDATES = 6  # candidate problems per group analysed (`advantage_recall` samples only those it needs)


def advantage_records(args: argparse.Namespace, problems: int) -> list[dict]:
    """Candidate problems: `--data`'s records, or held-out arithmetic-world problems (each with
    its `problem`, whose reward grades and whose structural oracle is the positive control)."""
    from ..analysis.counterfactual_recall import data_records
    from ..world import generate_problems
    from .choices import check_servable

    if args.data is not None:
        return data_records(args.data, problems, args.seed)
    check_servable(args.model)
    return [{"prompt": p.prompt, "answer": str(p.answer), "problem": p}
            for p in generate_problems(problems, args.preset or "recall", seed=args.seed, split="test")]


# The reading methods under a second a trace on arith-tiny (measured: entropy, GRAIL, KTAE and
# random under 0.1 s, OAR-P step 0.4 s, OAR-G 0.75 s; token OAR-P, hierarchical OAR-P and IG
# take 1.1-1.9 s). A bundled model's default, so that the quick look takes seconds, not minutes.
CHEAP_METHODS = ("entropy", "grail", "ktae", "oar_g", "oar_p_step", "random")


def default_methods(model: str) -> list[str]:
    """The methods scored when --methods is not given: on a bundled model the cheap reading
    methods (`CHEAP_METHODS`); else every reading method: the registered ones but the
    analysis-only resampling (a second Monte-Carlo oracle, as costly as this one), the grouped
    ones (KTAE) included."""
    from ..methods import available_methods, method_spec

    every = [m for m in available_methods(grouped=True) if not method_spec(m).analysis_only]
    return [m for m in every if m in CHEAP_METHODS] if bundled(model) else every


def bundled(model: str) -> bool:
    """Whether `model` names a model bundled with the package (arith-tiny: 1.1M parameters)."""
    from ..models.catalogue import CATALOGUE

    entry = CATALOGUE.get(str(model))
    return entry is not None and entry.bundled


def run_advantage(args: argparse.Namespace) -> int:
    from ..analysis.advantage_oracle import AdvantageSettings
    from ..analysis.advantage_recall import advantage_cache, advantage_recall
    from ..errors import InputError
    from ..models import load_model
    from ..models.catalogue import answering
    from .choices import budget_params

    size = args.group_samples or DEFAULT_GROUP
    settings = AdvantageSettings(n=args.continuations, temperature=args.temperature, seed=args.seed)
    if size < 2:  # one line `oar recall: error: ...` (`run_command`), as every refusal
        raise InputError(f"--group-samples {size}: GRPO's advantage needs groups of at least 2 answers")
    # Up to CANDIDATES times the groups needed are candidates, sampled in order until enough of
    # them mix right and wrong answers (a model right 15% of the time mixes about half its groups).
    records = advantage_records(args, CANDIDATES * math.ceil(args.n / size))
    cache = advantage_cache(args.cf_cache)  # read and checked before the model loads
    if bundled(args.model):
        # A 1.1M-parameter model's decode steps are too small to share: threads only contend
        # (measured on 2 busy cores: the oracle 8.1 s a trace with the default threads, 0.15 s with one).
        import torch

        torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    report = advantage_recall(
        model, tokenizer, records, n=args.n, methods=args.methods or default_methods(args.model), probe=args.probe,
        settings=settings, group_size=size, max_new_tokens=args.max_new_tokens or answering(args.model)[0].max_new_tokens, cache=cache,
        method_params=method_params_from(args, budget_params(args.max_batch_tokens)),
        min_steps=args.min_steps, progress=not args.no_progress)
    if args.json:
        print(json.dumps(report.as_dict(), allow_nan=False))
        return 0
    print("\n".join(text_report(report)))
    return 0


def _cell(stats: dict | None) -> str:
    if not stats or stats.get("mean") is None:
        return "n/a"
    low, high = stats["low"], stats["high"]
    return f"{stats['mean']:+.3f} [{low:+.3f},{high:+.3f}]" if low is not None else f"{stats['mean']:+.3f}"


def _p(stats: dict, key: str = "p_holm", missing: str = "") -> str:
    from ..analysis.stats import format_p

    return missing if stats.get(key) is None else format_p(stats[key], 3, "")


def text_report(report) -> list[str]:
    """The lines of the text report: settings, the label's reliability, the table, the
    positive control and the reading in words."""
    o, rel = report.oracle, report.reliability
    lines = [f"traces {report.n} in {report.groups['analysed']} groups of {report.groups['size']} "
             f"({report.groups['mixed']} mixing right and wrong); scored {report.n_scored}; "
             f"skipped without steps {report.skipped['no_steps']}, with fewer than asked "
             f"{report.skipped['few_steps']}",
             f"oracle: {o['n']} continuations per boundary at temperature {o['temperature']}, "
             f"{o['boundaries']} boundaries, mean |dV| {o['mean_abs_dv'] or 0:.3f}, "
             f"{o['seconds_per_trace'] or 0:.1f} s per trace (work when made)"]
    if rel.get("r") is None:
        lines.append("label reliability: undefined (too few steps, or a constant half)")
    else:
        lines.append(f"label reliability: split-half r {rel['r']:+.3f}, Spearman-Brown {rel['spearman_brown']:+.3f} "
                     f"over {rel['steps']} steps")
        before = rel.get("before_last") or {}
        lines.append("  without each trace's last step (whose halves share the trace's reward): " + (
            f"r {before['r']:+.3f}, Spearman-Brown {before['spearman_brown']:+.3f} over {before['steps']} steps"
            if before.get("r") is not None else "undefined (too few steps, or a constant half)"))
    heads = ("spearman |dV|", "Holm p", "| position", "credit agreement", "Holm p", "s/trace")
    rows = {**report.methods, **report.reference}
    width = max(len(m) for m in rows)
    lines.append(f"{'method':<{width}} " + " ".join(f"{h:>22}" for h in heads))
    for method, s in rows.items():
        seconds = s.get("seconds_per_trace")
        cells = (_cell(s["spearman"]), _p(s["spearman"]), _cell(s["partial_spearman"]),
                 _cell(s.get("credit_agreement")), _p(s.get("credit_agreement", {})),
                 "" if seconds is None else f"{seconds:.3f}")
        lines.append(f"{method:<{width}} " + " ".join(f"{c:>22}" for c in cells))
    lines.append(f"GRPO's own credit correlation with dV: {_cell(report.grpo)} (credit agreement is a "
                 "method's minus this)")
    control = report.positive_control
    if control:
        lines.append(f"positive control: |dV| recalls the world's causal (chain) steps at {_cell(control['chain'])} "
                     f"against a random ranking's {control['random_chain']['mean']:.3f}, a gain of "
                     f"{_cell(control['chain_gain'])} (p {_p(control['chain_gain'], 'p', 'n/a')}); "
                     f"direct steps {_cell(control['direct'])}, a gain of {_cell(control['direct_gain'])}")
    return lines + reading(report)


def comparisons(report) -> list:
    """Per method two `verdicts.Comparison`s: its Spearman with |dV| against a random ranking's
    0, and its credit agreement (already its correlation minus GRPO's) against GRPO, each
    resolved only where its Holm-adjusted p across the methods is below 0.05."""
    from ..analysis.verdicts import Comparison

    out = []
    for method, s in report.methods.items():
        rank, credit = s["spearman"], s.get("credit_agreement") or {}
        out.append(Comparison(method, "a random ranking", "within-trace Spearman with |dV|", rank["mean"],
                              rank["low"], rank["high"], p_holm=rank.get("p_holm")))
        if method != "random":
            out.append(Comparison(method, "GRPO", "credit agreement with dV", credit.get("mean"),
                                  credit.get("low"), credit.get("high"), p_holm=credit.get("p_holm")))
    return out


def _label_reliability(reliability: dict) -> float | None:
    """The reliability a caveat reads: that of the steps before each trace's last where it is
    defined (the last step's halves agree by construction), else the whole figure."""
    before = (reliability.get("before_last") or {}).get("spearman_brown")
    return before if before is not None else reliability.get("spearman_brown")


def reading(report) -> list[str]:
    """The report in words (`verdicts.reading`): a verdict per method and figure, the caveats
    (few traces, a noisy label, a positive control that does not beat random), what to run next."""
    from ..analysis.advantage_recall import LONGEST
    from ..analysis.recall_reading import STABLE_TRACES
    from ..analysis.verdicts import caveat_few, caveat_reliability, caveats
    from ..analysis.verdicts import reading as in_words

    if not report.methods or report.n_scored == 0:
        return ["Reading: no trace was scored; run with more --n or check the answers' steps."]
    control = report.positive_control or {}
    gain = (control.get("chain_gain") or {}).get("low")
    length = ((report.reference.get(LONGEST) or {}).get("spearman") or {})
    notes = caveats(
        caveat_few(report.n_scored, STABLE_TRACES, "traces"),
        caveat_few(report.groups["analysed"], 10, "groups (credit agreement's units)"),
        caveat_reliability(_label_reliability(report.reliability), 0.7,
                           "label (dV of the steps before the last, split-half)"),
        "the positive control does not rank the world's causal steps above a random ranking's expectation "
        "(the interval of |dV| recall's gain over chance holds 0): read agreement with |dV| with care"
        if gain is not None and gain <= 0 else None,
        f"|dV| follows step length here (longest_first {_cell(length)}): a step score pooled by its tokens' max "
        "grows with the step's length (the random method's does), so compare a method with longest_first, "
        "not only with a random ranking's 0" if (length.get("low") or 0) > 0 else None)
    more = (f"oar recall advantage --model <model> --n {max(2 * report.n, 40)} "
            f"--continuations {max(2 * report.oracle['n'], 16)} (narrower intervals, a more reliable label)")
    return in_words(comparisons(report), notes, more)
