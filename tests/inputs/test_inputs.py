"""Text -> ScoringBatch: prompt templating, response segments, masks and errors."""

import pytest
import torch

from oar_attrib.errors import InputError, TokenizerError
from oar_attrib.inputs.encoding import encode_pairs

from shared_data import qwen_dir
from models import WORDS, word_tokenizer


@pytest.fixture(scope="module")
def qwen():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_dir()))


def decode_mask(tok, batch, mask, row):
    return tok.decode(batch.input_ids[row][mask[row]].tolist())


def test_chat_prompt_then_response(qwen):
    messages = [{"role": "user", "content": "What is 8 * 9?"}]
    response = "8 * 9 = 72, so\nThe answer is 72."
    batch, (pair,) = encode_pairs(qwen, [messages], [response])
    text = qwen.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    templated = qwen(text, add_special_tokens=False)["input_ids"]
    row = batch.input_ids[0].tolist()
    assert pair.response_start == len(templated)
    assert row[: pair.response_start] == list(templated)
    assert qwen.decode(row[pair.response_start :]) == response
    assert qwen.decode(row[: pair.response_start]).endswith("<|im_start|>assistant\n")
    assert pair.span_found and pair.answer_text == "72"
    assert decode_mask(qwen, batch, batch.answer_mask, 0).strip() == "72"
    assert decode_mask(qwen, batch, batch.scored_mask, 0) == "8 * 9 = 72, so\n"
    assert not batch.scored_mask[0, : pair.response_start].any()  # the prompt is never scored
    assert batch.pad_token_id == qwen.pad_token_id


def test_string_prompts_plain_or_wrapped(qwen):
    prompt, response = "Compute 2+3.", "2+3=5 #### 5"
    plain, _ = encode_pairs(qwen, [prompt], [response], chat=False)
    ids = qwen(prompt)["input_ids"]
    assert plain.input_ids[0, : len(ids)].tolist() == ids
    wrapped, (pair,) = encode_pairs(qwen, [prompt], [response], chat=True)
    as_chat, _ = encode_pairs(qwen, [[{"role": "user", "content": prompt}]], [response])
    assert torch.equal(wrapped.input_ids, as_chat.input_ids)
    assert pair.response_start > len(ids)


def test_padding_masks_and_rows(qwen):
    prompts = ["Q1", "A longer question number two"]
    responses = ["So x = 4 and y = 5, total 9.\n#### 9", "\\boxed{5}"]
    batch, pairs = encode_pairs(qwen, prompts, responses)
    assert batch.input_ids.shape == (2, max(p.length for p in pairs))
    for b, p in enumerate(pairs):
        assert batch.attention_mask[b].sum() == p.length
        assert (batch.input_ids[b, p.length :] == qwen.pad_token_id).all()
        labels = torch.tensor([lab == "reasoning" for lab in p.labels])
        assert torch.equal(batch.scored_mask[b, p.response_start : p.length], labels & p.span_found)
    # The second response is only its answer: found, but with nothing to score.
    assert pairs[1].span_found and pairs[1].empty_reasoning
    assert not batch.scored_mask[1].any() and batch.answer_mask[1].any()
    assert not pairs[0].empty_reasoning and batch.has_answer.tolist() == [True, True]


def test_no_span_means_nothing_scored(qwen):
    batch, (pair,) = encode_pairs(qwen, ["Q"], ["I am not sure about this one."])
    assert not pair.span_found and pair.location is None
    assert set(pair.labels) == {"reasoning"}
    assert not batch.scored_mask.any() and not batch.answer_mask.any()
    assert batch.has_answer.tolist() == [False]


def test_response_ids_match_text_path(qwen):
    response = "Half of 10 is 5.\nThe answer is \\boxed{5}"
    ids = qwen(response, add_special_tokens=False)["input_ids"]
    from_text, (pt,) = encode_pairs(qwen, ["Q"], [response])
    from_ids, (pi,) = encode_pairs(qwen, ["Q"], None, response_ids=[ids + [qwen.eos_token_id]])
    width = from_text.input_ids.shape[1]
    assert pi.text == response and pi.location == pt.location
    assert torch.equal(from_ids.scored_mask[:, :width], from_text.scored_mask)
    assert torch.equal(from_ids.answer_mask[:, :width], from_text.answer_mask)
    assert pi.labels[-1] == "tail"  # the EOS
    assert from_ids.input_ids[0, -1].item() == qwen.eos_token_id


def test_word_level_tokenizer_and_segments():
    tok = word_tokenizer()
    batch, (pair,) = encode_pairs(tok, ["what is 3 + 4 ?"], ["so x = 3 + 4 #### 7"])
    assert pair.response_start == 6
    assert pair.labels == ["reasoning"] * 6 + ["bridge", "answer"]
    assert batch.scored_mask[0].nonzero().flatten().tolist() == list(range(6, 12))
    assert batch.answer_mask[0].nonzero().flatten().tolist() == [13]
    assert batch.probe_mask[0].nonzero().flatten().tolist() == [12]


def test_missing_pad_token():
    tok = word_tokenizer(pad=False)
    with pytest.raises(TokenizerError, match="tokenizer.pad_token = tokenizer.eos_token"):
        encode_pairs(tok, ["what"], ["#### 7"])
    batch, _ = encode_pairs(tok, ["what"], ["#### 7"], pad_token_id=tok.eos_token_id)
    assert batch.pad_token_id == tok.eos_token_id


def test_input_errors():
    tok = word_tokenizer()
    with pytest.raises(InputError, match="2 prompts but 1 responses"):
        encode_pairs(tok, ["what", "what"], ["#### 7"])
    with pytest.raises(InputError, match="row 1 has 9 tokens"):
        encode_pairs(tok, ["what", "what"], ["#### 7", "so x = 3 + 4 #### 7"], max_length=5)
    tok.model_max_length = 5  # the default limit comes from the tokenizer when it is sane
    with pytest.raises(InputError, match="max_length=5"):
        encode_pairs(tok, ["what"], ["so x = 3 + 4 #### 7"])
    tok.model_max_length = int(1e30)  # transformers' "no limit" sentinel
    encode_pairs(tok, ["what"], ["so x = 3 + 4 #### 7"])
    messages = [{"role": "user", "content": "what"}]
    with pytest.raises(TokenizerError, match="no chat_template"):
        encode_pairs(tok, [messages], ["#### 7"])
    with pytest.raises(InputError, match="chat=False"):
        encode_pairs(tok, [messages], ["#### 7"], chat=False)
    with pytest.raises(InputError, match="not strings"):
        encode_pairs(tok, "what", "#### 7")


def test_answer_first_after_an_empty_prompt_has_no_predicting_position():
    """One behaviour for attribute() and training: no error, nothing scored, a flag."""
    from oar_attrib.attribution import attribute
    from oar_attrib.models import random_qwen2

    tok = word_tokenizer()
    digit = r"(\d)"  # the last digit is the answer, with no marker before it
    batch, (first, later, prompted) = encode_pairs(tok, ["", "", "what ?"], ["7 so x", "so x = 7", "7 so x"],
                                                   answer_format="regex", answer_pattern=digit)
    assert first.labels == ["answer", "tail", "tail"]
    assert not first.span_found and first.no_predicting_position and first.steps == []
    assert later.span_found and not later.no_predicting_position  # position 2 predicts the 7
    assert prompted.span_found and not prompted.no_predicting_position  # the prompt's last token does
    assert batch.has_answer.tolist() == [False, True, True]
    assert not batch.scored_mask[0].any() and not batch.answer_mask[0].any()
    model = random_qwen2(len(WORDS), pad_id=tok.pad_token_id)
    (trace,) = attribute(model, tok, [""], ["7 so x"], ["oar_p"], answer_format="regex", answer_pattern=digit)
    assert trace.flags[0] == "no_predicting_position" and not trace.span_found
    assert trace.weights["oar_p"] == [1.0, 1.0, 1.0]


def test_plain_prompt_gets_the_chat_template_with_a_warning(smollm2):
    """SmolLM2 has a chat template: a plain string is scored as one user message (what the model
    was trained on), said in one warning line naming chat=False; chat=False keeps it plain."""
    import warnings

    from oar_attrib.inputs.encoding import PlainPromptWarning

    _, tok = smollm2
    prompt, response = "What is 2 + 3?", "2 + 3 = 5.\nThe answer is 5."
    with pytest.warns(PlainPromptWarning, match="chat=False") as caught:
        plain, _ = encode_pairs(tok, [prompt], [response])
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    as_chat, _ = encode_pairs(tok, [[{"role": "user", "content": prompt}]], [response])
    assert torch.equal(plain.input_ids, as_chat.input_ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bare, _ = encode_pairs(tok, [prompt], [response], chat=False)
    assert bare.input_ids.shape[1] < plain.input_ids.shape[1]
    assert tok.decode(bare.input_ids[0]).startswith(prompt)
