"""Exception types of reshaped GRPO training, one per failure family.

All derive from `oar_attrib.errors.OARError`, so `oar train` reports them as one-line errors.
"""
from oar_attrib.errors import OARError


class TrainingConfigError(OARError, ValueError):
    """A training setting (config field, YAML key, override) that cannot work as given."""


class UnsupportedTRLError(OARError, ImportError):
    """The installed TRL is outside the version range the trainer hooks were tested against."""


class DataError(OARError, ValueError):
    """A training data file or record that cannot be turned into prompts and answers."""


class LowSpanRateWarning(UserWarning):
    """Most completions of a generation batch have no answer span in the configured format, so
    their weights are 1 and the run is close to plain GRPO."""


class AlignError(OARError, ValueError):
    """A gradient-alignment setting, store or batch that cannot be measured as given."""
