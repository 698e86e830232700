"""OAR-G: the gradient proxy of OAR-P, one backward per noise draw (METHOD.md section 5).

e = the input embeddings (a detached leaf). P0 = the probe on a clean forward. Noise
xi ~ N(0, sigma^2) is added to the embeddings of the scored positions only, and

    J = KL(P0 || P(e + xi))   (`lt`, `as_mean`)      J = phi0 - phi(e + xi)   (`as_joint`)
    I_t = | < dJ/de_t , e_t > |

the gradient at the noisy point dotted with the clean embedding. At xi = 0 the KL is at its
minimum and its gradient is exactly zero, hence the noise. With `n_noise` > 1, I_t is the mean
of the per-draw importances. Only the embedding gradient is taken (`torch.autograd.grad`), so
the parameters' `.grad` are never touched.

The columns before a row's first scored position (its prompt) are the same in the clean and the
noisy forward and need no gradient: they run once per distinct prompt (a GRPO group shares
one), without autograd, and both forwards continue from their key/value cache. That spares the
prompt's forwards and backward, the same result up to float rounding. Rows run in groups whose
padded tokens fit a token budget sized from the memory bound (`budget.backward_tokens`), so a
backward never holds more than the bound allows, however many rows a batch has.

Noise draws share passes: a group's rows are repeated once per draw (draw-major) in one forward
and backward, as many draws as the token budget holds (`draws_per_pass`), on the prompt cache
and the clean probe values computed once for all draws. The noise is drawn in the order the
draws would be drawn one after another, and each draw's importances are summed in draw order
(`draws.mean_of_draws`), so the result is that of the draws run one by one up to what the
matrix kernels do with the larger batch: MKL's float32 GEMM picks its kernel by the number of
rows, and a row's result can differ in the last bits with it; under MKL's strict reproducible
mode (`MKL_CBWR=AUTO,STRICT` in the environment) batched and one-by-one draws are equal bit
for bit (tests/methods/test_oar_g.py checks both).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..defaults import PROBE
from ..inputs.batch import ScoringBatch
from ..models.budget import row_groups
from ..errors import InputError
from ..compat.transformers import accepts_logits_to_keep, plain_kv, with_cache
from ..models.lm import (check_positions, check_token_budget, draw_normal, eval_mode, input_embeddings,
                         keep_scoreable, logits_at, model_device, scoreable)
from .draws import mean_of_draws
from .knobs import OarGKnobs
from .registry import register_method
from .probes import ProbeSites, backward_budget, check_probe, probe_divergence, probe_sites, probe_values


# Analysis reads with 8 draws, training with the paper's 1 (`OarGKnobs`).
@register_method("oar_g", random=True, token_budget=True,
                 knobs=OarGKnobs, draws=True, speed_params=("draws_per_pass",), cost="cheap",
                 defaults=("reading", "training", "alignment", "demo"), listed=1)
def oar_g(model, batch: ScoringBatch, *, probe: str = PROBE, noise_std: float | None = OarGKnobs.noise_std,
          n_noise: int = OarGKnobs.n_noise, generator: torch.Generator | None = None,
          max_batch_tokens: int | None = None, draws_per_pass: int | None = None,
          return_draws: bool = False) -> torch.Tensor:
    """OAR-G importances of every row of `batch`: per draw, one forward/backward per group of
    rows whose padded tokens fit `max_batch_tokens`.

    batch:     B rows of width L (right-padded).
    noise_std: sigma of the embedding noise on scored positions (0: no noise; the KL probes
               then give all zeros, `as_joint` the plain gradient-times-input). None: 0.1 x
               the RMS of each row's scored embeddings (`noise_sigma`), a noise that survives
               bf16 rounding, so that bf16 and float32 rank tokens alike.
    n_noise:   number of noise draws to average.
    generator: source of the noise: each draw is one standard normal (B, L, D) tensor from it,
               scaled by `noise_std`, kept on the scored positions. Seed it to reproduce.
               A sequence of B generators gives row b the noise it would draw alone from
               generators[b] (a (1, n_b, D) normal, n_b its length), so a row's importances do
               not depend on the rows batched with it (training needs that on every rank).
    max_batch_tokens: at most this many tokens (rows x their padded width) in one forward
               with backward; a longer row goes alone. None: sized from the device's memory
               bound and the model's shape (`budget.backward_tokens`). Changes memory, not
               results.
    draws_per_pass: noise draws run together in one forward and backward (a group's rows
               repeated per draw); None: as many as `max_batch_tokens` holds, at most n_noise.
               Changes speed and memory; results only in the last bits (module docstring).
    return_draws: return the (n_noise, B, L) importances of each draw instead of their mean
               (`draws.mean_of_draws`, which gives the mean returned otherwise, bit for bit).
    Returns (B, L) float32 on the batch's device: >= 0 (NaN if the model gives NaN) on scored
    positions of rows with an answer span, exactly 0 elsewhere.
    """
    _check_arguments(model, batch, probe, noise_std, n_noise, generator, max_batch_tokens)
    work = batch.to(model_device(model))
    max_batch_tokens = backward_budget(model, work, max_batch_tokens)
    noisy = scoreable(work)[..., None]  # (B, L, 1)
    draws = torch.zeros((n_noise, *work.input_ids.shape), dtype=torch.float32, device=noisy.device)
    with eval_mode(model):
        embeds = input_embeddings(model, work.input_ids)  # (B, L, D)
        sigma = noise_sigma(noise_std, embeds, scoreable(work))  # (B, 1, 1)
        parts = [_Part.of(model, embeds, work, rows, probe)
                 for rows in row_groups(list(range(work.input_ids.shape[0])),
                                        work.lengths.tolist(), max_batch_tokens)]
        per_pass = _draws_per_pass(draws_per_pass, n_noise, parts, max_batch_tokens)
        for first in range(0, n_noise, per_pass):
            count = min(per_pass, n_noise - first)
            # Drawn for the whole batch, draw after draw, then split: the same numbers however
            # rows are grouped and draws batched.
            noise = torch.stack([_draw_noise(embeds, work, generator) * sigma
                                 for _ in range(count)])  # (count, B, L, D) float32
            noise = torch.where(noisy, noise, torch.zeros((), dtype=noise.dtype, device=noise.device))
            for part in parts:
                many = part.repeated(count)
                rows = noise[:, part.rows, :part.width].flatten(0, 1)  # (count * G, W, D)
                values = _gradient_times_input(model, many.embeds, rows, many.batch, many.sites,
                                               many.clean, probe, many.prefix)  # (count * G, W)
                draws[first:first + count, part.rows, :part.width] = values.view(count, -1, part.width)
    draws = keep_scoreable(draws, work).to(batch.input_ids.device)  # (n_noise, B, L)
    return draws if return_draws else mean_of_draws(draws)


def _check_arguments(model, batch: ScoringBatch, probe: str, noise_std, n_noise, generator,
                     max_batch_tokens) -> None:
    """One-line InputErrors for oar_g's arguments, before any work."""
    check_probe(probe)
    check_positions(model, batch)
    check_token_budget(max_batch_tokens)
    if not isinstance(n_noise, int) or n_noise < 1:
        raise InputError(f"n_noise must be an integer >= 1, got {n_noise!r}")
    if noise_std is not None and not noise_std >= 0:
        raise InputError(f"noise_std must be >= 0, got {noise_std!r}")
    if isinstance(generator, (list, tuple)) and len(generator) != batch.input_ids.shape[0]:
        raise InputError(f"{len(generator)} generators for {batch.input_ids.shape[0]} rows; "
                         "pass one generator, or one per row")


def _draws_per_pass(draws_per_pass: int | None, n_noise: int, parts: list["_Part"],
                    budget: int) -> int:
    """Draws per forward and backward: `draws_per_pass` checked, or as many copies of the
    largest row group as `budget` tokens hold (at least 1, at most n_noise)."""
    if draws_per_pass is not None:
        if not isinstance(draws_per_pass, int) or draws_per_pass < 1:
            raise InputError(f"draws_per_pass must be an integer >= 1 or None, got {draws_per_pass!r}")
        return min(draws_per_pass, n_noise)
    largest = max((len(part.rows) * part.width for part in parts), default=1)
    return max(1, min(n_noise, budget // max(largest, 1)))


@dataclass
class _Part:
    """Rows that share one forward and backward (their padded tokens fit the budget): their
    sub-batch, embeddings, probe sites, prompt cache and clean probe values."""

    rows: torch.Tensor  # (G,) indices into the batch
    batch: ScoringBatch  # (G, W), trimmed to its longest row
    embeds: torch.Tensor  # (G, W, D)
    sites: ProbeSites
    prefix: "_Prefix | None"
    clean: torch.Tensor  # (G, V) or (G,)

    @property
    def width(self) -> int:
        return self.batch.input_ids.shape[1]

    @classmethod
    def of(cls, model, embeds: torch.Tensor, batch: ScoringBatch, rows: list[int],
           probe: str) -> "_Part":
        index = torch.tensor(rows, device=embeds.device)
        sub = batch.select(index)
        sub_embeds = embeds[index, :sub.input_ids.shape[1]]
        sites = probe_sites(sub)
        prefix = _Prefix.of(model, sub_embeds, sub)
        with torch.no_grad():
            clean = probe_values(_probe_logits(model, sub_embeds, sub, sites, prefix), sites, probe)
        return cls(index, sub, sub_embeds, sites, prefix, clean)

    def repeated(self, count: int) -> "_Part":
        """The part with its G rows repeated `count` times, draw-major (row r of copy d at
        d * G + r): one pass runs `count` noise draws. `rows` stays the original (G,)."""
        if count == 1:
            return self
        index = torch.arange(len(self.rows), device=self.embeds.device).repeat(count)
        prefix = None if self.prefix is None else self.prefix.repeated(count)
        clean = self.clean.repeat(count, *([1] * (self.clean.dim() - 1)))
        return _Part(self.rows, self.batch.select(index), self.embeds.repeat(count, 1, 1),
                     self.sites.select(index), prefix, clean)


class _Prefix:
    """Keys and values of each row's columns before its first scored position (the prompt, in
    training), run once per distinct prefix: the completions of a GRPO group share a prompt.

    Row b's prefix sits right-aligned in P = max prefix length cache slots (slot j holds column
    j - (P - s_b), earlier slots are masked), so every row continues at its own column s_b.
    """

    def __init__(self, starts: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]],
                 slot_mask: torch.Tensor, cache_keyword: str):
        self.starts, self.kv, self.slot_mask = starts, kv, slot_mask  # (B,), per layer (B,H,P,D), (B,P)
        self.cache_keyword = cache_keyword  # the model's name for a KV cache (`compat.transformers.with_cache`)

    @classmethod
    def of(cls, model, embeds: torch.Tensor, batch: ScoringBatch) -> "_Prefix | None":
        """The prefixes of `batch`'s rows, or None when they are too short to be worth caching or
        the model's cache is not a plain key/value cache (the forwards then run whole rows).
        A row with nothing to score keeps no prefix (it runs whole; its objective is left out)."""
        score = scoreable(batch)
        starts = torch.where(score.any(dim=1), score.int().argmax(dim=1), 0)  # (B,) first scored column
        width = int(starts.max())
        if width < 2:
            return None
        rows = starts.tolist()
        distinct: dict[tuple, int] = {}
        owner = [distinct.setdefault(tuple(batch.input_ids[b, :s].tolist()), b) if s else -1
                 for b, s in enumerate(rows)]
        firsts = sorted(distinct.values())  # one row per distinct prefix
        slot_of = {b: i for i, b in enumerate(firsts)}
        index = torch.tensor(firsts, device=embeds.device)
        mask = torch.arange(width, device=embeds.device)[None, :] < starts[index][:, None]  # (U, P)
        cache = DynamicCache()  # without the config: every layer keeps all its keys
        inputs = dict(inputs_embeds=embeds[index, :width], attention_mask=mask.long(),
                      **with_cache(model, cache), use_cache=True)
        if accepts_logits_to_keep(model):
            inputs["logits_to_keep"] = 1  # the prefix's logits are never read
        with torch.no_grad():
            model(**inputs)
        src = torch.arange(width, device=embeds.device)[None, :] - (width - starts)[:, None]  # (B, P)
        slot_mask = src >= 0
        src = src.clamp_min(0)
        which = torch.tensor([slot_of.get(o, 0) for o in owner], device=embeds.device)[:, None]
        distinct_kv = plain_kv(cache, width)
        if distinct_kv is None:
            return None
        # (U, H, P, D) -> (B, H, P, D): each row's own prefix, right-aligned.
        kv = [(keys.transpose(1, 2)[which, src].transpose(1, 2),
               values.transpose(1, 2)[which, src].transpose(1, 2)) for keys, values in distinct_kv]
        return cls(starts, kv, slot_mask, *with_cache(model, None))

    def repeated(self, count: int) -> "_Prefix":
        """The prefixes of the rows repeated `count` times, draw-major (`_Part.repeated`)."""
        kv = [(keys.repeat(count, 1, 1, 1), values.repeat(count, 1, 1, 1)) for keys, values in self.kv]
        return _Prefix(self.starts.repeat(count), kv, self.slot_mask.repeat(count, 1),
                       self.cache_keyword)

    def continuation(self, embeds: torch.Tensor, batch: ScoringBatch, positions: torch.Tensor):
        """Forward kwargs that run columns [s_b, e_b) of every row on top of its prefix, and the
        probe `positions` (B, K) relative to them; e_b is one past the row's last probe site
        (later columns, the answer's last token and the tail, cannot reach the probe)."""
        n_rows = embeds.shape[0]
        lengths = batch.attention_mask.sum(dim=1)  # (B,)
        # Columns after the last probe site cannot reach the probe (causal): stop there.
        lengths = torch.minimum(lengths, (positions.max(dim=1).values + 1).clamp_min(self.starts + 1))
        span = int((lengths - self.starts).max())
        col = self.starts[:, None] + torch.arange(span, device=embeds.device)[None, :]  # (B, Q)
        valid = col < lengths[:, None]
        col = torch.minimum(col, (lengths - 1).clamp_min(0)[:, None])  # padding repeats the last column
        rows = torch.arange(n_rows, device=embeds.device)[:, None]
        attention_mask = torch.cat([self.slot_mask, valid], dim=1).long()  # (B, P + Q)
        relative = (positions - self.starts[:, None]).clamp(0, span - 1)
        cache = DynamicCache(ddp_cache_data=self.kv)  # a fresh cache: a forward appends to it
        return dict(inputs_embeds=embeds[rows, col], attention_mask=attention_mask,
                    position_ids=col, **{self.cache_keyword: cache}, use_cache=True), relative


def noise_sigma(noise_std: float | None, embeds: torch.Tensor,
                scored: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1) float32 sigma of each row's noise: `noise_std` when given (absolute), else
    RELATIVE_NOISE * the RMS of the row's embeddings over its scored positions, the same
    relative noise in every dtype (METHOD.md section 5, decision note). Per row, so that a row's
    sigma does not depend on the rows batched with it.

    embeds: (B, L, D); scored: (B, L) bool."""
    n_rows = embeds.shape[0]
    if noise_std is not None:
        return torch.full((n_rows, 1, 1), float(noise_std), device=embeds.device)
    weight = scored.float()[..., None]  # (B, L, 1)
    square = (embeds.float().pow(2) * weight).sum(dim=(1, 2))  # (B,)
    count = (weight.sum(dim=(1, 2)) * embeds.shape[-1]).clamp_min(1.0)
    return (RELATIVE_NOISE * (square / count).sqrt())[:, None, None]


RELATIVE_NOISE = 0.1


def _draw_noise(embeds: torch.Tensor, batch: ScoringBatch, generator) -> torch.Tensor:
    """(B, L, D) float32 standard normal noise from one generator, or row b's first n_b
    positions from generator[b] (zero on its padding) when given one per row."""
    if not isinstance(generator, (list, tuple)):
        return draw_normal(embeds.shape, generator, embeds.device, torch.float32)
    noise = torch.zeros(embeds.shape, dtype=torch.float32, device=embeds.device)
    for b, (n, gen) in enumerate(zip(batch.lengths.tolist(), generator)):
        noise[b, :n] = draw_normal((1, n, embeds.shape[-1]), gen, embeds.device, torch.float32)[0]
    return noise


def _probe_logits(model, embeds: torch.Tensor, batch: ScoringBatch, sites,
                  prefix: _Prefix | None) -> torch.Tensor:
    """(B, K, V) logits at the probe sites for input embeddings `embeds` (B, L, D); with a
    prefix, each row runs from its first scored column on, on top of the prefix's cache."""
    if prefix is None:
        return logits_at(model, sites.positions, inputs_embeds=embeds,
                         attention_mask=batch.attention_mask)
    # Probe sites lie after the first scored position; those of rows without an answer span
    # may not, and are clamped (their objective is left out).
    inputs, positions = prefix.continuation(embeds, batch, sites.positions)
    return logits_at(model, positions, **inputs)


def _gradient_times_input(model, embeds: torch.Tensor, noise: torch.Tensor,
                          batch: ScoringBatch, sites, clean: torch.Tensor,
                          probe: str, prefix: _Prefix | None) -> torch.Tensor:
    """(B, L) float32 |<dJ/de_t, e_t>| for one noise draw; rows are independent, so the
    gradient of the sum of their J gives every row its own gradient. The leaf and the noise
    are float32 whatever the model's dtype: e + xi is rounded to it once, at the model's input,
    and the gradient comes back as float32."""
    with torch.enable_grad():
        leaf = embeds.detach().float().requires_grad_(True)  # (B, L, D) float32
        noisy = (leaf + noise).to(embeds.dtype)
        value = probe_values(_probe_logits(model, noisy, batch, sites, prefix), sites, probe)
        objective = probe_divergence(clean, value, probe)  # (B,)
        # Rows without a span read meaningless sites: leave them out of the objective.
        objective = torch.where(sites.has_answer, objective, torch.zeros_like(objective))
        (grad,) = torch.autograd.grad(objective.sum(), leaf)
    return (grad * embeds.float()).sum(dim=-1).abs()  # (B, L)
