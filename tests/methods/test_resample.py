"""Resampling importance of steps, and step-level recall on the arithmetic world."""
import json
import math
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch

from oar_attrib.instruments.steps.recall import intervention_auc, pair_auc, step_sets, trace_step_recall
from oar_attrib.attribution import attribute
from oar_attrib.errors import InputError
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import method_spec
from oar_attrib.methods.resample import js_divergence, resample, resample_steps
from oar_attrib.world import generate_problems, shift_result


def test_js_divergence_by_hand():
    assert js_divergence(Counter(a=4), Counter(a=2)) == 0
    assert js_divergence(Counter(a=3), Counter(b=5)) == pytest.approx(math.log(2))
    # p = (1/2, 1/2), q = (1, 0): m = (3/4, 1/4).
    expected = 0.5 * (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25) + math.log(1 / 0.75))
    assert js_divergence(Counter(a=1, b=1), Counter(a=2)) == pytest.approx(expected)


@pytest.mark.slow
def test_resample_steps_counts_divergence_accuracy_and_seed(bundled):
    model, tok = bundled
    problems = generate_problems(2, "upstream", seed=3, split="test")
    batch, pairs = encode_pairs(tok, [p.prompt for p in problems], [p.solution for p in problems])
    answers = [str(p.answer) for p in problems]
    first = resample_steps(model, tok, batch, n_samples=6, answers=answers, seed=5)
    again = resample_steps(model, tok, batch, n_samples=6, answers=answers, seed=5)
    assert first == again  # seeded
    for row, (pair, steps) in enumerate(zip(pairs, first)):
        assert [(s.start - pair.response_start, s.end - pair.response_start) for s in steps] == pair.steps
        for s in steps:
            assert sum(s.kept.values()) == sum(s.removed.values()) == 6
            assert s.divergence == pytest.approx(js_divergence(Counter(s.kept), Counter(s.removed)))
            assert s.accuracy_kept == s.kept.get(answers[row], 0) / 6
            assert s.accuracy_drop == s.accuracy_kept - s.accuracy_removed
    scores = resample(model, batch, tokenizer=tok, n_samples=6, generator=torch.Generator().manual_seed(5))
    for row, steps in enumerate(first):
        for s in steps:
            assert torch.all(scores[row, s.start:s.end] == torch.tensor(s.divergence, dtype=torch.float32))
    assert (scores[~batch.scored_mask] == 0).all() and scores.max() > 0


def test_resample_is_analysis_only_and_checks_its_inputs(bundled):
    model, tok = bundled
    problem = generate_problems(1, "upstream", seed=3)[0]
    batch, _ = encode_pairs(tok, [problem.prompt], [problem.solution])
    assert method_spec("resample").analysis_only
    with pytest.raises(InputError, match="tokenizer"):
        resample(model, batch)
    with pytest.raises(InputError, match="max_rollouts"):
        resample_steps(model, tok, batch, n_samples=8, max_rollouts=10)
    with pytest.raises(InputError, match="removal"):
        resample_steps(model, tok, batch, removal="erase")


def test_shift_result_changes_only_the_result():
    assert shift_result(" o=3+4=7.") == " o=3+4=8."
    assert shift_result("so x=2*-3=-6. ", -2) == "so x=2*-3=-8. "
    assert shift_result("y=10-1=9.", by=5) == "y=10-1=14."
    with pytest.raises(InputError, match="name=a op b=result"):
        shift_result("#### 14")


def test_callable_removal_equals_the_named_removals(bundled):
    model, tok = bundled
    problems = generate_problems(2, "upstream", seed=4, split="test")
    batch, _ = encode_pairs(tok, [p.prompt for p in problems], [p.solution for p in problems])
    pad = int(batch.pad_token_id)
    for name, written in (("pad", lambda ids: [pad] * len(ids)), ("drop", lambda ids: [])):
        named = resample_steps(model, tok, batch, n_samples=3, removal=name, seed=2)
        assert resample_steps(model, tok, batch, n_samples=3, removal=written, seed=2) == named


@pytest.mark.slow
def test_intervention_auc_is_the_pair_auc_of_result_shift_divergences(bundled):
    model, tok = bundled
    problems = generate_problems(3, "upstream", seed=0, split="test")
    prompts, texts = [p.prompt for p in problems], [p.solution for p in problems]
    traces = attribute(model, tok, prompts, texts, methods=("random",))
    oracles = [p.oracle(t) for p, t in zip(problems, texts)]
    from oar_attrib.instruments.base import Run
    from oar_attrib.instruments.steps import StepRecall

    run = Run(model, tok, None, StepRecall(intervention_samples=4, seed=1))
    aucs = intervention_auc(run, prompts, texts, traces, oracles)
    assert len(aucs) == 3
    for row, (auc, trace, oracle) in enumerate(zip(aucs, traces, oracles)):
        batch, _ = encode_pairs(tok, [prompts[row]], [texts[row]])
        steps = resample_steps(model, tok, batch, n_samples=4, seed=1 + row, removal=lambda ids: tok.encode(
            shift_result(tok.decode(ids)), add_special_tokens=False))[0]
        sets = step_sets(trace, oracle)
        expected = pair_auc(np.array([s.divergence for s in steps]), sets["upstream"], sets["distractor"])
        assert auc == expected and 0 <= auc <= 1


def test_step_sets_and_step_recall_by_hand(bundled):
    model, tok = bundled
    # g=3+4=7. o=3+4=7. q=7+2=9. b=2*2=4. find q+b: q and b direct, o upstream, g distractor.
    problem = next(p for p in generate_problems(20, "upstream", seed=0, split="test")
                   if p.solution.startswith("g=3+4=7. o=3+4=7. q=7+2=9. b=2*2=4."))
    trace = attribute(model, tok, problem.prompt, problem.solution, methods=("oar_p_step",))[0]
    sets = step_sets(trace, problem.oracle(problem.solution))
    assert sets["direct"].tolist() == [False, False, True, True]
    assert sets["upstream"].tolist() == [False, True, False, False]
    assert sets["distractor"].tolist() == [True, False, False, False]
    # Scores that rank direct > upstream > distractor: recall 1, AUC 1; reversed: AUC 0.
    n = len(trace.token_ids)
    for values, auc in (([0.0, 1.0, 5.0, 4.0], 1.0), ([1.0, 0.0, 5.0, 4.0], 0.0), ([1.0, 1.0, 5.0, 4.0], 0.5)):
        trace.scores["hand"] = [0.0] * n
        for (a, b), v in zip(trace.steps, values):
            trace.scores["hand"][a:b] = [v] * (b - a)
        res = trace_step_recall(trace, problem.oracle(problem.solution))
        assert res["hand"] == {"direct": 1.0, "upstream": auc}
    assert res["random_expectation"] == {"direct": 0.5, "upstream": 0.5}
    assert pair_auc(np.array([1.0, 3.0]), np.array([True, False]), np.array([False, True])) == 0.0
    assert math.isnan(pair_auc(np.array([1.0]), np.array([True]), np.array([False])))


@pytest.mark.slow
def test_cli_recall_at_step_granularity_json():
    out = subprocess.run([sys.executable, "-m", "oar_attrib.cli", "recall", "steps",
                          "--n", "6", "--methods", "oar_p_step", "random", "--json", "--no-progress",
                          "--intervention-samples", "2"],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert list(report) == ["granularity", "preset", "pool", "methods", "random", "n", "n_scored",
                            "accuracy", "skipped", "by_outcome", "resample", "intervention", "record"]
    assert report["granularity"] == "step" and report["preset"] == "upstream"
    assert set(report["methods"]) == {"oar_p_step", "random"}
    assert report["random"]["upstream"]["mean"] == 0.5
    for stats in report["methods"].values():
        assert 0 <= stats["direct"]["mean"] <= 1 and stats["direct"]["n"] == report["n_scored"]
    shift = report["intervention"]
    assert shift["n_samples"] == 2 and 0 < shift["upstream"]["n"] <= report["n_scored"]
    assert 0 <= shift["upstream"]["mean"] <= 1
    assert shift["by_outcome"]["right"]["n"] + shift["by_outcome"]["wrong"]["n"] == shift["upstream"]["n"]
    bad = subprocess.run([sys.executable, "-m", "oar_attrib.cli", "recall", "--granularity", "word"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    bad = subprocess.run([sys.executable, "-m", "oar_attrib.cli", "recall", "steps",
                          "--intervention-samples", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--intervention-samples must be an integer from 0 to" in bad.stderr
