"""The counterfactual oracle on a tiny random Qwen2 model and a word-level tokenizer."""
import pytest
import torch

from oar_attrib.instruments.data.oracle import choose_positions, counterfactual_oracle, resampled_tokens
from oar_attrib.errors import InputError
from oar_attrib.models import random_qwen2

WORDS = ["<pad>", "<eos>", "[UNK]", "zzz"] + [f"w{i}" for i in range(28)]
PAD, EOS, ZZZ = 0, 1, 3


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="[UNK]"
    )


@pytest.fixture(scope="module")
def model():
    # A large init makes the random model's greedy text depend on its context (at the
    # default 0.02 it repeats one word), so a wrong prefix or padding shows in the answers.
    return random_qwen2(len(WORDS), seed=2, pad_id=PAD, eos_id=EOS, bos_token_id=None)


PROMPT = [10, 11, 12, 13]


def greedy(model, ids, n):
    """Plain greedy decoding, one full forward per token, no padding: the reference."""
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
            if nxt == EOS:
                break
            out.append(nxt)
    return out


def word(i):
    return lambda text: text.split()[i] if len(text.split()) > i else None


def test_known_causal_structure(model, tok):
    # The "answer" is the first three words: replacing any of them by a word the response
    # never contains changes it, replacing a later one never can.
    response = [4 + i for i in range(12)]
    first3 = lambda text: " ".join(text.split()[:3])  # noqa: E731
    got = counterfactual_oracle(model, tok, PROMPT, response, range(12), first3,
                                replacement_id=ZZZ, max_new_tokens=4, batch_size=5)
    assert got == {t: t < 3 for t in range(12)}


@pytest.mark.slow
def test_matches_plain_greedy_regeneration(model, tok):
    response = greedy(model, PROMPT, 10)
    assert len(response) == 10, "the tiny model emitted EOS early: pick another seed"
    extract = word(6)
    original = extract(tok.decode(response))
    want = {}
    for t in range(10):
        # Pad replaces y_t: it is attended while generating but dropped from the text.
        text = tok.decode(response[:t] + [PAD] + greedy(model, PROMPT + response[:t] + [PAD], 6),
                          skip_special_tokens=True)
        want[t] = extract(text) != original
    assert not any(want[t] for t in range(7, 10))  # y_>6 cannot change word 6
    assert any(want.values()) and not all(want.values()), "the check must be able to fail"
    for batch_size in (1, 4):  # batched with left padding, or one at a time
        got = counterfactual_oracle(model, tok, PROMPT, torch.tensor(response), range(10), extract,
                                    max_new_tokens=6, batch_size=batch_size)
        assert got == want


def test_subset_is_seeded_and_spread(model, tok):
    chosen = choose_positions(range(100), 10, seed=1)
    assert len(chosen) == 10 and chosen == sorted(chosen)
    assert [c // 10 for c in chosen] == list(range(10))  # one per tenth of the positions
    assert choose_positions(range(100), 10, seed=1) == chosen
    assert choose_positions(range(100), 10, seed=2) != chosen
    assert choose_positions([5, 3, 3], 10) == [3, 5]
    response = [4 + (i % 20) for i in range(40)]
    got = counterfactual_oracle(model, tok, PROMPT, response, range(40), word(0),
                                max_positions=6, max_new_tokens=2, seed=1)
    assert sorted(got) == choose_positions(range(40), 6, seed=1)
    assert not any(causal for t, causal in got.items() if t > 0)  # word 0 is y_0 for t > 0


def test_errors(model, tok):
    with pytest.raises(InputError, match="outside the response"):
        counterfactual_oracle(model, tok, PROMPT, [4, 5, 6], [3], word(0))
    with pytest.raises(InputError, match="no answer in the original"):
        counterfactual_oracle(model, tok, PROMPT, [4, 5, 6], [0], lambda text: None)
    with pytest.raises(InputError, match="replacement="):
        counterfactual_oracle(model, tok, PROMPT, [4, 5, 6], [0], word(0), replacement="mean")


def test_resampled_tokens_come_from_the_model_and_never_repeat_y_t(model, tok):
    response = [4 + (i % 20) for i in range(12)]
    drawn = resampled_tokens(model, PROMPT, response, range(12), seed=3)
    assert sorted(drawn) == list(range(12))
    assert all(drawn[t] != response[t] for t in drawn)
    assert resampled_tokens(model, PROMPT, response, range(12), seed=3) == drawn
    assert resampled_tokens(model, PROMPT, response, range(12), seed=4) != drawn
    # The frequencies of many draws at one position follow p(. | y_<t) without y_t.
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + response])).logits[0, len(PROMPT) + 4]
    p = torch.softmax(logits.float(), -1)
    p[response[5]] = 0
    p = p / p.sum()
    counts = torch.zeros_like(p)
    for seed in range(400):
        counts[resampled_tokens(model, PROMPT, response, [5], seed=seed)[5]] += 1
    assert (counts / 400 - p).abs().max() < 0.08


def test_resample_oracle_is_the_oracle_of_each_drawn_token(model, tok):
    response = [4 + (i % 20) for i in range(10)]
    extract = word(6)
    drawn = resampled_tokens(model, PROMPT, response, range(10), seed=1)
    got = counterfactual_oracle(model, tok, PROMPT, response, range(10), extract,
                                replacement="resample", seed=1, max_new_tokens=6, batch_size=4)
    for t in range(10):  # one position at a time with that token as a fixed replacement
        one = counterfactual_oracle(model, tok, PROMPT, response, [t], extract,
                                    replacement=drawn[t], max_new_tokens=6)
        assert got[t] == one[t]
    pad = counterfactual_oracle(model, tok, PROMPT, response, range(10), extract,
                                max_new_tokens=6, batch_size=4)
    assert pad == counterfactual_oracle(model, tok, PROMPT, response, range(10), extract,
                                        replacement=PAD, max_new_tokens=6, batch_size=4)


def test_the_oracle_cache_keys_on_the_replacement():
    import hashlib
    import json

    from oar_attrib.instruments.data.recall import _cache_key

    old = hashlib.sha256(json.dumps(["m", [1, 2], [3, 4], 8, 0]).encode()).hexdigest()[:24]
    assert _cache_key("m", [1, 2], [3, 4], 8, 0) == old  # caches written before the knob
    assert _cache_key("m", [1, 2], [3, 4], 8, 0, "pad") == old
    keys = {_cache_key("m", [1, 2], [3, 4], 8, 0, r) for r in ("pad", "resample", 5)}
    assert len(keys) == 3
