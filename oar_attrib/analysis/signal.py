"""Which groups carry a GRPO signal: a group whose answers all have the same reward (every
answer right, or every answer wrong) has advantage A_i = 0 for each answer, so every reshaped
advantage A_i * w_t is 0 too, whatever the token credit. TRL logs the share of such groups as
`frac_reward_zero_std`; every command that makes or reads a run says it in one line
(`signal_line`), and the run pages mark such a group.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable, Iterable


@dataclass(frozen=True)
class Knobs:
    """How the place that says the line spells the two sampling knobs that give a flat group a
    signal: more answers per question and a higher temperature (`oar generate`'s flags, the RL
    run's settings for an import, words on a page). temperature None: not advised (`oar
    generate` after it advised a lower one to get answers at all)."""

    samples: str = "more answers per question"
    temperature: str | None = "a higher sampling temperature"


GENERATE = Knobs("more answers per question (--samples)", "a higher --temperature")
ATTRIBUTE = Knobs("more answers per question (oar generate --samples)",
                  "a higher temperature (oar generate --temperature)")
RL_RUN = Knobs("more completions per prompt in the RL run (TRL's num_generations, verl's rollout.n)",
               "a higher sampling temperature there")


@dataclass(frozen=True)
class Signal:
    """groups: the groups seen (answers without a group are not counted); flat: those whose
    rewards are all equal (no GRPO signal), of which all_right with every answer right and
    all_wrong with every answer wrong (a flat group with other rewards is in neither)."""

    groups: int
    flat: int
    all_right: int
    all_wrong: int


def flat_groups(rows: Iterable[tuple[Hashable, float | None, bool | None]]) -> set:
    """The keys of the groups whose known rewards are all equal, of (group key, reward, correct)
    rows; rows with no group or no reward are left out."""
    return {key for key, rewards in _rewards(rows).items() if len(set(rewards)) == 1}


def _rewards(rows) -> dict:
    found: dict = defaultdict(list)
    for key, reward, _ in rows:
        if key is not None and reward is not None:
            found[key].append(float(reward))
    return found


def group_signal(rows: Iterable[tuple[Hashable, float | None, bool | None]]) -> Signal:
    """The `Signal` of (group key, reward, correct) rows (correct None: not known, so such a
    group is neither all right nor all wrong)."""
    rows = list(rows)
    by_group: dict = defaultdict(list)
    for key, reward, correct in rows:
        if key is not None and reward is not None:
            by_group[key].append(None if correct is None else bool(correct))
    flat = flat_groups(rows)
    right = sum(all(c is True for c in by_group[k]) for k in flat)
    wrong = sum(all(c is False for c in by_group[k]) for k in flat)
    return Signal(groups=len(by_group), flat=len(flat), all_right=right, all_wrong=wrong)


def remedy(signal: Signal, knobs: Knobs = Knobs()) -> str:
    """What gives the flat groups of `signal` a signal, fitted to them: harder questions for
    groups every answer of which is right, easier ones for those all wrong, and for both the
    sampling `knobs`."""
    questions = [text for n, text in ((signal.all_right, "harder questions (every answer right)"),
                                      (signal.all_wrong, "easier questions (every answer wrong)")) if n]
    sampling = [k for k in (knobs.samples, knobs.temperature) if k]
    return ", ".join(questions + sampling[:-1]) + (" or " if questions or sampling[:-1] else "") + sampling[-1]


def signal_line(signal: Signal, knobs: Knobs = Knobs()) -> str | None:
    """One line on the groups without a GRPO signal and what to do (`remedy`, in the `knobs`
    of the place that says it); None when every group has one (or there is no group)."""
    if not signal.groups or not signal.flat:
        return None
    why = f"{signal.all_wrong} with every answer wrong, {signal.all_right} with every answer right"
    head = ("no group carries a GRPO signal" if signal.flat == signal.groups else
            f"{signal.flat} of {signal.groups} groups carry no GRPO signal")
    return (f"{head} ({why}): their advantages are 0, so every reshaped advantage is 0 too; "
            f"{remedy(signal, knobs)} would give them one")


def store_signal(store, run_id: int) -> Signal:
    """The `Signal` of a stored run (groups keyed by step and group)."""
    rows, _ = store.traces(run_id, limit=1 << 62)
    return group_signal(((r.step, r.group) if r.group is not None else None, r.reward, r.correct)
                        for r in rows)
