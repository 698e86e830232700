"""`oar recall advantage`'s methods and report (the instrument is `instruments.advantage`):
the default methods, and the text report ending in a reading in words."""
from __future__ import annotations


def default_methods(model: str) -> list[str]:
    """The methods scored when --methods is not given: on a bundled model the cheap reading
    methods (the registry's `cost` "cheap": under a second a trace on arith-tiny, measured:
    entropy, GRAIL, KTAE and random under 0.1 s, OAR-P step 0.4 s, OAR-G 0.75 s; token OAR-P,
    hierarchical OAR-P and IG take 1.1-1.9 s), so that the quick look takes seconds; else every
    reading method: the registered ones but the analysis-only resampling (a second Monte-Carlo
    oracle, as costly as this one), the grouped ones (KTAE) included."""
    from ..methods import available_methods, cheap_methods, method_spec

    every = [m for m in available_methods(grouped=True) if not method_spec(m).analysis_only]
    return [m for m in every if m in cheap_methods()] if bundled(model) else every


def bundled(model: str) -> bool:
    """Whether `model` names a model bundled with the package (arith-tiny: 1.1M parameters)."""
    from ..models.catalogue import CATALOGUE

    entry = CATALOGUE.get(str(model))
    return entry is not None and entry.bundled


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
