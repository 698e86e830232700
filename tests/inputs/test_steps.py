"""Steps of a response: character spans per unit and token ranges over the reasoning."""
import json
import re

import pytest

import oar_attrib as oar
from oar_attrib.errors import InputError, UnknownNameError
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.inputs.steps import check_steps, resolve_unit, response_steps, token_steps
from oar_attrib.world import generate_problems

TEXT = "First, add.\n\nThen 3.5 + 1 = 4.5! Done?\nYes.\n#### 4.5"


def _texts(text, spans):
    return [text[a:b] for a, b in spans]


def test_units_cut_where_documented():
    end = TEXT.index("####")
    assert _texts(TEXT, oar.step_spans(TEXT, "line", end)) == ["First, add.", "Then 3.5 + 1 = 4.5! Done?", "Yes."]
    assert _texts(TEXT, oar.step_spans(TEXT, "paragraph", end)) == ["First, add.", "Then 3.5 + 1 = 4.5! Done?\nYes."]
    assert _texts(TEXT, oar.step_spans(TEXT, "sentence", end)) == [
        "First, add.", "Then 3.5 + 1 = 4.5!", "Done?", "Yes."]
    assert _texts(TEXT, oar.step_spans(TEXT, r"[!?]\s*", end)) == ["First, add.\n\nThen 3.5 + 1 = 4.5", "Done",
                                                                   "Yes."]
    assert _texts(TEXT, oar.step_spans(TEXT, re.compile(r",")))[0] == "First"


def test_world_clauses_are_one_step_each():
    problem = generate_problems(1, "default", seed=3)[0]
    text = problem.solution
    steps = _texts(text, oar.step_spans(text, "sentence", text.index("####")))
    clauses = re.findall(r"(?:\b[a-z]+ )?[a-z]=[^.]*\.", text)
    assert steps == clauses and len(steps) == len(problem.steps)


def test_bad_units_are_clear_errors():
    with pytest.raises(UnknownNameError, match="step unit"):
        oar.step_spans(TEXT, "word")
    with pytest.raises(InputError, match="empty string"):
        oar.step_spans(TEXT, r"\s*")
    with pytest.raises(InputError, match="outside"):
        oar.step_spans(TEXT, "line", end=len(TEXT) + 1)


def test_token_steps_cover_the_reasoning_in_order():
    text = "ab cd.\nef gh.\n#### 1"
    # tokens: "ab", " cd", ".\n", "ef", " gh", ".", "\n", "####", " 1"
    offsets = [(0, 2), (2, 5), (5, 7), (7, 9), (9, 12), (12, 13), (13, 14), (14, 18), (18, 20)]
    spans = oar.step_spans(text, "line", text.index("####"))
    assert spans == [(0, 6), (7, 13)]
    # ".\n" ends past neither start; "ef" is the first token reaching past 7; "\n" stays with step 2.
    assert token_steps(offsets, spans, n_tokens=7) == [(0, 3), (3, 7)]
    # A step past the reasoning gets no token and is dropped; no reasoning, no steps.
    assert token_steps(offsets, spans, n_tokens=2) == [(0, 2)]
    assert token_steps(offsets, spans, n_tokens=0) == []


def test_pool_steps_sum_mean_max_by_hand():
    from oar_attrib.inputs.steps import pool_steps

    scores = [1.0, 2.0, 6.0, 0.5, 0.5]
    ranges = [(0, 3), (3, 5)]
    assert pool_steps(scores, ranges, "sum") == [9.0, 1.0]
    assert pool_steps(scores, ranges, "mean") == [3.0, 0.5]
    assert pool_steps(scores, ranges, "max") == [6.0, 0.5]
    nan = pool_steps([1.0, float("nan"), 2.0], [(0, 2), (2, 3)], "max")
    assert nan[0] != nan[0] and nan[1] == 2.0
    with pytest.raises(ValueError, match="step pooling"):
        pool_steps(scores, ranges, "median")


# ------------------------------------------------------------------ steps over real tokens

from shared_data import data_file, qwen_dir  # noqa: E402


def _check_cover(pair, unit):
    """The pair's steps cover its scored tokens in order without overlap, and each step is
    one unit: a step's text (first token start to last token end) holds no cut of the unit
    except at its end, and every step starts at the token holding the start of its span."""
    n_scored = sum(lab == "reasoning" for lab in pair.labels) if pair.span_found else 0
    steps = pair.steps
    check_steps(steps, n_scored)
    if not steps:
        return
    end = pair.offsets[n_scored - 1][1]
    spans = oar.step_spans(pair.text, resolve_unit(pair.text, unit, end), end)
    starts = [a for a, _ in spans]
    for a, _ in steps[1:]:
        lo, hi = pair.offsets[a]
        assert any(lo <= s < hi or (s < hi and pair.offsets[a - 1][1] <= s) for s in starts)
    assert len(steps) <= len(spans)


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_dir()))


@pytest.mark.parametrize("name", ["gsm8k_test", "math500_test"])
def test_steps_cover_real_solutions_with_qwen_tokenizer(qwen, name):
    path = data_file(name)
    records = [json.loads(line) for line in path.read_text().splitlines()[:150]]
    texts = [r["solution"] for r in records]
    _, pairs = encode_pairs(qwen, ["Q:"] * len(texts), texts)
    n_multi = 0
    for text, pair in zip(texts, pairs):
        _check_cover(pair, "auto")
        if pair.span_found and len(oar.step_spans(text, "line", pair.location.marker_start)) > 1:
            n_multi += 1
            # auto on a multi-line solution is `line`: one step per non-empty line.
            lines = oar.step_spans(text, "line", pair.location.marker_start)
            assert len(pair.steps) == len([s for s in lines if s[0] < pair.offsets[len(
                [x for x in pair.labels if x == "reasoning"]) - 1][1]])
    assert n_multi > 50  # most solutions have several lines: the check above ran


def test_world_traces_get_one_step_per_clause():
    from transformers import AutoTokenizer

    from oar_attrib.models import bundled_path

    tok = AutoTokenizer.from_pretrained(str(bundled_path()))
    problems = generate_problems(40, "medium", seed=1)
    _, pairs = encode_pairs(tok, [p.prompt for p in problems], [p.solution for p in problems])
    for problem, pair in zip(problems, pairs):
        _check_cover(pair, "auto")
        texts = [pair.text[pair.offsets[a][0]:pair.offsets[b - 1][1]].strip() for a, b in pair.steps]
        clauses = re.findall(r"(?:\b[a-z]+ )?[a-z]=[^.]*\.", problem.solution)
        assert texts == clauses and len(texts) == len(problem.steps)


def test_response_steps_units_and_errors():
    text = "a=1.\nb=2.\n#### 3"
    offsets = [(i, i + 1) for i in range(len(text))]
    assert resolve_unit(text, "auto", 9) == "line"
    assert resolve_unit("a=1. b=2.", "auto") == "sentence"
    assert response_steps(text, offsets, 10) == [(0, 5), (5, 10)]
    assert response_steps(text, offsets, 0) == []
    with pytest.raises(InputError, match="exceeds"):
        response_steps(text, offsets, len(text) + 1)
    with pytest.raises(InputError, match="gaps"):
        check_steps([(0, 2), (3, 4)], 4)
    with pytest.raises(InputError, match="reasoning has"):
        check_steps([(0, 2)], 4)


def test_attribute_gives_steps_and_a_step_frame():
    import numpy as np
    from transformers import AutoTokenizer

    from models import world_policy
    from oar_attrib.attribution import AttributionBatch
    from oar_attrib.models import bundled_path

    tok = AutoTokenizer.from_pretrained(str(bundled_path()))
    problems = generate_problems(3, "medium", seed=2)
    traces = oar.attribute(world_policy(tok), tok, [p.prompt for p in problems],
                           [p.solution for p in problems], methods=("oar_p", "oar_p_step"))
    for problem, trace in zip(problems, traces):
        assert len(trace.steps) == len(problem.steps)
        check_steps(trace.steps, sum(trace.scored))
        frame = trace.step_frame()
        assert list(frame["text"]) == re.findall(r"(?:\b[a-z]+ )?[a-z]=[^.]*\.", problem.solution)
        token = np.asarray(trace.scores["oar_p"])
        step = np.asarray(trace.scores["oar_p_step"])
        for k, (a, b) in enumerate(trace.steps):
            assert frame.loc[k, "score_oar_p_sum"] == pytest.approx(token[a:b].sum())
            assert frame.loc[k, "score_oar_p_max"] == pytest.approx(token[a:b].max())
            # oar_p_step puts the step's importance on every token of the step.
            assert np.ptp(step[a:b]) == 0
            assert frame.loc[k, "score_oar_p_step_mean"] == pytest.approx(step[a])
        assert step.max() > 0 and (step[~np.asarray(trace.scored)] == 0).all()
    back = AttributionBatch.from_json(traces.to_json())
    assert [t.steps for t in back] == [t.steps for t in traces]


def test_the_store_keeps_steps_and_derives_them_for_records_without(tmp_path):
    from transformers import AutoTokenizer

    from models import world_policy
    from oar_attrib.models import bundled_path
    from oar_attrib.store import Store

    tok = AutoTokenizer.from_pretrained(str(bundled_path()))
    problem = generate_problems(1, "medium", seed=5)[0]
    trace = oar.attribute(world_policy(tok), tok, problem.prompt, problem.solution,
                          methods=("oar_p_step",), step_unit=r"\. ")[0]
    assert len(trace.steps) == len(problem.steps)
    legacy = trace.to_dict() | {"steps": []}  # a record written before steps existed
    legacy["response"] = problem.solution.replace(". ", ".\n")  # two-line: auto -> lines
    with Store(tmp_path / "runs.db") as store:
        run = store.add_run("steps")
        kept, derived = store.add_trace(run, trace), store.add_trace(run, legacy)
        assert store.trace(kept).steps == trace.steps
        assert store.trace(kept).to_attribution().steps == trace.steps
        assert "steps" not in store.trace(kept).extra
        assert store.trace(derived).steps == trace.steps  # one line per clause
