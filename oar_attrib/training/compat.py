"""Compatibility with TRL: the range supported (`TRL_MIN`, `TRL_MAX`, pyproject.toml's) and its
check (`check_trl_version`), and the private names of TRL's `GRPOTrainer` the project reaches,
all behind this one seam.

TRL may rename a private name in any release (the pin, `trl>=1.16,<1.17`, is one minor
release for that reason; the hooks rely on `_generate_and_score_completions` returning a dict
with per-sequence "advantages" and on `_compute_loss` accepting (B, T) advantages); here each is
listed, reached and checked, so that a rename is one line naming the names and the versions
this seam was checked on (`check`, run when an `OARGRPOTrainer` is built), not an
AttributeError in the middle of a run:

- `_generate_and_score_completions`, `_calculate_rewards`: overridden by `OARGRPOTrainer`
  (reshaping the advantages, keeping each reward); `oar align` calls the first (`generate_and_score`);
- `_get_per_token_logps_and_entropies`: the forward `oar align` shares between the methods'
  backward passes (`FORWARD`, replaced on the instance and restored);
- `_metrics` (`metrics`: the logs TRL averages), `_step` (`step`: loss calls so far),
  `_tokenizer` (`tokenizer`), `_entropy_bonus_enabled` (`entropy_bonus`): read.
"""
from __future__ import annotations

import os

from packaging.version import Version

from ..compat import private_names_missing, version_line
from ..errors import LibraryVersionError
from .errors import UnsupportedTRLError

TRL_MIN, TRL_MAX = Version("1.16.0"), Version("1.17.0")  # supported: pyproject.toml's range
TRL_OVERRIDE_ENV = "OAR_ALLOW_UNTESTED_TRL"
TRL_CHECKED_ON = "1.16.0"  # the TRL versions every name below was read against
FORWARD = "_get_per_token_logps_and_entropies"
TRL_NAMES = tuple(f"trl:GRPOTrainer.{name}" for name in (
    "_generate_and_score_completions", "_calculate_rewards", FORWARD,
    "_metrics", "_step", "_tokenizer", "_entropy_bonus_enabled"))


def check_trl_version(version: str | None = None) -> None:
    """Raise `UnsupportedTRLError` unless TRL is in [TRL_MIN, TRL_MAX) (or the override is set)."""
    if version is None:
        import trl

        version = trl.__version__
    if TRL_MIN <= Version(version) < TRL_MAX or os.environ.get(TRL_OVERRIDE_ENV) == "1":
        return
    raise UnsupportedTRLError(
        f"trl {version} is installed, but OARGRPOTrainer was tested with trl >={TRL_MIN},<{TRL_MAX} "
        f"(it overrides GRPOTrainer internals that change between releases); install "
        f"'trl>={TRL_MIN},<{TRL_MAX}', or set {TRL_OVERRIDE_ENV}=1 to try this version anyway"
    )


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
