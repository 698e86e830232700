"""The settings of `oar recall`'s subcommands, one frozen dataclass each, whose fields are the
subcommand's flags (`commands.add_dataclass_args`): `world` (token recall on the arithmetic
world), `steps` (recall of steps), `data` (a data set's counterfactual and value oracles),
`graded` (the graded counterfactual oracle) and `advantage` (the Monte-Carlo advantage oracle).
A subcommand has only the flags it reads, so a flag of another one is refused by the parser.

`oar recall` was once one command whose flags chose the mode (`--granularity step`, `--data`,
`--sets graded`, `--sets advantage`); `new_spelling` rewrites that spelling to its subcommand,
with one note on stderr, until 0.3.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..analysis.sets import ADVANTAGE, COUNTERFACTUAL, GRADED, RECALL_SETS
from ..commands import MAX_COUNT, dataclass_from_args, option
from ..console import say
from ..defaults import PROBE, PROBES, VIEW_STEP_POOL
from ..errors import InputError
from ..inputs.steps import STEP_POOLS
from ..world import VALUE_SETS
from .choices import method_name, probe_name

DEFAULT_MAX_NEW_TOKENS = 256  # --max-new-tokens of `data` and `graded` (advantage's: the catalogue's)
DEFAULT_GROUP = 4  # `advantage`: answers per problem (GRPO's group), also when --group-samples is 0
DATA_SETS = (COUNTERFACTUAL,) + VALUE_SETS  # the sets `data` scores (the value oracle's on wordworld only)

# The count flags and their least values; each is at most commands.MAX_COUNT (past it a flag
# asks for memory by the terabyte, or for a run that never ends).
COUNTS = (("n", 1), ("resample_samples", 1), ("intervention_samples", 0), ("cf_positions", 1),
          ("positions", 1), ("max_new_tokens", 1), ("graded_k", 1), ("group_samples", 0))


def number_problem(settings) -> str | None:
    """The one line for a count or --seed of `settings` out of its bounds (checked before
    anything loads), or None. A count the subcommand does not take is not checked."""
    if getattr(settings, "resample_samples", 1) < 1:
        return f"--resample-samples must be >= 1, got {settings.resample_samples}"
    if getattr(settings, "intervention_samples", 0) < 0:
        return f"--intervention-samples must be >= 0 (0: off), got {settings.intervention_samples}"
    for name, low in COUNTS:
        value = getattr(settings, name, None)
        if value is not None and not low <= value <= MAX_COUNT:
            return f"--{name.replace('_', '-')} must be from {low} to {MAX_COUNT}, got {value}"
    if not 0 <= settings.seed < 2**32:
        return f"--seed must be from 0 to 2**32 - 1, got {settings.seed}"
    return None


@dataclass(frozen=True, kw_only=True)
class RecallSettings:
    """What every `oar recall` subcommand takes: the model, how many traces, the methods, the
    probe and the output. Checked on construction (`number_problem`: InputError)."""

    model: str = option("arith-tiny", "bundled name or local checkpoint folder")
    n: int = option(200, "number of held-out problems")
    seed: int = option(0, "seed of problems, sampling and bootstrap")
    methods: tuple[str, ...] | None = option(None, "methods (default: all registered)", type=method_name)
    probe: str = option(PROBE, f"outcome probe (METHOD.md 3): one of {', '.join(PROBES)}", type=probe_name)
    json: bool = option(False, "print one JSON object", action="store_true")
    no_progress: bool = option(False, "hide the progress bar", action="store_true")

    def __post_init__(self) -> None:
        for f in fields(self):  # argparse's lists as tuples: the settings stay frozen all through
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        problem = number_problem(self)
        if problem:
            raise InputError(problem)


COUNTERFACTUAL_GROUP = "the counterfactual oracle (--sets counterfactual)"


@dataclass(frozen=True, kw_only=True)
class CounterfactualRecall(RecallSettings):
    """Recall that may score the model's own counterfactual oracle (`world`, `data`)."""

    cf_positions: int = option(64, "counterfactual set: scored positions tested per trace (one greedy "
                                   "regeneration each; more are thinned to this many, spread over the trace)",
                               group=COUNTERFACTUAL_GROUP)
    # The choices are `analysis.counterfactual.REPLACEMENTS`, which imports torch: not at parse time.
    replace: str = option("pad", "counterfactual set: what replaces a tested token, the pad token or a token "
                                 "drawn from the model at that position (not the original, seeded); on chat "
                                 "models whose pad is the end-of-turn token, pad ends the turn",
                          choices=("pad", "resample"), group=COUNTERFACTUAL_GROUP)


@dataclass(frozen=True, kw_only=True)
class WorldRecall(CounterfactualRecall):
    """`oar recall world`: token recall on the arithmetic world's held-out problems."""

    preset: str | None = option(None, "world preset (default: recall, whose final results are written once "
                                      "so `direct` is exact)")
    sets: tuple[str, ...] | None = option(
        None, "oracle sets to score against (default: direct chain) (results = direct; names: the final "
              "steps' names; counterfactual: the positions whose replacement changes the model's "
              "regenerated answer)", choices=RECALL_SETS)


@dataclass(frozen=True, kw_only=True)
class StepRecall(RecallSettings):
    """`oar recall steps`: every method's scores pooled per step, recall of the `direct` steps
    and the AUC of ranking an `upstream` step above a distractor."""

    preset: str | None = option(None, "world preset (default: upstream, which has a step on the answer's path "
                                      "that the answer does not read)")
    step_pool: str = option(VIEW_STEP_POOL, "how a method's token scores pool into a step score",
                            choices=STEP_POOLS)
    resample_samples: int = option(8, "method resample: continuations per side and step")
    intervention_samples: int = option(0, "also measure the upstream AUC of shifting each step's result and "
                                          "regenerating (how far the model itself carries upstream results), "
                                          "at this many continuations per side and step; 0: off")


@dataclass(frozen=True, kw_only=True)
class DataRecall(CounterfactualRecall):
    """`oar recall data`: any model's own counterfactual oracle on its greedy answers to a data
    set (and the value oracle's sets on the word-problem world)."""

    data: str = option(help="a JSONL data set (question/problem and optional gold answer, or prompt and "
                            "response), or wordworld:<preset> (held-out word problems, also scored on the "
                            "value oracle's direct/upstream/distractor sets)")
    sets: tuple[str, ...] | None = option(
        None, "oracle sets to score against (default: counterfactual, and on wordworld:<preset> also "
              "direct upstream distractor, the value oracle's)", choices=DATA_SETS)
    max_new_tokens: int = option(DEFAULT_MAX_NEW_TOKENS, "longest greedy answer the model writes to a question")
    cf_cache: str | None = option(None, "JSONL cache of each trace's counterfactual oracle; a rerun with it "
                                        "resumes after the traces already computed")


@dataclass(frozen=True, kw_only=True)
class SampledRecall(RecallSettings):
    """The problems of the sampled oracles (`graded`, `advantage`): a data set's, or held-out
    arithmetic-world problems."""

    preset: str | None = option(None, "world preset of the held-out problems when --data is not given "
                                      "(default: recall)")
    data: str | None = option(None, "a JSONL data set (question/problem and optional gold answer), or "
                                    "wordworld:<preset>: its problems instead of the arithmetic world's")


GRADED_GROUP = "the graded oracle"


@dataclass(frozen=True, kw_only=True)
class GradedRecall(SampledRecall):
    """`oar recall graded`: each method's Spearman and tercile AUC against the graded oracle's
    flip rates (K replacements per tested position)."""

    positions: int = option(64, "tested positions per trace (one per stratum of the scored reasoning, so "
                                "they span it); was --cf-positions", group=GRADED_GROUP)
    graded_k: int = option(8, "replacement tokens drawn from the model per tested position (each regenerated "
                              "greedily; the label is the share that change the answer)", group=GRADED_GROUP)
    max_new_tokens: int = option(DEFAULT_MAX_NEW_TOKENS, "longest greedy answer the model writes to a question",
                                 group=GRADED_GROUP)
    cf_cache: str | None = option(None, "JSONL cache of the model's answers, every method's scores, KTAE's "
                                        "groups and each trace's oracle: a rerun computes nothing it holds",
                                  group=GRADED_GROUP)
    group_samples: int = option(0, "answers sampled per problem to form the group KTAE compares (with the "
                                   "greedy trace); 0: KTAE does not apply", group=GRADED_GROUP)


ADVANTAGE_GROUP = "the advantage oracle"


@dataclass(frozen=True, kw_only=True)
class AdvantageRecall(SampledRecall):
    """`oar recall advantage`: every method against the Monte-Carlo advantage oracle."""

    methods: tuple[str, ...] | None = option(
        None, "methods (default: on a bundled model the cheap reading methods, else every reading method "
              "but resample)", type=method_name)
    group_samples: int = option(DEFAULT_GROUP, "the GRPO group size: answers sampled per problem (0: "
                                               f"{DEFAULT_GROUP})", group=ADVANTAGE_GROUP)
    continuations: int = option(8, "continuations sampled per step boundary (V_k's denominator)",
                                group=ADVANTAGE_GROUP)
    temperature: float = option(1.0, "the policy's sampling temperature (groups and continuations)",
                                group=ADVANTAGE_GROUP)
    min_steps: int = option(1, "traces with fewer steps are left out of the within-trace figures (they stay in "
                               "their group's advantages and, with --label all, in its credit agreement)",
                            group=ADVANTAGE_GROUP)
    label: str = option("all", "which traces of an analysed group get the oracle: all (every trace with a step, "
                               "so every group counts for credit agreement) or scored (only those of at least "
                               "--min-steps steps: cheaper, as the first SmolLM2 run)",
                        choices=("all", "scored"), group=ADVANTAGE_GROUP)
    max_new_tokens: int | None = option(None, "longest sampled answer (default: the model's catalogue "
                                              "answering length, 128 on arith-tiny)", group=ADVANTAGE_GROUP)
    cf_cache: str | None = option(None, "JSONL cache of every group of answers, every group's attribution and "
                                        "every step boundary's continuation rewards: a rerun reads back what it "
                                        "holds", group=ADVANTAGE_GROUP)


# Each subcommand's settings, in the order `oar recall --help` lists them.
MODES = {"world": WorldRecall, "steps": StepRecall, "data": DataRecall, GRADED: GradedRecall,
         ADVANTAGE: AdvantageRecall}


def settings_of(args) -> RecallSettings:
    """The settings of a parsed `oar recall MODE` command line (InputError: a count out of
    bounds)."""
    return dataclass_from_args(MODES[args.recall_mode], args)


# ------------------------------------------------------------------ the old spelling, until 0.3

UNTIL = "0.3"


def _take(args: list[str], flag: str, many: bool = False) -> tuple[list[str], list[str] | None]:
    """`args` without `flag` and its values (one, or with `many` every one up to the next
    option), and the values of its last use (argparse's rule), None when it is not there."""
    kept, values, i = [], None, 0
    while i < len(args):
        if args[i] == flag:
            end = i + 1
            while end < len(args) and not args[end].startswith("-") and (many or end == i + 1):
                end += 1
            values, i = args[i + 1:end], end
        elif args[i].startswith(flag + "="):
            values, i = [args[i].split("=", 1)[1]], i + 1
        else:
            kept.append(args[i])
            i += 1
    return kept, values


def _without(args: list[str], flag: str, value: str) -> list[str]:
    """`args` without `flag value` (or `flag=value`) wherever it is."""
    kept, i = [], 0
    while i < len(args):
        if args[i] == flag and args[i + 1:i + 2] == [value]:
            i += 2
        elif args[i] == f"{flag}={value}":
            i += 1
        else:
            kept.append(args[i])
            i += 1
    return kept


def _renamed_positions(args: list[str]) -> list[str]:
    """`args` with graded's `--cf-positions N` spelled `--positions N`."""
    return ["--positions" if a == "--cf-positions" else
            "--positions=" + a.split("=", 1)[1] if a.startswith("--cf-positions=") else a for a in args]


def old_mode(args: list[str]) -> tuple[str, list[str], str]:
    """The subcommand the one-command flags `args` chose, `args` without the flags that chose
    it, and how the old spelling named it. `--granularity token` (the default then) is dropped
    anywhere; a combination the old command refused (`--granularity step` beside `--data` or
    a sampled oracle, graded or advantage beside other sets) is kept for the parser to refuse."""
    sets = _take(args, "--sets", many=True)[1] or []
    rest = _without(args, "--granularity", "token")
    for mode in (GRADED, ADVANTAGE):  # graded first, as the one command chose
        if mode in sets:
            return mode, _take(rest, "--sets", many=True)[0] if sets == [mode] else rest, f"--sets {mode}"
    if _take(args, "--data")[1] is not None:
        return "data", rest, "--data"
    if _take(rest, "--granularity")[1] == ["step"]:
        return "steps", _without(rest, "--granularity", "step"), "--granularity step"
    return "world", rest, ""


def new_spelling(argv: list[str]) -> list[str]:
    """`argv` of the `oar` command line, an old `oar recall ...` (no subcommand after
    `recall`) rewritten to its subcommand's spelling and graded's `--cf-positions` to
    `--positions`, each with one note on stderr (never stdout: with --json the last line
    there stays the JSON object); any other argv as it is."""
    argv = list(argv)
    if argv[:1] != ["recall"] or argv[1:2] in (["-h"], ["--help"]):
        return argv
    if argv[1:2] and argv[1] in MODES:
        mode, rest = argv[1], argv[2:]
        old = new = f"oar recall {mode}"
    else:
        mode, rest, named = old_mode(argv[1:])
        old, new = f"oar recall {named}".rstrip(), f"oar recall {mode}" + (" --data" if mode == "data" else "")
    if mode == GRADED and _renamed_positions(rest) != rest:
        rest = _renamed_positions(rest)
        old, new = f"{old} --cf-positions", f"{new} --positions"
    if old != new:
        bare = " without a subcommand" if old == "oar recall" else ""
        say(f"oar recall: note: `{old}`{bare} is now `{new}`; the old spelling works until {UNTIL}")
    return ["recall", mode, *rest]
