"""The graded counterfactual oracle: how often does replacing a token change the answer?

The binary oracle (`data.oracle`) asks of each tested position t whether ONE replacement
followed by greedy regeneration changes the final answer; on a real model most positions are
then "causal" (84% of tested GSM8K positions on SmolLM2), so every method's recall sits at the
random level. The graded oracle asks it K times: K replacement tokens v_1..v_K are drawn from
the model's own next-token distribution at t, p(. | y_<t) with y_t excluded (float32 softmax,
with replacement, one seeded generator over the sorted positions), each prefix y_<t, v_j is
regenerated greedily, and the label of t is its flip rate

    f_t = #{j : answer(y_<t, v_j, greedy continuation) != answer(y)} / K  in {0, 1/K, ..., 1}

(a regeneration without an answer counts as a flip). Equal draws are regenerated once and
counted as often as drawn, so f_t is the plain estimate of P_{v ~ p(. | y_<t), v != y_t}(flip).

The work is one forward over prompt + response (its logits give the draws; its key/value cache
is every tested prefix's) and one batched greedy decode per group of rows: each row's cache is
the clean prefix cropped to its length and left-padded to the group's longest (the positions
`generate` gives left-padded rows), so no prefix is recomputed. Rows are grouped, positions in
order, so that a group holds at most `max_batch_tokens` tokens (rows x (longest prefix + the
regeneration)). A model whose cache is not a plain key/value cache (a sliding window that drops
keys) regenerates whole rows instead (`data.oracle`'s path). `DecodeStats` counts the rows,
their prefix lengths and new tokens, and the seconds: what `bench/bench_graded_oracle.py` turns
into throughput against the FLOP limit of the decoding work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from ...defaults import GRADED_K, GRADED_POSITIONS, option
from ...errors import InputError
from ...models.budget import CPU_BATCH_TOKENS
from ...models.generation import continue_rows, cut_at_stop, left_pad, stop_ids
from ...compat.transformers import cache_of, plain_kv, with_cache
from ...models.lm import eval_mode
from ..data.oracle import choose_positions
from ...defaults import REGENERATION_MARGIN  # tokens beyond what is left of the response
from ..base import OracleSettings, settings_of


@dataclass(frozen=True)
class GradedSettings(OracleSettings):
    """What the graded oracle tests (`record()`: the fields that key its cache) and how it
    decodes (`max_batch_tokens`, `reuse_prefix`: the same flips either way)."""

    k: int = option(GRADED_K, "Replacement tokens drawn per tested position (the flip rate's denominator).")
    positions: int = option(GRADED_POSITIONS, "Scored positions tested per trace, spread over it "
                                              "(`data.oracle.choose_positions`).")
    seed: int = option(0, "Seed of the tested positions and the draws.")
    margin: int = option(REGENERATION_MARGIN, "Tokens a regeneration may write beyond the rest of the original "
                                              "response.")
    max_batch_tokens: int = option(CPU_BATCH_TOKENS, "Tokens of one regenerated group of rows (rows x (longest "
                                                     "prefix + its regeneration); a row alone may pass it).",
                                   record=False)
    reuse_prefix: bool = option(True, "Regenerate each row on the clean forward's key/value cache; False "
                                      "regenerates whole rows (the reference the cached path is tested against).",
                                record=False)

    def __post_init__(self) -> None:
        for name in ("k", "positions", "max_batch_tokens"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InputError(f"graded oracle: {name}={getattr(self, name)!r} must be an integer >= 1")
        if not isinstance(self.margin, int) or self.margin < 0:
            raise InputError(f"graded oracle: margin={self.margin!r} must be an integer >= 0")


@dataclass
class DecodeStats:
    """The regeneration work of one or more traces: `rows` (prefix length, new tokens) per
    regenerated row (the replacement token counts as a new one), `forwards` the clean forwards
    (their lengths), and the wall seconds of both."""

    rows: list[tuple[int, int]] = field(default_factory=list)
    forwards: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: "DecodeStats") -> None:
        self.rows += other.rows
        self.forwards += other.forwards
        self.seconds += other.seconds

    def to_dict(self) -> dict:
        new = sum(n for _, n in self.rows)
        return {"rows": len(self.rows), "new_tokens": new, "prefill_tokens": sum(self.forwards),
                "seconds": round(self.seconds, 3),
                "tokens_per_second": round(new / self.seconds, 2) if self.seconds > 0 else None}


@dataclass
class GradedTrace:
    """The oracle of one trace: per tested response position t, the K drawn replacement ids
    and whether each regeneration changed the answer."""

    draws: dict[int, list[int]]
    flips: dict[int, list[bool]]
    stats: DecodeStats = field(default_factory=DecodeStats)

    def flip_rates(self) -> dict[int, float]:
        return {t: sum(f) / len(f) for t, f in sorted(self.flips.items())}

    def to_json(self) -> dict:
        return {"positions": [[t, self.draws[t], [int(x) for x in self.flips[t]]] for t in sorted(self.flips)]}

    @classmethod
    def from_json(cls, data: dict) -> "GradedTrace":
        draws = {int(t): [int(v) for v in d] for t, d, _ in data["positions"]}
        flips = {int(t): [bool(x) for x in f] for t, _, f in data["positions"]}
        return cls(draws, flips)


def _clean_forward(model, row: list[int]):
    """(logits (L, V), key/value cache) of one forward over the (L,) row."""
    device = next(model.parameters()).device
    with eval_mode(model), torch.no_grad():
        out = model(input_ids=torch.tensor([row], device=device), use_cache=True)
    return out.logits[0], cache_of(out)


def draw_replacements(logits: torch.Tensor, prompt_len: int, response: list[int], positions: list[int],
                      k: int, seed: int) -> dict[int, list[int]]:
    """{t: k ids drawn from softmax(logits[P + t - 1]) with response[t] excluded}, positions in
    sorted order from one generator seeded by `seed`; a position whose every other token has
    probability 0 is left out. logits: (P + T, V) of the clean row."""
    if positions and prompt_len == 0 and min(positions) == 0:
        raise InputError("the graded oracle needs a prompt: nothing predicts position 0 of a "
                         "response after an empty prompt")
    at = torch.tensor([prompt_len + t - 1 for t in positions], dtype=torch.long)
    probs = torch.softmax(logits[at.to(logits.device)].float(), dim=-1).cpu()  # (N, V)
    probs[torch.arange(len(positions)), torch.tensor([response[t] for t in positions])] = 0.0
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for i, t in enumerate(positions):
        if probs[i].sum() > 0:
            out[t] = torch.multinomial(probs[i], k, replacement=True, generator=gen).tolist()
    return out


def _padded_cache(kv, lengths: list[int]) -> DynamicCache:
    """A cache of len(lengths) rows: row i holds the clean prefix's first lengths[i] columns,
    left-padded (zeros, masked out) to the longest."""
    width = max(lengths)
    layers = []
    for keys, values in kv:  # (1, H, W, D) each
        rows_k, rows_v = [], []
        for n in lengths:
            pad = torch.zeros(keys.shape[:2] + (width - n,) + keys.shape[3:], dtype=keys.dtype, device=keys.device)
            rows_k.append(torch.cat([pad, keys[:, :, :n]], dim=2))
            rows_v.append(torch.cat([pad, values[:, :, :n]], dim=2))
        layers.append((torch.cat(rows_k), torch.cat(rows_v)))
    return DynamicCache(ddp_cache_data=layers)


@torch.no_grad()
def _regenerate(model, kv, rows: list[list[int]], pad_id: int, eos: list[int], max_new_tokens: int) -> list[list[int]]:
    """Greedy continuations of each row (a clean prefix and one replacement token), on the
    clean cache `kv` when there is one, cut before the first EOS."""
    if kv is None:
        out = continue_rows(model, rows, pad_id, max_new_tokens=max_new_tokens, eos_token_id=eos or None)
    else:
        device = next(model.parameters()).device
        ids, attn = left_pad(rows, pad_id, device)
        cache = _padded_cache(kv, [len(r) - 1 for r in rows])
        kwargs = {"eos_token_id": eos} if eos else {}
        with eval_mode(model):
            out = model.generate(input_ids=ids, attention_mask=attn, **with_cache(model, cache),
                                 max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                 top_k=None, top_p=None, pad_token_id=int(pad_id), **kwargs)
        out = out[:, ids.shape[1]:]
    return [cut_at_stop(row, eos, keep=False) for row in out.tolist()]


def graded_oracle(model, tokenizer, prompt_ids: Sequence[int], response_ids: Sequence[int],
                  positions: Sequence[int], extract_answer: Callable[[str], str | None],
                  settings: GradedSettings | None = None, **keywords) -> GradedTrace:
    """The graded oracle of one trace (module docstring).

    prompt_ids: (P,), response_ids: (T,) token ids; positions: indices into the response
    (e.g. its scored positions), thinned to `settings.positions`. extract_answer: response
    text (decoded without special tokens) -> answer or None. settings: `GradedSettings`, or
    its fields as keywords (`k`, `positions`, `seed`, `margin`, `max_batch_tokens`, and
    `reuse_prefix` False: whole rows regenerated, the reference; the same results)."""
    settings = settings_of(GradedSettings, settings, keywords, "graded_oracle")
    start = time.perf_counter()
    prompt, response = [int(i) for i in prompt_ids], [int(i) for i in response_ids]
    bad = [t for t in positions if not 0 <= int(t) < len(response)]
    if bad:
        raise InputError(f"positions {bad[:5]} are outside the response (length {len(response)})")
    original = extract_answer(tokenizer.decode(response, skip_special_tokens=True))
    if original is None:
        raise InputError("extract_answer finds no answer in the original response, so no change "
                         "can be detected; check the extractor on that text")
    chosen = choose_positions([int(t) for t in positions], settings.positions, settings.seed) if positions else []
    logits, cache = _clean_forward(model, prompt + response)
    draws = draw_replacements(logits, len(prompt), response, chosen, settings.k, settings.seed)
    kv = plain_kv(cache, len(prompt) + len(response)) if settings.reuse_prefix else None
    del logits
    stats = DecodeStats(forwards=[len(prompt) + len(response)])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    eos = stop_ids(model, tokenizer)
    todo = [(t, v) for t in sorted(draws) for v in dict.fromkeys(draws[t])]  # each distinct pair once
    answers: dict[tuple[int, int], str | None] = {}
    for group in _groups(todo, len(prompt), len(response), settings.margin, settings.max_batch_tokens):
        rows = [prompt + response[:t] + [v] for t, v in group]
        new = max(len(response) - t + settings.margin for t, _ in group)
        tails = _regenerate(model, kv, rows, pad, eos, new)
        for (t, v), tail in zip(group, tails):
            answers[(t, v)] = extract_answer(tokenizer.decode(response[:t] + [v] + tail, skip_special_tokens=True))
            stats.rows.append((len(prompt) + t, 1 + len(tail)))
    flips = {t: [answers[(t, v)] != original for v in draws[t]] for t in draws}
    stats.seconds = time.perf_counter() - start
    return GradedTrace(draws, flips, stats)


def _groups(todo: list[tuple[int, int]], prompt_len: int, response_len: int, margin: int,
            budget: int) -> list[list[tuple[int, int]]]:
    """Consecutive (position, token) pairs grouped so that rows x (longest prefix + its
    regeneration) stays within `budget` tokens (a row alone may pass it)."""
    out, current = [], []
    for pair in todo:
        trial = current + [pair]
        width = prompt_len + max(t for t, _ in trial) + 1 + max(response_len - t + margin for t, _ in trial)
        if current and len(trial) * width > budget:
            out.append(current)
            trial = [pair]
        current = trial
    return out + ([current] if current else [])
