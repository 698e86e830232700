"""grading.grade: the reward pays for the answer span the span finder finds, nothing else."""
import json
from pathlib import Path

import pytest

from oar_attrib.inputs.grading import NO_ANSWER, TRUNCATED, UNPARSABLE, Grade, grade
from oar_attrib.inputs.spans import locate_answer
from oar_attrib.training.rewards import (bind_reward, gsm8k_lenient_reward, gsm8k_reward,
                                         math_verify_lenient_reward, math_verify_reward)

OUTPUTS = Path(__file__).resolve().parents[1] / "data" / "smollm2_outputs.jsonl"


@pytest.mark.parametrize(
    "text, gold, reward, answer, why",
    [
        ("9 * 2 = 18\n#### 18", "18", 1.0, "18", "correct"),
        ("The answer is $18 per day.", "18", 1.0, "18", "correct"),
        ("The answer is \\boxed{\\frac{1}{2}}.", "0.5", 1.0, "\\frac{1}{2}", "correct"),
        ("The answer is 45 x 18 = 756.", "756", 1.0, "756", "correct"),
        ("#### 19", "18", 0.0, "19", "wrong"),
        ("no answer, just 18 apples", "18", 0.0, None, NO_ANSWER),
        ('The final line ends with "####".', "18", 0.0, None, NO_ANSWER),
    ],
)
def test_grade_reads_the_answer_span(text, gold, reward, answer, why):
    g = grade(text, gold)
    assert (g.reward, g.answer, g.why, g.correct) == (reward, answer, why, reward == 1.0)
    loc = locate_answer(text)
    assert g.span == (None if loc is None else loc.span)


def test_truncated_is_zero_whatever_it_says():
    g = grade("#### 18", "18", truncated=True)
    assert (g.reward, g.why, g.answer) == (0.0, TRUNCATED, "18")


def test_format_is_the_one_asked():
    text = "\\boxed{18} but then\n#### 17"
    assert grade(text, "18", "boxed").reward == 1.0
    assert grade(text, "18", "gsm8k").reward == 0.0
    assert grade(text, "18").answer == "17"  # auto: the last statement


def test_unparsable_answer_and_bad_reason(monkeypatch):
    import oar_attrib.inputs.grading as grading

    monkeypatch.setattr(grading, "parse_answer", lambda answer: ())  # math-verify reads nothing
    assert grading.grade("The answer is 18.", "18").why == UNPARSABLE
    with pytest.raises(ValueError, match="unknown grade reason"):
        Grade(0.0, False, None, None, "maybe")


# The case: the old reward fell back to "the last plain expression" anywhere, so a
# rambling completion without a final answer that happens to contain `5 + 2 = 7` earned 1.0
# while the span finder found no answer (OAR off). Now the two agree; the old reading is opt-in.
RAMBLING = ["First, 5 + 2 = 7pfennig, and then we take the number of the days", "So 5 + 2 = 7"]


def test_reward_and_span_finder_disagreed_before_and_agree_now():
    gold = ["7", "7"]
    assert [locate_answer(t) for t in RAMBLING] == [None, None]
    assert math_verify_lenient_reward(None, RAMBLING, answer=gold) == [1.0, 1.0]  # the old reading
    assert gsm8k_lenient_reward(None, RAMBLING, answer=gold) == [1.0, 1.0]
    assert math_verify_reward(None, RAMBLING, answer=gold) == [0.0, 0.0]
    assert gsm8k_reward(None, RAMBLING, answer=gold) == [0.0, 0.0]


def test_cut_off_completions_earn_zero_through_trl_columns():
    done, cut = [5, 6, 2], [5, 6, 7]  # 2 is the stop id
    comps = ["#### 7", "#### 7"]
    assert math_verify_reward(None, comps, answer=["7", "7"], completion_ids=[done, cut],
                              stop_ids=[2]) == [1.0, 0.0]
    # without stop ids nothing can be judged cut off
    assert math_verify_reward(None, comps, answer=["7", "7"], completion_ids=[done, cut]) == [1.0, 1.0]


def test_bind_reward_supplies_settings_and_keeps_name():
    bound = bind_reward(math_verify_reward, answer_format="boxed", stop_ids=[2])
    assert bound.__name__ == "math_verify_reward" and bound.correct_threshold == 1.0
    comps = ["\\boxed{7}\n#### 8", "\\boxed{7}\n#### 8"]
    assert bound(None, comps, answer=["7", "7"], completion_ids=[[1, 2], [1, 1]]) == [1.0, 0.0]
    # a dataset column wins over the bound default
    assert bound(None, comps[:1], answer=["8"], answer_format=["gsm8k"], completion_ids=[[2]]) == [1.0]


def test_smollm2_outputs_reward_only_labelled_answers():
    """On the model's own answers: a reward of 1 only where the hand label has an answer that
    equals the gold answer and the answer was not cut off; the lenient reading pays for more."""
    records = [json.loads(line) for line in OUTPUTS.read_text().splitlines()]
    for r in records:
        g = grade(r["text"], r["gold"], r["asked_format"], truncated=r["truncated"])
        label = r["label_asked"]
        expected = label is not None and not r["truncated"] and grade(label["answer"], r["gold"], "regex", "(.+)").correct
        assert g.correct == expected, r["text"][-200:]
        assert (g.span is None) == (label is None) or r["truncated"]
