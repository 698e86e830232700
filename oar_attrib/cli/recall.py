"""`oar recall`: oracle causal-token recall of every method, one subcommand per instrument
(their flags: `recall_settings`): `world` on the arithmetic world, `steps` at step granularity,
`data` against any model's own counterfactual oracle on a JSONL data set, `graded` and
`advantage` against the sampled oracles (`recall_advantage`).

`--json` prints the report with the settings record of the command (`recall_record`). A
`--cf-cache` holds the record of the model it was computed with (weights and dtype: its keys
hold the rest); a rerun with another model or dtype is refused before the model loads."""
from __future__ import annotations

import argparse
import json
import shlex
import textwrap

from ..analysis.recall_reading import graded_comparisons, paired_comparisons
from ..analysis.sets import DEFAULT_SETS
from ..analysis.verdicts import plain
from ..commands import DefaultsHelpFormatter, add_dataclass_args, add_model_args
from ..defaults import GRANULARITY
from ..errors import InputError
from .choices import add_method_knobs, budget_params, check_servable, method_params_from
from .recall_advantage import run_advantage
from .recall_settings import DEFAULT_MAX_NEW_TOKENS, MODES, CounterfactualRecall, StepRecall, settings_of

# `oar recall` runs the methods on knobs from the table (resample: --resample-samples).
RECALL_KNOB_METHODS = ("ig", "oar_g")


RANDOM_DRAW, RANDOM_EXPECTED = "random (a draw)", "random expectation"


def stats_cell(stats: dict, value: str) -> str:
    """`mean [lo,hi]` of `mean_ci` stats (`value`: the key of the mean), or n/a without one."""
    if stats[value] is None:
        return "n/a"
    return f"{stats[value]:.3f} [{stats['ci95'][0]:.3f},{stats['ci95'][1]:.3f}]"


def stats_table(report, columns, value: str) -> str:
    """The text table of `oar recall`: one row per method, the random method's own draw
    labelled as one, and the random-ranking expectation as its own last row (as README's);
    one `stats_cell` per column."""
    rows = {(RANDOM_DRAW if m == "random" else m): v for m, v in report.methods.items()}
    rows[RANDOM_EXPECTED] = report.random
    width = max(len(m) for m in rows)
    lines = [f"{'method':<{width}} " + " ".join(f"{name:>22}" for name in columns)]
    for method, stats in rows.items():
        cells = [stats_cell(stats[name], value) for name in columns]
        lines.append(f"{method:<{width}} " + " ".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines)


RECALL_FIELDS = ("n", "preset", "granularity", "step_pool", "sets", "cf_positions", "replace", "data",
                 "max_new_tokens", "resample_samples", "intervention_samples")


def recall_knobs(args: argparse.Namespace) -> dict:
    """The recall's own knobs in its settings record (RECALL_FIELDS), the same keys in every
    subcommand: one the subcommand does not take is recorded at the value the one command
    `oar recall` gave it, so that a record reads as it did before the subcommands."""
    absent = {"preset": None, "data": None, "sets": list(DEFAULT_SETS), "max_new_tokens": DEFAULT_MAX_NEW_TOKENS,
              "granularity": "step" if args.recall_mode == "steps" else GRANULARITY,
              **{name: cls.__dataclass_fields__[name].default for cls, names in (
                  (CounterfactualRecall, ("cf_positions", "replace")),
                  (StepRecall, ("step_pool", "resample_samples", "intervention_samples"))) for name in names}}
    return {name: getattr(args, name) if hasattr(args, name) else absent[name] for name in RECALL_FIELDS}


def recall_record(args: argparse.Namespace) -> dict:
    """The settings record of an `oar recall` command: the methods with their parameters as
    used, the probe and seed, the model and dtype, and the recall's own knobs (`recall`)."""
    from ..attribution import analysis_params
    from ..methods import available_methods
    from ..records.settings_record import settings_record
    from ..weights.settings import ReshapeSettings

    methods = args.methods or available_methods()
    used = analysis_params(methods, method_params_from(args, budget_params(args.max_batch_tokens)))
    return settings_record(ReshapeSettings(probe=args.probe, seed=args.seed), methods, used,
                           model=args.model, dtype=args.dtype,
                           recall=recall_knobs(args))


def check_cache(args: argparse.Namespace, write: bool = True) -> None:
    """Refuse a `--cf-cache` computed with another model or dtype, or not a cache of this
    oracle (RecordMismatchError, OutputError; before the model loads); with `write` (once the
    model has loaded: a refused model leaves no file), give a cache without a record this
    command's."""
    from ..analysis.counterfactual_recall import CACHE_OWNER
    from ..jsonl import append_jsonl, check_log_path, iter_jsonl
    from ..records.settings_record import check_resume

    if args.cf_cache is None:
        return
    path, full = check_log_path(args.cf_cache, "--cf-cache", CACHE_OWNER), recall_record(args)
    record = {k: full[k] for k in ("format", "model", "dtype", "version")}
    stored = next((v["record"] for _, v in (iter_jsonl(path) if path.is_file() else ())
                   if isinstance(v, dict) and isinstance(v.get("record"), dict)), None)
    if stored is not None:
        check_resume(f"--cf-cache {path}", stored, record, "pass a new --cf-cache")
    elif write:
        append_jsonl(path, [{"record": record}], "--cf-cache", owner=CACHE_OWNER)  # readers skip lines without a key


def world_model(args: argparse.Namespace):
    """The model and tokenizer of `world` and `steps`, an arithmetic-world model's (checked
    before its weights load)."""
    from ..models import load_model

    check_servable(args.model)
    return load_model(args.model, device=args.device, dtype=args.dtype)


def run_world(args: argparse.Namespace) -> int:
    """`oar recall world`: recall@|O| of every method against the arithmetic world's oracle sets
    (and the model's own counterfactual oracle)."""
    from ..analysis.recall import oracle_recall

    args.sets = args.sets or list(DEFAULT_SETS)
    model, tokenizer = world_model(args)
    report = oracle_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset or "recall",
                           methods=args.methods, probe=args.probe, progress=not args.no_progress,
                           sets=args.sets, cf_positions=args.cf_positions, replacement=args.replace,
                           method_params=method_params_from(args, budget_params(args.max_batch_tokens)))
    if args.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(args)}))
        return 0
    print(report.counts_line())
    print(stats_table(report, args.sets, "recall"))
    print_reading(report, paired_comparisons(report, args.sets, args.seed), "oar recall world")
    return 0


def run_steps(args: argparse.Namespace) -> int:
    """`oar recall steps`: direct-step recall and upstream AUC per method."""
    from ..analysis.step_recall import STEP_METRICS, step_recall

    model, tokenizer = world_model(args)
    report = step_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset or "upstream",
                         methods=args.methods, probe=args.probe, pool=args.step_pool,
                         method_params=method_params_from(args),
                         progress=not args.no_progress, resample_samples=args.resample_samples,
                         intervention_samples=args.intervention_samples)
    if args.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(args)}))
        return 0
    print(f"preset={report.preset} {report.counts_line()} step pool={report.pool}")
    print(stats_table(report, STEP_METRICS, "mean"))
    if report.intervention:
        cell = stats_cell(report.intervention["upstream"], "mean")
        print(f"{'result-shift intervention (the model itself, no method)':<20} upstream {cell}")
    print_reading(report, paired_comparisons(report, STEP_METRICS, args.seed), "oar recall steps")
    return 0


def print_reading(report, comparisons, command: str) -> None:
    """The reading in words that ends the text output (`analysis.recall_reading`)."""
    from ..analysis.recall_reading import next_recall_step, recall_reading

    print("\n".join(recall_reading(report, comparisons, next_recall_step(report, command))))


def run_data(args: argparse.Namespace) -> int:
    """`oar recall data`: counterfactual recall of every method on the model's own traces of a
    data set (and value-oracle recall on the word-problem world)."""
    from ..analysis.counterfactual_recall import counterfactual_recall, data_records, data_sets
    from ..models import load_model
    from ..models.budget import CPU_BATCH_TOKENS

    records = data_records(args.data, args.n, args.seed)
    known = data_sets(records)
    sets = args.sets or list(known)
    other = [s for s in sets if s not in known]
    if other:
        raise InputError(f"{args.data} is scored at token granularity on --sets {' '.join(known)} (the value "
                         f"oracle's sets need --data wordworld:<preset>), got --sets {' '.join(sets)}")
    check_cache(args, write=False)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    check_cache(args)
    report = counterfactual_recall(
        model, tokenizer, records, methods=args.methods, probe=args.probe, seed=args.seed,
        cf_positions=args.cf_positions, max_new_tokens=args.max_new_tokens,
        max_batch_tokens=args.max_batch_tokens or CPU_BATCH_TOKENS, cache=args.cf_cache, model_name=args.model,
        method_params=method_params_from(args, budget_params(args.max_batch_tokens)),
        progress=not args.no_progress, replacement=args.replace, sets=sets)
    if args.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(args)}))
        return 0
    accuracy = "n/a (no gold answers)" if report.accuracy is None else f"{report.accuracy:.3f}"
    print(f"n={report.n} scored={report.n_scored} accuracy={accuracy} skipped: {plain(report.skipped)}; "
          f"oracle: {plain(report.oracle)}")
    print(stats_table(report, sets, "recall"))
    for outcome, part in report.by_outcome.items():
        print(f"{outcome} traces (n={part['n']}):")
        print(stats_table(argparse.Namespace(methods=part["methods"], random=part["random"]), sets, "recall"))
    print_reading(report, paired_comparisons(report, sets, args.seed), f"oar recall data --data {shlex.quote(str(args.data))}")
    return 0


def graded_records(args: argparse.Namespace) -> list[dict]:
    """The records `oar recall graded` scores: `--data`'s, or held-out arithmetic-world problems
    (their prompt and gold answer)."""
    from ..analysis.counterfactual_recall import data_records
    from ..world import generate_problems

    if args.data is not None:
        return data_records(args.data, args.n, args.seed)
    check_servable(args.model)
    return [{"prompt": p.prompt, "answer": str(p.answer)}
            for p in generate_problems(args.n, args.preset or "recall", seed=args.seed, split="test")]


def run_graded(args: argparse.Namespace) -> int:
    """`oar recall graded`: each method's Spearman and tercile AUC against the graded oracle's flip
    rates (K replacements per tested position), resumable through `--cf-cache`."""
    from ..analysis.graded_oracle import GradedSettings
    from ..analysis.graded_recall import RANDOM_RANKING, GradedCache, graded_recall
    from ..models import load_model
    from ..models.budget import CPU_BATCH_TOKENS

    records = graded_records(args)
    cache = GradedCache(args.cf_cache)  # read and checked before the model loads
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    report = graded_recall(
        model, tokenizer, records, methods=args.methods, probe=args.probe,
        settings=GradedSettings(k=args.graded_k, positions=args.positions, seed=args.seed),
        max_new_tokens=args.max_new_tokens, max_batch_tokens=args.max_batch_tokens or CPU_BATCH_TOKENS,
        cache=cache, group_samples=args.group_samples,
        method_params=method_params_from(args, budget_params(args.max_batch_tokens)),
        progress=not args.no_progress)
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    accuracy = "n/a (no gold answers)" if report.accuracy is None else f"{report.accuracy:.3f}"
    print(f"n={report.n} scored={report.n_scored} accuracy={accuracy} skipped: {plain(report.skipped)}")
    print(f"oracle: {plain(report.oracle)}")
    print(f"decode: {plain(report.decode)}; cache: {plain(report.cache)}")
    width = max([len(m) for m in report.methods] + [len(RANDOM_EXPECTED)])
    heads = ("spearman", "tercile AUC", "spearman - random", "spearman | position", "early first")
    print(f"{'method':<{width}} " + " ".join(f"{h:>22}" for h in heads))
    for method, stats in report.methods.items():
        versus = stats.get("vs_random", {}).get("spearman")
        cells = [stats_cell(stats["spearman"], "mean"), stats_cell(stats["auc"], "mean"),
                 stats_cell(versus, "mean") if versus else "",
                 stats_cell(stats["partial_spearman"], "mean"), stats_cell(stats["position_spearman"], "mean")]
        print(f"{method:<{width}} " + " ".join(f"{c:>22}" for c in cells))
    expected = ("spearman", "auc", None, "partial_spearman", "position_spearman")
    print(f"{RANDOM_EXPECTED:<{width}} " + " ".join(
        f"{'':>22}" if k is None else f"{RANDOM_RANKING[k]:>22.3f}" for k in expected))
    print("spearman | position: with position held fixed (partial); early first: the scores' "
          "Spearman with earliness (earliest_first: 1)")
    print_reading(report, graded_comparisons(report), "oar recall graded")
    return 0


RECALL_DESCRIPTION = """\
Oracle recall of every method: how much of a set of tokens known (or tested) to decide the answer
each method ranks first, beside a random ranking, with 95% bootstrap intervals over traces. One
subcommand per instrument; `oar recall MODE --help` lists its flags. (Until 0.3 the one-command
spelling `oar recall --granularity step | --data | --sets graded | --sets advantage` still runs,
with a note.)"""
# Each subcommand: what runs it and its line in `oar recall --help`.
RUNS = {"world": (run_world, "token recall on the arithmetic world's held-out problems"),
        "steps": (run_steps, "recall of steps on the arithmetic world (direct steps, upstream AUC)"),
        "data": (run_data, "any model's own counterfactual oracle on a JSONL data set or wordworld:<preset>"),
        "graded": (run_graded, "the graded counterfactual oracle (flip rates per tested position)"),
        "advantage": (run_advantage, "the Monte-Carlo advantage oracle (dV per step, credit agreement)")}


def run(args: argparse.Namespace) -> int:
    """Check the subcommand's settings (a count out of bounds: one line `oar recall: error: ...`
    from `run_command`, before anything loads) and run it."""
    settings_of(args)
    return RUNS[args.recall_mode][0](args)


def add_parser(sub) -> None:
    rc = sub.add_parser("recall", help="oracle recall of every method, on the arithmetic world or any model's "
                                       "own counterfactual, graded or advantage oracle",
                        description=RECALL_DESCRIPTION)
    modes = rc.add_subparsers(dest="recall_mode", required=True, metavar="{" + ",".join(MODES) + "}")
    for name, settings in MODES.items():
        said = " ".join(settings.__doc__.split("\n\n")[0].split()).removeprefix(f"`oar recall {name}`: ")
        mode = modes.add_parser(name, help=RUNS[name][1], description=textwrap.fill(said[:1].upper() + said[1:], 96),
                                formatter_class=DefaultsHelpFormatter)
        add_dataclass_args(mode, settings)
        add_method_knobs(mode, RECALL_KNOB_METHODS)
        add_model_args(mode)
        mode.set_defaults(func=run)
