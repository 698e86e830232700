"""Training prompts: the arithmetic world's presets, the word-problem world's, and JSONL math sets.

Every dataset has a `prompt` column (a string, or a one-message chat when the tokenizer has a
chat template; TRL applies the template) and an `answer` column (a string) that the reward
functions read. World rows also carry the problem itself (`problem`, JSON) so that the run
store can attach the structural oracle to a generated trace.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from datasets import Dataset

from oar_attrib.defaults import PROMPT_FORMAT, WORLD_FORMAT
from oar_attrib import rollouts
from oar_attrib.errors import InputError
from oar_attrib.inputs.pairs import is_chat
from oar_attrib.jsonl import NotJSON, iter_jsonl
from oar_attrib.rollouts import PROMPT_TEMPLATES, QUESTION_KEYS  # noqa: F401 - this module's names too
from oar_attrib.world import Problem, Step, generate_problems

from .errors import DataError



# ------------------------------------------------------------------ the arithmetic world


def _encode(value):
    """JSON of a Problem's field values, tagged so that decoding restores their types."""
    if isinstance(value, Step):
        return {"__step__": {f.name: _encode(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, frozenset):
        return {"__frozenset__": sorted((_encode(v) for v in value), key=repr)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__step__" in value:
        return Step(**{k: _decode(v) for k, v in value["__step__"].items()})
    if "__frozenset__" in value:
        return frozenset(_decode(v) for v in value["__frozenset__"])
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    return {k: _decode(v) for k, v in value.items()}


def problem_to_json(problem: Problem) -> str:
    """A world problem as JSON text (field by field, so new Problem fields travel too)."""
    return json.dumps({f.name: _encode(getattr(problem, f.name)) for f in fields(problem)})


def problem_from_json(text: str) -> Problem:
    return Problem(**{k: _decode(v) for k, v in json.loads(text).items()})


def world_dataset(n: int, preset: str = "default", seed: int = 0, split: str = "train",
                  answer_format: str = WORLD_FORMAT) -> Dataset:
    """`n` world problems: prompt (the question and a newline, as in pretraining), answer,
    answer_format and problem (JSON). The 'test' split is disjoint from 'train'."""
    problems = generate_problems(n, preset, seed=seed, split=split, answer_format=answer_format)
    return Dataset.from_dict({
        "prompt": [p.prompt for p in problems],
        "answer": [str(p.answer) for p in problems],
        "answer_format": [p.answer_format for p in problems],
        "problem": [problem_to_json(p) for p in problems],
    })


# ------------------------------------------------------------------ the word-problem world


def word_dataset(n: int, preset: str, tokenizer=None, template: str = "answer_is",
                 system: str | None = None, seed: int = 0, split: str = "train") -> Dataset:
    """`n` word problems of a `world.words` preset as prompt / answer / id columns, the question
    formatted like a JSONL record's (`format_prompt`: the template's instruction, as a chat when
    the tokenizer has a template). The 'test' split is disjoint from 'train'; the same
    arguments always give the same problems in the same order."""
    from oar_attrib.world.words import generate_word_problems

    problems = generate_word_problems(n, preset, seed=seed, split=split)
    return Dataset.from_dict({
        "prompt": [format_prompt(p.question, tokenizer, template, system) for p in problems],
        "answer": [str(p.answer) for p in problems],
        "id": [f"{preset}-{split}-{seed}-{i}" for i in range(len(problems))],
    })


# ------------------------------------------------------------------ JSONL math sets


def read_jsonl(path: str | Path) -> list[dict]:
    """Records of a JSON Lines file; errors name the file and line."""
    from oar_attrib.errors import InputError
    from oar_attrib.files import check_file

    try:
        path = check_file(path, hint="pass a JSON Lines file (one object per line)")
    except InputError as err:  # a folder, a FIFO or a device is not "missing"
        raise DataError(str(err)) from None
    records = []
    for number, record in iter_jsonl(path):
        if isinstance(record, NotJSON):
            raise DataError(f"{path}:{number}: not JSON ({record})")
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: a record must be a JSON object")
        records.append(record)
    return records


def _question(record: dict, where: str) -> str:
    for key in QUESTION_KEYS:
        if isinstance(record.get(key), str):
            return record[key]
    raise DataError(f"{where}: needs a 'prompt' (TRL's column: a string, or chat messages), "
                    "or a 'question' or 'problem' string")


def _trl_prompt(prompt, where: str):
    """TRL's `prompt` column as it is: a string (standard) or a list of {role, content}
    messages (conversational, TRL applies the chat template)."""
    if isinstance(prompt, str) and prompt.strip():
        return prompt
    if is_chat(prompt):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise DataError(f"{where}: 'prompt' must be a non-empty string or a list of "
                    '{"role": ..., "content": ...} messages (TRL\'s standard or conversational format)')


def format_prompt(question: str, tokenizer=None, template: str = PROMPT_FORMAT, system: str | None = None):
    """`rollouts.format_prompt` (the question with the template's instruction, as a chat when
    the tokenizer has a template), its errors as DataError."""
    try:
        return rollouts.format_prompt(question, tokenizer, template, system)
    except InputError as err:
        raise DataError(str(err)) from None


def math_dataset(path: str | Path, tokenizer=None, template: str = PROMPT_FORMAT, system: str | None = None,
                 limit: int | None = None) -> Dataset:
    """A JSONL math set as prompt / answer / id columns. A record holds a `question` or
    `problem` (formatted with `template`, as a chat when the tokenizer has a template) or, in
    TRL's formats, a `prompt` used as it is (a string, or a list of chat messages); and the
    gold `answer` the reward functions read."""
    records = read_jsonl(path)[:limit]
    if not records:
        raise DataError(f"{path} holds no records")
    prompts, answers, ids = [], [], []
    for number, record in enumerate(records, start=1):
        where = f"{path}: record {number}"
        answer = record.get("answer")
        if not isinstance(answer, (str, int, float)) or str(answer).strip() == "":
            raise DataError(f"{where}: needs a non-empty 'answer'")
        if "prompt" in record:
            prompts.append(_trl_prompt(record["prompt"], where))
        else:
            prompts.append(format_prompt(_question(record, where), tokenizer, template, system))
        answers.append(str(answer))
        ids.append(str(record.get("id", number - 1)))
    if len({isinstance(p, str) for p in prompts}) > 1:
        first_chat = next(i for i, p in enumerate(prompts) if not isinstance(p, str))
        raise DataError(f"{path}: record {first_chat + 1}'s prompt is chat messages but others are "
                        "strings; one file holds one format (TRL's standard or conversational)")
    return Dataset.from_dict({"prompt": prompts, "answer": answers, "id": ids})
