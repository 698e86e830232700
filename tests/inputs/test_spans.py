"""Answer spans, segments and offsets (METHOD.md section 2)."""
import json
import re
from pathlib import Path

import pytest

from oar_attrib.errors import InputError, UnknownNameError
from oar_attrib.inputs.spans import (
    AnswerLocation,
    find_answer_span,
    locate_answer,
    offsets_from_ids,
    offsets_from_ids_batch,
    segment_tokens,
)

from shared_data import VENDORED_GSM8K, data_file, is_vendored, qwen_dir

ORDER = {"reasoning": 0, "bridge": 1, "answer": 2, "tail": 3}


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_dir()))


def _records(name):
    return [json.loads(line) for line in data_file(name).read_text().splitlines()]


def parts(text, fmt="auto", pattern=None):
    """(marker text, answer text) of the located answer, or None."""
    loc = locate_answer(text, fmt, pattern)
    return None if loc is None else (text[loc.marker_start : loc.start], text[loc.start : loc.end])


# ----------------------------------------------------------------------------- locate_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so x = \\boxed{\\frac{1}{2}}.", ("\\boxed{", "\\frac{1}{2}")),
        ("first \\boxed{3}, then \\boxed{72} done", ("\\boxed{", "72")),
        ("\\boxed{ 72 }", ("\\boxed{ ", "72")),  # the space joins the marker
        ("\\boxed{5.}", ("\\boxed{", "5")),
        ("set \\boxed{\\{1, 2\\}}", ("\\boxed{", "\\{1, 2\\}")),
        ("\\fbox{x^{2}+1}", ("\\fbox{", "x^{2}+1")),
        ("\\boxed{\\boxed{3}}", ("\\boxed{", "\\boxed{3}")),  # the outer box is the last
        ("\\boxed{4} then \\boxed{5", ("\\boxed{", "4")),  # an unbalanced box is skipped
    ],
)
def test_boxed(text, expected):
    assert parts(text, "boxed") == expected
    assert parts(text) == expected  # auto prefers boxed


@pytest.mark.parametrize(
    "text, expected",
    [
        ("9 * 2 = 18\n#### 18", ("#### ", "18")),
        ("#### 3\nwait\n#### -1,234.5", ("#### ", "-1,234.5")),
        ("####-7", ("####", "-7")),
        ("#### $1,000.", ("#### $", "1,000")),
        ("#### 5, so done", ("#### ", "5")),
        ("#### .5", ("#### ", ".5")),
        ("#### Paris\nmore", ("#### ", "Paris")),
    ],
)
def test_gsm8k(text, expected):
    assert parts(text, "gsm8k") == expected
    assert parts(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("So 8 * 9 = 72. The answer is 72.", ("The answer is ", "72")),
        ("THE ANSWER IS -3.5 because", ("THE ANSWER IS ", "-3.5")),
        ("the answer is 3.14. Done.", ("the answer is ", "3.14")),
        ("Answer: 12\nthat is all", ("Answer: ", "12")),
        ("The answer is 1. Then the final answer is: $\\frac{1}{2}$.", None),
        ("**Answer:** 42", ("Answer:** ", "42")),
    ],
)
def test_answer_is(text, expected):
    if expected is None:  # the last occurrence wins; `$` and a final period are trimmed
        loc = locate_answer(text, "answer_is")
        assert text[loc.start : loc.end] == "\\frac{1}{2}"
        assert text[loc.marker_start : loc.start] == "the final answer is: $"
        return
    assert parts(text, "answer_is") == expected
    assert parts(text) == expected


def test_regex_last_match_and_compiled_pattern():
    text = "Result = 5; later Result = 17 ."
    assert parts(text, "regex", r"Result = (\d+)") == ("Result = ", "17")
    assert parts(text, "regex", re.compile(r"Result\s*=\s*(\d+)")) == ("Result = ", "17")
    assert parts(text, pattern=r"Result = (\d+)") == ("Result = ", "17")  # auto + pattern
    assert locate_answer(text, "regex", r"Nope (\d+)") is None


@pytest.mark.parametrize("pattern", [r"Result = \d+", r"(Result) = (\d+)"])
def test_regex_needs_exactly_one_group(pattern):
    with pytest.raises(InputError, match="exactly one capturing group"):
        locate_answer("Result = 5", "regex", pattern)


def test_format_errors():
    with pytest.raises(InputError, match="needs `answer_pattern`"):
        locate_answer("x", "regex")
    with pytest.raises(InputError, match="only used with answer_format='regex'"):
        locate_answer("x", "boxed", r"(x)")
    with pytest.raises(UnknownNameError, match="boxed.*gsm8k"):
        locate_answer("x", "latex")


@pytest.mark.parametrize(
    "text, fmt",
    [("\\boxed{}", "auto"), ("\\boxed{  }", "boxed"), ("steps\n####", "auto"),
     ("#### \n5", "gsm8k"), ("The answer is .", "answer_is"), ("no answer here", "auto"),
     ("", "auto")],
)
def test_empty_or_missing_answer_is_none(text, fmt):
    assert locate_answer(text, fmt) is None
    assert find_answer_span(text, fmt) is None


def test_auto_order_and_find_answer_span():
    text = "The answer is 3. #### 4 and \\boxed{5}"
    assert find_answer_span(text) == (text.index("5"), text.index("5") + 1)
    assert locate_answer("The answer is 3. #### 4").fmt == "gsm8k"
    assert locate_answer("The answer is 3.").fmt == "answer_is"


def test_location_validates_itself():
    with pytest.raises(InputError):
        AnswerLocation(5, 3, 4, "boxed")
    with pytest.raises(InputError):
        AnswerLocation(0, 3, 3, "boxed")


# ----------------------------------------------------------------------------- segments


def test_segments_on_hand_offsets():
    text = "ab cd \\boxed{12} x"
    #        0123456789012345678
    offsets = [(0, 2), (2, 5), (5, 7), (7, 12), (12, 13), (13, 14), (14, 16), (16, 18), (0, 0)]
    loc = locate_answer(text)
    assert (loc.marker_start, loc.start, loc.end) == (6, 13, 15)
    seg = segment_tokens(offsets, loc)
    # " \\" (5, 7) straddles the marker start: bridge, not reasoning. "2}" (14, 16) overlaps
    # the answer: answer. The (0, 0) token after the first is EOS: tail.
    assert seg.labels == ("reasoning", "reasoning", "bridge", "bridge", "bridge", "answer",
                          "answer", "tail", "tail")
    assert seg.span_found
    assert seg.scored.tolist() == [True, True] + [False] * 7
    assert seg.answer.tolist() == [False] * 5 + [True, True, False, False]
    assert seg.n_reasoning == 2


def test_segments_without_location():
    seg = segment_tokens([(0, 2), (2, 4), (0, 0)], None)
    assert seg.labels == ("reasoning", "reasoning", "tail")
    assert not seg.span_found
    assert not seg.scored.any()
    with pytest.raises(UnknownNameError):
        seg.mask("prompt")


def test_segments_on_qwen_tokens(qwen):
    text = "So x = 5 and y = 2.5.\nThe answer is $\\boxed{\\frac{1}{2}}$ indeed"
    enc = qwen(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    loc = locate_answer(text)
    seg = segment_tokens(offsets, loc)
    ranks = [ORDER[lab] for lab in seg.labels]
    assert ranks == sorted(ranks)  # reasoning, bridge, answer, tail in that order
    reasoning = [i for i, lab in zip(ids, seg.labels) if lab == "reasoning"]
    answer = [i for i, lab in zip(ids, seg.labels) if lab == "answer"]
    assert qwen.decode(reasoning) == text[: offsets[len(reasoning) - 1][1]]
    assert offsets[len(reasoning) - 1][1] <= loc.marker_start  # nothing scored past the marker
    assert "\\frac{1}{2}" in qwen.decode(answer)
    assert "boxed" not in qwen.decode(answer)


# ----------------------------------------------------------------------------- data sets


def _answer_tokens(qwen, texts):
    enc = qwen(texts, add_special_tokens=False, return_offsets_mapping=True)
    for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
        loc = locate_answer(text)
        if loc is None:
            yield text, None, None, None
            continue
        labels = segment_tokens(offsets, loc).labels
        idx = [i for i, lab in enumerate(labels) if lab == "answer"]
        yield text, loc, [ids[i] for i in idx], (offsets[idx[0]][0], offsets[idx[-1]][1])


@pytest.mark.slow
def test_every_gsm8k_answer_found_and_tokenised(qwen):
    records = _records("gsm8k_test")
    assert len(records) == (VENDORED_GSM8K if is_vendored() else 1319)
    texts = [r["solution"] for r in records]
    for rec, (text, loc, ids, _) in zip(records, _answer_tokens(qwen, texts)):
        assert loc is not None, rec["id"]
        span = text[loc.start : loc.end]
        assert qwen.decode(ids).strip() == span, rec["id"]
        assert span.replace(",", "") == rec["answer"], rec["id"]


@pytest.mark.slow
def test_math500_answers_found_and_tokenised(qwen):
    records = _records("math500_test")
    texts = [r["solution"] for r in records]
    found = same_as_record = 0
    for rec, (text, loc, ids, (lo, hi)) in zip(records, _answer_tokens(qwen, texts)):
        if loc is None:
            continue
        found += 1
        span = text[loc.start : loc.end]
        same_as_record += span == rec["answer"]
        # Tokens may straddle the span's edges ("}}", "}$"); their decode is exactly the text
        # they cover, which holds the span and nothing beyond the first and last token.
        assert qwen.decode(ids) == text[lo:hi], rec["id"]
        assert lo <= loc.start and hi >= loc.end and span in qwen.decode(ids), rec["id"]
    assert found >= 0.99 * len(records)
    assert same_as_record >= 0.95 * len(records)


# ----------------------------------------------------------------------------- offsets_from_ids


def test_offsets_from_ids_match_tokenizer_on_ascii(qwen):
    texts = [r["solution"] for r in _records("gsm8k_test")[:60]]
    texts = [t for t in texts if t.isascii()] + ["  two  spaces\n\nand\ttabs {x}^2 ####  7"]
    enc = qwen(texts, add_special_tokens=False, return_offsets_mapping=True)
    for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
        got, decoded = offsets_from_ids(qwen, ids)
        assert decoded == text
        assert got == [tuple(o) for o in offsets]


def test_offsets_from_ids_multibyte_chars(qwen):
    text = "a 𝔸 é x 日本語 ✓"
    enc = qwen(text, add_special_tokens=False, return_offsets_mapping=True)
    got, decoded = offsets_from_ids(qwen, enc["input_ids"])
    assert decoded == text
    assert got == [tuple(o) for o in enc["offset_mapping"]]
    # 𝔸 (4 bytes) is split over three tokens, and each covers the character.
    split = [o for o in got if o[0] <= text.index("𝔸") < o[1]]
    assert len(split) == 3


def test_offsets_from_ids_special_tokens_at_end(qwen):
    text = "So \\boxed{7}"
    ids = qwen(text, add_special_tokens=False)["input_ids"] + [qwen.eos_token_id, qwen.pad_token_id]
    offsets, decoded = offsets_from_ids(qwen, ids)
    assert decoded == text
    assert offsets[-2:] == [(len(text), len(text))] * 2
    seg = segment_tokens(offsets, locate_answer(decoded))
    assert seg.labels[-3:] == ("tail", "tail", "tail")  # "}" then EOS and pad
    assert offsets_from_ids(qwen, []) == ([], "")


def test_offsets_from_ids_batch_equals_one_row_at_a_time(qwen):
    texts = ["a 𝔸 é x 日本語 ✓ #### 3", "So \\boxed{7}", "", "  two  spaces\n\nand\ttabs"]
    rows = [qwen(t, add_special_tokens=False)["input_ids"] for t in texts]
    rows[1] = rows[1] + [qwen.eos_token_id, qwen.pad_token_id]
    batched = offsets_from_ids_batch(qwen, rows)
    assert batched == [offsets_from_ids(qwen, ids) for ids in rows]
    assert [text for _, text in batched] == texts
    for (offsets, text), ids in zip(batched, rows):
        enc = qwen(text, add_special_tokens=False, return_offsets_mapping=True)
        assert offsets[: len(enc["input_ids"])] == [tuple(o) for o in enc["offset_mapping"]]


# ----------------------------------------------------------------------------- hostile prose
# The rules hold for a class of texts, not the examples: a region without a value is refused,
# an expression is cut to its result, prose to its value; the last statement wins whatever its
# format; a restatement of the answer just before the marker is bridge, not reasoning.


@pytest.mark.parametrize(
    "text",
    [
        'The final line ends with "####".',                      # punctuation only
        "The answer is: Here is a short example of how I performed",  # a sentence, no value
        "The final line is \"#### <answer>\".",                  # the instruction echoed
        "The answer isn't exact, so we go on",                   # not a statement
        "The answer is within \\boxed{}.",                       # an empty box
        "The final answer is $f(x) = \\frac{x-2}{x",             # an expression cut off
        "#### seven apples\nmore",                               # words, no value
    ],
)
def test_no_value_is_refused(text):
    assert locate_answer(text) is None
    for fmt in ("boxed", "gsm8k", "answer_is"):
        assert find_answer_span(text, fmt) is None


@pytest.mark.parametrize(
    "text",
    [
        # SmolLM2-135M's own replies that an earlier `auto` read an answer from (issue cases):
        "Janet has three bolts.\nFinal answer: three bolts of blue fiber and 2 * 4 = 8 bolts of white fiber.",
        "So the answer is within within within 81% of the total.",
        "the answer is within within within 81%",
        # their class: the number is not what the sentence states first, or sits in an expression
        "The answer is that she has 18 apples left.",
        "Answer: we first compute $1^{(2^{235423523})}$ and go on",
        "The answer is that 1^{(2^{235423523})} is one",
        "The answer is: 1 raised to the power of 2^{235423523}, which is 1",
        "The final answer is 2 * 4 bolts of fiber",
        "The answer is 2^{10} which is large",
        "#### about the 12 eggs she sold",
    ],
)
def test_no_answer_from_inside_an_expression_or_a_sentence(text):
    assert locate_answer(text) is None
    assert find_answer_span(text, "answer_is") is None and find_answer_span(text, "gsm8k") is None


@pytest.mark.parametrize(
    "text, answer",
    [
        ("The answer is approximately 3.14 meters.", "3.14"),
        ("The answer is 81% of the total.", "81"),
        ("The answer is $1^{(2^{235423523})}$, which is 1.", "1^{(2^{235423523})}"),
        ("The answer is 20 because there are 20 left.", "20"),
        ("The answer is 45 x 18 = 756.", "756"),
        ("#### 3 + 4 = 7", "7"),
        ("\\boxed{x = 5}", "5"),
        ("The answer is $18 per day.", "18"),
        ("So the answer is 0 hours.", "0"),
        ("The final answer is 126 inches.", "126"),
        ('The final line is "The answer is 20."', "20"),
        ("The answer is $\\frac{3}{4}$ of the cake.", "\\frac{3}{4}"),
        ("The answer is x \\le 3.", "x \\le 3"),
        ("The answer is (C).", "(C)"),
        ("The answer is $20,000.\n\nThe final line is \"#### <answer>\".", "20,000"),
    ],
)
def test_value_is_cut_from_expressions_and_prose(text, answer):
    loc = locate_answer(text)
    assert text[loc.start : loc.end] == answer


@pytest.mark.parametrize(
    "text, fmt",
    [
        ("#### 5\nWait, let me check.\nThe answer is 7.", "answer_is"),
        ("The answer is 5.\nNo: \\boxed{7}", "boxed"),
        ("\\boxed{5} hmm\n#### 7", "gsm8k"),
        ("#### 5\nAnswer: 7", "answer_is"),
    ],
)
def test_auto_takes_the_last_statement_whatever_its_format(text, fmt):
    loc = locate_answer(text)
    assert (text[loc.start : loc.end], loc.fmt) == ("7", fmt)


@pytest.mark.parametrize(
    "text, bridge",
    [
        ("2 + 0 = 2.\nThe answer is 2.\n#### 2", "The answer is 2.\n#### "),
        ("x = 480\n\n#### 480\n\nThe answer is 480.", "#### 480\n\nThe answer is "),
        ("So 22.4.\nThe answer is 22.4.\n\nThe answer is 22.4.", "The answer is 22.4.\n\nThe answer is "),
        ("The answer is $\\boxed{25}$.", "The answer is $\\boxed{"),
    ],
)
def test_restatement_and_holding_sentence_are_bridge(text, bridge):
    loc = locate_answer(text)
    assert text[loc.marker_start : loc.start] == bridge


def test_a_different_earlier_answer_stays_reasoning():
    text = "The answer is 3.\n#### 4"
    loc = locate_answer(text)
    assert text[loc.marker_start : loc.start] == "#### "
    # on tokens: the restated answer is bridge (not scored), the earlier claim is reasoning
    restated = "Thus 2.\nThe answer is 2.\n#### 2"
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+", restated)]
    labels = segment_tokens(offsets, locate_answer(restated)).labels
    assert labels == ("reasoning", "reasoning", "bridge", "bridge", "bridge", "bridge", "bridge", "answer")


# ----------------------------------------------------------------------------- SmolLM2's own text

SMOLLM2_OUTPUTS = Path(__file__).resolve().parents[1] / "data" / "smollm2_outputs.jsonl"


def _smollm2_outputs():
    return [json.loads(line) for line in SMOLLM2_OUTPUTS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("record", _smollm2_outputs(), ids=lambda r: f"{r['source']}-{r['id']}-{r['template']}-{r['decoding']}")
def test_spans_on_smollm2_outputs_match_hand_labels(record):
    """Each sampled SmolLM2-135M answer against its hand label: the answer span's text and
    where it ends (or no answer), in `auto` and in the format the prompt asked for."""
    text, label = record["text"], record["label"]
    for fmt in ("auto", record["asked_format"]):
        loc = locate_answer(text, fmt)
        got = None if loc is None else {"answer": text[loc.start : loc.end], "end": loc.end}
        want = label if fmt == "auto" else record["label_asked"]
        assert got == want, fmt
