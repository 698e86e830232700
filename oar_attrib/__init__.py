"""oar-attrib: Outcome-grounded Advantage Reshaping for reasoning LLMs.

The public API is imported lazily (PEP 562), so that `import oar_attrib` and the command line
start without loading torch until a name that needs it is used.
"""
from __future__ import annotations

import importlib

__version__ = "0.2.0.dev0"  # the one place; pyproject.toml reads it (CHANGELOG.md: 0.2.0 is unreleased)

_EXPORTS = {
    "attribute": "attribution",
    "AttributionBatch": "records.traces",
    "TraceAttribution": "records.traces",
    "compute_weights": "attribution",  # deprecated: weights.pipeline.weigh
    "ReshapeSettings": "weights.settings",
    "load_model": "models",
    "find_answer_span": "inputs.spans",
    "locate_answer": "inputs.spans",
    "segment_tokens": "inputs.spans",
    "step_spans": "inputs.steps",
    "token_steps": "inputs.steps",
    "encode_pairs": "inputs.encoding",
    "ScoringBatch": "inputs.batch",
    "bilevel_weights": "weights.gating",
    "entropy_topk_mask": "weights.gating",
    "grail_weights": "weights.gating",
    "reshape_advantages": "weights.gating",
    "ess_ratio": "weights.metrics",
    "top_mass": "weights.metrics",
    "recall_at_k": "weights.metrics",
    "average_precision": "weights.metrics",
    "counterfactual_oracle": "analysis.counterfactual",
    "oracle_recall": "analysis.recall",
    "RecallReport": "analysis.recall",
    "generate": "generation",
    "recall_figure": "analysis.figures",
    "token_heatmap": "analysis.figures",
    "agreement_matrix": "analysis.agreement",
    "method_agreement": "analysis.figures",
    "weights_figure": "analysis.figures",
    "experiment_report": "analysis.experiment",
    "paired_difference": "analysis.experiment",
    "experiment_figure": "analysis.experiment_figures",
    "experiment_credit_figure": "analysis.experiment_figures",
    "get_method": "methods",
    "register_method": "methods",
    "available_methods": "methods",
    "oar_p_reference": "methods.oar_p",
    "WorldConfig": "world",
    "generate_problems": "world",
    "oracle_spans": "world",
    "reward": "world",
    "Store": "store",
    "summarise": "analysis.run_summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'oar_attrib' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
