"""The Monte-Carlo advantage oracle and advantage recall on the bundled arithmetic model: the
last value is the trace's reward, a near-zero temperature makes every V_k the greedy
continuation's reward exactly, the batched decode equals one-by-one decoding, the split-half
reliability and the credit agreement match hand computations, and a rerun with the same cache
calls the model for nothing."""
import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from oar_attrib.instruments.advantage.oracle import (AdvantageSettings, AdvantageTrace, Boundaries,
                                                     advantage_oracle, prefix_chunks, split_half)
from oar_attrib.instruments.advantage.metrics import (EARLIEST, LONGEST, credit_metrics, estimate, label_ceiling,
                                                      partial, trace_metrics)
from oar_attrib.instruments.advantage.recall import (advantage_cache, advantage_recall, choose_groups, step_weights,
                                                     summarise)
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
    args = (model, tok, prompt, attributed.token_ids, attributed.steps, problem.reward, 1.0)
    together, alone = advantage_oracle(*args, settings), advantage_oracle(*args, replace(settings, batched=False))
    assert together.rewards == alone.rewards and together.new_tokens == alone.new_tokens
    assert len(together.rewards) == len(attributed.steps) >= 2
    store = Boundaries(settings)
    first = prompt + attributed.token_ids[:attributed.steps[0][1]]
    store.put(first, [9.0] * 4, 0.0)  # boundary 1 known (an impossible reward: it must be read, not made)
    partly = store.oracle(*args)
    assert partly.rewards[1] == [9.0] * 4
    assert partly.rewards[:1] + partly.rewards[2:] == together.rewards[:1] + together.rewards[2:]
    chunks = prefix_chunks(model, [len(prompt) + len(attributed.token_ids)] * 5, 4)
    assert [k for c in chunks for k in c] == [0, 1, 2, 3, 4]
    from oar_attrib.models import budget
    monkeypatch.setattr(budget, "memory_bound", lambda device: 1)  # no room: one boundary per pass, still
    assert prefix_chunks(model, [40, 40, 40], 4) == [[0], [1], [2]]
    assert advantage_oracle(*args, settings).rewards == together.rewards


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
    got = trace_metrics({"flat": np.ones(4), "abs": np.abs(dv)}, dv, 1.0, np.array([3, 1, 2, 5]))
    assert math.isnan(got["flat"]["signed"]) and got["abs"]["absolute"] == 1.0
    summary = estimate({"flat": [float("nan"), float("nan"), 0.2], "b": [0.1, 0.3, 0.2]})
    assert summary["flat"]["n"] == 1 and summary["flat"]["undefined"] == 2
    assert summary["b"]["p_holm"] is not None and summary["b"]["low"] <= 0.2 <= summary["b"]["high"]


def test_the_signed_label_is_the_advantage_s_sign_times_dv_by_hand():
    """A wrong answer (A < 0): the step that lowered V the most is its most credited one, so a
    method weighting it most agrees with the signed label and disagrees with dV itself."""
    dv, lengths = np.array([0.3, -0.4, 0.1]), np.array([4, 4, 4])
    weights = np.array([0.5, 2.0, 1.0])  # most weight on step 2, the one that sank V
    got = trace_metrics({"m": weights}, dv, -0.8, lengths)["m"]
    assert got["signed"] == pytest.approx(1.0)  # -dV ranks 1, 3, 2: the weights' own
    assert got["absolute"] == pytest.approx(0.5)  # |dV| ranks 2, 3, 1 against the weights' 1, 3, 2
    assert trace_metrics({"m": weights}, dv, 0.8, lengths)["m"]["signed"] == pytest.approx(-1.0)
    assert math.isnan(trace_metrics({"m": weights}, dv, 0.0, lengths)["m"]["signed"])  # A = 0: no signed label
    assert got["signed_before_last"] == pytest.approx(1.0) and math.isnan(got["length"])  # lengths constant


def test_step_weights_are_means_kept_or_recovered_from_token_advantages():
    row = {"steps": [[0, 2], [2, 5]], "advantage": -0.5,
           "token_advantages": {"m": [-0.5 * w for w in (1.0, 3.0, 0.5, 0.5, 2.0)]}}
    np.testing.assert_allclose(step_weights(row, "m"), [2.0, 1.0])
    kept = {**row, "step_weights": {"m": [2.0, 1.0]}}
    np.testing.assert_array_equal(step_weights(kept, "m"), [2.0, 1.0])
    assert np.isnan(step_weights({**row, "advantage": 0.0}, "m")).all()  # A = 0 hides w: no score, not 0


def _synthetic_rows(seed: int, traces: int = 60) -> list[dict]:
    """Traces whose signed label follows step length (as SmolLM2's did), scored by a random
    method whose token scores are uniform: its step max grows with length, its mean does not."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(traces):
        lengths = rng.integers(2, 40, size=int(rng.integers(5, 9)))
        advantage = float(rng.choice([-1.0, 1.0]))
        dv = advantage * (lengths / 40 + rng.normal(0, 0.3, lengths.size))
        tokens = [rng.uniform(size=n) for n in lengths]
        scores = {"mean": np.array([t.mean() for t in tokens]), "max": np.array([t.max() for t in tokens]),
                  EARLIEST: -np.arange(lengths.size, dtype=float), LONGEST: lengths.astype(float)}
        rows.append({"family": True, "advantage": advantage, "dv": dv.tolist(), "step_tokens": lengths.tolist(),
                     "step_scores": {k: v.tolist() for k, v in scores.items()},
                     "metrics": trace_metrics(scores, dv, advantage, lengths), "seconds": {"mean": 1.0, "max": 1.0}})
    return rows


def test_a_random_method_pooled_by_mean_reads_nothing_and_by_max_reads_length():
    rows = _synthetic_rows(0)
    methods, reference, _ = summarise(rows, [], ["mean", "max"])
    assert methods["max"]["signed"]["low"] > 0.1  # credited for length, as random's max was on SmolLM2
    assert methods["max"]["length"]["mean"] > 0.4  # its scores follow length
    mean = methods["mean"]["signed"]
    assert abs(mean["mean"]) < 0.1 and mean["low"] < 0 < mean["high"] and mean["pooling"] == "mean"
    for name in ("mean", "max"):  # with length held fixed, neither is credited
        fit = methods[name]["partial"]["signed"]
        assert fit["low"] < 0 < fit["high"] and fit["traces"] == 60 and fit["controls"] == ["length", "position"]
    assert reference[LONGEST]["signed"]["low"] > 0.2 and reference[LONGEST]["partial"]["signed"]["controls"] == ["position"]
    assert reference[EARLIEST]["partial"]["signed"]["controls"] == ["length"]


def test_the_partial_coefficient_is_the_least_squares_one_on_within_trace_ranks():
    from oar_attrib.analysis.stats import within_ranks

    rows = _synthetic_rows(1, traces=25)
    got = partial(rows, "max", "signed")
    y, X = [], []
    for row in rows:
        s = np.array(row["step_scores"]["max"])
        y.append(within_ranks(np.sign(row["advantage"]) * np.array(row["dv"])))
        X.append(np.column_stack([within_ranks(s), within_ranks(row["step_tokens"]),
                                  within_ranks(-np.arange(s.size, dtype=float))]))
    coef = np.linalg.lstsq(np.vstack(X), np.concatenate(y), rcond=None)[0]
    assert got["coef"] == pytest.approx(coef[0]) and got["low"] < got["coef"] < got["high"]
    assert got["steps"] == sum(len(r["dv"]) for r in rows) and got["traces"] == 25
    perfect = [{**r, "step_scores": {"label": (np.sign(r["advantage"]) * np.array(r["dv"])).tolist()}} for r in rows]
    assert partial(perfect, "label", "signed")["coef"] == pytest.approx(1.0)  # the label itself: 1, whatever the controls


def test_the_label_ceiling_is_the_mean_within_trace_split_half_spearman_corrected():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(2)
    rows = []
    for _ in range(12):
        truth = rng.normal(size=6)
        rows.append({"advantage": float(rng.choice([-1.0, 1.0])),
                     "dv_halves": [(truth + rng.normal(0, 0.7, 6)).tolist(), (truth + rng.normal(0, 0.7, 6)).tolist()]})
    got = label_ceiling(rows)
    r = np.mean([spearmanr(*row["dv_halves"])[0] for row in rows])  # sign(A) multiplies both halves alike
    brown = 2 * r / (1 + r)
    assert got["signed"]["all"]["r"] == pytest.approx(r) and got["signed"]["all"]["spearman_brown"] == pytest.approx(brown)
    assert got["signed"]["all"]["ceiling"] == pytest.approx(math.sqrt(brown)) and got["signed"]["all"]["traces"] == 12
    before = np.mean([spearmanr(row["dv_halves"][0][:-1], row["dv_halves"][1][:-1])[0] for row in rows])
    assert got["signed"]["before_last"]["r"] == pytest.approx(before)
    absolute = np.mean([spearmanr(np.abs(row["dv_halves"][0]), np.abs(row["dv_halves"][1]))[0] for row in rows])
    assert got["absolute"]["all"]["r"] == pytest.approx(absolute)
    noise = label_ceiling([{"advantage": 1.0, "dv_halves": [[0.1, 0.2], [0.2, 0.1]]}] * 3)["signed"]["all"]
    assert noise["r"] == -1.0 and noise["ceiling"] == 0.0 and noise["too_few"]


def test_too_few_units_are_never_resolved_and_intervals_stay_in_a_correlation_s_range():
    from oar_attrib.analysis.verdicts import Comparison, verdict

    got = estimate({"m": [0.9, 0.95, 0.99, 0.97], "wide": [-0.9, 0.95]})
    assert got["m"]["too_few"] and got["m"]["p"] < 0.01 and got["m"]["high"] == 1.0  # clipped, not above 1
    assert got["wide"]["low"] == -1.0 and got["wide"]["high"] == 1.0  # a t-interval on 1 df was [-12.7, +12.7]
    c = Comparison("m", "random", "Spearman", got["m"]["mean"], got["m"]["low"], got["m"]["high"],
                   p_holm=got["m"]["p_holm"], units=4, unit="traces")
    assert c.outcome == "too_few" and "too few to read" in verdict(c) and "resolved" not in verdict(c)
    ten = estimate({"m": [0.9, 0.95, 0.99, 0.97, 0.92, 0.93, 0.96, 0.94, 0.98, 0.91]})["m"]
    assert not ten["too_few"]
    assert Comparison("m", "r", "S", ten["mean"], ten["low"], ten["high"], units=10).outcome == "better"


def test_mixed_groups_are_chosen_first():
    assert choose_groups([[1, 1], [0, 1], [0, 0], [1, 0]], n=4, size=2) == [1, 3]
    assert choose_groups([[1, 1], [0, 1]], n=4, size=2) == [0, 1]


def test_groups_are_sampled_until_enough_mix_right_and_wrong(monkeypatch):
    """Candidates are sampled in order and no further than needed: with 2 mixed groups wanted,
    sampling stops at the second mixed one; with too few mixed, every candidate is sampled."""
    from oar_attrib.instruments.advantage import recall as module

    answers = {1: ["1", "1"], 2: ["1", "0"], 3: ["0", "0"], 4: ["0", "1"], 5: ["1", "0"]}
    sampled = []
    monkeypatch.setattr(module, "sampled_group",
                        lambda run, ids, size, temperature, tokens: sampled.append(ids) or answers[ids])
    run = SimpleNamespace(settings=AdvantageSettings())
    reward = [lambda text: float(text)] * 5
    texts, rewards = module.sample_groups(run, [1, 2, 3, 4, 5], reward, 2, 2, 8, False)
    assert sampled == [1, 2, 3, 4] and rewards == [[1, 1], [1, 0], [0, 0], [0, 1]]
    assert choose_groups(rewards, n=4, size=2) == [1, 3]
    sampled.clear()
    texts, rewards = module.sample_groups(run, [1, 3], reward[:2], 2, 2, 8, False)
    assert sampled == [1, 3] and choose_groups(rewards, n=4, size=2) == [0, 1]


def test_settings_refuse_bad_values():
    with pytest.raises(InputError, match="n=0"):
        AdvantageSettings(n=0)
    with pytest.raises(InputError, match="temperature"):
        AdvantageSettings(temperature=0.0)


def test_seeds_and_cache_keys_are_made_of_the_four_oracle_fields_as_before():
    """The continuations' seeds and cache keys are made of `record()`: n, temperature, seed and
    margin in that order, what `asdict` gave before `batched` was a field, so committed caches
    read back and their reports reproduce. How the oracle decodes (`batched`) is none of them.
    The seeds and the key are the literal values the code before `record()` gave (8bbd18a)."""
    from oar_attrib.instruments.advantage.recall import CachedBoundaries
    from oar_attrib.instruments.cache import cache_key

    settings = AdvantageSettings(n=4, temperature=0.7, seed=3, margin=5)
    old = {"n": 4, "temperature": 0.7, "seed": 3, "margin": 5}
    assert list(settings.record().items()) == list(old.items())
    assert list(AdvantageSettings().record()) == ["n", "temperature", "seed", "margin"]
    for decoded in (settings, replace(settings, batched=False)):
        assert decoded.record() == old
        assert Boundaries(decoded).seed([1, 2, 3]) == 903183900063368358
    assert Boundaries(AdvantageSettings()).seed([5]) == 47871868024358864
    record = {"model": "m", "dtype": "float32", "oracle": "advantage", **settings.record()}
    assert cache_key(record, [1, 2, 3]) == "a113dcdde543a619e966d974d4f9bf8d"
    store = CachedBoundaries(advantage_cache(None), record, replace(settings, batched=False))
    assert store.seed([1, 2, 3]) == CachedBoundaries(advantage_cache(None), record, settings).seed([1, 2, 3])


def test_recall_refuses_the_oracles_settings_object_naming_where_its_fields_go():
    """`settings=` is the instrument's (`AdvantageRecall`) since 0.2.0, as for graded_recall: an
    `AdvantageSettings` there, or settings and keywords at once, is a TypeError that says where
    the oracle's fields go; before any model is called."""
    with pytest.raises(TypeError, match="continuations, temperature, seed and margin"):
        advantage_recall(None, None, [], AdvantageSettings(n=2))
    with pytest.raises(TypeError, match="no setting named nonsense"):
        advantage_recall(None, None, [], n=2, nonsense=1)
    with pytest.raises(InputError, match="at least 2 answers"):
        advantage_recall(None, None, [], n=2, group_size=1)


def test_recall_resumes_from_its_cache_without_the_model(bundled, tmp_path):
    model, tok = bundled
    records = [{"prompt": p.prompt, "answer": str(p.answer), "problem": p}
               for p in generate_problems(2, "recall", seed=1, split="test")]
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:  # one group of 2 traces, 2 continuations a boundary: the smallest run that resumes
        kwargs = dict(n=2, methods=["random"], continuations=2, margin=0, group_samples=2,
                      max_new_tokens=48, cache=tmp_path / "cache.jsonl")
        first = advantage_recall(model, tok, records, **kwargs)
        made = len(calls)
        second = advantage_recall(model, tok, records, **kwargs)
    finally:
        hook.remove()
    assert made > 0 and len(calls) == made  # the rerun reads everything back
    assert json.dumps(first.as_dict()["per_trace"]) == json.dumps(second.as_dict()["per_trace"])
    assert second.cache["prefix"]["computed"] == 0 and second.cache["attribution"]["computed"] == 0
    assert first.n_scored >= 1 and first.n_labelled >= first.n_scored
    for row in first.per_trace:
        assert row["values"][-1] == row["reward"]
        assert row["control"]["chain"] >= 0  # the arithmetic world's positive control is computed
        # a reader recomputes each figure from the row alone: the metrics from the step scores,
        # dV, the advantage and the lengths, dV from the values, the halves average to dV when N is even
        again = trace_metrics({m: np.array(v, dtype=float) for m, v in row["step_scores"].items()},
                              np.array(row["dv"]), row["advantage"], np.array(row["step_tokens"]))
        np.testing.assert_equal(again, {m: row["metrics"][m] for m in again})  # NaN equals NaN here
        assert np.allclose(np.diff(row["values"]), row["dv"])
        assert np.allclose(np.mean(row["dv_halves"], axis=0), row["dv"])
        assert row["step_scores"][LONGEST] == row["step_tokens"] and min(row["step_tokens"]) >= 1
    again = summarise(first.per_trace, first.per_group, ["random"])
    assert json.dumps(again[0]) == json.dumps(first.methods) and json.dumps(again[1]) == json.dumps(first.reference)


def test_every_trace_of_a_group_is_labelled_so_every_group_counts(bundled, tmp_path):
    """label="all": a trace below --min-steps gets the oracle (its group's credit agreement
    reads it) but stays out of the within-trace figures; "scored" leaves it unlabelled."""
    model, tok = bundled
    records = [{"prompt": p.prompt, "answer": str(p.answer), "problem": p}
               for p in generate_problems(4, "recall", seed=1, split="test")]
    kwargs = dict(n=4, methods=["random"], continuations=2, margin=0, group_samples=2,
                  max_new_tokens=48, cache=tmp_path / "cache.jsonl", min_steps=99)
    every = advantage_recall(model, tok, records, **kwargs)
    scored = advantage_recall(model, tok, records, label="scored", **kwargs)
    assert every.n_scored == scored.n_scored == 0  # no trace reaches 99 steps
    assert every.n_labelled == len(every.per_trace) > 0 and scored.n_labelled == 0
    assert every.groups["credit"] == len({t["group"] for t in every.per_trace}) and scored.groups["credit"] == 0
    assert not any(t["family"] for t in every.per_trace)


def test_references_are_families_of_their_own():
    """The methods' Holm p is their family's; each reference's is its raw p."""
    rows = _synthetic_rows(3, traces=15)
    methods, reference, _ = summarise(rows, [], ["mean", "max"])
    family = estimate({m: [r["metrics"][m]["signed"] for r in rows] for m in ("mean", "max")})
    for m in ("mean", "max"):
        assert methods[m]["signed"]["p_holm"] == family[m]["p_holm"]
    for r in (EARLIEST, LONGEST):
        assert reference[r]["signed"]["p_holm"] == reference[r]["signed"]["p"]


def test_cache_refuses_a_malformed_advantage_entry(tmp_path):
    path = tmp_path / "cache.jsonl"
    path.write_text(json.dumps({"kind": "prefix", "key": "k", "rewards": [1.0, 0.0]}) + "\n")
    assert advantage_cache(path).get("prefix", "k")["rewards"] == [1.0, 0.0]  # read back, counted
    for rewards in (["1"], [7.0, 0.0], [-1.0], [], [1e400]):  # a graded reward lies in [0, 1]
        path.write_text(json.dumps({"kind": "prefix", "key": "k", "rewards": rewards}) + "\n")
        with pytest.raises(InputError, match=r"cache.jsonl:1: a prefix entry must hold"):
            advantage_cache(path)
    traces = {"token_ids": [1], "steps": [[0, 1]], "step_scores": {}, "token_advantages": {}}
    for advantage in (1e400, None, "1"):
        path.write_text(json.dumps({"kind": "attribution", "key": "k", "traces": [{**traces, "advantage": advantage}]})
                        + "\n")
        with pytest.raises(InputError, match=r"attribution entry must hold"):
            advantage_cache(path)


def test_cached_values_outside_what_the_settings_make_are_refused(bundled, tmp_path):
    """A boundary's rewards of another length than --continuations, a group whose texts are
    not the ones it was written with: one InputError naming the cache, the file unchanged."""
    model, tok = bundled
    records = [{"prompt": p.prompt, "answer": str(p.answer), "problem": p}
               for p in generate_problems(2, "recall", seed=1, split="test")]
    path = tmp_path / "cache.jsonl"
    kwargs = dict(n=2, methods=["random"], continuations=2, margin=0, group_samples=2,
                  max_new_tokens=48, cache=path)
    advantage_recall(model, tok, records, **kwargs)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    cases = {"prefix": lambda e: e.update(rewards=e["rewards"] * 50),
             "group": lambda e: e.update(texts=[t + " 9" for t in e["texts"]])}
    for kind, change in cases.items():
        edited = [dict(e) for e in lines]
        change(next(e for e in edited if e.get("kind") == kind))
        bad = tmp_path / f"{kind}.jsonl"
        bad.write_text("".join(json.dumps(e) + "\n" for e in edited))
        before = bad.read_bytes()
        with pytest.raises(InputError, match=rf"--cf-cache {bad}: a "):
            advantage_recall(model, tok, records, **{**kwargs, "cache": bad})
        assert bad.read_bytes() == before


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
