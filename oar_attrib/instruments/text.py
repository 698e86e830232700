"""What the instruments' text reports share: a statistic's cell, the table of methods (the
random method's draw labelled, a random ranking's expectation as its last row), the reading in
words that ends every report, and the settings record `--json` prints beside the report."""
from __future__ import annotations

from types import SimpleNamespace

RANDOM_DRAW, RANDOM_EXPECTED = "random (a draw)", "random expectation"
# The recall's own knobs in a settings record, the same keys for every instrument: one an
# instrument does not take is recorded at the value the one command `oar recall` gave it, so
# that a record reads as it did before the subcommands.
RECALL_FIELDS = ("n", "preset", "granularity", "step_pool", "sets", "cf_positions", "replace", "data",
                 "max_new_tokens", "resample_samples", "intervention_samples")


def stats_cell(stats: dict, value: str) -> str:
    """`mean [lo,hi]` of `mean_ci` stats (`value`: the key of the mean), or n/a without one."""
    if stats[value] is None:
        return "n/a"
    return f"{stats[value]:.3f} [{stats['ci95'][0]:.3f},{stats['ci95'][1]:.3f}]"


def stats_table(report, columns, value: str) -> str:
    """One row per method, the random method's own draw labelled as one, and the random-ranking
    expectation as its own last row; one `stats_cell` per column."""
    rows = {(RANDOM_DRAW if m == "random" else m): v for m, v in report.methods.items()}
    rows[RANDOM_EXPECTED] = report.random
    width = max(len(m) for m in rows)
    lines = [f"{'method':<{width}} " + " ".join(f"{name:>22}" for name in columns)]
    for method, stats in rows.items():
        cells = [stats_cell(stats[name], value) for name in columns]
        lines.append(f"{method:<{width}} " + " ".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines)


def part_table(part: dict, columns, value: str) -> str:
    """`stats_table` of a part of a report ({"methods", "random"}: the right or wrong traces)."""
    return stats_table(SimpleNamespace(methods=part["methods"], random=part["random"]), columns, value)


def reading_lines(report, comparisons, command: str) -> list[str]:
    """The reading in words that ends the text output (`analysis.recall_reading`)."""
    from ..analysis.recall_reading import next_recall_step, recall_reading

    return recall_reading(report, comparisons, next_recall_step(report, command))


def print_reading(report, comparisons, command: str) -> None:
    print("\n".join(reading_lines(report, comparisons, command)))


def recall_record(settings, name: str) -> dict:
    """The settings record of an `oar recall NAME` run: the methods with their parameters as
    used, the probe and seed, the model and dtype, and the recall's own knobs (`recall`)."""
    from ..analysis.sets import DEFAULT_SETS
    from ..attribution import analysis_params
    from ..defaults import (CF_POSITIONS, GRANULARITY, RECALL_MAX_NEW_TOKENS, REPLACEMENT, RESAMPLE_SAMPLES,
                            VIEW_STEP_POOL)
    from ..methods import available_methods
    from ..records.settings_record import settings_record
    from ..weights.settings import ReshapeSettings

    methods = list(settings.methods or available_methods())
    used = analysis_params(methods, settings.params())
    absent = {"preset": None, "data": None, "max_new_tokens": RECALL_MAX_NEW_TOKENS, "cf_positions": CF_POSITIONS,
              "replace": REPLACEMENT, "step_pool": VIEW_STEP_POOL, "resample_samples": RESAMPLE_SAMPLES,
              "intervention_samples": 0, "sets": list(DEFAULT_SETS),
              "granularity": "step" if name == "steps" else GRANULARITY}
    knobs = {f: (list(v) if isinstance(v := getattr(settings, f), tuple) else v) if hasattr(settings, f)
             else absent[f] for f in RECALL_FIELDS}
    return settings_record(ReshapeSettings(probe=settings.probe, seed=settings.seed), methods, used,
                           model=settings.model, dtype=settings.dtype, recall=knobs)


def cache_record(settings, name: str) -> dict:
    """The record a cache of instrument `name` carries on its first line: the model's identity
    and dtype (what every entry depends on, the rest of what made an entry is in its key) and
    the instrument; the same for every shard of one command."""
    from ..records.settings_record import RECORD_FORMAT, model_identity
    from ..version import __version__

    return {"format": RECORD_FORMAT, "model": model_identity(settings.model), "dtype": settings.dtype,
            "version": __version__, "instrument": name}
