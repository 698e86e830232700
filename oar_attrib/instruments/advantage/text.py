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
    from ...methods import available_methods, cheap_methods, method_spec
    from ...models.catalogue import bundled

    every = [m for m in available_methods(grouped=True) if not method_spec(m).analysis_only]
    return [m for m in every if m in cheap_methods()] if bundled(model) else every


def _cell(stats: dict | None) -> str:
    """`+0.123 [-0.045,+0.291]`, `+0.123` without an interval, `too few (7)` below the minimum
    of units, `n/a` unmeasured."""
    if not stats or stats.get("mean", stats.get("coef")) is None:
        return "n/a"
    mean = stats.get("mean", stats.get("coef"))
    units = stats.get("n", stats.get("traces"))
    if stats.get("too_few"):
        return f"too few ({units})"
    low, high = stats["low"], stats["high"]
    return f"{mean:+.3f} [{low:+.3f},{high:+.3f}]" if low is not None else f"{mean:+.3f}"


def _p(stats: dict, key: str = "p_holm", missing: str = "") -> str:
    from ...analysis.stats import format_p

    if not stats or stats.get(key) is None or stats.get("too_few"):
        return missing
    return format_p(stats[key], 3, "")


def ceiling_line(report) -> str:
    """The label's ceiling in one line: how far a method's Spearman with the signed label can
    go, set by the label's own within-trace split-half reliability."""
    def part(row: dict) -> str:
        if row.get("spearman_brown") is None:
            return f"undefined ({row.get('traces', 0)} traces with a split-half value)"
        few = f", too few traces ({row['traces']}) to read" if row.get("too_few") else ""
        return (f"split-half {row['r']:+.3f}, Spearman-Brown {row['spearman_brown']:+.3f} over {row['traces']} "
                f"traces: a method's Spearman can reach about {row['ceiling']:.2f}{few}")

    signed, absolute = report.ceiling["signed"], report.ceiling["absolute"]
    return (f"label ceiling: sign(A)*dV within trace, {part(signed['all'])}; before the last step, "
            f"{part(signed['before_last'])}. |dV|: {part(absolute['all'])}; before the last step, "
            f"{part(absolute['before_last'])}")


def text_report(report, settings) -> list[str]:
    """The lines of the text report: the label's ceiling first, the settings and counts, the
    table, the positive control and the reading in words."""
    o, g = report.oracle, report.groups
    lines = [ceiling_line(report),
             f"traces {report.n} in {g['analysed']} groups of {g['size']} ({g['mixed']} mixing right and wrong); "
             f"labelled {report.n_labelled}, scored (within-trace figures) {report.n_scored}; out of the "
             f"within-trace figures: without steps {report.skipped['no_steps']}, with fewer steps than asked "
             f"{report.skipped['few_steps']}; credit agreement over {g['credit_defined']} groups",
             f"oracle: {o['n']} continuations per boundary at temperature {o['temperature']}, "
             f"{o['boundaries']} boundaries, mean |dV| {o['mean_abs_dv'] or 0:.3f}, "
             f"{o['seconds_per_trace'] or 0:.1f} s per trace (work when made)"]
    heads = ("signed (mean w)", "Holm p", "| length, position", "Holm p", "|dV| (mean w)", "credit agreement",
             "Holm p", "s/trace")
    rows = {**report.methods, **report.reference}
    width = max(len(m) for m in rows)
    lines.append(f"{'method':<{width}} " + " ".join(f"{h:>24}" for h in heads))
    for method, s in rows.items():
        seconds, partial = s.get("seconds_per_trace"), s["partial"]["signed"]
        cells = (_cell(s["signed"]), _p(s["signed"]), _cell(partial), _p(partial), _cell(s["absolute"]),
                 _cell(s.get("credit_agreement")), _p(s.get("credit_agreement", {})),
                 "" if seconds is None else f"{seconds:.3f}")
        lines.append(f"{method:<{width}} " + " ".join(f"{c:>24}" for c in cells))
    lines.append(f"signed: Spearman with sign(A)*dV of the mean of a method's weights over each step; "
                 f"| length, position: the same label's within-trace rank regression on the score with step length "
                 f"and position held fixed, clustered by trace; over {report.n_scored} traces; credit agreement over "
                 f"{g['credit_defined']} groups")
    lines.append(f"GRPO's own credit correlation with dV: {_cell(report.grpo)} (credit agreement is a "
                 "method's minus this)")
    control = report.positive_control
    if control:
        lines.append(f"positive control: |dV| recalls the world's causal (chain) steps at {_cell(control['chain'])} "
                     f"against a random ranking's {control['random_chain']['mean']:.3f}, a gain of "
                     f"{_cell(control['chain_gain'])} (p {_p(control['chain_gain'], 'p', 'n/a')}); "
                     f"direct steps {_cell(control['direct'])}, a gain of {_cell(control['direct_gain'])}")
    return lines + reading(report, settings)


def comparisons(report) -> list:
    """Per method two `verdicts.Comparison`s: its Spearman with the signed label against a
    random ranking's 0, and its credit agreement (already its correlation minus GRPO's) against
    GRPO, each resolved only where its Holm-adjusted p across the methods is below 0.05 and
    its units (traces, groups) reach `stats.MIN_UNITS`."""
    from ...analysis.verdicts import Comparison

    out = []
    for method, s in report.methods.items():
        rank, credit = s["signed"], s.get("credit_agreement") or {}
        out.append(Comparison(method, "a random ranking", "within-trace Spearman with sign(A)*dV", rank["mean"],
                              rank["low"], rank["high"], p_holm=rank.get("p_holm"), units=rank["n"], unit="traces"))
        if method != "random":
            out.append(Comparison(method, "GRPO", "credit agreement with dV", credit.get("mean"),
                                  credit.get("low"), credit.get("high"), p_holm=credit.get("p_holm"),
                                  units=credit.get("n", 0), unit="groups"))
    return out


def reading(report, settings) -> list[str]:
    """The report in words (`verdicts.reading`): the label's ceiling, a verdict per method and
    figure, the caveats (few traces, a low ceiling, a positive control that does not beat
    random, a label that follows length), what to run next (the run's own command, `settings`',
    on twice the traces and continuations)."""
    from ...commands import flags_line
    from .metrics import LONGEST
    from ...analysis.stats import MIN_UNITS
    from ...analysis.verdicts import caveats
    from ...analysis.verdicts import reading as in_words

    if not report.methods or report.n_scored == 0:
        return ["Reading: no trace was scored; run with more --n or check the answers' steps."]
    control = report.positive_control or {}
    gain = (control.get("chain_gain") or {}).get("low")
    length = (report.reference.get(LONGEST) or {}).get("absolute") or {}
    ceiling = report.ceiling["signed"]["before_last"].get("ceiling")
    notes = caveats(
        f"only {report.n_scored} traces and {report.groups['credit_defined']} groups: a figure over fewer than "
        f"{MIN_UNITS} units is too few to read" if min(report.n_scored, report.groups["credit_defined"]) < MIN_UNITS
        else None,
        f"the signed label's ceiling before the last step is {ceiling:.2f}: no method's Spearman can be read far "
        "above it, and a small one may be the label's noise" if ceiling is not None and ceiling < 0.5 else None,
        "the positive control does not rank the world's causal steps above a random ranking's expectation "
        "(the interval of |dV| recall's gain over chance holds 0): read agreement with dV with care"
        if gain is not None and gain <= 0 else None,
        f"|dV| follows step length here (longest_first {_cell(length)}): compare a method's partial coefficient "
        "(length and position held fixed), not only its Spearman" if (length.get("low") or 0) > 0 else None)
    more = ("oar recall advantage " + flags_line(
        settings, ("model", "data" if settings.data else "preset", "n", "seed", "group_samples", "continuations",
                   "temperature", "max_new_tokens", "min_steps", "label", "methods"),
        n=max(2 * report.n, 40), continuations=max(2 * report.oracle["n"], 16))
        + " (narrower intervals, a more reliable label)")
    signed = report.ceiling["signed"]
    first = (f"The signed label's ceiling: a method's within-trace Spearman can reach about "
             f"{_ceiling(signed['all'])} ({_ceiling(signed['before_last'])} before the last step)")
    traces = signed["all"].get("traces") or 0
    if signed["all"].get("too_few", True):
        first += f"; over {traces} traces, too few to read (a ceiling needs {MIN_UNITS})"
    return [first + "."] + in_words(comparisons(report), notes, more)


def _ceiling(row: dict) -> str:
    return "n/a" if row.get("ceiling") is None else f"{row['ceiling']:.2f}"
