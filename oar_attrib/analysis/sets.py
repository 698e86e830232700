"""The names of the sets recall scores against, importable without torch (the CLI's parser
lists them): the world's oracle sets and the counterfactual oracle's causal positions."""
from __future__ import annotations

from ..world import DEFAULT_SETS, KNOWN_SETS

COUNTERFACTUAL = "counterfactual"
RECALL_SETS = KNOWN_SETS + (COUNTERFACTUAL,)

__all__ = ["COUNTERFACTUAL", "DEFAULT_SETS", "RECALL_SETS"]
