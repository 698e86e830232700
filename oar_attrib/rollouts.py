"""Rollouts: from questions to graded groups of answers with GRPO advantages.

A question file is JSON Lines in the GSM8K / MATH-500 / AIME / AMC layout (`question` or
`problem`, and the gold `answer`) or TRL's (`prompt`: a string or chat messages, and `answer`).
Each question is asked with an instruction for the answer format (`PROMPT_TEMPLATES`), as a
chat when the tokenizer has a template; G answers are decoded per question in left-padded
batches sorted by prompt length, each prompt prefilled once (`generation.continue_groups`),
graded by `grading.grade` (the answer span in the asked format; 0 when cut off or without
one) and given the GRPO group advantage (`group_advantages`, TRL's default rule).

The records (`prompt` as chat messages, `response`, `gold`, `reward`, `correct`,
`advantage`, `group`, `sample`, `source` as file:line, ...) are the lines `oar attribute`
takes; `oar generate` writes them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Sequence

import torch

from .defaults import PROMPT_FORMAT, option
from .errors import InputError
from .models.generation import continue_groups, stop_ids
from .inputs.grading import grade
from .inputs.pairs import is_chat
from .inputs.spans import MARKER_FORMATS
from .jsonl import NotJSON, iter_jsonl

# The instruction asks for the answer in the format the reward and the span finder read: one
# template per `spans.MARKER_FORMATS`, and `plain` (the question alone).
PROMPT_TEMPLATES = {
    "boxed": "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    "gsm8k": "{question}\nPlease reason step by step, and end with a final line '#### <answer>'.",
    "answer_is": "{question}\nPlease reason step by step, and end with a final line 'The answer is <answer>.'",
    "plain": "{question}",
}
QUESTION_KEYS = ("question", "problem")
# TRL's GRPO advantage: (r - mean) / (std + EPS) within a group, std with Bessel's correction
# (`scale_rewards="group"`, GRPOConfig's default in trl 1.16).
EPS = 1e-4


def format_prompt(question: str, tokenizer=None, template: str = PROMPT_FORMAT, system: str | None = None):
    """The prompt of one question: the template's text, as a chat (list of messages) when the
    tokenizer has a chat template, else as a plain string."""
    if template not in PROMPT_TEMPLATES:
        raise InputError(f"unknown prompt template {template!r}; known: {', '.join(PROMPT_TEMPLATES)}")
    text = PROMPT_TEMPLATES[template].format(question=question)
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        return text if system is None else f"{system}\n\n{text}"
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": text}]


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """rewards: (Q, G), G answers to each of Q questions -> (Q, G) float32 advantages
    (r - mean) / (std + EPS) within each row, std unbiased (TRL's `scale_rewards="group"`);
    0 for G == 1 (TRL gets NaN there and zeroes it)."""
    rewards = rewards.float()
    if rewards.shape[-1] < 2:
        return torch.zeros_like(rewards)
    mean = rewards.mean(-1, keepdim=True)
    return (rewards - mean) / (rewards.std(-1, keepdim=True) + EPS)


@dataclass(frozen=True)
class Question:
    """One question to answer: its prompt (chat messages, or a string for a tokenizer without
    a chat template), gold answer, index `group` among the file's questions, and `source`."""

    group: int
    prompt: str | list
    gold: str
    source: str


class Bad(NamedTuple):
    """Why a question line cannot be asked; `kind` names the family counted in a summary."""

    kind: str
    why: str


def question_of(record, tokenizer, template: str, system: str | None = None) -> tuple | Bad:
    """(prompt, gold) of one parsed line, or the `Bad` that says why it cannot be asked."""
    if isinstance(record, NotJSON):
        return Bad(record.kind, str(record) if record.kind != "not_json" else f"not JSON ({record})")
    if not isinstance(record, dict):
        return Bad("fields", "a line must be a JSON object")
    gold = record.get("answer")
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)) or not str(gold).strip():
        return Bad("fields", "needs a non-empty gold 'answer' (string or number)")
    prompt = record.get("prompt")
    if prompt is not None:
        if isinstance(prompt, str) and prompt.strip():
            chat = getattr(tokenizer, "chat_template", None) is not None
            return ([{"role": "user", "content": prompt}] if chat else prompt), str(gold)
        if is_chat(prompt):
            return [{"role": m["role"], "content": m["content"]} for m in prompt], str(gold)
        return Bad("bad_chat", "'prompt' must be a non-empty string or a list of {'role', 'content'} messages")
    question = next((record[k] for k in QUESTION_KEYS if isinstance(record.get(k), str)), None)
    if question is None or not question.strip():
        return Bad("fields", "needs a 'question' or 'problem' string (or TRL's 'prompt')")
    return format_prompt(question, tokenizer, template, system), str(gold)


def read_questions(path: str | Path, tokenizer, template: str = PROMPT_FORMAT, *, system: str | None = None,
                   limit: int | None = None, report: Callable[[str, str], None] | None = None
                   ) -> Iterator[Question]:
    """The first `limit` askable questions of `path`, numbered 0, 1, ... (`group`); each bad
    line is passed to `report(kind, message)` as `path:LINE: skipped (KIND): why` and skipped."""
    group = 0
    for number, record in iter_jsonl(path):
        if limit is not None and group >= limit:
            return
        got = question_of(record, tokenizer, template, system)
        if isinstance(got, Bad):
            if report is not None:
                report(got.kind, f"{path}:{number}: skipped ({got.kind}): {got.why}")
            continue
        yield Question(group, got[0], got[1], f"{Path(path).name}:{number}")
        group += 1


def prompt_ids(tokenizer, prompt) -> list[int]:
    """The token ids a question's answers continue (the chat template with the generation
    prompt for messages): the prompt encoding `oar attribute` scores them with."""
    from .inputs.encoding import _encode_prompt

    return _encode_prompt(tokenizer, prompt, None if isinstance(prompt, list) else False, 0)


def decode_answers(model, tokenizer, chunk: Sequence[tuple[list[int], Question]], *, samples: int,
                   greedy: bool, temperature: float, max_new_tokens: int,
                   on_step: Callable[[int, int], None] | None = None) -> list[list[tuple[str, int, bool]]]:
    """Per (prompt ids, question) of `chunk`, its `samples` answers as (text, tokens with the
    EOS, cut off at max_new_tokens), decoded together (`continue_groups`; `on_step(tokens,
    ended)` after each decoding step)."""
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (stop or [0])[0]
    new = continue_groups(model, [ids for ids, _ in chunk], pad, max_new_tokens=max_new_tokens,
                          samples=samples - int(greedy), greedy=greedy, temperature=temperature,
                          eos_token_id=stop or None, on_step=on_step).tolist()
    out = []
    for row in new:
        end = next((i for i, t in enumerate(row) if t in stop), None)
        kept = row if end is None else row[:end]
        out.append((tokenizer.decode(kept, skip_special_tokens=True), len(kept) + (end is not None), end is None))
    return [out[i * samples:(i + 1) * samples] for i in range(len(chunk))]


# Every key an answer line of `oar generate` holds: `graded_group`'s, and the `sampling` record
# the command adds (a resumed --out whose line holds another is refused, `cli.generate`).
ANSWER_KEYS = frozenset({"prompt", "response", "gold", "reward", "correct", "answer", "why", "group", "sample",
                         "greedy", "tokens", "source", "advantage", "sampling"})


def graded_group(question: Question, answers: Sequence[tuple[str, int, bool]], answer_format: str,
                 greedy: bool = False, first: int = 0) -> list[dict]:
    """The records of one question's answers ((text, tokens, cut off) each): graded, with
    the group's GRPO advantages; numbered from `first` (answers added to a group held)."""
    out = []
    for sample, (text, tokens, cut) in enumerate(answers, start=first):
        g = grade(text, question.gold, answer_format, truncated=cut)
        out.append({"prompt": question.prompt, "response": text, "gold": question.gold,
                    "reward": g.reward, "correct": g.correct, "answer": g.answer, "why": g.why,
                    "group": question.group, "sample": sample, "greedy": greedy and sample == 0,
                    "tokens": tokens, "source": question.source})
    advantages = group_advantages(torch.tensor([[r["reward"] for r in out]]))[0]
    for record, advantage in zip(out, advantages.tolist()):
        record["advantage"] = advantage
    return out


def sample_groups(model, tokenizer, questions: Sequence[Question], *, samples: int, greedy: bool = False,
                  temperature: float = 1.0, max_new_tokens: int = 512, answer_format: str = PROMPT_FORMAT,
                  batch_size: int = 8, seed: int = 0) -> Iterator[list[list[dict]]]:
    """Per batch of `batch_size` questions (sorted by prompt length, so batches are padded
    little), the graded groups of `samples` answers each: the first greedy when `greedy`, the
    others sampled at `temperature` (sampling seeded by `seed` once, before the first batch)."""
    encoded = [(prompt_ids(tokenizer, q.prompt), q) for q in questions]
    yield from sample_encoded(model, tokenizer, encoded, samples=samples, greedy=greedy,
                              temperature=temperature, max_new_tokens=max_new_tokens,
                              answer_format=answer_format, batch_size=batch_size, seed=seed)


def sample_encoded(model, tokenizer, encoded: Sequence[tuple[list[int], Question]], *, samples: int,
                   greedy: bool = False, temperature: float = 1.0, max_new_tokens: int = 512,
                   answer_format: str = PROMPT_FORMAT, batch_size: int = 8, seed: int = 0,
                   first: int = 0, on_step: Callable[[int, int], None] | None = None,
                   in_order: bool = False) -> Iterator[list[list[dict]]]:
    """`sample_groups` of questions whose prompt ids are known ((ids, question) pairs); the
    answers are numbered from `first` (answers added to groups already held). `on_step(tokens,
    ended)` hears of each decoding step (`generation.StepCounter`), so progress moves while a
    batch decodes. `in_order`: batches of consecutive questions, in the order given (`oar
    generate` writes the groups in its input's order), instead of sorted by prompt length."""
    if samples < 1:
        raise InputError(f"samples must be at least 1 (answers per question), got {samples}")
    if not in_order:
        encoded = sorted(encoded, key=lambda e: len(e[0]))
    torch.manual_seed(seed)
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        answers = decode_answers(model, tokenizer, chunk, samples=samples, greedy=greedy,
                                 temperature=temperature, max_new_tokens=max_new_tokens, on_step=on_step)
        yield [graded_group(q, a, answer_format, greedy, first) for (_, q), a in zip(chunk, answers)]


@dataclass(frozen=True)
class SamplingSettings:
    """How `oar generate` samples: the record each answer carries, and what a resume must
    match (answers sampled otherwise are never mixed into one file)."""

    model: str = option(help="catalogue name or checkpoint folder")
    answer_format: str = option(help="the format asked for and graded")
    temperature: float = option(help="sampling temperature; 0 means greedy decoding "
                                     "(one answer per question)")
    greedy: bool = option(help="the first answer of each group is the greedy one")
    max_new_tokens: int = option(help="tokens per answer")
    seed: int = option(help="seed of the sampling")

    def __post_init__(self):
        if self.answer_format not in MARKER_FORMATS:
            raise InputError(f"--answer-format {self.answer_format!r}: known {', '.join(MARKER_FORMATS)}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InputError(f"--temperature must be a finite number >= 0 (0: greedy decoding), "
                             f"got {self.temperature}")
        if not 1 <= self.max_new_tokens < 2 ** 31:
            raise InputError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if not 0 <= self.seed < 2 ** 63:
            raise InputError(f"--seed must be in [0, 2**63), got {self.seed}")

    def record(self) -> dict:
        """What each answer carries as `sampling`: these settings, the model named as the
        settings record names it (`model_identity`: catalogue name or path, and the sha256 of
        its weights), so that `oar attribute` and `oar import` know which model wrote a file."""
        from .records.settings_record import model_identity

        return {**asdict(self), "model": model_identity(self.model)}

    @property
    def all_greedy(self) -> bool:
        """Temperature 0: greedy decoding, every answer the greedy one."""
        return self.temperature == 0
