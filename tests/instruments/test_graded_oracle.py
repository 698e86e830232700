"""The graded counterfactual oracle and graded recall on the bundled arithmetic model: the
cached-prefix regeneration equals whole-row regeneration, the draws follow their definition,
the statistics match hand computations, and a rerun with the same cache calls the model for
nothing."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from oar_attrib.instruments.data.recall import answer_key
from oar_attrib.instruments.graded.oracle import GradedSettings, GradedTrace, draw_replacements, graded_oracle
from oar_attrib.instruments.graded.recall import EARLIEST, graded_recall, pooled, tercile_auc, trace_metrics
from oar_attrib.errors import InputError
from oar_attrib.models.generation import generate
from oar_attrib.inputs.grading import grade
from oar_attrib.methods.baselines.ktae import key_token_values
from oar_attrib.world import generate_problems


@pytest.fixture(scope="module")
def trace(bundled):
    model, tok = bundled
    problem = generate_problems(1, "recall", seed=0, split="test")[0]
    response = generate(model, tok, [problem.prompt])[0]
    response = [t for t in response if t != tok.eos_token_id]
    return tok(problem.prompt, add_special_tokens=False).input_ids, response


def records(n=3):
    return [{"prompt": p.prompt, "answer": str(p.answer)} for p in generate_problems(n, "recall", seed=0, split="test")]


def test_cached_prefix_regeneration_equals_whole_rows(bundled, trace):
    model, tok = bundled
    prompt, response = trace
    settings = GradedSettings(k=4, positions=6)
    positions = list(range(len(response) - 3))
    fast = graded_oracle(model, tok, prompt, response, positions, answer_key, replace(settings, max_batch_tokens=200))
    slow = graded_oracle(model, tok, prompt, response, positions, answer_key, replace(settings, reuse_prefix=False))
    assert fast.draws == slow.draws and fast.flips == slow.flips
    assert len(fast.flips) == 6 and all(len(f) == 4 for f in fast.flips.values())
    assert set(fast.flip_rates().values()) <= {j / 4 for j in range(5)}
    assert GradedTrace.from_json(fast.to_json()).flips == fast.flips
    distinct = sum(len(set(d)) for d in fast.draws.values())  # equal draws regenerated once
    assert len(fast.stats.rows) == distinct and fast.stats.forwards == [len(prompt) + len(response)]


def test_draws_exclude_the_original_and_are_seeded():
    logits = torch.zeros(4, 5)
    logits[:, 2] = 5.0  # the model prefers token 2 everywhere
    response = [2, 2, 1]  # positions 0..2; prompt of 1 token: logits row p + t - 1 predicts t
    draws = draw_replacements(logits, 1, response, [0, 1, 2], k=50, seed=3)
    assert 2 not in draws[0] + draws[1] and 1 not in draws[2]
    assert all(len(d) == 50 for d in draws.values())
    assert draw_replacements(logits, 1, response, [0, 1, 2], k=50, seed=3) == draws
    peaked = torch.full((2, 3), -1e4)
    peaked[:, 1] = 0.0  # all the mass on the original: nothing else can be drawn
    assert draw_replacements(peaked, 1, [1], [0], k=3, seed=0) == {}
    with pytest.raises(InputError, match="prompt"):
        draw_replacements(logits, 0, response, [0], k=2, seed=0)


def test_tercile_auc_and_spearman_by_hand():
    flips = np.array([0.0, 0.0, 0.25, 0.5, 1.0, 1.0])
    # quantiles: 1/3 -> 0.0833, 2/3 -> 0.667: bottom {0, 0}, top {1, 1}
    assert tercile_auc(np.array([1.0, 2, 3, 4, 5, 6]), flips) == 1.0
    assert tercile_auc(np.array([6.0, 5, 4, 3, 2, 1]), flips) == 0.0
    assert tercile_auc(np.array([1.0, 5, 0, 0, 5, 1]), flips) == pytest.approx((0.5 + 1 + 0 + 0.5) / 4)
    assert math.isnan(tercile_auc(np.array([1.0, 2, 3]), np.zeros(3)))  # nothing to separate
    # mostly zeros: the quantiles tie, top = above them, bottom = at or below
    assert tercile_auc(np.array([1.0, 2, 3, 9]), np.array([0, 0, 0, 0.5])) == 1.0
    metrics = trace_metrics({"m": [0.0, 3.0, 1.0, 2.0, 0.0], "ktae": [0, -3.0, 1.0, -2.0, 0]},
                            {1: 1.0, 2: 0.0, 3: 0.5})
    assert metrics["m"]["spearman"] == pytest.approx(1.0)
    assert metrics["ktae"]["spearman"] == pytest.approx(1.0)  # a signed method ranks by |k|
    # scores 3, 1, 2 at positions 1, 2, 3: Spearman with earliness (-1, -2, -3) is 0.5, and so
    # is the flip rates'; with position held fixed, (1 - 0.25) / sqrt(0.75 * 0.75) = 1
    assert metrics["m"]["position_spearman"] == pytest.approx(0.5)
    assert metrics["m"]["partial_spearman"] == pytest.approx(1.0)
    early = trace_metrics({"late": [0.0, 1.0, 2.0, 3.0]}, {1: 0.0, 2: 1.0, 3: 0.5})["late"]
    assert early["position_spearman"] == pytest.approx(-1.0) and math.isnan(early["partial_spearman"])


def test_pooled_differences_are_paired_per_trace():
    per_trace = [{"a": {"spearman": x, "auc": 0.5}, "random": {"spearman": y, "auc": 0.5}}
                 for x, y in [(0.4, 0.1), (0.2, 0.3), (0.6, -0.2)]]
    summary, between = pooled(per_trace, ["a", "random"])
    assert summary["a"]["spearman"]["mean"] == pytest.approx(0.4)
    assert summary["a"]["vs_random"]["spearman"]["mean"] == pytest.approx((0.3 - 0.1 + 0.8) / 3)
    assert between["a - random"]["spearman"] == summary["a"]["vs_random"]["spearman"]


def test_constant_scores_have_no_auc_and_are_counted_apart():
    """A ranking that ranks nothing (KTAE on a group all right or all wrong: every score 0) has
    no AUC, not 0.5, and no Spearman; the pooled summary counts those traces apart."""
    flips = np.array([0.0, 0.0, 0.25, 0.5, 1.0, 1.0])
    assert math.isnan(tercile_auc(np.zeros(6), flips))
    flat = trace_metrics({"ktae": [0.0] * 4, "m": [0.0, 3.0, 1.0, 2.0]}, {1: 1.0, 2: 0.0, 3: 0.5})
    assert all(math.isnan(v) for v in flat["ktae"].values()) and flat["m"]["auc"] == 1.0
    per_trace = [flat, trace_metrics({"ktae": [0.0, 1.0, 2.0, 3.0], "m": [0.0, 1.0, 2.0, 3.0]},
                                     {1: 0.0, 2: 0.5, 3: 1.0})]
    summary, _ = pooled(per_trace, ["ktae", "m"])
    assert summary["ktae"]["auc"] == {"mean": 1.0, "ci95": [1.0, 1.0], "n": 1}  # over its one defined trace
    assert summary["ktae"]["undefined"]["auc"] == 1 and summary["m"]["undefined"]["auc"] == 0


def test_a_rerun_with_the_same_cache_calls_the_model_for_nothing(bundled, tmp_path):
    model, tok = bundled
    calls = []
    hook = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    kwargs = dict(methods=["oar_p", "entropy", "random"], graded_k=2, positions=4, cache=tmp_path / "c.jsonl",
                  max_new_tokens=96)
    try:
        first = graded_recall(model, tok, records(), **kwargs)
        assert calls and first.n_scored == 3
        assert first.cache["oracle"] == {"cached": 0, "computed": 3}
        calls.clear()
        again = graded_recall(model, tok, records(), **kwargs)
        assert calls == []  # no answer, no score, no regeneration recomputed
        assert again.cache == {"answer": {"cached": 3, "computed": 0}, "group": {"cached": 0, "computed": 0},
                               "scores": {"cached": 9, "computed": 0}, "oracle": {"cached": 3, "computed": 0}}
        assert again.as_dict()["methods"] == first.as_dict()["methods"]
        printed = json.loads(json.dumps(first.as_dict(), allow_nan=False))  # strict JSON, as --json prints
        assert len(printed["per_trace"]) == 3
        summary, between = pooled([t for t in printed["per_trace"] if t is not None], [*kwargs["methods"], EARLIEST])
        assert summary == printed["methods"] and between == printed["between"]  # recomputable from the file
        other = graded_recall(model, tok, records(), **{**kwargs, "graded_k": 3})
        assert other.cache["oracle"] == {"cached": 0, "computed": 3}  # another K: a new oracle
        assert other.cache["scores"] == {"cached": 9, "computed": 0}  # the same scores
    finally:
        hook.remove()


def test_ktae_applies_with_sampled_groups_only(bundled, tmp_path):
    model, tok = bundled
    oracle = dict(graded_k=2, positions=3)
    with pytest.raises(InputError, match="group"):
        graded_recall(model, tok, records(2), methods=["ktae"], **oracle)
    report = graded_recall(model, tok, records(2), methods=["ktae", "random"], **oracle,
                           group_samples=3, cache=tmp_path / "k.jsonl")
    assert report.cache["group"]["computed"] == 2 and "ktae" in report.methods
    sampled = [json.loads(line)["texts"] for line in (tmp_path / "k.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "group"]
    nonzero = 0
    for record, trace, texts in zip(records(2), report.traces, sampled):
        group = [trace.response] + texts  # the greedy trace first, then the sampled answers
        right = torch.tensor([grade(t, record["answer"]).correct for t in group])
        rows = [torch.tensor(tok(t, add_special_tokens=False).input_ids) for t in group]
        values = key_token_values(rows, right, tok.pad_token_id)
        expected = [values[i] if s else 0.0 for i, s in zip(trace.token_ids, trace.scored)]
        assert trace.scores["ktae"] == pytest.approx(expected, abs=1e-6)
        nonzero += any(expected)
    assert nonzero  # a group with right and wrong answers, so KTAE had something to compare


def test_the_earliest_first_reference_ranks_by_position(bundled):
    """`earliest_first` scores each trace's tested positions by their place, earlier first: its
    Spearman with the flip rates is the one of the negated positions, trace by trace, and it is
    reported beside the methods and against random."""
    from scipy.stats import spearmanr

    model, tok = bundled
    report = graded_recall(model, tok, records(), methods=["entropy", "random"], graded_k=2, positions=4,
                           max_new_tokens=96)
    assert list(report.methods) == ["entropy", "random", EARLIEST] and "vs_random" in report.methods[EARLIEST]
    checked = 0
    for graded, row in zip(report.graded, report.per_trace):
        if graded is None:
            continue
        rates = graded.flip_rates()
        positions = sorted(rates)
        want = spearmanr([-t for t in positions], [rates[t] for t in positions]).correlation
        got = row[EARLIEST]["spearman"]
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-12)
        if len(positions) > 1:  # position alone: earliness 1, nothing left once it is held fixed
            assert row[EARLIEST]["position_spearman"] == pytest.approx(1.0)
            assert math.isnan(row[EARLIEST]["partial_spearman"])
        checked += 1
    assert checked == report.n_scored > 0
