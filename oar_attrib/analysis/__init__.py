"""Analysis of attributions: the statistics every report uses, readings in words, verdicts and
the figures. The instruments that measure (`instruments`) and the reports of runs (`reports`)
read it; the pipeline never imports it."""
