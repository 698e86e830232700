"""Batched decoding, the one place the package continues token rows with `model.generate`.

Rows of different lengths are left-padded so that every row continues at the same column
(`left_pad`); `continue_rows` decodes greedily or by sampling from there, with dropout off;
`generate` does it for prompt texts and cuts each response after its EOS. The evaluation, the
counterfactual oracle, the training callbacks and the toy rollouts all decode through
`continue_rows`, so they share one padding and one decoding configuration.

`continue_groups` is the fast path for groups of answers per prompt (rollouts, `oar eval
--data`): each prompt is prefilled once (`model.generate` with `num_return_sequences` would
prefill it once per returned sequence), its KV cache repeated for the group, and a greedy
answer decoded in the same loop as the sampled ones (`GreedyRows`), so a group costs one
prefill and one decode loop. `model.generate` stops as soon as every row has hit EOS.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ..compat.transformers import cache_of, with_cache
from .lm import eval_mode


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) left-padded token ids and their (B, L) attention mask, L the longest row: generation
    continues every row at column L."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), int(pad_id), dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if len(row):
            ids[b, width - len(row):] = torch.as_tensor(list(row), dtype=torch.long)
            attn[b, width - len(row):] = 1
    return ids.to(device), attn.to(device)


def stop_ids(model, tokenizer) -> list[int]:
    """The ids that end a response: the model's generation config's EOS ids (one or a list),
    else the tokenizer's EOS; empty when neither has one."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return [] if eos is None else sorted({int(e) for e in (eos if isinstance(eos, list) else [eos])})


def cut_at_stop(row: Sequence[int], stop: Sequence[int], keep: bool = True) -> list[int]:
    """`row` up to its first stop id (kept when `keep`), or all of it without one."""
    at = next((i for i, tok in enumerate(row) if tok in stop), None)
    return list(row) if at is None else list(row[: at + 1 if keep else at])


@torch.no_grad()
def continue_rows(
    model, rows: Sequence[Sequence[int]], pad_id: int, *, max_new_tokens: int,
    do_sample: bool = False, temperature: float = 1.0, num_return_sequences: int = 1,
    eos_token_id: int | list[int] | None = None, min_new_tokens: int | None = None,
) -> torch.Tensor:
    """(B * num_return_sequences, N) new token ids after each of the B rows of ids, N <=
    max_new_tokens, row-major (a row's sequences together); after a row's EOS `generate` fills
    in `pad_id`. Greedy unless `do_sample` (then at `temperature`, no top-k/top-p); dropout is
    off whatever mode the model is in. eos_token_id: default the model's generation config's.
    The model's generation config supplies every setting not named here."""
    device = next(model.parameters()).device
    ids, attn = left_pad(rows, pad_id, device)
    kwargs = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    if min_new_tokens is not None:
        kwargs["min_new_tokens"] = min_new_tokens
    with eval_mode(model):
        out = model.generate(
            input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens, do_sample=do_sample,
            temperature=temperature if do_sample else None, top_k=None, top_p=None,
            num_return_sequences=num_return_sequences, pad_token_id=int(pad_id), **kwargs,
        )
    return out[:, ids.shape[1]:]


def generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int = 96,
    do_sample: bool = False,
    temperature: float = 1.0,
    num_return_sequences: int = 1,
    batch_size: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> list[list[int]]:
    """Response token ids for each prompt (num_return_sequences per prompt, prompt-major),
    cut after the first EOS (kept) and without padding. Prompts are tokenized without special
    tokens; sampling is seeded by `seed`."""
    stop = stop_ids(model, tokenizer)
    torch.manual_seed(seed)
    out: list[list[int]] = []
    starts = range(0, len(prompts), batch_size)
    for start in tqdm(starts, desc="generate", disable=not progress):
        chunk = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts[start: start + batch_size]]
        new = continue_rows(model, chunk, tokenizer.pad_token_id, max_new_tokens=max_new_tokens,
                            do_sample=do_sample, temperature=temperature,
                            num_return_sequences=num_return_sequences, eos_token_id=stop or None)
        out += [cut_at_stop(row, stop) for row in new.tolist()]
    return out


class GreedyRows(LogitsProcessor):
    """Turns the rows `rows` of a sampling step into their argmax (every other logit -inf), so
    that a greedy answer decodes in the same `generate` call as sampled ones. A positive
    temperature keeps the argmax, so the order against the temperature warper does not matter."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows  # (R,) bool, True where the row decodes greedily

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """scores: (R, V) -> (R, V), the greedy rows one-hot (0 at the argmax, -inf elsewhere)."""
        top = torch.full_like(scores, float("-inf")).scatter(1, scores.argmax(-1, keepdim=True), 0.0)
        return torch.where(self.rows.to(scores.device)[:, None], top, scores)


class StepCounter(StoppingCriteria):
    """Tells `on_step(tokens, ended)` after each decoding step of `generate`: how many rows
    made a token this step and how many of them ended with it (a stop id); never stops a
    row. A progress bar counts tokens and answers with it as they are made."""

    def __init__(self, rows: int, stop: Sequence[int], on_step: Callable[[int, int], None]):
        self.alive = torch.ones(rows, dtype=torch.bool)
        self.stop, self.on_step = torch.tensor(list(stop), dtype=torch.long), on_step

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        """input_ids: (R, L), the last column the token just made -> (R,) all False."""
        last = input_ids[:, -1].cpu()
        ended = self.alive & torch.isin(last, self.stop)
        self.on_step(int(self.alive.sum()), int(ended.sum()))
        self.alive &= ~ended
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _prefill(model, ids: torch.Tensor, attn: torch.Tensor):
    """The KV cache of every column of the (B, L) left-padded rows but the last, at the
    positions `generate` gives left-padded rows (attention-mask cumsum - 1); None when L == 1."""
    if ids.shape[1] < 2:
        return None
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids[:, :-1], attention_mask=attn[:, :-1], position_ids=positions[:, :-1],
                use_cache=True)
    return cache_of(out)


@torch.no_grad()
def continue_groups(
    model, rows: Sequence[Sequence[int]], pad_id: int, *, max_new_tokens: int, samples: int = 0,
    greedy: bool = True, temperature: float = 1.0, eos_token_id: int | list[int] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> torch.Tensor:
    """(B * K, N) new token ids, K = greedy + samples answers per row of ids, row-major (a
    row's K answers together, its greedy one first), N <= max_new_tokens; after an answer's EOS
    `generate` fills in `pad_id`. Each row is prefilled once and its cache repeated K times;
    the greedy answer equals `continue_rows`'s greedy one, the others are sampled at
    `temperature` (no top-k/top-p). Dropout is off. `on_step(tokens, ended)` hears of every
    decoding step (`StepCounter`; answers cut off at max_new_tokens are not counted as ended)."""
    k = int(greedy) + samples
    if k < 1:
        raise ValueError("continue_groups needs greedy=True or samples >= 1")
    device = next(model.parameters()).device
    ids, attn = left_pad(rows, pad_id, device)
    kwargs = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    greedy_rows = (torch.arange(len(rows) * k, device=device) % k == 0) & greedy
    if samples and greedy:
        kwargs["logits_processor"] = LogitsProcessorList([GreedyRows(greedy_rows)])
    if on_step is not None:
        eos = eos_token_id if eos_token_id is not None else getattr(model.generation_config, "eos_token_id", None)
        stop = [eos] if isinstance(eos, int) else list(eos or [])
        kwargs["stopping_criteria"] = StoppingCriteriaList([StepCounter(len(rows) * k, stop, on_step)])
    with eval_mode(model):
        cache = _prefill(model, ids, attn)
        if cache is not None and k > 1:
            cache.batch_repeat_interleave(k)
        out = model.generate(
            input_ids=ids.repeat_interleave(k, 0), attention_mask=attn.repeat_interleave(k, 0),
            **with_cache(model, cache), max_new_tokens=max_new_tokens, do_sample=samples > 0,
            temperature=temperature if samples else None, top_k=None, top_p=None,
            pad_token_id=int(pad_id), **kwargs,
        )
    return out[:, ids.shape[1]:]


def gumbel_sample(scores: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """(R,) token ids sampled from softmax(scores) by the Gumbel-max rule: argmax of scores +
    Gumbel noise -log(-log(noise)). scores: (R, V) float32 logits already divided by the
    temperature; noise: (R, V) uniforms in [0, 1) (a 0 gives -inf: never picked)."""
    return (scores - torch.log(-torch.log(noise))).argmax(-1)


class SeededStreams:
    """One random stream per prefix: `draw(alive)` gives each live row its (V,) uniforms for this
    decoding step, prefix p's `samples` rows drawing together from prefix p's own generator
    (seeded by seeds[p]). A prefix's stream is read once per step from its first step to its
    last live row's end, whatever other prefixes share the batch, so its continuations are
    the same decoded alone or beside others."""

    def __init__(self, seeds: Sequence[int], samples: int, vocab: int):
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.samples, self.vocab = samples, vocab

    def draw(self, alive: torch.Tensor) -> torch.Tensor:
        """alive: (R,) indices of the live rows (row r of prefix r // samples) -> (R, V)."""
        prefixes = torch.unique(alive // self.samples).tolist()
        drawn = {p: torch.rand((self.samples, self.vocab), generator=self.generators[p]) for p in prefixes}
        return torch.stack([drawn[int(r) // self.samples][int(r) % self.samples] for r in alive])


@torch.no_grad()
def sample_prefixes(model, prefixes: Sequence[Sequence[int]], seeds: Sequence[int], budgets: Sequence[int], *,
                    samples: int, temperature: float, pad_id: int, stop: Sequence[int]) -> list[list[list[int]]]:
    """Per prefix its `samples` continuations, sampled at `temperature` (no top-k/top-p), each
    cut before its first stop id and at most budgets[p] tokens long: one prefill of the P
    left-padded prefixes, each prefix's KV cache repeated `samples` times, one decode loop over
    all P * samples rows in which a row that ends leaves the batch (its cache rows with it), so
    the work is the tokens written, not the longest row times the rows. Prefix p samples from
    its own stream (`SeededStreams`, seeds[p]; `gumbel_sample`): its continuations do not
    depend on the other prefixes of the batch. Dropout is off."""
    device = next(model.parameters()).device
    ids, attn = left_pad(prefixes, pad_id, device)  # (P, L)
    rows = len(prefixes) * samples
    out: list[list[int]] = [[] for _ in range(rows)]
    limit = torch.tensor([int(b) for b in budgets for _ in range(samples)])  # (R,)
    alive = torch.nonzero(limit > 0).flatten()
    stop = torch.tensor(sorted({int(s) for s in stop}), dtype=torch.long)
    with eval_mode(model):
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        first = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
        cache = cache_of(first)
        cache.batch_repeat_interleave(samples)
        logits = first.logits[:, -1].float().repeat_interleave(samples, 0)  # (R, V)
        attn, length = attn.repeat_interleave(samples, 0), attn.sum(-1).repeat_interleave(samples, 0)
        streams = SeededStreams(seeds, samples, logits.shape[-1])
        logits, attn, length = logits[alive], attn[alive], length[alive]
        cache.batch_select_indices(alive.to(device))
        while alive.numel():
            token = gumbel_sample(logits.cpu() / temperature, streams.draw(alive))  # (R,)
            for r, t in zip(alive.tolist(), token.tolist()):
                out[r].append(t)
            ended = torch.isin(token, stop) | (torch.tensor([len(out[r]) for r in alive.tolist()]) >= limit[alive])
            keep = torch.nonzero(~ended).flatten()
            if keep.numel() == 0:
                break
            if keep.numel() < alive.numel():
                cache.batch_select_indices(keep.to(device))
            alive, token, attn, length = alive[keep], token[keep], attn[keep], length[keep]
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)  # (R, L + t)
            step = model(input_ids=token[:, None].to(device), attention_mask=attn,
                         position_ids=length[:, None], use_cache=True, **with_cache(model, cache))
            cache, logits, length = cache_of(step), step.logits[:, -1].float(), length + 1
    return [[cut_at_stop(out[p * samples + j], stop.tolist(), keep=False) for j in range(samples)]
            for p in range(len(prefixes))]
