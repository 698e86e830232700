"""Analysis of attributions and runs: the statistics every report uses, readings in words,
verdicts, figures, and the run and experiment reports. The instruments that measure
(`instruments`) report through it; the pipeline never imports it."""
