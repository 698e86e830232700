"""`oracle_recall`'s report: the summary JSON is unchanged, and the per-trace data it keeps
(traces, texts, per-trace recall, `to_frame`) is what the summary was computed from."""
import json
import re

import numpy as np
import pytest
import torch

from oar_attrib import cli
from oar_attrib.instruments.world import recall
from oar_attrib.analysis.recall_reading import paired_comparisons
from oar_attrib.analysis.verdicts import verdict
from oar_attrib.world import extract_answer, generate_problems
from oar_attrib.world.tokenizer import build_tokenizer
from models import world_policy

N, SEED, METHODS = 10, 4, ["oar_p", "entropy", "random"]
SUMMARY_KEYS = ["methods", "random", "n", "n_scored", "accuracy", "skipped"]  # `oar recall world --json`, in order
STEP_SUMMARY_KEYS = ["granularity", "preset", "pool", "methods", "random", "n", "n_scored", "accuracy",
                     "skipped", "by_outcome", "resample", "intervention"]  # `oar recall steps --json`


@pytest.fixture(scope="module")
def problems():
    return generate_problems(N, "recall", seed=SEED, split="test")  # oracle_recall's default


@pytest.fixture(scope="module")
def tokenizer(problems):
    extra = generate_problems(30, "default", seed=1)
    return build_tokenizer([p.prompt + p.solution for p in problems + extra], 280)


@pytest.fixture(scope="module")
def model(tokenizer):
    return world_policy(tokenizer)


def _response(i: int, problem) -> str:
    """The 'model's' answer to problem i: right, wrong, without an answer, or incomplete."""
    if i == 1:
        return problem.solution.rsplit("####", 1)[0] + f"#### {problem.answer + 1}"
    if i == 2:
        return problem.solution.rsplit("####", 1)[0]
    if i == 3:
        return f"#### {problem.answer}"
    return problem.solution


@pytest.fixture()
def scripted(monkeypatch, tokenizer, problems):
    """`generate` replaced by one that writes `_response` for each prompt, so that the report
    has right, wrong and skipped traces without a trained model."""
    by_prompt = {p.prompt: (i, p) for i, p in enumerate(problems)}

    def fake_generate(model, tok, prompts, **kwargs):
        texts = [_response(*by_prompt[p]) for p in prompts]
        return [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]

    monkeypatch.setattr(recall, "generate", fake_generate)


@pytest.fixture()
def report(scripted, model, tokenizer):
    return recall.oracle_recall(model, tokenizer, n=N, seed=SEED, methods=METHODS)


def test_summary_json_keeps_its_keys(report):
    data = report.as_dict()
    assert list(data) == SUMMARY_KEYS
    assert json.loads(json.dumps(data)) == data
    assert report.skipped == {"no_answer_span": 1, "incomplete_trace": 1}
    assert report.n_scored == N - 2 and set(data["methods"]) == set(METHODS)


def test_both_reports_give_their_own_summary_keys_in_order_and_no_trace_data():
    """Token and step reports share their summary fields (`analysis.report.RecallSummary`):
    each `as_dict` is exactly its JSON's keys, in order, whatever per-trace data it holds."""
    from oar_attrib.instruments.steps.recall import StepRecallReport

    shared = {"methods": {"m": 1}, "random": {"r": 2}, "n": 5, "n_scored": 4, "accuracy": 0.25,
              "skipped": {"no_answer_span": 1}}
    per_trace = {"oracles": ["o"] * 5, "per_trace": [None] * 5}
    token = recall.RecallReport(**shared, texts=["t"] * 5, status=["scored"] * 5, **per_trace)
    assert list(token.as_dict()) == SUMMARY_KEYS and token.as_dict() == shared
    own = {"granularity": "step", "preset": "upstream", "pool": "max", "by_outcome": {"m": 3},
           "resample": {}, "intervention": {}}
    step = StepRecallReport(**shared, **own, **per_trace)
    assert list(step.as_dict()) == STEP_SUMMARY_KEYS and step.as_dict() == {**shared, **own}
    assert token.counts_line() == step.counts_line() == \
        "n=5 scored=4 accuracy=0.250 skipped: no_answer_span 1"
    with pytest.raises(TypeError):  # per-trace data is passed by name only
        recall.RecallReport(*shared.values(), ["problem"])


def test_per_trace_data_lines_up_with_the_problems(report, problems):
    assert [p.prompt for p in report.problems] == [p.prompt for p in problems]
    assert len(report.texts) == len(report.traces) == len(report.oracles) == len(report.per_trace) == N
    assert [t.response for t in report.traces] == report.texts
    assert report.status[2:4] == ["no_answer_span", "incomplete_trace"]
    assert [s == "scored" for s in report.status] == [r is not None for r in report.per_trace]
    assert report.correct == [i not in (1, 2) for i in range(N)]
    assert report.accuracy == pytest.approx(np.mean(report.correct))
    for i in (0, 4):
        oracle = problems[i].oracle(report.texts[i])
        assert report.per_trace[i] == recall.trace_recall(report.traces[i], oracle)


def test_frame_means_equal_the_summary(report):
    frame = report.to_frame()
    assert len(frame) == report.n_scored * len(METHODS) * len(recall.DEFAULT_SETS)
    assert set(frame["trace"]) == {i for i, s in enumerate(report.status) if s == "scored"}
    means = frame.groupby(["method", "oracle"])[["recall", "ap"]].mean()
    for method in METHODS:
        for name in recall.DEFAULT_SETS:
            stats = report.methods[method][name]
            assert means.loc[(method, name), "recall"] == pytest.approx(stats["recall"])
            assert means.loc[(method, name), "ap"] == pytest.approx(stats["ap"])
            lo, hi = stats["ci95"]
            assert lo <= stats["recall"] <= hi
    expected = frame[frame["method"] == METHODS[0]].groupby("oracle")["expected"].mean()
    for name in recall.DEFAULT_SETS:
        assert expected[name] == pytest.approx(report.random[name]["recall"])
    assert frame["recall"].between(0, 1).all()
    wrong = frame[~frame["correct"]]
    assert set(wrong["trace"]) == {1}


def test_cli_recall_json_has_the_summary_keys_only(scripted, tmp_path, model, tokenizer, capsys):
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    assert cli.main(["recall", "world", "--model", str(folder), "--n", str(N), "--seed", str(SEED),
                     "--methods", *METHODS, "--json", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    record = data.pop("record")  # the settings record of the command, beside the summary
    assert list(data) == SUMMARY_KEYS and data["n_scored"] == N - 2
    assert sorted(record["methods"]) == sorted(METHODS) and record["model"]["name"] == str(folder)
    assert data == json.loads(json.dumps(recall.oracle_recall(
        model, tokenizer, n=N, seed=SEED, methods=METHODS).as_dict()))


def test_names_and_results_can_be_scored_beside_direct(scripted, model, tokenizer, problems, capsys):
    for p in problems:
        o = p.oracle()
        assert o.results == o.direct and not set(o.names) & set(o.direct)
        assert {p.solution[a:b] for a, b in o.names} == {p.target[0], p.target[2]}
        assert sorted(p.solution[a:b] for a, b in o.results) == sorted(
            [str(p.values[p.target[0]]), str(p.values[p.target[2]])])
    sets = ("direct", "names", "results")
    report = recall.oracle_recall(model, tokenizer, n=N, seed=SEED, methods=METHODS, sets=sets)
    assert set(report.random) == set(sets) and all(set(report.methods[m]) == set(sets) for m in METHODS)
    # `results` is `direct`: equal scores; the names are two one-token spans, so a random
    # ranking finds them at 2 / |S|.
    for trace, row in zip(report.traces, report.per_trace):
        if row is not None:
            assert row["oar_p"]["direct"] == row["oar_p"]["results"]
            assert row[recall.EXPECTED]["names"] == pytest.approx(2 / sum(trace.scored))
    with pytest.raises(recall.InputError, match="unknown oracle set"):
        recall.oracle_recall(model, tokenizer, n=2, seed=SEED, methods=METHODS, sets=("answer",))
    with pytest.raises(SystemExit):  # argparse refuses it before anything is loaded
        cli.main(["recall", "world", "--sets", "answer"])
    assert "invalid choice: 'answer'" in capsys.readouterr().err


def test_a_token_set_is_ranked_among_its_tested_positions_only(report):
    i = report.status.index("scored")
    trace, oracle = report.traces[i], report.oracles[i]
    scores = np.asarray(trace.scores["oar_p"])
    scored = [t for t, s in enumerate(trace.scored) if s]
    best = max(scored, key=lambda t: scores[t])
    tested = np.zeros(len(scores), dtype=bool)
    tested[[t for t in scored if t != best]] = True
    # The top position among the tested ones is found at k=1, although an untested one
    # scores higher; the bottom one is not.
    top = max((t for t in scored if t != best), key=lambda t: scores[t])
    bottom = min((t for t in scored if t != best), key=lambda t: scores[t])
    for target_pos, want in ((top, 1.0), (bottom, 0.0)):
        target = np.zeros_like(tested)
        target[target_pos] = True
        row = recall.trace_recall(trace, oracle, ("direct", "counterfactual"),
                                  {"counterfactual": (target, tested)})
        assert row["oar_p"]["counterfactual"]["recall"] == pytest.approx(want)
        assert row[recall.EXPECTED]["counterfactual"] == pytest.approx(1 / tested.sum())
        assert row["oar_p"]["direct"] == recall.trace_recall(trace, oracle, ("direct",))["oar_p"]["direct"]
    # A tested position outside the scored set is not ranked.
    outside = trace.scored.index(False) if False in trace.scored else None
    if outside is not None:
        tested[outside] = True
        target = np.zeros_like(tested)
        target[[outside, top]] = True
        row = recall.trace_recall(trace, oracle, ("counterfactual",), {"counterfactual": (target, tested)})
        assert row["oar_p"]["counterfactual"]["recall"] == pytest.approx(1.0)


def test_counterfactual_set_scores_the_model_oracle_of_each_trace(scripted, monkeypatch, model, tokenizer,
                                                                  problems):
    # An oracle that marks exactly the `direct` tokens among all scored positions gives the
    # `direct` figures: the counterfactual set goes through the same ranking.
    calls = []

    def fake_oracle(model_, tok, prompt_ids, response_ids, positions, extract, *, max_positions, **kw):
        calls.append((prompt_ids, list(response_ids), list(positions), max_positions))
        text = tok.decode(response_ids, skip_special_tokens=True)
        assert extract(text) is not None  # the world's answer of the trace itself
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
        problem = next(p for p in problems if tok(p.prompt, add_special_tokens=False).input_ids == prompt_ids)
        direct = recall.oracle_token_mask(offsets, problem.oracle(text).direct)
        return {t: bool(direct[t]) for t in positions}

    monkeypatch.setattr(recall, "counterfactual_oracle", fake_oracle)
    report = recall.oracle_recall(model, tokenizer, n=N, seed=SEED, methods=METHODS,
                                  sets=("direct", "counterfactual"), cf_positions=7)
    assert len(calls) == report.n_scored
    for method in METHODS:
        assert report.methods[method]["counterfactual"] == report.methods[method]["direct"]
    assert report.random["counterfactual"] == report.random["direct"]
    scored_traces = [t for t, s in zip(report.traces, report.status) if s == "scored"]
    for (prompt_ids, response_ids, positions, max_positions), trace in zip(calls, scored_traces):
        assert response_ids == trace.token_ids and max_positions == 7
        assert positions == [t for t, s in enumerate(trace.scored) if s]
    with pytest.raises(recall.InputError, match="cf.positions"):
        recall.oracle_recall(model, tokenizer, n=2, seed=SEED, methods=METHODS,
                             sets=("counterfactual",), cf_positions=0)


def test_counterfactual_masks_are_the_counterfactual_oracle(scripted, model, tokenizer, problems):
    report = recall.oracle_recall(model, tokenizer, n=N, seed=SEED, methods=["random"], sets=("direct",))
    i = report.status.index("scored")
    trace, problem = report.traces[i], problems[i]
    target, tested = recall.counterfactual_masks(model, tokenizer, problem, trace, max_positions=5, seed=1)
    assert tested.sum() == 5 and all(trace.scored[t] for t in np.flatnonzero(tested))
    # Reference: for each tested t, put the pad token at t, decode greedily one token at a time
    # (no batch, no padding) and compare the answers read from the texts.
    prompt = tokenizer(problem.prompt, add_special_tokens=False).input_ids
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    original = extract_answer(tokenizer.decode(trace.token_ids, skip_special_tokens=True))
    want = set()
    for t in np.flatnonzero(tested):
        ids = prompt + trace.token_ids[:t] + [pad]
        with torch.no_grad():
            for _ in range(len(trace.token_ids) + 8):
                nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
                if nxt == eos:
                    break
                ids.append(nxt)
        if extract_answer(tokenizer.decode(ids[len(prompt):], skip_special_tokens=True)) != original:
            want.add(int(t))
    assert set(np.flatnonzero(target)) == want


def test_cli_recall_offers_every_recall_set():
    """The CLI offers the arithmetic world's sets, the counterfactual one, the value oracle's
    (word-problem data), the graded oracle and the advantage oracle, each once."""
    from oar_attrib.world import VALUE_SETS

    modes = cli.subcommands(cli.subcommands(cli.build_parser())["recall"])
    world, data = (next(a for a in modes[m]._actions if a.dest == "sets").choices for m in ("world", "data"))
    assert tuple(world) == recall.RECALL_SETS
    assert tuple(data) == ("counterfactual",) + VALUE_SETS
    assert {"graded", "advantage"} <= set(modes)  # the sampled oracles: subcommands of their own
    offered = [*world, *(s for s in data if s not in world), "graded", "advantage"]
    assert len(offered) == len(set(offered)) and set(offered) == set(recall.RECALL_SETS) | set(VALUE_SETS) | {
        "graded", "advantage"}


def test_cli_recall_text_shows_the_random_draw_and_the_expectation(scripted, tmp_path, model,
                                                                     tokenizer, capsys):
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    argv = ["recall", "world", "--model", str(folder), "--n", str(N), "--seed", str(SEED),
            "--methods", *METHODS, "--no-progress"]
    assert cli.main(argv + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    table, _, words = out.partition("Reading:\n")
    lines = table.splitlines()[2:]
    assert "{" not in out and "['" not in out  # no Python reprs anywhere
    # the reading: one verdict per method (the random draw aside) and set, from the paired
    # per-trace differences, then the caveat of few traces and the next command
    report = recall.oracle_recall(model, tokenizer, n=N, seed=SEED, methods=METHODS)
    verdicts = [verdict(c) for c in paired_comparisons(report, ("direct", "chain"), SEED)]
    assert len(verdicts) == 2 * (len(METHODS) - 1)
    assert words.splitlines()[:len(verdicts)] == [f"  {v}" for v in verdicts]
    assert f"only {N - 2} traces were scored" in words and "Next: oar recall world --n 200" in words
    # Each row: a label, then "recall [lo,hi]" per set (direct, chain).
    rows = {re.split(r"\s{2,}|\s(?=\d\.\d{3} \[)", line)[0].strip():
            [float(x) for x in re.findall(r"(\d\.\d{3}) \[", line)] for line in lines}
    assert set(rows) == {"oar_p", "entropy", "random (a draw)", "random expectation"}
    for i, name in enumerate(("direct", "chain")):
        assert rows["random (a draw)"][i] == round(data["methods"]["random"][name]["recall"], 3)
        assert rows["random expectation"][i] == round(data["random"][name]["recall"], 3)
        assert rows["oar_p"][i] == round(data["methods"]["oar_p"][name]["recall"], 3)
