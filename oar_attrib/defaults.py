"""The defaults of turning importances into weights, declared once for the whole package.

`ReshapeSettings` (`weights.settings`) is built from these, and the gating functions
(`gating`, `weightings`, `step_gating`) default to the same objects; nothing else writes the
numbers. This module imports nothing, so the low-level gating math can read it without an
import cycle through the settings' name checks (which read the method and weighting
registries).
"""
TAU = 0.4  # quantile level that splits suppression from boosting (METHOD.md 6)
BETA = 2.0  # boost strength above the tau-quantile
W_MIN = 0.1  # floor of the suppression gate, before the mass-preserving rescale
RHO = 0.2  # kept fraction of the top-rho weighting
STEP_POOL = "mean"  # how step granularity pools a step's token importances before gating
# How pages, exports and step recall rank steps: a step is as important as its top token, so a
# long step of filler with one decisive token is not averaged away. Gating pools with the mean
# (above) so that a step's weight does not grow with the single largest score.
VIEW_STEP_POOL = "max"
GRANULARITY = "token"
GRANULARITIES = ("token", "step")
