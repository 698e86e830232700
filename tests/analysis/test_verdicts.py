"""Readings in words: a comparison is resolved better, worse or not by its 95% interval, in the
direction that favours the method; the block lists verdicts, the leader, caveats and next step."""
import math

from oar_attrib.analysis.verdicts import (Comparison, caveat_few, caveat_reliability, caveat_smoke, caveats,
                                          leader, plain, reading, verdict)


def test_outcome_follows_the_interval_and_the_direction():
    assert Comparison("a", "random", "recall", 0.2, 0.1, 0.3).outcome == "better"
    assert Comparison("a", "random", "recall", -0.2, -0.3, -0.1).outcome == "worse"
    assert Comparison("a", "random", "recall", 0.05, -0.01, 0.1).outcome == "unresolved"
    assert Comparison("a", "GRPO", "loss", -0.2, -0.3, -0.1, higher_is_better=False).outcome == "better"
    assert Comparison("a", "random", "recall", 0.2).outcome == "unresolved"  # no interval
    assert Comparison("a", "random", "recall", None).outcome == "unmeasured"
    assert Comparison("a", "random", "recall", math.nan, 0.1, 0.2).outcome == "unmeasured"


def test_verdict_sentences():
    assert verdict(Comparison("oar_p", "random", "direct recall", 0.21, 0.15, 0.27)) == (
        "oar_p: resolved better than random on direct recall (+0.210 [+0.150, +0.270]).")
    assert verdict(Comparison("ig", "random", "direct recall", 0.01, -0.02, 0.04)) == (
        "ig: not resolved from random on direct recall (+0.010 [-0.020, +0.040]; the 95% interval holds 0).")
    assert verdict(Comparison("ig", "random", "direct recall", None)) == (
        "ig: not measured against random on direct recall (no trace could be scored).")


def test_reading_block_and_leader():
    comps = [Comparison("oar_p", "random", "recall", 0.21, 0.15, 0.27),
             Comparison("oar_g", "random", "recall", 0.30, 0.10, 0.50),
             Comparison("ig", "random", "recall", -0.1, -0.2, -0.05)]
    assert leader(comps) == "Leading: oar_g (the largest resolved gain over random on recall)."
    lines = reading(comps, caveats(caveat_few(12, 30), None, caveat_smoke()), "oar recall world --n 200")
    assert lines[0] == "Reading:" and lines[1:4] == [f"  {verdict(c)}" for c in comps]
    assert lines[4] == "  " + leader(comps)
    assert lines[5:] == ["Caveats:", "  - " + caveat_few(12, 30), "  - " + caveat_smoke(),
                         "Next: oar recall world --n 200"]
    assert "No method is resolved better" in reading(comps[2:])[-1]


def test_caveats_apply_only_when_they_should():
    assert caveat_few(30, 30) is None and "only 29 traces" in caveat_few(29, 30)
    assert caveat_reliability(0.195, 0.5) == ("the reference's reliability is 0.20 (below 0.50): "
                                              "differences against it are mostly noise")
    assert caveat_reliability(0.6, 0.5) is None and caveat_reliability(None, 0.5) is None


def test_plain_never_gives_a_repr():
    assert plain({"k": 8, "positions": [1, 2], "p": 0.123456}) == "k 8, positions 1, 2, p 0.1235"
    assert plain({}) == ""


def test_a_family_member_is_resolved_only_where_its_holm_p_is_below_alpha():
    kept = Comparison("a", "GRPO", "credit", 0.24, 0.20, 0.28, p_holm=0.64)
    assert kept.outcome == "unresolved" and kept.held_by_holm
    assert verdict(kept) == "a: not resolved from GRPO on credit (+0.240 [+0.200, +0.280]; Holm p 0.640 across the methods)."
    assert Comparison("a", "GRPO", "credit", 0.24, 0.20, 0.28, p_holm=0.01).outcome == "better"
    assert Comparison("a", "GRPO", "credit", -0.24, -0.28, -0.20, p_holm=0.049).outcome == "worse"
    held = Comparison("a", "GRPO", "credit", 0.05, -0.01, 0.1, p_holm=0.9)  # the interval says it first
    assert verdict(held).endswith("(+0.050 [-0.010, +0.100]; the 95% interval holds 0).")
    assert leader([kept]) is None

