"""Groups without a GRPO signal: counted from rewards (every reward equal: advantage 0), told
in one line with the remedy, and read the same from a JSONL and from a run store."""
from types import SimpleNamespace

import torch

from oar_attrib.analysis.signal import GENERATE, RL_RUN, Knobs, Signal, flat_groups, group_signal, remedy, signal_line, store_signal
from oar_attrib.rollouts import group_advantages

ROWS = [  # (group, reward, correct)
    (0, 1.0, True), (0, 1.0, True),        # every answer right: no signal
    (1, 0.0, False), (1, 0.0, False),      # every answer wrong: no signal
    (2, 1.0, True), (2, 0.0, False),       # mixed: a signal
    (3, 0.5, None), (3, 0.5, None),        # equal partial rewards: no signal, neither right nor wrong
    (None, 1.0, True), (4, None, None),    # no group, no reward: not counted
]


def test_flat_groups_are_those_whose_advantages_are_zero():
    assert flat_groups(ROWS) == {0, 1, 3}
    for key in range(4):  # the same groups by GRPO's own rule
        rewards = torch.tensor([[r for g, r, _ in ROWS if g == key]])
        assert bool((group_advantages(rewards) == 0).all()) == (key in {0, 1, 3})
    assert group_signal(ROWS) == Signal(groups=4, flat=3, all_right=1, all_wrong=1)


def test_signal_line_counts_and_remedy():
    assert signal_line(Signal(groups=4, flat=3, all_right=1, all_wrong=1)) == (
        "3 of 4 groups carry no GRPO signal (1 with every answer wrong, 1 with every answer right): "
        "their advantages are 0, so every reshaped advantage is 0 too; harder questions (every answer "
        "right), easier questions (every answer wrong), more answers per question or a higher sampling "
        "temperature would give them one")
    assert signal_line(Signal(2, 2, 0, 2)).startswith("no group carries a GRPO signal (2 with every answer wrong")
    assert signal_line(Signal(2, 0, 0, 0)) is None and signal_line(Signal(0, 0, 0, 0)) is None


def test_the_remedy_fits_the_groups_and_the_place_that_says_it():
    """All-right groups need harder questions, never easier ones; an import has no --samples."""
    right, wrong, partial = Signal(4, 2, 2, 0), Signal(4, 2, 0, 2), Signal(4, 1, 0, 0)
    assert remedy(right) == "harder questions (every answer right), more answers per question or a higher sampling temperature"
    assert "easier" not in remedy(right) and "harder" not in remedy(wrong) and remedy(wrong).startswith("easier")
    assert remedy(partial) == "more answers per question or a higher sampling temperature"
    assert "--samples" in remedy(right, GENERATE) and "--samples" not in remedy(right, RL_RUN)
    assert "num_generations" in remedy(right, RL_RUN)
    # after `oar generate` advised a lower --temperature to get answers at all: no higher one
    assert remedy(wrong, Knobs(GENERATE.samples, None)) == ("easier questions (every answer wrong) or more "
                                                            "answers per question (--samples)")


def test_a_store_counts_groups_per_step():
    """Groups are keyed by (step, group): group 0 is all right at step 0 and mixed at step 1.
    (A real store is read in tests/test_rollouts.py, through `oar attribute --out *.db`.)"""
    rows = [SimpleNamespace(step=step, group=0, reward=reward, correct=reward > 0)
            for step, reward in [(0, 1.0), (0, 1.0), (1, 1.0), (1, 0.0)]]
    store = SimpleNamespace(traces=lambda run_id, limit: (rows, len(rows)))
    assert store_signal(store, 1) == Signal(groups=2, flat=1, all_right=1, all_wrong=0)
