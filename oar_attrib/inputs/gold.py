"""The gold probe as an input: a trace re-encoded with its final answer replaced by the gold one.

For data with a gold answer the outcome that matters is the correct answer, not the model's
own. Rather than a fourth probe, the trace is re-encoded so that its answer span holds the gold
text: the `as_joint` probe (METHOD.md section 3) on that batch is then exactly the gold
answer's mean log-likelihood, and OAR-P's `as_joint` importance on it is the drop of the gold
answer's log-likelihood when a position is masked. Every method takes that batch unchanged.

The response ids before the first answer token are kept as they are (only the text from that
token on is tokenized again), so every reasoning position keeps its token and its index, and
scores on the gold batch line up with scores on the original one.
"""
from __future__ import annotations

from ..defaults import ANSWER_FORMAT
from ..errors import InputError
from .encoding import EncodedPair, pair_from_offsets
from .spans import offsets_from_ids
from .steps import AUTO


def with_gold_answer(tokenizer, pair: EncodedPair, gold: str, *, answer_format: str = ANSWER_FORMAT,
                     answer_pattern=None, step_unit=AUTO) -> EncodedPair:
    """`pair` with the text of its answer span replaced by `gold`, re-encoded.

    The response ids before the answer's first token stay; the rest (that token's text up to
    the answer, the gold text, whatever followed the answer) is tokenized afresh and the
    answer located again (`spans.locate_answer` with `answer_format`, `answer_pattern`). An
    InputError when the pair has no answer span, or when the re-encoded answer is not `gold`
    (a gold text the answer format cannot hold, e.g. one with a sentence in it).
    """
    gold = str(gold).strip()
    if not pair.span_found or pair.location is None:
        raise InputError("the trace has no answer span to replace by the gold answer; "
                         "check its answer format (`spans.locate_answer`)")
    if not gold:
        raise InputError("the gold answer is empty")
    first = pair.labels.index("answer")
    loc, text = pair.location, pair.text
    tail = text[pair.offsets[first][0]:loc.start] + gold + text[loc.end:]
    ids = pair.response_ids[:first] + list(tokenizer(tail, add_special_tokens=False)["input_ids"])
    offsets, new_text = offsets_from_ids(tokenizer, ids)
    out = pair_from_offsets(pair.prompt_ids, ids, offsets, new_text, answer_format=answer_format,
                            answer_pattern=answer_pattern, step_unit=step_unit)
    if not out.span_found or out.answer_text != gold:
        raise InputError(f"the trace re-encoded with the gold answer {gold!r} reads its answer as "
                         f"{out.answer_text!r}; the answer format cannot hold that gold text")
    return out
