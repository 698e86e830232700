"""oar-attrib: Outcome-grounded Advantage Reshaping for reasoning LLMs.

The public API is declared below and imported lazily (PEP 562, `lazy.lazy_exports`), so that
`import oar_attrib` and the command line start without loading torch until a name that needs
it is used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

from .version import __version__  # noqa: F401  (written in `version`, which pyproject.toml reads)

if TYPE_CHECKING:  # every export; each loads on first use
    from .analysis import stats  # the statistics every report uses: bootstrap, Holm, t intervals
    from .analysis.agreement import agreement_matrix
    from .instruments.data.oracle import counterfactual_oracle
    from .reports.experiment import experiment_report, paired_difference
    from .reports.experiment_figures import experiment_credit_figure, experiment_figure
    from .analysis.figures import method_agreement, recall_figure, token_heatmap, weights_figure
    from .instruments.world.recall import RecallReport, oracle_recall
    from .analysis.run_summary import summarise
    from .attribution import attribute, compute_weights  # compute_weights: deprecated, weights.pipeline.weigh
    from .models.generation import generate
    from .inputs.batch import ScoringBatch
    from .inputs.encoding import encode_pairs
    from .inputs.spans import find_answer_span, locate_answer, segment_tokens
    from .inputs.steps import step_spans, token_steps
    from .methods import available_methods, get_method, register_method
    from .methods.oar_p import oar_p_reference
    from .models import load_model
    from .records.traces import AttributionBatch, TraceAttribution
    from .store import Store
    from .weights.gating import bilevel_weights, entropy_topk_mask, grail_weights, reshape_advantages
    from .weights.metrics import average_precision, ess_ratio, recall_at_k, top_mass
    from .weights.settings import ReshapeSettings
    from .world import WorldConfig, generate_problems, oracle_spans, reward

__all__ = [
    "AttributionBatch", "RecallReport", "ReshapeSettings", "ScoringBatch", "Store", "TraceAttribution",
    "WorldConfig", "agreement_matrix", "attribute", "available_methods", "average_precision", "bilevel_weights",
    "compute_weights", "counterfactual_oracle", "encode_pairs", "entropy_topk_mask", "ess_ratio",
    "experiment_credit_figure", "experiment_figure", "experiment_report", "find_answer_span",
    "generate", "generate_problems", "get_method", "grail_weights", "load_model", "locate_answer",
    "method_agreement", "oar_p_reference", "oracle_recall", "oracle_spans", "paired_difference",
    "recall_at_k", "recall_figure", "register_method", "reshape_advantages", "reward",
    "segment_tokens", "stats", "step_spans", "summarise", "token_heatmap", "token_steps", "top_mass",
    "weights_figure",
]

# The figures are plotly's, which comes with the web extra.
__getattr__, __dir__ = lazy_exports(__name__, __file__, extras={
    "oar_attrib.analysis.figures": "web", "oar_attrib.reports.experiment_figures": "web"})
