"""`oar recall intervention`, the advantage oracle's positive control: the sites of a reference
solution and of a model's own word-problem trace, the pooled AUC and the mean drops against
hand computations, and the control passing on the bundled model's arithmetic world."""
import json

import numpy as np
import pytest

from oar_attrib.cli import main
from oar_attrib.instruments.intervention import mean_drops, pooled_auc, trace_sites, world_sites
from oar_attrib.world import generate_problems
from oar_attrib.world.words import generate_word_problems


def test_a_reference_solution_s_sites_are_its_steps_with_the_result_shifted():
    problem = generate_problems(1, "default", seed=0, split="test")[0]
    assert problem.solution == "z=2+3=5. p=5*6=30. i=30-8=22. #### 35"  # the answer is p+z
    sites = world_sites(problem, 7, by=2)
    assert [(s.trace, s.step, s.kind) for s in sites] == [(7, 0, "chain"), (7, 1, "chain"), (7, 2, "distractor")]
    assert (sites[1].intact, sites[1].corrupt) == ("z=2+3=5. p=5*6=30", "z=2+3=5. p=5*6=32")
    assert sites[2].corrupt.endswith("i=30-8=24")


def test_a_word_trace_s_sites_are_its_steps_last_quantity():
    problem = next(p for p in generate_word_problems(50, "easy", seed=0, split="test") if p.roles())
    values = {role: v for v, role in problem.roles().items()}
    trace = (f"1. We start from {values['upstream'] if 'upstream' in values else values['direct']}.\n"
             f"2. A number {values.get('distractor', 999)} that does not matter.\n"
             f"3. The answer is {problem.answer}.")
    sites = trace_sites(trace, 0, problem)
    assert sites[0].kind == "chain" and sites[0].corrupt != sites[0].intact
    if "distractor" in values:
        assert sites[1].kind == "distractor"
        assert sites[1].corrupt.endswith(f"A number {values['distractor'] + 1} that does not matter.")
    assert all(s.step < 2 for s in sites)  # the last step (the answer) is no site
    bare = trace_sites("1. Tom has 10 cards.\n2. He buys 2 more: 12.\nThe answer is 12.", 3)
    assert [(s.step, s.kind, s.corrupt.splitlines()[-1]) for s in bare] == [
        (0, "chain", "1. Tom has 11 cards."), (1, "chain", "2. He buys 2 more: 13.")]


def _rows():
    # trace 0: chain drops 0.5, 0.3, distractor 0.0; trace 1: chain 0.1, distractor 0.2 (placebo beside the chains)
    return [{"trace": 0, "kind": "chain", "drop": 0.5, "placebo": 0.05}, {"trace": 0, "kind": "chain", "drop": -0.3,
                                                                          "placebo": -0.1},
            {"trace": 0, "kind": "distractor", "drop": 0.0}, {"trace": 1, "kind": "chain", "drop": 0.1, "placebo": 0.1},
            {"trace": 1, "kind": "distractor", "drop": -0.2}]


def test_the_pooled_auc_by_hand():
    got = pooled_auc(_rows(), "distractor", n_boot=200)
    # |chain| 0.5, 0.3, 0.1 against |distractor| 0.0, 0.2: 5 of 6 pairs won
    assert got["mean"] == pytest.approx(5 / 6) and (got["chain"], got["negatives"], got["traces"]) == (3, 2, 2)
    assert got["too_few"] and not got["passes"]  # 2 traces: never a pass
    assert 0 <= got["low"] <= got["mean"] <= got["high"] <= 1
    placebo = pooled_auc(_rows(), "placebo", n_boot=200)
    # |chain| 0.5, 0.3, 0.1 against |placebo| 0.05, 0.1, 0.1: 7 won, 2 ties (0.1 against 0.1) of 9
    assert placebo["mean"] == pytest.approx((7 + 0.5 * 2) / 9) and placebo["negatives"] == 3
    assert pooled_auc(_rows(), "distractor", n_boot=200) == got  # seeded
    assert pooled_auc([r for r in _rows() if r["kind"] == "chain"], "distractor")["mean"] is None  # no negative


def test_the_mean_drops_by_hand():
    got = mean_drops(_rows(), n_boot=200)
    assert got["chain"]["mean"] == pytest.approx((0.5 - 0.3 + 0.1) / 3) and got["chain"]["sites"] == 3
    assert got["distractor"]["mean"] == pytest.approx(-0.1) and got["distractor"]["traces"] == 2
    assert got["placebo"]["mean"] == pytest.approx(0.05 / 3)
    assert got["chain"]["low"] <= got["chain"]["mean"] <= got["chain"]["high"]


def test_the_control_passes_on_the_bundled_arithmetic_world_and_resumes(capsys, tmp_path):
    """30 reference solutions of `default`, 16 continuations a side: corrupting a chain step's
    result drops V, a distractor's does not, and |dV| separates them (the interval above 0.5)."""
    argv = ["recall", "intervention", "--model", "arith-tiny", "--n", "30", "--continuations", "16", "--json",
            "--no-progress", "--cf-cache", str(tmp_path / "c.jsonl")]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    auc = report["auc"]
    assert auc["low"] > 0.5 and auc["passes"] and auc["traces"] == 30 and auc["negative"] == "distractor"
    assert report["drop"]["chain"]["low"] > report["drop"]["distractor"]["high"]
    assert report["intervention"]["model"]["name"] == "arith-tiny" and report["intervention"]["continuations"] == 16
    assert report["reading"][1].strip().startswith("The oracle passes")
    rows = report["per_site"]
    assert pooled_auc(rows, "distractor")["mean"] == auc["mean"]  # the figure recomputes from the rows
    assert all(r["drop"] == pytest.approx(r["intact"] - r["corrupt"]) for r in rows)
    assert main(argv) == 0  # the rerun reads every prefix back
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["cache"]["prefix"]["computed"] == 0 and again["auc"] == auc
