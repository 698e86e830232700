"""The Monte-Carlo advantage oracle and advantage recall on the bundled arithmetic model: the
last value is the trace's reward, a near-zero temperature makes every V_k the greedy
continuation's reward exactly, the batched decode equals one-by-one decoding, the split-half
reliability and the credit agreement match hand computations, and a rerun with the same cache
calls the model for nothing."""
import json
import math

import numpy as np
import pytest

from oar_attrib.analysis.advantage_oracle import (AdvantageSettings, AdvantageTrace, Boundaries, advantage_oracle,
                                                  boundary_chunks, split_half)
from oar_attrib.analysis.advantage_recall import (advantage_cache, advantage_recall, choose_groups, credit_metrics,
                                                  estimate, trace_metrics)
from oar_attrib.analysis.stats import holm, t_interval, t_test_p
from oar_attrib.attribution import attribute
from oar_attrib.errors import InputError
from oar_attrib.models.generation import continue_rows, cut_at_stop, generate, stop_ids
from oar_attrib.world import generate_problems

COLD = 1e-4  # a temperature at which sampling is the argmax


@pytest.fixture(scope="module")
def trace(bundled):
    model, tok = bundled
    problem = generate_problems(1, "recall", seed=0, split="test")[0]
    text = tok.decode(generate(model, tok, [problem.prompt])[0], skip_special_tokens=True)
    steps = attribute(model, tok, [problem.prompt], [text], [])[0]
    return problem, tok(problem.prompt, add_special_tokens=False).input_ids, steps


def greedy_reward(model, tok, prefix, head, problem, max_new):
    eos = stop_ids(model, tok)
    tail = cut_at_stop(continue_rows(model, [prefix + head], tok.pad_token_id, max_new_tokens=max_new,
                                     eos_token_id=eos).tolist()[0], eos, keep=False)
    return problem.reward(tok.decode(head + tail, skip_special_tokens=True))


def test_cold_values_are_the_greedy_continuations_rewards(bundled, trace):
    model, tok = bundled
    problem, prompt, attributed = trace
    response, steps = attributed.token_ids, attributed.steps
    assert len(steps) >= 2
    steps = steps[:2]  # two boundaries (the prompt, the first step) keep the test to seconds
    settings = AdvantageSettings(n=2, temperature=COLD, margin=4)
    oracle = advantage_oracle(model, tok, prompt, response, steps, problem.reward, 0.25, settings)
    values = oracle.values()
    assert values[-1] == 0.25  # V_S is the trace's own reward, whatever was passed
    assert len(values) == len(steps) + 1 and np.allclose(oracle.dv().sum(), 0.25 - values[0])
    for k, b in enumerate([0] + [e for _, e in steps[:-1]]):
        expected = greedy_reward(model, tok, prompt, response[:b], problem, len(response) - b + 4)
        assert oracle.rewards[k] == [expected] * 2


def test_boundaries_decoded_together_equal_one_per_pass(bundled, trace, monkeypatch):
    """The fast path (every boundary of the trace in one decode loop) samples exactly the
    continuations of the reference (one boundary per pass), warm; a boundary already in the
    store is read back, not decoded, and the others come out the same beside it."""
    model, tok = bundled
    problem, prompt, attributed = trace
    settings = AdvantageSettings(n=4, temperature=1.0, margin=4)
    args = (model, tok, prompt, attributed.token_ids, attributed.steps, problem.reward, 1.0, settings)
    together, alone = advantage_oracle(*args), advantage_oracle(*args, batched=False)
    assert together.rewards == alone.rewards and together.new_tokens == alone.new_tokens
    assert len(together.rewards) == len(attributed.steps) >= 2
    store = Boundaries(settings)
    first = prompt + attributed.token_ids[:attributed.steps[0][1]]
    store.put(first, [9.0] * 4, 0.0)  # boundary 1 known (an impossible reward: it must be read, not made)
    partly = advantage_oracle(*args, store=store)
    assert partly.rewards[1] == [9.0] * 4
    assert partly.rewards[:1] + partly.rewards[2:] == together.rewards[:1] + together.rewards[2:]
    chunks = boundary_chunks(model, [0, 1, 2, 3, 4], len(prompt), len(attributed.token_ids), 4)
    assert [k for c in chunks for k in c] == [0, 1, 2, 3, 4]
    from oar_attrib.models import budget
    monkeypatch.setattr(budget, "memory_bound", lambda device: 1)  # no room: one boundary per pass, still
    assert boundary_chunks(model, [0, 1, 2], len(prompt), 40, 4) == [[0], [1], [2]]
    assert advantage_oracle(*args).rewards == together.rewards


def test_split_half_is_the_hand_formula():
    rng = np.random.default_rng(0)
    traces = [AdvantageTrace(rng.integers(0, 2, size=(s, 5)).astype(float).tolist(), float(r))
              for s, r in ((3, 1), (4, 0), (2, 1))]
    a, b, a_before, b_before = [], [], [], []
    for t in traces:
        first = [np.mean(r[:2]) for r in t.rewards] + [t.reward]  # n=5: halves of 2, the fifth in neither
        second = [np.mean(r[2:4]) for r in t.rewards] + [t.reward]
        a += list(np.diff(first))
        b += list(np.diff(second))
        a_before += list(np.diff(first))[:-1]
        b_before += list(np.diff(second))[:-1]
    r = np.corrcoef(a, b)[0, 1]
    got = split_half(traces)
    assert got["steps"] == 9 and math.isclose(got["r"], r)
    assert math.isclose(got["spearman_brown"], 2 * r / (1 + r) if r > 0 else r)
    before = np.corrcoef(a_before, b_before)[0, 1]
    assert got["before_last"]["steps"] == 6 and math.isclose(got["before_last"]["r"], before)
    flat = AdvantageTrace([[1.0, 1.0]] * 3, 1.0)
    undefined = {"r": None, "spearman_brown": None, "steps": 3}
    assert split_half([flat]) == {**undefined, "before_last": {**undefined, "steps": 2}}


def test_the_last_steps_shared_reward_inflates_the_whole_figure_not_before_last():
    """Pure-noise continuations (V independent of the prefix): the halves of the steps before
    the last do not agree, but the last step's do, through the trace's own reward."""
    rng = np.random.default_rng(1)
    traces = [AdvantageTrace(rng.integers(0, 2, size=(4, 16)).astype(float).tolist(), float(i % 2))
              for i in range(200)]
    got = split_half(traces)
    assert got["r"] > 0.3 and abs(got["before_last"]["r"]) < 0.1


def test_credit_agreement_by_hand():
    labels = [np.array([0.5, 0.5, -0.2]), np.array([0.1, 0.3])]
    adv = [1.0, -1.0]
    same = {"uniform": [np.full(3, 1.0), np.full(2, -1.0)],  # w = 1: GRPO itself
            "towards": [np.array([1.0, 1.0, 0.1]), np.array([-0.2, -0.1])]}
    got = credit_metrics(same, adv, labels)
    y = np.concatenate(labels)
    base = np.corrcoef([1, 1, 1, -1, -1], y)[0, 1]
    assert math.isclose(got["grpo"]["credit_correlation"], base)
    assert abs(got["uniform"]["credit_agreement"]) < 1e-12
    toward = np.corrcoef([1.0, 1.0, 0.1, -0.2, -0.1], y)[0, 1]
    assert math.isclose(got["towards"]["credit_agreement"], toward - base)
    flat = credit_metrics({"m": [np.ones(3)]}, [0.0], [labels[0]])  # A all 0: undefined, not 0
    assert math.isnan(flat["grpo"]["credit_correlation"]) and math.isnan(flat["m"]["credit_agreement"])
    none = credit_metrics({"m": []}, [], [])  # no trace of the group scored: undefined, no error
    assert math.isnan(none["grpo"]["credit_correlation"]) and math.isnan(none["m"]["credit_correlation"])


def test_constant_scores_are_undefined_and_counted_apart():
    dv = np.array([0.5, -0.25, 0.0, 0.75])
    got = trace_metrics({"flat": np.ones(4), "abs": np.abs(dv)}, dv)
    assert math.isnan(got["flat"]["spearman"]) and got["abs"]["spearman"] == 1.0
    summary = estimate({"flat": [float("nan"), float("nan"), 0.2], "b": [0.1, 0.3, 0.2]})
    assert summary["flat"]["n"] == 1 and summary["flat"]["undefined"] == 2
    assert summary["b"]["p_holm"] is not None and summary["b"]["low"] <= 0.2 <= summary["b"]["high"]


def test_mixed_groups_are_chosen_first():
    assert choose_groups([[1, 1], [0, 1], [0, 0], [1, 0]], n=4, size=2) == [1, 3]
    assert choose_groups([[1, 1], [0, 1]], n=4, size=2) == [0, 1]


def test_groups_are_sampled_until_enough_mix_right_and_wrong(monkeypatch):
    """Candidates are sampled in order and no further than needed: with 2 mixed groups wanted,
    sampling stops at the second mixed one; with too few mixed, every candidate is sampled."""
    from oar_attrib.analysis import advantage_recall as module

    answers = {1: ["1", "1"], 2: ["1", "0"], 3: ["0", "0"], 4: ["0", "1"], 5: ["1", "0"]}
    sampled = []
    monkeypatch.setattr(module, "_group", lambda run, ids, size, tokens: sampled.append(ids) or answers[ids])
    reward = [lambda text: float(text)] * 5
    texts, rewards = module._sample_groups(None, [1, 2, 3, 4, 5], reward, 2, 2, 8, False)
    assert sampled == [1, 2, 3, 4] and rewards == [[1, 1], [1, 0], [0, 0], [0, 1]]
    assert choose_groups(rewards, n=4, size=2) == [1, 3]
    sampled.clear()
    texts, rewards = module._sample_groups(None, [1, 3], reward[:2], 2, 2, 8, False)
    assert sampled == [1, 3] and choose_groups(rewards, n=4, size=2) == [0, 1]


def test_settings_refuse_bad_values():
    with pytest.raises(InputError, match="n=0"):
        AdvantageSettings(n=0)
    with pytest.raises(InputError, match="temperature"):
        AdvantageSettings(temperature=0.0)


def test_recall_resumes_from_its_cache_without_the_model(bundled, tmp_path):
    model, tok = bundled
    records = [{"prompt": p.prompt, "answer": str(p.answer), "problem": p}
               for p in generate_problems(2, "recall", seed=1, split="test")]
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:  # one group of 2 traces, 2 continuations a boundary: the smallest run that resumes
        kwargs = dict(n=2, methods=["random"], settings=AdvantageSettings(n=2, margin=0), group_size=2,
                      max_new_tokens=48, cache=tmp_path / "cache.jsonl")
        first = advantage_recall(model, tok, records, **kwargs)
        made = len(calls)
        second = advantage_recall(model, tok, records, **kwargs)
    finally:
        hook.remove()
    assert made > 0 and len(calls) == made  # the rerun reads everything back
    assert json.dumps(first.as_dict()["per_trace"]) == json.dumps(second.as_dict()["per_trace"])
    assert second.cache["prefix"]["computed"] == 0 and second.cache["attribution"]["computed"] == 0
    assert first.n_scored >= 1
    for row in first.per_trace:
        assert row["values"][-1] == row["reward"]
        assert row["control"]["chain"] >= 0  # the arithmetic world's positive control is computed
        # a reader recomputes each figure from the row alone: the metrics from the step scores and
        # dV, dV from the values, the halves average to dV when N is even
        again = trace_metrics({m: np.array(v) for m, v in row["step_scores"].items()}, np.array(row["dv"]))
        np.testing.assert_equal(again, {m: row["metrics"][m] for m in again})  # NaN equals NaN here
        assert np.allclose(np.diff(row["values"]), row["dv"])
        assert np.allclose(np.mean(row["dv_halves"], axis=0), row["dv"])
        # longest_first ranks the steps by their length in tokens
        length = trace_metrics({"l": np.array(row["step_tokens"], dtype=float)}, np.array(row["dv"]))["l"]
        np.testing.assert_equal(length, row["metrics"]["longest_first"])
        assert len(row["step_tokens"]) == len(row["dv"]) and min(row["step_tokens"]) >= 1


def test_longest_first_is_scored_outside_the_methods_holm_family():
    """The step-length reference joined after the methods' family was fixed: the methods' and
    earliest_first's Holm p are those of their own family, longest_first's is its raw p."""
    from oar_attrib.analysis.advantage_recall import LONGEST, _report, estimate
    from oar_attrib.analysis.graded_recall import EARLIEST

    rng = np.random.default_rng(0)
    rows = []
    for _ in range(12):
        dv = rng.normal(size=6)
        rows.append({"metrics": {m: {"spearman": rng.uniform(-1, 1), "partial_spearman": rng.uniform(-1, 1),
                                     "position_spearman": rng.uniform(-1, 1)} for m in ("a", "b", EARLIEST, LONGEST)},
                     "seconds": {"a": 1.0, "b": 1.0}, "dv": dv.tolist()})

    class Run:
        oracle_seconds = {}
        settings = AdvantageSettings(n=2, margin=0)
        cache = type("C", (), {"counts": {}})()

    report = _report(Run(), [{}], ["a", "b"], [0], {0: [1.0, 0.0]}, rows, [], [], {}, 2)
    family = estimate({m: [r["metrics"][m]["spearman"] for r in rows] for m in ("a", "b", EARLIEST)})
    for m in ("a", "b"):
        assert report.methods[m]["spearman"]["p_holm"] == family[m]["p_holm"]
    assert report.reference[EARLIEST]["spearman"]["p_holm"] == family[EARLIEST]["p_holm"]
    alone = report.reference[LONGEST]["spearman"]
    assert alone["p_holm"] == alone["p"] and alone["mean"] == pytest.approx(np.mean([r["metrics"][LONGEST]["spearman"] for r in rows]))


def test_cache_refuses_a_malformed_advantage_entry(tmp_path):
    path = tmp_path / "cache.jsonl"
    path.write_text(json.dumps({"kind": "prefix", "key": "k", "rewards": [1.0, 0.0]}) + "\n")
    assert advantage_cache(path).get("prefix", "k")["rewards"] == [1.0, 0.0]  # read back, counted
    path.write_text(json.dumps({"kind": "prefix", "key": "k", "rewards": ["1"]}) + "\n")
    with pytest.raises(InputError, match=r"cache.jsonl:1: a prefix entry must hold"):
        advantage_cache(path)


def test_estimate_is_the_stats_owner_per_column():
    columns = {"a": [0.1, 0.4, float("nan"), 0.3], "b": [-0.2, 0.1, 0.0, 0.05]}
    got = estimate(columns)
    adjusted, _ = holm({k: t_test_p(v) for k, v in columns.items()})
    for name, values in columns.items():
        interval = t_interval(values)
        assert (got[name]["mean"], got[name]["low"], got[name]["high"]) == (interval["mean"], interval["low"], interval["high"])
        assert math.isclose(got[name]["p_holm"], adjusted[name])
    assert got["a"]["undefined"] == 1 and got["a"]["n"] == 3


def test_the_interval_excludes_0_exactly_where_the_t_test_rejects():
    """The interval is the t-test's own: at 2 groups a percentile bootstrap excluded 0 at p 0.11."""
    rng = np.random.default_rng(0)
    columns = {f"{n}-{i}": list(rng.normal(rng.uniform(-1, 1), rng.uniform(0.1, 1), n))
               for n in (2, 3, 5, 12, 40) for i in range(25)}
    rows = estimate(columns)  # one family: Holm (statsmodels) once
    rejected = [row["p"] < 0.05 for row in rows.values()]
    assert 10 < sum(rejected) < len(rows) - 10  # both kinds occur
    for row, reject in zip(rows.values(), rejected):
        assert (row["low"] > 0 or row["high"] < 0) == reject
    two = estimate({"m": [0.2023, 0.2837]})["m"]  # two groups' credit agreement
    assert two["low"] < 0 < two["high"] and two["p"] > 0.05
    one = estimate({"m": [0.3, float("nan")]})["m"]
    assert one["mean"] == 0.3 and one["low"] is None and one["high"] is None and one["n"] == 1  # no interval of one
