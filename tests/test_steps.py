"""Steps of a response: character spans per unit and token ranges over the reasoning."""
import re

import pytest

import oar_attrib as oar
from oar_attrib.errors import InputError, UnknownNameError
from oar_attrib.steps import token_steps
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
    from oar_attrib.steps import pool_steps

    scores = [1.0, 2.0, 6.0, 0.5, 0.5]
    ranges = [(0, 3), (3, 5)]
    assert pool_steps(scores, ranges, "sum") == [9.0, 1.0]
    assert pool_steps(scores, ranges, "mean") == [3.0, 0.5]
    assert pool_steps(scores, ranges, "max") == [6.0, 0.5]
    nan = pool_steps([1.0, float("nan"), 2.0], [(0, 2), (2, 3)], "max")
    assert nan[0] != nan[0] and nan[1] == 2.0
    with pytest.raises(ValueError, match="step pooling"):
        pool_steps(scores, ranges, "median")
