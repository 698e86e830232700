"""`oar recall`: oracle causal-token recall of every method on the arithmetic world, or, with
`--data`, against any model's own counterfactual oracle on a JSONL data set.

`--json` prints the report with the settings record of the command (`recall_record`). A
`--cf-cache` holds the record of the model it was computed with (weights and dtype: its keys
hold the rest); a rerun with another model or dtype is refused before the model loads."""
from __future__ import annotations

import argparse
import shlex
import json

from ..analysis.recall_reading import graded_comparisons, paired_comparisons
from ..analysis.sets import CLI_SETS, DEFAULT_SETS
from ..analysis.verdicts import plain
from ..commands import add_model_args
from ..console import say
from ..defaults import GRANULARITIES, GRANULARITY, VIEW_STEP_POOL
from ..inputs.steps import STEP_POOLS
from .choices import add_method_knobs, add_probe_arg, budget_params, check_servable, method_name, method_params_from

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
                           recall={name: getattr(args, name) for name in RECALL_FIELDS})


def check_cache(args: argparse.Namespace) -> None:
    """Refuse a `--cf-cache` computed with another model or dtype (RecordMismatchError, before
    the model loads); give a cache without a record this command's."""
    from ..jsonl import append_jsonl, check_log_path, iter_jsonl
    from ..records.settings_record import check_resume

    if args.cf_cache is None:
        return
    path, full = check_log_path(args.cf_cache, "--cf-cache"), recall_record(args)
    record = {k: full[k] for k in ("format", "model", "dtype", "version")}
    stored = next((v["record"] for _, v in (iter_jsonl(path) if path.is_file() else ())
                   if isinstance(v, dict) and isinstance(v.get("record"), dict)), None)
    if stored is not None:
        check_resume(f"--cf-cache {path}", stored, record, "pass a new --cf-cache")
        return
    append_jsonl(path, [{"record": record}], "--cf-cache")  # readers skip lines without a key


def run_steps(args: argparse.Namespace, model, tokenizer) -> int:
    """`--granularity step`: direct-step recall and upstream AUC per method."""
    from ..analysis.step_recall import STEP_METRICS, step_recall

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
    print_reading(report, paired_comparisons(report, STEP_METRICS, args.seed), "oar recall --granularity step")
    return 0


def print_reading(report, comparisons, command: str) -> None:
    """The reading in words that ends the text output (`analysis.recall_reading`)."""
    from ..analysis.recall_reading import next_recall_step, recall_reading

    print("\n".join(recall_reading(report, comparisons, next_recall_step(report, command))))


def run_data(args: argparse.Namespace) -> int:
    """`--data`: counterfactual recall of every method on the model's own traces of a data set
    (and value-oracle recall on the word-problem world)."""
    from ..analysis.counterfactual_recall import counterfactual_recall, data_records, data_sets
    from ..models import load_model
    from ..models.budget import CPU_BATCH_TOKENS

    records = data_records(args.data, args.n, args.seed)
    known = data_sets(records)
    sets = args.sets or list(known)
    other = [s for s in sets if s not in known]
    if other or args.granularity == "step":
        say(f"oar recall --data: {args.data} is scored at token granularity on --sets {' '.join(known)} "
            f"(the other sets are the arithmetic world's; the value oracle's need --data "
            f"wordworld:<preset>), got --sets {' '.join(sets)} --granularity {args.granularity}")
        return 2
    check_cache(args)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
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
    print_reading(report, paired_comparisons(report, sets, args.seed), f"oar recall --data {shlex.quote(str(args.data))}")
    return 0


def graded_records(args: argparse.Namespace) -> list[dict]:
    """The records `--sets graded` scores: `--data`'s, or held-out arithmetic-world problems
    (their prompt and gold answer)."""
    from ..analysis.counterfactual_recall import data_records
    from ..world import generate_problems

    if args.data is not None:
        return data_records(args.data, args.n, args.seed)
    check_servable(args.model)
    return [{"prompt": p.prompt, "answer": str(p.answer)}
            for p in generate_problems(args.n, args.preset or "recall", seed=args.seed, split="test")]


def run_graded(args: argparse.Namespace) -> int:
    """`--sets graded`: each method's Spearman and tercile AUC against the graded oracle's flip
    rates (K replacements per tested position), resumable through `--cf-cache`."""
    from ..analysis.graded_oracle import GradedSettings
    from ..analysis.graded_recall import RANDOM_RANKING, GradedCache, graded_recall
    from ..models import load_model
    from ..models.budget import CPU_BATCH_TOKENS

    if args.sets != ["graded"] or args.granularity == "step":
        say("oar recall: --sets graded runs alone, at token granularity")
        return 2
    records = graded_records(args)
    cache = GradedCache(args.cf_cache)  # read and checked before the model loads
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    report = graded_recall(
        model, tokenizer, records, methods=args.methods, probe=args.probe,
        settings=GradedSettings(k=args.graded_k, positions=args.cf_positions, seed=args.seed),
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
    print_reading(report, graded_comparisons(report), "oar recall --sets graded")
    return 0


# The count flags and their least values; each is at most configs.MAX_COUNT (past it a flag
# asks for memory by the terabyte, or for a run that never ends).
COUNTS = (("n", 1), ("resample_samples", 1), ("intervention_samples", 0), ("cf_positions", 1),
          ("max_new_tokens", 1), ("graded_k", 1), ("group_samples", 0))


def number_problem(args: argparse.Namespace) -> str | None:
    """The one line for a count flag or --seed out of its bounds (checked before anything
    loads), or None."""
    from ..commands import MAX_COUNT

    if args.resample_samples < 1:
        return f"--resample-samples must be >= 1, got {args.resample_samples}"
    if args.intervention_samples < 0:
        return f"--intervention-samples must be >= 0 (0: off), got {args.intervention_samples}"
    for name, low in COUNTS:
        value = getattr(args, name, None)
        if value is not None and not low <= value <= MAX_COUNT:
            return f"--{name.replace('_', '-')} must be from {low} to {MAX_COUNT}, got {value}"
    if not 0 <= args.seed < 2**32:
        return f"--seed must be from 0 to 2**32 - 1, got {args.seed}"
    return None


DEFAULT_MAX_NEW_TOKENS = 256  # --max-new-tokens of every set but advantage (its own: the catalogue's)


def run(args: argparse.Namespace) -> int:
    from ..models import load_model
    from ..analysis.recall import oracle_recall

    problem = number_problem(args)
    if problem:
        say(f"oar recall: {problem}")
        return 2
    if not (args.sets and "advantage" in args.sets):
        args.max_new_tokens = args.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    if args.sets and "graded" in args.sets:
        return run_graded(args)
    if args.sets and "advantage" in args.sets:
        from .recall_advantage import run_advantage

        return run_advantage(args)
    if args.data is not None:
        return run_data(args)
    args.sets = args.sets or list(DEFAULT_SETS)
    check_servable(args.model)
    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    if args.granularity == "step":
        return run_steps(args, model, tokenizer)
    report = oracle_recall(model, tokenizer, n=args.n, seed=args.seed, preset=args.preset or "recall",
                           methods=args.methods, probe=args.probe, progress=not args.no_progress,
                           sets=args.sets, cf_positions=args.cf_positions, replacement=args.replace,
                           method_params=method_params_from(args, budget_params(args.max_batch_tokens)))
    if args.json:
        print(json.dumps({**report.as_dict(), "record": recall_record(args)}))
        return 0
    print(report.counts_line())
    print(stats_table(report, args.sets, "recall"))
    print_reading(report, paired_comparisons(report, args.sets, args.seed), "oar recall")
    return 0


def add_parser(sub) -> None:
    rc = sub.add_parser("recall", help="oracle causal-token recall of every method on the arithmetic world")
    rc.add_argument("--model", default="arith-tiny", help="bundled name or local checkpoint folder")
    rc.add_argument("--n", type=int, default=200, help="number of held-out problems")
    rc.add_argument("--seed", type=int, default=0, help="seed of problems, sampling and bootstrap")
    rc.add_argument("--preset", default=None,
                    help="world preset (default: recall, whose final results are written once so "
                         "`direct` is exact; with --granularity step: upstream, which has a step "
                         "on the answer's path that the answer does not read)")
    _add_step_args(rc.add_argument_group("steps (--granularity step)"))
    rc.add_argument("--methods", nargs="+", default=None, type=method_name,
                    help="methods (default: all registered)")
    add_probe_arg(rc)
    rc.add_argument("--sets", nargs="+", default=None, choices=CLI_SETS,
                    help="oracle sets to score against (default: direct chain; with --data: "
                         "counterfactual, and on wordworld:<preset> also direct upstream "
                         "distractor) (results = direct; names: the final steps' names; "
                         "counterfactual: the positions whose replacement changes the model's "
                         "regenerated answer)")
    _add_data_args(rc.add_argument_group("word-problem data and the sampled oracles "
                                          "(--data, --sets graded/advantage)"))
    add_method_knobs(rc, RECALL_KNOB_METHODS)
    add_model_args(rc)
    rc.add_argument("--json", action="store_true", help="print one JSON object")
    rc.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rc.set_defaults(func=run)


def _add_step_args(group) -> None:
    group.add_argument("--granularity", choices=GRANULARITIES, default=GRANULARITY,
                    help="token: recall of tokens against oracle sets; step: every method's scores "
                         "pooled per step, recall of the `direct` steps and the AUC of ranking an "
                         "`upstream` step above a distractor")
    group.add_argument("--step-pool", choices=STEP_POOLS, default=VIEW_STEP_POOL,
                    help="--granularity step: how a method's token scores pool into a step score")
    group.add_argument("--resample-samples", type=int, default=8,
                    help="--granularity step, method resample: continuations per side and step")
    group.add_argument("--intervention-samples", type=int, default=0,
                    help="--granularity step: also measure the upstream AUC of shifting each step's "
                         "result and regenerating (how far the model itself carries upstream "
                         "results), at this many continuations per side and step; 0: off")


def _add_data_args(group) -> None:
    group.add_argument("--cf-positions", type=int, default=64,
                    help="counterfactual set: scored positions tested per trace (one greedy "
                         "regeneration each; more are thinned to this many, spread over the trace)")
    group.add_argument("--replace", default="pad", choices=("pad", "resample"),
                    help="counterfactual set: what replaces a tested token, the pad token or a token "
                         "drawn from the model at that position (not the original, seeded); on chat "
                         "models whose pad is the end-of-turn token, pad ends the turn")
    group.add_argument("--data", default=None,
                    help="a JSONL data set (question/problem and optional gold answer, or prompt "
                         "and response), or wordworld:<preset> (held-out word problems, also scored "
                         "on the value oracle's direct/upstream/distractor sets): any model's own "
                         "counterfactual oracle on its greedy traces instead of the arithmetic world")
    group.add_argument("--max-new-tokens", type=int, default=None,
                    help="--data: longest greedy answer the model writes to a question (default 256); "
                         "--sets advantage: longest sampled answer (default: the model's catalogue "
                         "answering length, 128 on arith-tiny)")
    group.add_argument("--cf-cache", default=None,
                    help="--data: JSONL cache of each trace's counterfactual oracle; a rerun with "
                         "it resumes after the traces already computed (--sets graded: also the "
                         "model's answers and every method's scores, so a rerun computes nothing)")
    group.add_argument("--graded-k", type=int, default=8,
                    help="--sets graded: replacement tokens drawn from the model per tested position "
                         "(each regenerated greedily; the label is the share that change the answer)")
    group.add_argument("--group-samples", type=int, default=0,
                    help="--sets graded: answers sampled per problem to form the group KTAE compares "
                         "(with the greedy trace); 0: KTAE does not apply. --sets advantage: the "
                         "GRPO group size (0: 4)")
    group.add_argument("--continuations", type=int, default=8,
                    help="--sets advantage: continuations sampled per step boundary (V_k's denominator)")
    group.add_argument("--temperature", type=float, default=1.0,
                    help="--sets advantage: the policy's sampling temperature (groups and continuations)")
    group.add_argument("--min-steps", type=int, default=1,
                    help="--sets advantage: traces with fewer steps get no oracle (they stay in "
                         "their group's advantages)")
