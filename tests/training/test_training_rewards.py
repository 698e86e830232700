"""Verifiable rewards: the world's exact reward, GSM8K numeric match, math-verify (MATH/AIME/AMC)."""
import json
import re

import pytest

from oar_attrib.world import generate_problems
from oar_attrib.training.errors import TrainingConfigError
from oar_attrib.training.rewards import (extract_number, get_reward, gsm8k_reward, math_verify_reward,
                              world_reward)

from shared_data import data_file


def records(name):
    return [json.loads(line) for line in data_file(name).read_text().splitlines() if line.strip()]


def perturb(answer: str) -> str:
    """A different answer: the first non-zero digit moved up by one (9 -> 1), else a 0 made 1,
    else '+1' appended. The first digit, not the last: math-verify rounds to 6 decimals and
    ignores base subscripts and units, so a change in the last digit can be equivalent."""
    m = re.search(r"[1-9]", answer) or re.search(r"0", answer)
    if m is None:
        return answer + "+1"
    digit = int(answer[m.start()])
    return answer[: m.start()] + str(digit % 9 + 1) + answer[m.start() + 1 :]


def boxed(answer: str) -> str:
    return f"Let me think step by step. So the final answer is \\boxed{{{answer}}}."


def test_world_reward_is_the_worlds_exact_reward():
    problems = generate_problems(3, "default", seed=4) + generate_problems(1, "default", seed=4, answer_format="boxed")
    texts = [p.solution for p in problems]
    answers = [str(p.answer) for p in problems]
    fmts = [p.answer_format for p in problems]
    assert world_reward(None, texts, answer=answers, answer_format=fmts) == [1.0] * 4
    expected = [p.reward(t) for p, t in zip(problems, texts)]
    assert world_reward(None, texts, answer=answers, answer_format=fmts) == expected
    wrong = [t.replace(f"#### {p.answer}", f"#### {p.answer + 1}") for t, p in zip(texts[:3], problems)]
    assert world_reward(None, wrong, answer=answers[:3]) == [0.0] * 3
    chat = [[{"role": "assistant", "content": texts[0]}]]
    assert world_reward(None, chat, answer=answers[:1]) == [1.0]


def test_gsm8k_numeric_match():
    comps = ["so she makes $18.00 a day.\n#### 18", "It is 1,234 apples. #### 1,234", "The answer is 7.",
             "\\boxed{-3}", "#### 19", "no number here"]
    golds = ["18", "1234", "7", "-3", "18", "5"]
    assert gsm8k_reward(None, comps, answer=golds) == [1, 1, 1, 1, 0, 0]
    assert extract_number("x = 4, then 5 and finally 6.5 apples") == 6.5


@pytest.mark.slow
@pytest.mark.parametrize("name", ["math500_test", "gsm8k_test", "aime24", "aime25", "amc23"])
def test_math_verify_accepts_every_gold_answer_and_rejects_a_perturbed_one(name):
    recs = records(name)
    golds = [r["answer"] for r in recs]
    right = math_verify_reward(None, [boxed(g) for g in golds], answer=golds)
    wrong = math_verify_reward(None, [boxed(perturb(g)) for g in golds], answer=golds)
    assert [r["id"] for r, v in zip(recs, right) if v != 1.0] == []
    assert [r["id"] for r, v in zip(recs, wrong) if v != 0.0] == []


def test_math_verify_equivalences_and_failures():
    golds = ["\\frac{1}{2}", "025", "(3, \\frac{\\pi}{2})", "\\text{(C)}"]
    comps = ["\\boxed{0.5}", "The answer is $\\boxed{25}$", "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
             "\\boxed{\\text{(C)}}"]
    assert math_verify_reward(None, comps, answer=golds) == [1.0] * 4
    assert math_verify_reward(None, ["no answer", ""], answer=["2", "2"]) == [0.0, 0.0]
    chat = [[{"role": "assistant", "content": "\\boxed{4}"}]]
    assert math_verify_reward(None, chat, answer=["4"]) == [1.0]


def test_get_reward():
    assert get_reward("world") is world_reward and get_reward("math_verify") is math_verify_reward
    assert get_reward("oar_attrib.training.rewards:gsm8k_reward") is gsm8k_reward
    with pytest.raises(Exception, match="gsm8k, gsm8k_lenient, math_verify"):
        get_reward("exact")
    with pytest.raises(TrainingConfigError, match="cannot import"):
        get_reward("no_such_module:fn")
    with pytest.raises(TrainingConfigError, match="answer"):
        world_reward(None, ["#### 1"])
