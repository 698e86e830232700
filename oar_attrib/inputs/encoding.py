"""Prompt/response text -> `ScoringBatch` (METHOD.md section 2 made into tensors).

The prompt is tokenized as the model sees it (chat template for message lists), the response
on its own with character offsets, and the two are concatenated. Segments of the response
(reasoning | bridge | answer | tail) become `scored_mask` and `answer_mask`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Sequence, Union

import torch

from ..defaults import ANSWER_FORMAT
from .batch import ScoringBatch, step_ids_from_ranges
from .chat_template import chat_ids
from ..errors import InputError, TokenizerError, renamed_keyword
from .segments import ANSWER, scored_set
from .spans import AnswerLocation, locate_answer, offsets_from_ids, segment_tokens
from .steps import AUTO, reasoning_steps

Message = Mapping[str, str]
Prompt = Union[str, Sequence[Message]]

# transformers stores "no limit" as a huge sentinel (int(1e30)); anything above this is one.
_SANE_MAX_LENGTH = 10_000_000


@dataclass
class EncodedPair:
    """One encoded prompt/response pair, with everything needed to map scores back to text.

    offsets are (start, end) character spans into `text` (the response), one per response
    token; labels the segment of each response token; response_start the index in the
    batch row where the response begins; steps the (start, end) token ranges over the
    response tokens that cover its scored reasoning tokens in order (empty without a span).
    no_predicting_position: the answer starts the response after an empty prompt, so no
    position predicts it; span_found is then False and nothing is scored.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    offsets: list[tuple[int, int]]
    labels: list[str]
    location: AnswerLocation | None
    span_found: bool
    response_start: int
    text: str
    empty_reasoning: bool = False
    steps: list[tuple[int, int]] = field(default_factory=list)
    no_predicting_position: bool = False

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @property
    def answer_text(self) -> str | None:
        return None if self.location is None else self.text[self.location.start : self.location.end]


def _as_ids(value) -> list[int]:
    if isinstance(value, Mapping):  # transformers 5 returns a BatchEncoding from the template
        value = value["input_ids"]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if value and isinstance(value[0], list):  # a batch of one
        value = value[0]
    return [int(i) for i in value]


class PlainPromptWarning(UserWarning):
    """A plain-string prompt was wrapped in the tokenizer's chat template (chat=None)."""


def _templated(tokenizer, prompt: Prompt, chat: bool | None) -> bool:
    """Whether a string prompt goes through the chat template: chat=True, or chat=None with a
    tokenizer that has one (a chat model scored on a bare string sees a text it was never
    trained on; its rankings then differ from the same trace's chat version), with a warning."""
    if not isinstance(prompt, str) or chat is not None:
        return bool(chat) or not isinstance(prompt, str)
    if getattr(tokenizer, "chat_template", None) is None:
        return False
    import warnings

    warnings.warn("a plain-string prompt was wrapped in the tokenizer's chat template as one user "
                  "message; pass chat=False (CLI: --no-chat) to score it as plain text",
                  PlainPromptWarning, stacklevel=4)
    return True


def _encode_prompt(tokenizer, prompt: Prompt, chat: bool | None, row: int) -> list[int]:
    if isinstance(prompt, str) and not _templated(tokenizer, prompt, chat):
        return _as_ids(tokenizer(prompt)["input_ids"])
    if not isinstance(prompt, (str, list, tuple)):
        raise InputError(
            f"prompt {row} must be a string or a list of chat messages, "
            f"got {type(prompt).__name__}"
        )
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if chat is False:
        raise InputError(
            f"prompt {row} is a list of chat messages but chat=False; pass chat=None or True "
            "to apply the chat template, or pass the prompt as a string"
        )
    if not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in messages):
        raise InputError(
            f"prompt {row} must be a string or a list of {{'role': ..., 'content': ...}} messages"
        )
    if getattr(tokenizer, "chat_template", None) is None:
        raise TokenizerError(
            f"prompt {row} is a chat, but the tokenizer has no chat_template; use a chat "
            "model (command line: --model), set tokenizer.chat_template, or pass the prompt as a string"
        )
    return chat_ids(tokenizer, messages)  # the template runs in a bounded sandbox


def _encode_response(tokenizer, response: str | None, ids) -> tuple[list[int], list, str]:
    """Response token ids, their character offsets and the text the offsets index."""
    if ids is not None:
        offsets, text = offsets_from_ids(tokenizer, ids)
        return _as_ids(ids), offsets, text
    if not getattr(tokenizer, "is_fast", False):
        # Slow tokenizers give no offset mapping; decoding the ids gives offsets instead.
        ids = tokenizer(response, add_special_tokens=False)["input_ids"]
        offsets, text = offsets_from_ids(tokenizer, ids)
        return _as_ids(ids), offsets, text
    enc = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
    return _as_ids(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]], response


def _default_max_length(tokenizer) -> int | None:
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit <= _SANE_MAX_LENGTH:
        return limit
    return None


def position_limit(tokenizer, model=None) -> int | None:
    """The longest row the pair can take: the smaller of the tokenizer's model_max_length
    (when set) and the max_position_embeddings of `model` (a loaded model, or its config) (a
    converted GGUF tokenizer often says "no limit"); None when neither says."""
    config = getattr(model, "config", model)
    limits = [_default_max_length(tokenizer), getattr(config, "max_position_embeddings", None)]
    limits = [x for x in limits if isinstance(x, int) and 0 < x <= _SANE_MAX_LENGTH]
    return min(limits) if limits else None


def _check_inputs(tokenizer, prompts, responses, response_ids, pad_token_id) -> int:
    if pad_token_id is None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None)
    if pad_token_id is None:
        raise TokenizerError(
            "the tokenizer has no pad token; set `tokenizer.pad_token = tokenizer.eos_token` "
            "or pass pad_token_id="
        )
    if isinstance(prompts, str) or isinstance(responses, str):
        raise InputError("prompts and responses must be lists (one entry per pair), not strings")
    if responses is None and response_ids is None:
        raise InputError("pass responses (texts) or response_ids (token id lists)")
    n_resp = len(response_ids) if responses is None else len(responses)
    if len(prompts) != n_resp:
        raise InputError(
            f"got {len(prompts)} prompts but {n_resp} responses; pass one response per prompt"
        )
    if response_ids is not None and len(response_ids) != len(prompts):
        raise InputError(
            f"got {len(prompts)} prompts but {len(response_ids)} response_ids; pass one per prompt"
        )
    if not prompts:
        raise InputError("no prompt/response pairs given")
    return int(pad_token_id)


def encode_pair(
    tokenizer, prompt: Prompt, response: str | None, *, row: int = 0, answer_format: str = ANSWER_FORMAT,
    answer_pattern=None, chat: bool | None = None, response_ids=None, step_unit=AUTO,
) -> EncodedPair:
    """Encode one pair (see `encode_pairs`); `row` only names the pair in error messages."""
    prompt_ids = _encode_prompt(tokenizer, prompt, chat, row)
    ids, offsets, text = _encode_response(tokenizer, response, response_ids)
    return pair_from_offsets(prompt_ids, ids, offsets, text, answer_format=answer_format,
                             answer_pattern=answer_pattern, step_unit=step_unit)


def pair_from_offsets(prompt_ids: Sequence[int], response_ids: Sequence[int], offsets, text: str, *,
                      answer_format: str = ANSWER_FORMAT, answer_pattern=None, step_unit=AUTO) -> EncodedPair:
    """The EncodedPair of token ids, the response tokens' (start, end) character `offsets` into
    `text`: the answer located (`spans.locate_answer`), each token labelled by segment, the
    reasoning cut into steps. `attribute()` (texts) and training (sampled ids) both build
    their pairs here.

    An answer at the very start of the response after an empty prompt has no position that
    predicts it: the pair gets span_found=False and no_predicting_position=True (nothing is
    scored, the trace is flagged) rather than an error, since training meets such rows in
    sampled batches and a user's batch should not fail for one row.
    """
    location = locate_answer(text, answer_format, answer_pattern)
    segments = segment_tokens(offsets, location)
    unpredicted = segments.span_found and not prompt_ids and segments.labels[0] == "answer"
    found = segments.span_found and not unpredicted
    return EncodedPair(
        prompt_ids=list(prompt_ids),
        response_ids=list(response_ids),
        offsets=[(int(s), int(e)) for s, e in offsets],
        labels=list(segments.labels),
        location=location,
        span_found=found,
        response_start=len(prompt_ids),
        text=text,
        empty_reasoning=found and segments.n_reasoning == 0,
        steps=reasoning_steps(text, offsets, segments.labels, found, step_unit),
        no_predicting_position=unpredicted,
    )


def pairs_to_batch(pairs: Sequence[EncodedPair], pad_token_id: int) -> ScoringBatch:
    """Right-padded (B, L) ScoringBatch of encoded pairs, L = the longest row; its step_ids
    come from each pair's `steps`, its response_mask from each pair's response tokens."""
    width = max(p.length for p in pairs)
    input_ids = torch.full((len(pairs), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(pairs), width), dtype=torch.long)
    scored = torch.zeros((len(pairs), width), dtype=torch.bool)
    answer = torch.zeros((len(pairs), width), dtype=torch.bool)
    response = torch.zeros((len(pairs), width), dtype=torch.bool)
    for b, p in enumerate(pairs):
        s = p.response_start
        input_ids[b, : p.length] = torch.tensor(p.prompt_ids + p.response_ids, dtype=torch.long)
        attention[b, : p.length] = 1
        response[b, s : p.length] = True
        if p.span_found:
            scored[b, s : p.length] = torch.tensor(scored_set(p.labels, p.span_found))
            answer[b, s : p.length] = torch.tensor([lab == ANSWER for lab in p.labels])
    steps = [[(p.response_start + a, p.response_start + b) for a, b in p.steps] for p in pairs]
    return ScoringBatch(input_ids, attention, scored, answer, pad_token_id,
                        step_ids_from_ranges((len(pairs), width), steps), response)


def encode_pairs(
    tokenizer,
    prompts: Sequence[Prompt],
    responses: Sequence[str] | None,
    *,
    answer_format: str = ANSWER_FORMAT,
    answer_pattern=None,
    chat: bool | None = None,
    max_length: int | None = None,
    response_ids: Sequence[Sequence[int]] | None = None,
    pad_token_id: int | None = None,
    step_unit=AUTO,
    fmt: str | None = None,
    pattern=None,
    encoded: Sequence[EncodedPair] | None = None,
) -> tuple[ScoringBatch, list[EncodedPair]]:
    """Tokenize prompt/response pairs into a ScoringBatch of B rows, and describe each pair.

    prompts: B strings or chat message lists. chat=None templates message lists, and strings
        too (as one user message, with a `PlainPromptWarning`) when the tokenizer has a chat
        template; chat=True always wraps a string; chat=False tokenizes strings plainly.
    responses: B response texts; or None with response_ids (B id lists, e.g. sampled in
        training), whose offsets and text then come from decoding (`offsets_from_ids`).
        When response_ids are given they are used and `responses` is ignored.
    answer_format, answer_pattern: the answer format (see `spans.locate_answer`; `fmt` and
        `pattern` are their old spellings).
    max_length: longest allowed row; default the tokenizer's model_max_length when set.
    step_unit: how the reasoning splits into steps (`steps.step_spans` units, a regex, or
        `auto`: lines, or sentences for a one-line reasoning); sets each pair's `steps` and
        the batch's step_ids.
    encoded: the pairs `encode_pair` already made of these prompts and responses under the same
        answer format, chat rule and step unit (`inputs.pairs.judge_tokens` checks each line
        that way): batched as they are, so no text is tokenized twice.
    Rows without an answer span, with an empty reasoning, or whose answer starts the response
    after an empty prompt (`no_predicting_position`) have no scored positions.
    """
    answer_format = renamed_keyword("fmt", fmt, "answer_format", answer_format, "auto")
    answer_pattern = renamed_keyword("pattern", pattern, "answer_pattern", answer_pattern, None)
    pad_token_id = _check_inputs(tokenizer, prompts, responses, response_ids, pad_token_id)
    if max_length is None:
        max_length = _default_max_length(tokenizer)
    if encoded is not None and len(encoded) != len(prompts):
        raise InputError(f"{len(encoded)} encoded pairs for {len(prompts)} prompts; pass one per prompt")
    pairs = []
    for row, prompt in enumerate(prompts):
        text = None if responses is None else responses[row]
        ids = None if response_ids is None else response_ids[row]
        pair = encoded[row] if encoded is not None else encode_pair(
            tokenizer, prompt, text, row=row, answer_format=answer_format, answer_pattern=answer_pattern,
            chat=chat, response_ids=ids, step_unit=step_unit)
        if max_length is not None and pair.length > max_length:
            raise InputError(
                f"row {row} has {pair.length} tokens ({len(pair.prompt_ids)} prompt + "
                f"{len(pair.response_ids)} response), more than max_length={max_length}; "
                "shorten the response or raise max_length"
            )
        pairs.append(pair)
    return pairs_to_batch(pairs, pad_token_id), pairs
