"""A prompt/response pair as a line of JSON gives it: judged before anything is attributed.

`oar attribute` reads its input lines with these, the live page judges a typed pair the same
way, and the importers, rollouts and training data recognise chat prompts with `is_chat`. A
line that cannot be attributed is a `Skip`: a one-line reason and the family it is counted
under in a summary. `judge_tokens` encodes the pair it judges; `oar attribute` hands that
encoding to `attribute(encoded=...)`, so no response is tokenized twice.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from ..defaults import ANSWER_FORMAT
from ..errors import InputError, TokenizerError
from ..jsonl import NotJSON


class Skip(str):
    """Why a line is skipped; `kind` names the family counted in the summary."""

    def __new__(cls, message: str, kind: str) -> "Skip":
        self = super().__new__(cls, message)
        self.kind = kind
        return self


def is_chat(prompt) -> bool:
    """Whether `prompt` is chat messages: a non-empty list of {'role': str, 'content': str}."""
    return isinstance(prompt, list) and bool(prompt) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt)


def judge_record(record) -> tuple | Skip:
    """(prompt, response) of a parsed line, or the Skip that says what is wrong with it."""
    if isinstance(record, NotJSON):
        text = record if record.kind != "not_json" else f"not JSON ({record})"
        return Skip(text, record.kind)
    prompt = record.get("prompt") if isinstance(record, dict) else None
    response = record.get("response") if isinstance(record, dict) else None
    if not isinstance(prompt, (str, list)) or not isinstance(response, str):
        return Skip("needs a 'prompt' (string or chat messages) and a 'response' string", "fields")
    if isinstance(prompt, list) and not is_chat(prompt):
        return Skip("the prompt is a list but not of {'role': str, 'content': str} chat messages",
                    "bad_chat")
    if not response.strip():
        return Skip("the response is empty; there is nothing to attribute", "empty_response")
    return prompt, response


def judge_tokens(tokenizer, prompt, response, answer_format: str = ANSWER_FORMAT,
                 chat: bool | None = None):
    """The pair encoded (`encoding.EncodedPair`), or the Skip that says why it cannot be one
    scoring row (too long, chat without a template, no response tokens)."""
    import logging

    from .chat_template import TemplateRefusedError
    from .encoding import _default_max_length, encode_pair

    # transformers warns of a text longer than the model here; the skip report says it instead.
    quiet = logging.getLogger("transformers.tokenization_utils_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        pair = encode_pair(tokenizer, prompt, response, answer_format=answer_format, chat=chat)
    except TemplateRefusedError:
        raise  # the model's template is at fault, not the line: stop in one line
    except (InputError, TokenizerError) as err:
        return Skip(str(err), "unscorable")
    finally:
        quiet.setLevel(level)
    limit = _default_max_length(tokenizer)
    if limit is not None and pair.length > limit:
        return Skip(f"{pair.length} tokens, more than the model's {limit}; shorten it", "too_long")
    if not pair.response_ids:
        return Skip("the response has no tokens; there is nothing to attribute", "empty_response")
    return pair


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The labels a line may carry beside its text, each with its test and what it must be.
LABEL_RULES = {"reward": (_finite, "a finite number"), "advantage": (_finite, "a finite number"),
               "group": (_integer, "an integer"), "correct": (lambda v: isinstance(v, bool), "true or false")}


def label_problems(record: dict) -> list[str]:
    """What is wrong with each label of `record` that is there (not null) but not what it must
    be (`LABEL_RULES`); `input_labels` leaves such a label out."""
    return [f"its {key} {str(record[key])[:40]!r} is not {what}" for key, (ok, what) in LABEL_RULES.items()
            if record.get(key) is not None and not ok(record[key])]


def input_labels(record: dict, response: str, answer_format: str = ANSWER_FORMAT) -> dict:
    """What a line says about its response beside the text, carried into the output: `gold`
    (the line's `gold` or `answer`), `reward` and `advantage` (finite numbers; the advantage
    also gives the token advantages A * w_t), `group` (an integer: the line's GRPO group, as
    `oar generate` writes it) and `correct` (the line's own bool, or else graded against the
    gold answer); `graded` and `new_tokens`: the grader's reason (`grading.WHYS`) and the
    answer's generated tokens, as `oar generate` writes them (`why`, `tokens`), so that a
    cut-off answer is named as one."""
    from .grading import WHYS, grade

    labels = {}
    gold = record.get("gold", record.get("answer"))
    if isinstance(gold, (str, int, float)) and not isinstance(gold, bool):
        labels["gold"] = str(gold)
    for key in ("reward", "advantage"):
        if _finite(record.get(key)):
            labels[key] = float(record[key])
    if _integer(record.get("group")):
        labels["group"] = record["group"]
    if record.get("why") in WHYS:
        labels["graded"] = record["why"]
    if _integer(record.get("tokens")):
        labels["new_tokens"] = record["tokens"]
    if isinstance(record.get("correct"), bool):
        labels["correct"] = record["correct"]
    elif "gold" in labels:
        labels["correct"] = grade(response, labels["gold"], answer_format).correct
    return labels
