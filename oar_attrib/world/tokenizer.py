"""A byte-level BPE tokenizer for the arithmetic world, built offline with `tokenizers`.

Like the Qwen2 tokenizer, digits are always split one per token, so that a number's digits
are separate positions for attribution, and decoding returns the exact text (byte-level).
"""
from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS = "<|pad|>", "<|endoftext|>"
# World tokenizers hold a few hundred tokens (build_tokenizer's vocab_size); a general LM's
# tokenizer tens of thousands.
WORLD_VOCAB_MAX = 4096


def not_the_worlds(tokenizer) -> str | None:
    """Why `tokenizer` is not an arithmetic-world tokenizer (a chat template, a large
    vocabulary), or None when it may be one."""
    if getattr(tokenizer, "chat_template", None):
        return "has a chat template"
    if len(tokenizer) > WORLD_VOCAB_MAX:
        return f"has {len(tokenizer)} tokens (a world tokenizer has at most {WORLD_VOCAB_MAX})"
    return None


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 256) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` and wrap it for transformers (pad and eos set)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        padding_side="right",
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
