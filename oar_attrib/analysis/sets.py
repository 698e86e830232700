"""The names of the sets recall scores against, importable without torch (the CLI's parser
lists them): the arithmetic world's oracle sets, the counterfactual oracle's causal positions,
the word-problem world's value-oracle sets (`oar recall data --data wordworld:<preset>`) and the
graded oracle's flip rates; and the subsets of a run's traces its summaries are taken over."""
from __future__ import annotations

from ..world import DEFAULT_SETS, KNOWN_SETS, VALUE_SETS

COUNTERFACTUAL = "counterfactual"
# The graded counterfactual oracle (`instruments.graded.oracle`): not a set of positions but a flip rate per
# position, scored by rank correlation and tercile AUC; `oar recall graded` runs it.
GRADED = "graded"
# The Monte-Carlo advantage oracle (`advantage_oracle`): a value change dV per step, scored by
# rank correlation and credit agreement; `oar recall advantage` runs it.
ADVANTAGE = "advantage"
RECALL_SETS = KNOWN_SETS + (COUNTERFACTUAL,)
# Every set an `oar recall` subcommand's `--sets` names: the value oracle's are scored on word-problem data only.
CLI_SETS = tuple(dict.fromkeys(RECALL_SETS + VALUE_SETS + (GRADED, ADVANTAGE)))
SUBSETS = ("all", "correct", "wrong")  # the traces a run's summaries and profiles are taken over

__all__ = ["ADVANTAGE", "CLI_SETS", "COUNTERFACTUAL", "DEFAULT_SETS", "GRADED", "RECALL_SETS", "SUBSETS"]
