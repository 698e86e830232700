"""A trace re-encoded with the gold answer: its answer span is the gold text, its reasoning
tokens are untouched, and as_joint OAR-P on it is the gold answer's log-likelihood drop."""
import pytest
import torch

from oar_attrib.errors import InputError
from oar_attrib.inputs.encoding import encode_pair, pairs_to_batch
from oar_attrib.inputs.gold import with_gold_answer
from oar_attrib.methods.oar_p import oar_p

from models import tiny_qwen2, word_tokenizer
from shared_data import qwen_dir


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_dir()))


def answer_text(tok, pair):
    batch = pairs_to_batch([pair], tok.pad_token_id)
    return tok.decode(batch.input_ids[0][batch.answer_mask[0]].tolist()).strip()


@pytest.mark.parametrize("response, gold", [
    ("8 * 9 = 72, so\nThe answer is 71.", "72"),
    ("8 * 9 = 72, so the total is \\boxed{71} dollars.", "72"),
    ("She has 1200 - 5 = 1195 left.\n#### 1195", "1,200"),
    ("3/4 of 8 is 6.\nThe answer is 6.", "3/4"),
])
def test_answer_span_decodes_to_gold_and_reasoning_is_kept(qwen, response, gold):
    pair = encode_pair(qwen, [{"role": "user", "content": "q?"}], response)
    gold_pair = with_gold_answer(qwen, pair, gold)
    assert gold_pair.answer_text == gold
    assert answer_text(qwen, gold_pair) == gold
    first = pair.labels.index("answer")
    assert gold_pair.prompt_ids == pair.prompt_ids
    assert gold_pair.response_ids[:first] == pair.response_ids[:first]
    assert gold_pair.labels[:first] == pair.labels[:first]  # the same positions are scored


def test_gold_equal_to_the_answer_gives_the_plain_as_joint_scores():
    tok = word_tokenizer()
    model = tiny_qwen2(seed=1)
    pair = encode_pair(tok, "what is 3 + 4 ?", "so x = 3 + 4 = 7 the answer is 7", chat=False)
    same = with_gold_answer(tok, pair, "7")
    assert same.response_ids == pair.response_ids and same.labels == pair.labels
    plain = oar_p(model, pairs_to_batch([pair], tok.pad_token_id), probe="as_joint")
    gold = oar_p(model, pairs_to_batch([same], tok.pad_token_id), probe="as_joint")
    torch.testing.assert_close(gold, plain, rtol=0, atol=0)
    other = oar_p(model, pairs_to_batch([with_gold_answer(tok, pair, "9")], tok.pad_token_id),
                  probe="as_joint")
    assert not torch.equal(other, plain)  # another gold answer is another outcome


def test_errors_name_the_problem(qwen):
    pair = encode_pair(qwen, [{"role": "user", "content": "q?"}], "no answer here")
    with pytest.raises(InputError, match="no answer span"):
        with_gold_answer(qwen, pair, "3")
    pair = encode_pair(qwen, [{"role": "user", "content": "q?"}], "2 + 2 = 4.\nThe answer is 4.")
    with pytest.raises(InputError, match="cannot hold"):
        with_gold_answer(qwen, pair, "here is how I did it")
    with pytest.raises(InputError, match="empty"):
        with_gold_answer(qwen, pair, "  ")
