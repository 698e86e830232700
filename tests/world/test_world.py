"""The arithmetic world: seeded problems, oracle spans, reward."""
import re

import pytest

from oar_attrib.errors import UnknownNameError, WorldConfigError
from oar_attrib.inputs.spans import find_answer_span
from oar_attrib.world import (
    PRESETS,
    Problem,
    Step,
    WorldConfig,
    extract_answer,
    generate_problems,
    get_config,
    oracle_spans,
    reward,
    split_of,
)


def _spans_text(text, spans):
    return [text[a:b] for a, b in spans]


def test_same_seed_same_problems_and_other_seed_differs():
    a = generate_problems(20, "default", seed=3)
    b = generate_problems(20, "default", seed=3)
    c = generate_problems(20, "default", seed=4)
    assert [p.solution for p in a] == [p.solution for p in b]
    assert [p.question for p in a] != [p.question for p in c]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_solution_is_consistent_with_the_problem(preset):
    cfg = PRESETS[preset]
    for p in generate_problems(200, preset, seed=1):
        values = {}
        # Recompute every step from the text of the solution: each must be right.
        for m in re.finditer(r"([a-z])=(\d+)([+\-*])(\d+)=(\d+)", p.solution):
            name, lv, op, rv, res = m.groups()
            assert int(res) == eval(f"{lv}{op}{rv}")
            values[name] = int(res)
        u, op, v = p.target
        assert op in cfg.final_ops
        assert p.answer == eval(f"{values[u]}{op}{values[v]}") >= 0
        assert extract_answer(p.solution) == p.answer
        assert len(p.steps) == cfg.n_steps + cfg.n_distractors
        assert len(p.path) == cfg.n_steps
        literals = [x for s in p.steps for x in (s.left, s.right) if isinstance(x, int)]
        assert literals and max(literals) <= cfg.max_given
        # Every named operand is defined by an earlier step of the solution.
        for i, step in enumerate(p.steps):
            before = {s.name for s in p.steps[:i]}
            assert all(x in before for x in (step.left, step.right) if isinstance(x, str))
        # No step reads itself, and no distractor writes the final expression out.
        assert all(s.left != s.right or isinstance(s.left, int) for s in p.steps)
        assert not any({s.left, s.right} == {u, v} for s in p.steps if s.name not in p.path)
        # The final expression is never written out: the trace holds exactly the problem's steps.
        assert len(re.findall(r"[a-z]=\d+[+\-*]\d+=\d+", p.solution)) == len(p.steps)


def test_answer_needs_two_results_and_all_path_steps():
    for p in generate_problems(200, "hard", seed=2):
        u, _, v = p.target
        assert u != v and {u, v} <= p.path
        distractors = {s.name for s in p.steps} - p.path
        assert len(distractors) == PRESETS["hard"].n_distractors
        # Nothing on the path reads a distractor.
        assert all(s.left not in distractors and s.right not in distractors for s in p.steps if s.name in p.path)


@pytest.mark.parametrize("preset", ["recall", "recall-wide", "medium", "hard"])
def test_without_reuse_every_final_result_is_written_once(preset):
    problems = generate_problems(200, preset, seed=3, reuse_finals=False)
    for p in problems:
        u, _, v = p.target
        assert {u, v} <= p.path and all(u not in (s.left, s.right) and v not in (s.left, s.right)
                                        for s in p.steps)
        o = p.oracle()
        finals = sorted(str(p.values[n]) for n in (u, v))
        assert sorted(_spans_text(p.solution, o.direct)) == finals
    # With reuse (the other presets' default), later steps do read the finals.
    reused = generate_problems(200, "default", seed=3)
    assert any(p.target[2] in (s.left, s.right) or p.target[0] in (s.left, s.right)
               for p in reused for s in p.steps)
    assert get_config("recall").reuse_finals is False


def test_recall_results_are_one_digit_so_no_digit_of_direct_is_predictable():
    # In `recall-wide` a two-digit sum of two one-digit givens starts with "1": its length gives
    # that digit away. `recall` keeps every value to one digit, so each token of `direct` is a
    # whole value.
    wide_tens = [str(p.values[s.name]) for p in generate_problems(300, "recall-wide", seed=4)
                 for s in p.steps if s.name in (p.target[0], p.target[2]) and s.op == "+"
                 and isinstance(s.left, int) and isinstance(s.right, int) and p.values[s.name] > 9]
    assert wide_tens and {v[0] for v in wide_tens} == {"1"}
    for p in generate_problems(300, "recall", seed=4):
        assert all(0 <= v <= 9 for v in p.values.values())
        assert [b - a for a, b in p.oracle().direct] == [1, 1]


def test_oracle_spans_cover_exactly_the_intended_text():
    p = generate_problems(1, "default", seed=0)[0]
    text = p.solution
    oracle = p.oracle()
    u, _, v = p.target
    direct = _spans_text(text, oracle.direct)
    assert sorted(direct) == sorted([str(p.values[u]), str(p.values[v])])
    assert sorted(_spans_text(text, oracle.names)) == sorted([u, v])
    chain = _spans_text(text, oracle.chain)
    for step in p.steps:
        written = f"{step.name}={p.value(step.left)}{step.op}{p.value(step.right)}={p.values[step.name]}"
        assert (written in chain) == (step.name in p.path)
        assert (written in _spans_text(text, oracle.distractor)) == (step.name not in p.path)
    assert all(w in ("so", "then", "now", "ok", "next", "hmm", "well") for w in _spans_text(text, oracle.filler))
    assert oracle.complete


def _chars(spans):
    return {i for a, b in spans for i in range(a, b)}


def test_oracle_sets_nest_and_never_overlap_wrongly():
    for p in generate_problems(300, "hard", seed=5, filler_rate=0.8):
        o = p.oracle()
        direct, chain, dis, fil = map(_chars, (o.direct, o.chain, o.distractor, o.filler))
        assert direct and direct <= chain
        assert not chain & dis and not chain & fil and not dis & fil
        assert len(o.filler) == sum(f is not None for f in p.fillers)


def test_oracle_of_a_hand_written_problem():
    # The module docstring's example, built by hand; every span below is counted by hand on
    # "d=4+7=11. e=11-3=8. so f=7*3=21. g=8+2=10. #### 29" (d at 0, e at 10, f at 23, g at 33).
    p = Problem(steps=(Step("d", 4, "+", 7), Step("e", "d", "-", 3), Step("f", 7, "*", 3), Step("g", "e", "+", 2)),
                target=("e", "+", "f"), path=frozenset("def"), values={"d": 11, "e": 8, "f": 21, "g": 10},
                fillers=(None, None, "so", None))
    assert p.solution == "d=4+7=11. e=11-3=8. so f=7*3=21. g=8+2=10. #### 29" and p.answer == 29
    o = p.oracle()
    assert o.direct == ((17, 18), (29, 31))
    assert o.chain == ((0, 8), (10, 18), (23, 31))
    assert o.distractor == ((33, 41),)
    assert o.filler == ((20, 22),)
    assert o.names == ((10, 11), (23, 24)) and o.complete
    # A trace the model wrote differently: no filler, e's result wrong, f never written.
    o2 = oracle_spans(p, "d=4+7=11. e=11-3=9. g=9+2=11. #### 20")
    assert o2.direct == ((17, 18),) and o2.chain == ((0, 8), (10, 18)) and o2.distractor == ((20, 28),)
    assert o2.filler == () and not o2.complete


def test_oracle_of_a_different_trace_follows_the_names():
    p = generate_problems(1, "default", seed=11, filler_rate=0.0)[0]
    u, _, v = p.target
    # A trace with a wrong result for u and a prefix: the direct span still points at u's result.
    steps = p.solution.split(" ")
    wrong = []
    for s in steps:
        if s.startswith(f"{u}="):
            s = re.sub(r"=(\d+)\.$", "=999.", s)
        wrong.append(s)
    trace = "hmm " + " ".join(wrong)
    o = oracle_spans(p, trace)
    assert "999" in _spans_text(trace, o.direct)
    assert _spans_text(trace, o.filler) == ["hmm"]
    # A trace that never reaches v is incomplete and has no span for v.
    cut = trace[: trace.index(f" {v}=")] if f" {v}=" in trace else trace[: trace.index(f"{v}=")]
    o2 = oracle_spans(p, cut)
    assert not o2.complete and v not in _spans_text(cut, o2.direct)


@pytest.mark.parametrize(
    "text,fmt,expected",
    [
        ("a=1+2=3. #### 3", "gsm8k", 1.0),
        ("a=1+2=3.", "gsm8k", 0.0),  # missing answer
        ("#### 3 and then some words", "gsm8k", 1.0),  # extra text after the number
        ("#### 4 #### 3", "gsm8k", 1.0),  # the last marker counts
        ("####-3", "gsm8k", 0.0),  # -3 is not 3
        ("#### 003", "gsm8k", 1.0),  # leading zeros read as a number
        ("\\boxed{3}", "boxed", 1.0),
        ("\\boxed{ 3 }", "boxed", 1.0),
        ("#### 3", "boxed", 0.0),  # the wrong format finds no answer
        ("", "gsm8k", 0.0),
    ],
)
def test_reward_edge_cases(text, fmt, expected):
    assert reward(text, 3, fmt) == expected


@pytest.mark.parametrize(
    "text,fmt,expected",
    [
        ("e=11-3=8. #### 29", "gsm8k", 29),  # right
        ("e=11-3=8. #### 30", "gsm8k", 30),  # wrong
        ("e=11-3=8. 29", "gsm8k", None),  # missing marker
        ("e=11-3=8. \\boxed{29}", "boxed", 29),  # boxed
        ("#### 29.", "gsm8k", 29),  # the sentence's full stop is not part of the number
        # What the span finder locates is the answer; a non-integer there is no answer:
        ("#### 4 #### x", "gsm8k", None),
        ("#### 3.5", "gsm8k", None),
        ("\\boxed{3} \\boxed{x}", "boxed", None),
        ("#### ", "gsm8k", None),
    ],
)
def test_extract_answer_reads_the_located_answer(text, fmt, expected):
    assert extract_answer(text, fmt) == expected
    span = find_answer_span(text, fmt)
    if expected is not None:  # the reward reads the characters attribution scores as the answer
        assert text[span[0]:span[1]] == str(expected)


def test_reward_negative_answer():
    assert reward("#### -12", -12) == 1.0
    assert extract_answer("#### -12") == -12
    assert reward("#### 12", -12) == 0.0


def test_split_is_disjoint_and_about_one_in_ten():
    train = generate_problems(300, "default", seed=0, split="train")
    test = generate_problems(300, "default", seed=0, split="test")
    assert all(split_of(p.question) == "train" for p in train)
    assert not {p.question for p in train} & {p.question for p in test}
    both = generate_problems(2000, "default", seed=1, split=None)
    share = sum(split_of(p.question) == "test" for p in both) / len(both)
    assert 0.06 < share < 0.14


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (dict(n_steps=1), "n_steps"),
        (dict(n_steps=20, n_distractors=10), "letters"),
        (dict(max_given=9, max_value=10), "max_value"),
        (dict(filler_rate=1.5), "filler_rate"),
        (dict(ops="/"), "ops"),
        (dict(final_ops="*"), "final_ops"),
    ],
)
def test_impossible_settings_raise_clear_errors(overrides, needle):
    with pytest.raises(WorldConfigError, match=needle):
        generate_problems(1, "default", **overrides)


def test_unknown_preset_and_format_list_known_names():
    with pytest.raises(UnknownNameError, match="default"):
        get_config("nightmare")
    with pytest.raises(UnknownNameError, match="gsm8k"):
        WorldConfig(answer_format="latex")
    with pytest.raises(WorldConfigError, match="fields"):
        get_config("default", n_stepz=3)


def test_boxed_format():
    p = generate_problems(1, "default", seed=0, answer_format="boxed")[0]
    assert p.solution.endswith(f"\\boxed{{{p.answer}}}")
    assert p.reward(p.solution) == 1.0
    assert p.reward(p.solution.replace("\\boxed", "#### ")) == 0.0
