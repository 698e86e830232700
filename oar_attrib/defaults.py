"""The defaults of the pipeline's knobs and the names a probe is chosen from, declared once for
the whole package.

`ReshapeSettings` (`weights.settings`) is built from these; every importance method, the gating
functions (`gating`, `weightings`, `step_gating`), the analysis, the command line and the pages
default to the same objects, and nothing else writes the values (tests/test_architecture.py
checks it). This module imports nothing, so every wing reads it, and the command line builds
its help from it without loading torch.
"""
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

# `oar attribute`'s methods when --methods is not given (`cli.choices.default_methods`): token
# OAR-P and OAR-G on the bundled model (a fraction of a second a trace); on any other model the
# reading set, hierarchical OAR-P, OAR-G and entropy, whose first trace of a few hundred tokens
# ends within a minute or two on a CPU, where token OAR-P (a forward per reasoning token) takes
# minutes a trace: it runs when named.
BUNDLED_METHODS = ("oar_p", "oar_g")
READING_METHODS = ("oar_p_hier", "oar_g", "entropy")

# Plain GRPO: the registered method of uniform weights (`methods.none`), and the baseline every
# paired comparison (an experiment grid's, gradient alignment's) is made against.
NO_METHOD = "none"
