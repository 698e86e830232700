"""The reports of runs: gradient alignment's (`align`: its statistics, `align_step`: what a
reshaping does to GRPO's step, `align_folder`: its result files, `align_reading`: the reading in
words) and a training grid's (`experiment`: curves and paired differences, `experiment_stats`,
`experiment_figures`), beside their producers in `training`. They read what a run wrote; the
statistics they share are `analysis.stats`."""
