"""The private names of TRL's `GRPOTrainer` the project reaches, all behind this one seam.

TRL may rename a private name in any release (the pin, `trl>=1.16,<1.17`, is one minor
release for that reason); here each is listed, reached and checked, so that a rename is one
line naming the names and the versions this seam was checked on (`check`, run when an
`OARGRPOTrainer` is built), not an AttributeError in the middle of a run:

- `_generate_and_score_completions`, `_calculate_rewards`: overridden by `OARGRPOTrainer`
  (reshaping the advantages, keeping each reward); `oar align` calls the first (`generate_and_score`);
- `_get_per_token_logps_and_entropies`: the forward `oar align` shares between the methods'
  backward passes (`FORWARD`, replaced on the instance and restored);
- `_metrics` (`metrics`: the logs TRL averages), `_step` (`step`: loss calls so far),
  `_tokenizer` (`tokenizer`), `_entropy_bonus_enabled` (`entropy_bonus`): read.
"""
from __future__ import annotations

from ..errors import LibraryVersionError
from ..inputs.transformers_private import private_names_missing, version_line

TRL_CHECKED_ON = "1.16.0"  # the TRL versions every name below was read against
FORWARD = "_get_per_token_logps_and_entropies"
TRL_NAMES = tuple(f"trl:GRPOTrainer.{name}" for name in (
    "_generate_and_score_completions", "_calculate_rewards", FORWARD,
    "_metrics", "_step", "_tokenizer", "_entropy_bonus_enabled"))


def check(names=TRL_NAMES) -> None:
    """LibraryVersionError, in one line, when the installed TRL lacks one of `names`."""
    missing = private_names_missing(names)
    if missing:
        raise LibraryVersionError(version_line("trl", TRL_CHECKED_ON, missing))


def metrics(trainer, mode: str = "train"):
    """The trainer's logs of `mode` (name -> list of values), which TRL averages at each log."""
    return trainer._metrics[mode]


def step(trainer) -> int:
    """The loss calls the trainer has made (TRL's `_step`)."""
    return trainer._step


def tokenizer(trainer):
    """The trainer's text tokenizer (of a processor, its tokenizer)."""
    return trainer._tokenizer


def entropy_bonus(trainer) -> bool:
    """Whether the trainer's loss carries an entropy bonus (entropy_coef or an adaptive one)."""
    return trainer._entropy_bonus_enabled


def generate_and_score(trainer, rows: list[dict]) -> dict:
    """TRL's generation output for `rows`: completions sampled, rewarded and given advantages."""
    return trainer._generate_and_score_completions(rows)
