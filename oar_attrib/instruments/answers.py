"""The model's own answers to an instrument's problems, cached in its `OracleCache`: each
prompt's greedy answer (`greedy_answers`, kind "answer") and one problem's group of answers
sampled at a temperature (`sampled_group`, kind "group": GRPO's group for `advantage`, KTAE's
for `graded`).

A group is keyed by the model's record, its size, temperature, the run's seed and the longest
answer, with the prompt's ids, and sampled from torch's stream seeded by the hash of that key
(`advantage.oracle.prefix_seed`): the same key samples the same texts whichever instrument,
shard or position in the run asks for it. Its texts are kept with their hash, and a group read
back that holds another number of texts or texts of another hash is refused in one line.
"""
from __future__ import annotations

import hashlib
import json

import torch
from tqdm.auto import tqdm

from ..rollouts import decode_answers
from .base import Run
from .cache import cache_key

GREEDY_CHUNK = 8  # prompts decoded together for their greedy answers


def texts_hash(texts: list[str]) -> str:
    """The hash a group's answers are kept with, checked when they are read back."""
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:32]


def _decode(run: Run, prompts: list[list[int]], samples: int, greedy: bool, temperature: float,
            max_new_tokens: int) -> list[list[str]]:
    """Per prompt its answers' texts (`rollouts.decode_answers`: each prompt prefilled once)."""
    answers = decode_answers(run.model, run.tokenizer, [(ids, None) for ids in prompts], samples=samples,
                             greedy=greedy, temperature=temperature, max_new_tokens=max_new_tokens)
    return [[text for text, _, _ in group] for group in answers]


def greedy_answers(run: Run, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
    """Each prompt's greedy answer, from the cache or decoded now (GREEDY_CHUNK prompts at a time)."""
    record = run.record(answer="greedy", max_new_tokens=max_new_tokens)
    keys = [cache_key(record, ids) for ids in prompts]
    found = {i: run.cache.get("answer", k) for i, k in enumerate(keys)}
    todo = [i for i, hit in found.items() if hit is None]
    for start in tqdm(range(0, len(todo), GREEDY_CHUNK), desc="answers", disable=not run.progress or not todo):
        chunk = todo[start:start + GREEDY_CHUNK]
        for i, (text,) in zip(chunk, _decode(run, [prompts[i] for i in chunk], 1, True, 1.0, max_new_tokens)):
            found[i] = run.cache.put("answer", keys[i], {"text": text})
    return [found[i]["text"] for i in range(len(prompts))]


def sampled_group(run: Run, ids: list[int], size: int, temperature: float, max_new_tokens: int) -> list[str]:
    """One problem's `size` answers sampled at `temperature` (module docstring), from the cache
    or sampled now."""
    from .advantage.oracle import prefix_seed

    record = run.record(answer="sampled", samples=size, temperature=temperature, seed=run.settings.seed,
                        max_new_tokens=max_new_tokens)
    key = cache_key(record, ids)
    hit = run.cache.get("group", key)
    if hit is None:
        torch.manual_seed(prefix_seed(key))
        texts = _decode(run, [ids], size, False, temperature, max_new_tokens)[0]
        hit = run.cache.put("group", key, {"texts": texts, "sha": texts_hash(texts)})
    if len(hit["texts"]) != size or hit.get("sha", texts_hash(hit["texts"])) != texts_hash(hit["texts"]):
        raise run.cache.refuse(f"a group of answers ({key}) holds {len(hit['texts'])} texts for groups of {size}, or "
                               "texts that are not the ones it was written with")
    return hit["texts"]
