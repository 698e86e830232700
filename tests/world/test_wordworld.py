"""The word-problem world (`world.words`) and its value oracle (`world.value_oracle`): seeded and
exact problems, and the oracle's marks on the reference solution and on hand-written traces."""
import pytest

from oar_attrib.errors import UnknownNameError, WorldConfigError
from oar_attrib.world import (VALUE_SETS, WORD_PRESETS, Quantity, WordConfig, WordProblem, find_numbers,
                              generate_word_problems, parse_number, value_oracle)


def _marked(text, oracle):
    return {k: [text[s:e] for s, e in getattr(oracle, k)] for k in VALUE_SETS + ("answer",)}


def _mia() -> WordProblem:
    """Mia has 14, buys 6 (20); Noah has twice as many (40); Leo's age 9 is a distractor."""
    q = (Quantity("q0", 14, "given", 0), Quantity("d0", 9, "distractor", 1), Quantity("k1", 6, "given", 2),
         Quantity("q1", 20, "step", 2, "+", ("q0", "k1")), Quantity("k2", 2, "given", 3),
         Quantity("q2", 40, "step", 3, "*", ("q1", "k2")))
    sentences = ("Mia has 14 stickers.", "Leo is 9 years old.", "Mia buys 6 more stickers.",
                 "Noah has twice as many stickers as Mia.")
    solution = "Mia has 14 + 6 = 20 stickers.\nNoah has 20 * 2 = 40 stickers.\nThe answer is 40."
    return WordProblem(sentences, "How many stickers does Noah have now?", q, "q2", solution)


def _shop() -> WordProblem:
    """A shop has 1,200 pens, sells 300 (900), gets 12 boxes of 25 ... only values matter here:
    1200 and 300 direct, 12 a distractor, 900 the answer."""
    q = (Quantity("q0", 1200, "given", 0), Quantity("k1", 300, "given", 1),
         Quantity("q1", 900, "step", 1, "-", ("q0", "k1")), Quantity("d0", 12, "distractor", 2))
    return WordProblem(("A shop has 1,200 pens.", "It sells 300 pens.", "Its owner is 12."),
                       "How many pens are left?", q, "q1", "1,200 - 300 = 900.\nThe answer is 900.")


# ----------------------------------------------------------------------------- the generator


def test_the_same_seed_gives_the_same_problems_and_another_seed_others():
    a = generate_word_problems(20, "two-step", seed=3, split=None)
    b = generate_word_problems(20, "two-step", seed=3, split=None)
    c = generate_word_problems(20, "two-step", seed=4, split=None)
    assert [p.question for p in a] == [p.question for p in b]
    assert [p.solution for p in a] == [p.solution for p in b]
    assert [p.question for p in a] != [p.question for p in c]


@pytest.mark.parametrize("preset", list(WORD_PRESETS))
def test_values_are_distinct_gold_is_the_graph_and_sentences_state_their_numbers(preset):
    cfg = WORD_PRESETS[preset]
    for p in generate_word_problems(60, preset, seed=1, split=None):
        values = [q.value for q in p.quantities]
        assert len(set(values)) == len(values) and min(values) >= 2, p.question
        assert p.answer == p.evaluate() and p.reward(p.solution) == 1.0
        steps = [q for q in p.quantities if q.kind == "step"]
        assert cfg.min_steps <= len(steps) <= cfg.max_steps
        assert sum(q.kind == "distractor" for q in p.quantities) == cfg.n_distractors
        assert sum(not find_numbers(s) for s in p.sentences) == cfg.n_fillers
        for q in p.quantities:
            stated = p.sentences[q.sentence]
            if q.kind != "step":  # a stated number is in its own sentence, digits or "twice"
                assert {m.value for m in find_numbers(stated)} == {q.value}, stated
            else:
                assert {p.by_key[k].sentence for k in q.inputs} & {q.sentence}
        assert max(values) <= cfg.max_value
        assert p.roles()[p.answer] == "answer"


def test_ops_restrict_the_path():
    for p in generate_word_problems(20, "three-step", seed=2, split=None, ops="-", per_rate=0.0):
        assert {q.op for q in p.quantities if q.kind == "step"} == {"-"} and p.answer == p.evaluate()


def test_train_and_test_share_no_problem():
    train = {p.question for p in generate_word_problems(300, "easy", seed=0, split="train")}
    test = {p.question for p in generate_word_problems(60, "easy", seed=0, split="test")}
    assert train and test and not train & test


def test_bad_settings_say_what_is_wrong():
    with pytest.raises(WorldConfigError, match="min_steps"):
        WordConfig(min_steps=3, max_steps=2)
    with pytest.raises(WorldConfigError, match="ops"):
        WordConfig(ops="/")
    with pytest.raises(UnknownNameError, match="two-step"):
        generate_word_problems(1, "nope")
    with pytest.raises(WorldConfigError, match="WordConfig fields"):
        generate_word_problems(1, "easy", n_steps=3)
    assert set(WordConfig.help()) == set(WordConfig().__dict__) and all(WordConfig.help().values())


# ----------------------------------------------------------------------------- the value oracle


def test_the_reference_solution_of_a_fixed_seed_is_marked_exactly():
    p = generate_word_problems(1, "two-step", seed=0, split="test")[0]
    assert p.question == ("Liam has 19 books. Liam likes books a lot. Liam buys 7 more books. Liam sells "
                          "each of the books for $2. The shop is 6 meters from Liam's house. How many "
                          "dollars does Liam get?")
    assert p.solution == "Liam has 19 + 7 = 26 books.\nLiam gets 26 * 2 = 52 dollars.\nThe answer is 52."
    o = p.oracle()
    # Counted by hand on the solution text: line 1 starts at 0, line 2 at 28, line 3 at 59.
    assert o.upstream == ((9, 11), (14, 15))          # 19, 7
    assert o.direct == ((18, 20), (38, 40), (43, 44))  # 26, 26, 2: the final step's inputs
    assert o.distractor == ()
    assert o.answer == ((47, 49),)                     # 52 in the reasoning; the final 52 is not
    assert o.reasoning_end == 59 and o.complete


def test_a_paraphrase_is_marked_by_value_whatever_its_words():
    p = _mia()
    text = "Mia starts out with 14 stickers. After buying 6 more she owns 20.\nNoah owns double: 20 x 2 = 40.\nThe answer is 40."
    assert _marked(text, value_oracle(p, text)) == {
        "direct": ["20", "20", "2"], "upstream": ["14", "6"], "distractor": [], "answer": ["40"]}


def test_numbers_written_as_words_are_marked():
    p = _mia()
    text = "Mia has Fourteen stickers and buys six more, so twenty. Noah has twice as many, forty.\nThe answer is 40."
    o = value_oracle(p, text)
    assert _marked(text, o) == {"direct": ["twenty", "twice"], "upstream": ["Fourteen", "six"],
                                "distractor": [], "answer": ["forty"]}
    assert o.complete
    assert [parse_number(w) for w in ("twenty-one", "twenty one", "a hundred and five", "nine hundred ninety-nine")] \
        == [21, 21, 105, 999]


def test_a_repeated_value_is_marked_at_each_mention_and_a_restated_distractor_counts():
    p = _mia()
    text = "Leo is 9, which does not matter. 14 + 6 = 20. So 20, and 20 doubled: 20 * 2 = 40. The answer is 40."
    o = value_oracle(p, text)
    assert _marked(text, o) == {"direct": ["20", "20", "20", "20", "2"], "upstream": ["14", "6"],
                                "distractor": ["9"], "answer": ["40"]}
    assert o.direct[0] == (text.index("= 20") + 2, text.index("= 20") + 4)


def test_commas_dollars_and_decimals_name_the_value():
    p = _shop()
    text = "They had $1,200 (1200.00 in all), sold 300, and 1,200 - 300 = 900.\nThe answer is 900."
    assert _marked(text, value_oracle(p, text)) == {
        "direct": ["1,200", "1200.00", "300", "1,200", "300"], "upstream": [], "distractor": [], "answer": ["900"]}


def test_a_value_inside_a_larger_number_is_not_a_mention():
    p = _shop()
    text = "120 pens, 12.5 boxes, 1.25 kg, 212 and 3000 and 12000, but 12 is the owner's age. The answer is 900."
    assert _marked(text, value_oracle(p, text)) == {"direct": [], "upstream": [], "distractor": ["12"], "answer": []}
    listed = "a list 5,6,7 and 1,200,000"
    assert [listed[m.start:m.end] for m in find_numbers(listed)] == ["5", "6", "7", "1,200,000"]


def test_numbered_list_markers_are_not_quantities():
    p = _mia()
    # SmolLM2 numbers its steps: `2.` names the step, not Mia's or Noah's 2; the `2` of the
    # third line, and a decimal opening a line, are quantities as anywhere else.
    text = ("1. Mia has 14 stickers.\n2. She buys 6 more: 14 + 6 = 20.\n  3) Noah has twice 20, "
            "20 * 2 = 40.\n2.5 is no marker.\nThe answer is 40.")
    assert _marked(text, value_oracle(p, text)) == {
        "direct": ["20", "twice", "20", "20", "2"], "upstream": ["14", "6", "14", "6"], "distractor": [],
        "answer": ["40"]}
    assert [text[m.start:m.end] for m in find_numbers("2. a\n 9) b\n- 6. c\n**20.** d")] == []


def test_the_final_answer_is_not_reasoning():
    p = _mia()
    wrong = "14 + 6 = 20.\nThe answer is 20."  # the final statement's 20 is the answer, not a direct mention
    o = value_oracle(p, wrong)
    assert _marked(wrong, o)["direct"] == ["20"] and o.direct == ((9, 11),)
    assert o.reasoning_end == wrong.index("The answer")
    tail = "20 * 2 = 40. The answer is 40. Also 14 and 6!"  # after the answer: not reasoning either
    assert _marked(tail, value_oracle(p, tail)) == {"direct": ["20", "2"], "upstream": [], "distractor": [],
                                                     "answer": ["40"]}
    none = "Mia has 14 and 6 more."  # without an answer statement the whole text is reasoning
    o = value_oracle(p, none)
    assert o.reasoning_end == len(none) and _marked(none, o)["upstream"] == ["14", "6"] and not o.complete


def test_token_sets_follow_the_offsets():
    p = _mia()
    text = "14 + 6 = 20. 20 * 2 = 40. The answer is 40."
    # One token per whitespace-separated word; "20." is one token, and an EOS of width 0.
    offsets, at = [], 0
    for word in text.split(" "):
        offsets.append((at, at + len(word)))
        at += len(word) + 1
    offsets.append((len(text), len(text)))
    sets = value_oracle(p, text).to_token_sets(offsets)
    assert sets == {"upstream": frozenset({0, 2}), "direct": frozenset({4, 5, 7}),
                    "distractor": frozenset(), "answer": frozenset({9})}
