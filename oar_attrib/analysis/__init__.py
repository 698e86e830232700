"""Analysis of attributions: oracle recall with intervals, the counterfactual oracle, and the
figures. Reads the pipeline's results; the pipeline never imports it."""
