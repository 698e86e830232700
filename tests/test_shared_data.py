"""The trimmed copy of the shared tokenizer and data vendored under tests/data/shared: it loads
as the real tokenizer does, and its records are the first ones of the real files."""
import json

from transformers import AutoTokenizer

from shared_data import ROOT, VENDORED_GSM8K, unpacked_vendored

# Qwen2.5's byte-level BPE ids of this text (read with the full tokenizer files).
TEXT = "So 6 times 7 is 42. The answer is \\boxed{42}."
EXPECTED_IDS = [4416, 220, 21, 3039, 220, 22, 374, 220, 19, 17, 13, 576, 4226, 374, 1124, 79075, 90, 19, 17, 7810]


def test_the_vendored_tokenizer_gives_qwens_ids():
    tok = AutoTokenizer.from_pretrained(str(unpacked_vendored() / "tokenizers" / "Qwen2.5-7B-Instruct"))
    assert len(tok) == 151665 and tok.eos_token == "<|im_end|>"
    assert tok(TEXT, add_special_tokens=False)["input_ids"] == EXPECTED_IDS
    enc = tok(TEXT, add_special_tokens=False, return_offsets_mapping=True)
    assert "".join(TEXT[a:b] for a, b in enc["offset_mapping"]) == TEXT


def test_the_vendored_records_are_the_first_of_the_real_files():
    data = unpacked_vendored() / "data"
    gsm = [json.loads(line) for line in (data / "gsm8k_test.jsonl").read_text().splitlines()]
    assert len(gsm) == VENDORED_GSM8K and [r["id"] for r in gsm] == list(range(VENDORED_GSM8K))
    assert all(r["solution"].endswith(f"#### {r['answer']}") or "####" in r["solution"] for r in gsm)
    real = ROOT.parent / "shared" / "data" / "gsm8k_test.jsonl"
    if real.is_file():  # beside the repository: the vendored lines are its first lines, unchanged
        assert (data / "gsm8k_test.jsonl").read_text().splitlines() == real.read_text().splitlines()[:VENDORED_GSM8K]
