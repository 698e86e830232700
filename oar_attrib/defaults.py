"""The defaults of the pipeline's knobs and the names a probe is chosen from, declared once for
the whole package.

`ReshapeSettings` (`weights.settings`) is built from these; every importance method, the gating
functions (`gating`, `weightings`, `step_gating`), the analysis, the command line and the pages
default to the same objects, and nothing else writes the values (tests/test_architecture.py
checks it). It also holds the one field helper every settings field is made with (`option`,
with the bounds both the parser and the settings check). This module imports only the standard
library and `errors`, so every wing reads it, and the command line builds its help from it
without loading torch.
"""
from __future__ import annotations

import dataclasses

from .errors import InputError

# Outcome probes (METHOD.md 3), implemented in `methods.probes`: what the model believes about
# its final answer, read at the answer span.
PROBES = ("lt", "as_mean", "as_joint")
PROBE = "as_mean"  # the probe of every method, command and page unless one is chosen

TAU = 0.4  # quantile level that splits suppression from boosting (METHOD.md 6)
BETA = 2.0  # boost strength above the tau-quantile
W_MIN = 0.1  # floor of the suppression gate, before the mass-preserving rescale
RHO = 0.2  # kept fraction of the top-rho weighting
GRANULARITY = "token"
GRANULARITIES = ("token", "step")

# Two poolings of a step's token scores (the names are `inputs.steps.STEP_POOLS`), for two jobs:
# gating pools with the mean, so that a step's weight does not grow with its single largest
# score; pages, exports and step recall rank steps by their top token (a step is as important
# as its most important token, so a long step of filler with one decisive token is not
# averaged away).
GATING_STEP_POOL = "mean"  # granularity='step': a step's importance before gating
VIEW_STEP_POOL = "max"  # how a step is ranked where it is shown or scored

# Answer formats (the names are `inputs.spans.ANSWER_FORMATS`): where the span finder looks for
# the final answer unless told; the format a generated prompt asks for
# (`rollouts.PROMPT_TEMPLATES`); the one the arithmetic world writes (`world.WORLD_FORMATS`).
ANSWER_FORMAT = "auto"
PROMPT_FORMAT = "boxed"
WORLD_FORMAT = "gsm8k"

# The model a command runs on when neither its flags nor its input name one (`catalogue`:
# the bundled arithmetic model, which needs no download).
DEFAULT_MODEL = "arith-tiny"

# `oar attribute`'s methods on the bundled model when --methods is not given (`cli.choices.
# default_methods`): token OAR-P and OAR-G (a fraction of a second a trace). On any other model
# it is the registry's reading set (`methods.default_methods("reading")`: hierarchical OAR-P,
# OAR-G and entropy), whose first trace of a few hundred tokens ends within a minute or two on
# a CPU, where token OAR-P (a forward per reasoning token) takes minutes a trace: it runs when named.
BUNDLED_METHODS = ("oar_p", "oar_g")

# Plain GRPO: the registered method of uniform weights (`methods.none`), and the baseline every
# paired comparison (an experiment grid's, gradient alignment's) is made against.
NO_METHOD = "none"

# The sampled oracles' sizes, one default each for the API and `oar recall`: the graded oracle's
# replacements per tested position and tested positions per trace (`instruments.graded.
# oracle.GradedSettings`), the advantage oracle's continuations per step boundary
# (`instruments.advantage.oracle.AdvantageSettings`).
GRADED_K = 8
GRADED_POSITIONS = 32
ADVANTAGE_CONTINUATIONS = 16
# Tokens a regeneration (the counterfactual and graded oracles') or a continuation (the
# advantage oracle's) may write beyond what is left of the original response.
REGENERATION_MARGIN = 16
# Which traces of an analysed group the advantage oracle labels (`advantage_recall`): every one
# with a step (every mixed group counts for credit agreement), or those of --min-steps only.
ADVANTAGE_LABELS = ("all", "scored")
# The recall instruments' own defaults (`instruments`), which their settings records also give
# an instrument that does not take them: counterfactual positions per trace, what replaces a
# tested token, the longest greedy answer, resampling's continuations.
CF_POSITIONS = 64
REPLACEMENT = "pad"
RECALL_MAX_NEW_TOKENS = 256
RESAMPLE_SAMPLES = 8


# Reshaped GRPO on verl (`training.verl`): the one method of the paper's OAR-P family that runs
# where verl's policy is, through its actor's per-token log-probabilities, with the one probe
# those give (the answer tokens' own log-probabilities; `lt` and `as_mean` need whole
# distributions, which the actor does not return).
VERL_METHOD = "oar_p_step"
VERL_PROBE = "as_joint"

# ------------------------------------------------------------------ the one field helper
# Every settings field of the package is made here (`option`): its default, its help text, how
# its flag is spelled and parsed, and its bounds, which the parser's check
# (`commands.check_flag_numbers`) and the settings' own (`check_bounds`) both read. It sits with
# the defaults, below everything, so that the method knobs (`methods.registry.knob`) and the
# reshaping settings use it without importing the command line.

# The largest count a command-line number may ask for (noise draws, samples, batches): larger ones
# allocate memory by the terabyte before any check of theirs could run.
MAX_COUNT = 100_000


# The one bound of a seed, every command's and every settings class's: numpy's legacy seeding,
# which some of the instruments' bootstraps reach, takes no more than 32 bits.
SEED = (0, 2**32 - 1)
# The largest magnitude a float setting may have: the computations run in float32.
FLOAT32_MAX = 3.4028234663852886e38
def bounds_problem(value, bounds: tuple | None, kind: type = float) -> str | None:
    """Why the int or float `value` is outside `bounds` ((low, high), either None: open) or,
    for a float, not finite or past float32's range; None when it is fine."""
    import math

    low, high = bounds or (None, None)
    number = kind is float or isinstance(value, float)
    finite = not number or (math.isfinite(value) and abs(value) <= FLOAT32_MAX)
    if finite and (low is None or value >= low) and (high is None or value <= high):
        return None
    noun = "a finite number" if number else "an integer"
    if low is None and high is None:
        return f"must be {noun} within float32's range, got {value}"
    if high is None:
        return f"must be {noun} >= {low}, got {value}"
    if low is None:
        return f"must be {noun} <= {_power(high)}, got {value}"
    return f"must be {noun} from {low} to {_power(high)}, got {value}"


def check_bounds(settings) -> None:
    """InputError naming the flag of the first field of the dataclass `settings` whose value
    is outside its declared `bounds` (`option(bounds=...)`) or, for a float, not finite or past
    float32: what `__post_init__` calls, reading the same bounds as the parser's check
    (`check_flag_numbers`), so the two cannot disagree."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        problem = bounds_problem(value, f.metadata.get("bounds"), float if isinstance(value, float) else int)
        if problem:
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            raise InputError(f"{flag if isinstance(flag, str) else flag[-1]} {problem}")


def _power(n: int) -> str:
    """`n` as people write a large bound: 2**63 - 1, 2**31, else the digits."""
    if n > 10**6 and (n + 1) & n == 0:
        return f"2**{n.bit_length()} - 1"
    if n > 10**6 and n & (n - 1) == 0:
        return f"2**{n.bit_length() - 1}"
    return str(n)


def option(default=dataclasses.MISSING, help: str = "", *, default_factory=dataclasses.MISSING,
           **flag) -> dataclasses.Field:
    """A settings field, the one way a field with help text is written (every settings object's,
    also those TRL's or transformers' parsers read, whose `metadata["help"]` this is): its
    default and its help text and, for a command-line flag (`add_dataclass_args`), how the
    flag is spelled and parsed, any of
    flag:    the option strings, when not `--field-name` ("--out" or ("-n", "--n"));
             a name without dashes makes a positional argument;
    type:    the parser of the text (default: the field's type, a `T | None` a T);
    choices, metavar, nargs, required: as argparse's;
    action:  "store_true" for a switch named as the field (default for a bool:
             `--name/--no-name`);
    group:   the title of the argument group the flag is listed under in `--help`;
    bounds:  (low, high) of a number, either None for open: the parser's check
             (`check_flag_numbers`) and the dataclass's (`check_bounds`) both read it.
    Any other key is kept in the field's metadata for its readers (a method knob's `kind`
    and `analysis` default, a reshaping setting's `config` name).
    A field without a default is a required flag; a list default is given as a tuple (or, in
    a settings object that is no flag, made by `default_factory`)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"help": help, **flag})


