"""The perturbation engine of OAR-P (METHOD.md section 4): token, step and hierarchical OAR-P
are this engine run on different perturbation units.

A *unit* is a set of scored positions of one row masked together in one perturbed copy (a
token for `oar_p`, a step for `oar_p_step`); its importance I is how far the outcome probe
moves, KL(P || P^(unit)) for `lt` / `as_mean`, max(phi - phi^(unit), 0) for `as_joint`, and it
goes to every position of the unit. Units are given as a (B, L) long tensor, the unit id of
each position (-1: not perturbed); a copy is planned at its unit's first position, its anchor.

`masked_reference` is the definition run literally: one full forward per unit. `perturb` gives
the same numbers with far less work, using three exact facts:
- a substitution at t changes nothing before t, so the clean key/value cache of positions < s
  is reused and only [s, end) is recomputed, where s <= the anchor is the copy's window start
  (every position of a unit lies at or after its anchor, so inside the window);
- nothing after the last probe position q_K can reach the probe: `end` = q_K + 1;
- only the probe positions are projected to the vocabulary (`logits_to_keep`).
Copies are batched into forwards in one of two layouts, which give the same numbers:
- padded: each copy is a row holding a reused (left-padded) cache and a (right-padded) window
  of new tokens, with explicit position ids; which copies share a forward is decided by a cost
  model (see `plan_row`, `pack_chunks`);
- packed (`oar_p_packed`): the copies' windows concatenated into one row without padding, on
  the clean cache of their rows, under a block mask; for models whose attention takes one.
A forward's tokens, cache plus new tokens over all its rows, stay within `max_batch_tokens`,
by default sized from the memory bound of `budget` (the device's free memory; on CPU a stated
share of the RAM).

`perturb` runs one clean pass per group of rows (`Clean`, its key/value cache kept) and hands
each group to the method as a `RowGroup`, whose `score(units)` plans, packs and runs the
copies of any units on that one clean pass; a method may call it more than once (hierarchical
OAR-P scores steps, then tokens inside the chosen steps, on the same cache).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
from transformers import DynamicCache

from ..defaults import PROBE
from ..models.budget import auto_batch_tokens, row_groups
from ..errors import InputError
from ..inputs.batch import ScoringBatch
from ..compat.transformers import plain_kv, with_cache
from ..models.lm import check_positions, eval_mode, float32_head, logits_at, model_device
from .masks import check_mask, perturbed_row, substitute, window_columns, window_sites
from .oar_p_packed import mask_kind, pack_copies, packed_key_limit, plan_copies, score_packed
from .probes import ProbeSites, check_probe, probe_importance, probe_sites, probe_values

# A forward has a fixed cost that does not shrink with its size: every weight is read from
# memory once (plus Python and kernel launches). In tokens of compute that is about
# bytes_per_param * FLOPS / (2 * memory bandwidth), whatever the model size: ~16-32 for fp32
# on a CPU, a few hundred for bf16 on a GPU. It is what batching copies into one forward saves.
OVERHEAD_TOKENS_CPU = 16
OVERHEAD_TOKENS_ACCELERATOR = 256
_SHIFTABLE_LAYERS = frozenset({"full_attention", "sliding_attention"})
PACKINGS = ("auto", "packed", "padded")
# Device types where packing="auto" packs (when the model takes it). Empty until a run of
# bench/bench_oar_p.py shows packed faster there: on a GPU its dense block mask costs attention
# over every key of the forward, against the padded rows' padding (docs/benchmarks.md).
AUTO_PACKED_DEVICES: frozenset[str] = frozenset()


# --------------------------------------------------------------------------------------------
# The reference: the definition, one full forward per unit.
# --------------------------------------------------------------------------------------------

def masked_reference(model, batch: ScoringBatch, groups: torch.Tensor, probe: str = PROBE, *,
                     mask="pad", generator=None) -> torch.Tensor:
    """The brute-force definition for any perturbation unit: for each row and group g, one full
    forward with every position of g masked (`masks.perturbed_row`); g's importance goes to
    all of them.

    groups: (B, L) long, the group of each position (a token for OAR-P, a step for step-level
    OAR-P), -1 where nothing is perturbed. mask, generator: what a perturbed position holds
    (`masks`: "pad", a token id, "zero", "mean", "resample" drawn with `generator`, "delete").
    Returns (B, L) float32 on the batch's device, 0 on positions of no group and on rows
    without an answer span.
    """
    check_probe(probe)
    check_mask(mask)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    groups = groups.to(work.input_ids.device)
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    with torch.no_grad(), eval_mode(model), float32_head(model):
        sub = substitute(model, work, mask, generator)
        for row in range(work.input_ids.shape[0]):
            if not bool(sites.has_answer[row]):
                continue
            row_sites = sites.select(torch.tensor([row], device=out.device))
            ids, attention = work.input_ids[row:row + 1], work.attention_mask[row:row + 1]
            logits = model(ids, attention_mask=attention).logits  # (1, L, V)
            clean = probe_values(logits[:, row_sites.positions[0]], row_sites, probe)
            for g in sorted(set(groups[row].tolist()) - {-1}):
                at = groups[row] == g
                inputs, index = perturbed_row(model, sub, row, ids, attention, at)
                logits = model(**inputs).logits  # (1, L', V)
                at_sites = row_sites.positions[0]  # (K,)
                if sub.delete:
                    at_sites = _sites_after_delete(at_sites, index, at)
                value = probe_values(logits[:, at_sites], row_sites, probe)
                out[row, at] = probe_importance(clean, value, probe)[0]
    return out.to(batch.input_ids.device)


def _sites_after_delete(positions: torch.Tensor, index: torch.Tensor,
                        at: torch.Tensor) -> torch.Tensor:
    """(K,) the probe sites q_k = a_k - 1 (`positions`, (K,)) once the positions `at` (L,)
    bool are deleted and clean position p moved to index[p] (`index`, (L,)): the position
    before a_k's new place. Neither an answer token nor everything before it may go."""
    answers = positions + 1
    if bool(at[answers].any()) or bool((index[answers] < 1).any()):
        raise InputError("mask='delete' would delete an answer token or every token before "
                         "the answer; score fewer positions or use another mask")
    return index[answers] - 1


# --------------------------------------------------------------------------------------------
# The fast engine: the driver and the row group it hands to a method.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Chunk:
    """Perturbed copies of one row that share a window [start, end) of recomputed tokens."""

    row: int  # index into the row group
    start: int  # s: first recomputed position; <= every anchor and <= q_1
    end: int  # q_K + 1: the window stops after the last probe position
    positions: tuple[int, ...]  # the copies' anchors (their units' first positions), one each

    @property
    def width(self) -> int:
        return self.end - self.start


@dataclass
class Clean:
    """The clean pass of a row group: its tokens, key/value cache and probe values, and what
    its perturbed copies change."""

    input_ids: torch.Tensor  # (G, W)
    attention_mask: torch.Tensor  # (G, W)
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, keys and values (G, H, W, D)
    sites: ProbeSites  # (G, K)
    value: torch.Tensor  # (G, V) log-probs or (G,) phi
    replace: torch.Tensor  # (G, W) the id each position takes when perturbed (masks.Substitute)
    delete: bool = False  # perturbed positions are deleted instead (mask="delete")
    units: torch.Tensor | None = None  # (G, W) long unit ids (-1 none); None: one per position

    def perturbed(self, row: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """(R, W) bool: the positions each of R copies masks, the unit of its anchor.
        row, anchor: (R,) long, the copy's row within the group and its unit's first position."""
        width = self.input_ids.shape[1]
        if self.units is None:
            return torch.arange(width, device=row.device)[None, :] == anchor[:, None]
        return self.units[row] == self.units[row, anchor][:, None]


@dataclass
class RowGroup:
    """One group of rows on its clean pass: what a method's `score_group` gets from `perturb`.

    rows: (G,) long, the group's rows in the batch; units: (G, W) long, the units the method
    asked for on those rows (its `units` argument of `perturb`, cut to the group's width W =
    its longest q_K + 1); step_ids: (G, W) long or None, the batch's steps on those rows.
    """

    model: torch.nn.Module
    clean: Clean
    rows: torch.Tensor
    units: torch.Tensor
    step_ids: torch.Tensor | None
    probe: str
    budget: int
    overhead: float
    kind: str | None  # the packed mask kind, or None for the padded path
    pad_token_id: int
    bar: object

    @property
    def width(self) -> int:
        return self.clean.input_ids.shape[1]

    def score(self, units: torch.Tensor) -> torch.Tensor:
        """One perturbed copy per unit of `units` (G, W) long (-1: none), each masking every
        position of its unit, all on this group's clean pass.
        Returns (G, W) float32: each unit's importance on each of its positions, 0 elsewhere."""
        clean = dataclasses.replace(self.clean, units=units)
        anchors = unit_anchors(units)  # (G, W)
        n_copies = int(anchors.sum())
        self.bar.total = max(self.bar.total or 0, self.bar.n + n_copies)
        out = torch.zeros(units.shape, dtype=torch.float32, device=units.device)
        for index, anchor, importance in _forwards(self, clean, anchors):
            hit = units[index] == units[index, anchor][:, None]  # (R, W)
            rows, cols = hit.nonzero(as_tuple=True)
            out[index[rows], cols] = importance[rows].float()
            self.bar.update(len(index))
        return out


def perturb(model, batch: ScoringBatch, units: Callable[[ScoringBatch, torch.Tensor], torch.Tensor],
            score_group: Callable[[RowGroup], torch.Tensor] | None = None, *,
            probe: str = PROBE, max_batch_tokens: int | None = None, generator=None,
            progress: bool = False, overhead_tokens: int | None = None, packing: str = "auto",
            mask="pad") -> torch.Tensor:
    """The fast engine: importances of perturbation units, equal to `masked_reference` up to
    float rounding.

    batch:       B rows of width L (right-padded), on any device.
    units:       (work batch on the model's device, reachable (B, L) bool) -> (B, L) long unit
                 ids, -1 where nothing is perturbed; only reachable positions may be in a unit
                 (`reachable_positions`: scored, in a row with a span, up to q_K).
    score_group: RowGroup -> (G, W) float32 importances of the group's rows; default
                 `group.score(group.units)`, one copy per unit.
    The other arguments are `oar_p`'s. Returns (B, L) float32 on the batch's device, 0 on the
    rows and positions no unit covers.
    """
    check_probe(probe)
    check_mask(mask)
    check_positions(model, batch)
    work = batch.to(model_device(model))
    sites = probe_sites(work)
    unit_ids = units(work, reachable_positions(work, sites))  # (B, L)
    ends = (sites.last + 1).tolist()
    # Longest rows first, so that the rows of one clean pass need little padding.
    rows = sorted((unit_ids >= 0).any(dim=1).nonzero().flatten().tolist(), key=lambda r: -ends[r])
    budget = batch_budget(model, sites, [ends[row] for row in rows], max_batch_tokens)
    kind = _packing_kind(model, packing, work.input_ids.device)
    if overhead_tokens is None:
        on_cpu = work.input_ids.device.type == "cpu"
        overhead_tokens = OVERHEAD_TOKENS_CPU if on_cpu else OVERHEAD_TOKENS_ACCELERATOR
    score_group = score_group or (lambda group: group.score(group.units))
    out = torch.zeros(work.input_ids.shape, dtype=torch.float32, device=work.input_ids.device)
    bar = progress_bar(progress, int(unit_anchors(unit_ids).sum()))
    with torch.no_grad(), eval_mode(model):
        sub = substitute(model, work, mask, generator)
        for group in row_groups(rows, ends, budget):
            clean = clean_pass(model, work, sites, group, probe, sub.ids, sub.delete)
            index = torch.tensor(group, device=out.device)
            width = clean.input_ids.shape[1]
            steps = None if work.step_ids is None else work.step_ids[index, :width]
            row_group = RowGroup(model, clean, index, unit_ids[index, :width], steps, probe,
                                 budget, overhead_tokens, kind, work.pad_token_id, bar)
            with sub.override(model):
                out[index, :width] = score_group(row_group)
    bar.close()
    return out.to(batch.input_ids.device)


def _forwards(group: RowGroup, clean: Clean, anchors: torch.Tensor):
    """Yield (index, anchors, importances), (R,) each, of every forward over the copies
    anchored at `anchors` (G, W) bool on the group's clean pass `clean`."""
    lead = int(clean.delete)  # a deletion at q_1 moves the first probe site to q_1 - 1
    model, sites = group.model, clean.sites
    if group.kind is not None:
        width = group.width
        copies = [copy for index in range(len(group.rows))
                  for copy in plan_copies(index, anchors[index], int(sites.positions[index, 0]),
                                          int(sites.last[index]) + 1, lead)]
        limit = min(group.budget, packed_key_limit(model, width, group.overhead))
        for forward in pack_copies(copies, width, limit, max(1, group.budget // width)):
            yield score_packed(model, clean, forward, group.probe, group.kind)
        return
    chunks = [chunk for index in range(len(group.rows))
              for chunk in plan_row(index, anchors[index], sites, index, group.budget,
                                    group.overhead, lead)]
    for forward in pack_chunks(chunks, group.budget, group.overhead, cache_slots_may_shift(model)):
        yield _score_forward(model, clean, forward, group.probe, group.pad_token_id)


def unit_anchors(units: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: the first position of each unit of `units` (B, L) long (-1: none) in its
    row, where its copy is planned."""
    n_rows, width = units.shape
    position = torch.arange(width, device=units.device).expand(n_rows, width)
    valid = units >= 0
    key = units.clamp_min(0)
    n_units = int(key.max()) + 1 if units.numel() else 1
    first = torch.full((n_rows, n_units), width, dtype=torch.long, device=units.device)
    first = first.scatter_reduce(1, key, torch.where(valid, position, width), "amin")
    return valid & (first.gather(1, key) == position)


def reachable_positions(batch: ScoringBatch, sites: ProbeSites) -> torch.Tensor:
    """(B, L) bool: scored positions of rows with a span, up to the last probe position q_K.
    A substitution after q_K cannot reach the probe (causality): importance 0, no forward."""
    positions = torch.arange(batch.input_ids.shape[1], device=batch.input_ids.device)
    before_end = positions[None, :] <= sites.last[:, None]
    return batch.scored_mask & sites.has_answer[:, None] & before_end


def batch_budget(model, sites: ProbeSites, ends: list[int], max_batch_tokens: int | None) -> int:
    """The token budget of one forward: `max_batch_tokens`, checked, or when None the auto
    budget of `budget.auto_batch_tokens` for these rows (`ends`: each row's q_K + 1)."""
    if max_batch_tokens is None:
        width = int(sites.valid.sum(dim=1).max()) if sites.valid.numel() else 1
        max_batch_tokens = auto_batch_tokens(model, model_device(model), width,
                                             min(ends, default=1), max(ends, default=1))
    _check_budget(max_batch_tokens, ends)
    return max_batch_tokens


def _check_budget(max_batch_tokens: int, ends: list[int]) -> None:
    longest = max(ends, default=0)
    if not isinstance(max_batch_tokens, int) or max_batch_tokens < max(longest, 1):
        raise InputError(
            f"max_batch_tokens={max_batch_tokens!r} cannot hold one copy of the longest row "
            f"({longest} tokens up to its last answer token); pass max_batch_tokens >= {longest}"
        )


def _packing_kind(model, packing: str, device: torch.device) -> str | None:
    """The packed mask kind to use, or None for the padded path."""
    if packing not in PACKINGS:
        raise InputError(f"packing={packing!r} is not one of {', '.join(PACKINGS)}")
    kind = mask_kind(model) if packing != "padded" else None
    if packing == "packed" and kind is None:
        raise InputError("this model cannot take packed copies (its attention implementation "
                         "or layer kinds take no block mask); use packing='padded' or 'auto'")
    return kind if packing == "packed" or device.type in AUTO_PACKED_DEVICES else None


def cache_slots_may_shift(model) -> bool:
    """Whether copies with different prefix lengths may share a forward.

    Sharing left-pads the reused caches, which shifts each row's key slots and query slots by
    the same amount: masks that depend only on query-key distances (causal, sliding window)
    stay exact. Layer kinds with absolute boundaries (chunked attention) do not; those models
    keep one window start per forward.
    """
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    layer_types = getattr(config, "layer_types", None) or []
    chunked = getattr(config, "attention_chunk_size", None) is not None
    return not chunked and all(kind in _SHIFTABLE_LAYERS for kind in layer_types)


def progress_bar(enabled: bool, total: int):
    from tqdm.auto import tqdm  # imported here: only progress reporting needs it

    return tqdm(total=total, disable=not enabled, desc="OAR-P", unit="copy")


def clean_pass(model, batch: ScoringBatch, sites: ProbeSites, group: list[int],
               probe: str, replace: torch.Tensor | None = None, delete: bool = False) -> Clean:
    """One forward of the group's rows up to their last probe position, keeping the cache.
    replace: (B, L) long, the id each position takes when perturbed (`masks.Substitute.ids`);
    None: the pad token everywhere. delete: perturbed positions are deleted instead."""
    index = torch.tensor(group, device=batch.input_ids.device)
    group_sites = sites.select(index)
    width = int(group_sites.last.max()) + 1
    input_ids = batch.input_ids[index, :width]  # (G, W)
    attention_mask = batch.attention_mask[index, :width]  # (G, W)
    # A cache without the config: every layer keeps all its keys, whatever the model's
    # sliding-window settings, so that any prefix can be reused.
    cache = DynamicCache()
    logits = logits_at(model, group_sites.positions, input_ids=input_ids,
                       attention_mask=attention_mask, **with_cache(model, cache), use_cache=True)
    kv = plain_kv(cache, width)
    if kv is None:
        kinds = sorted({type(layer).__name__ for layer in getattr(cache, "layers", [])})
        raise InputError(
            f"the fast OAR-P engine needs a plain key/value cache, but this model's cache "
            f"layers are {', '.join(kinds) or 'missing'}; use oar_p_reference for this model"
        )
    if replace is None:
        replace = torch.full_like(batch.input_ids, batch.pad_token_id)
    return Clean(input_ids, attention_mask, kv, group_sites,
                 probe_values(logits, group_sites, probe), replace[index, :width], delete)


def plan_row(index: int, anchors: torch.Tensor, sites: ProbeSites, row: int, budget: int,
             overhead: float, lead: int = 0) -> list[_Chunk]:
    """Split one row's copies, anchored at the True positions of `anchors` (L,) bool, into
    chunks of consecutive copies.

    A chunk of m copies anchored at t_i < ... < t_j costs `overhead + m * (end - s)` tokens with
    s = max(min(t_i, q_1) - lead, 0) (`lead`: 1 for "delete", whose first probe site may move
    to the position before t): every copy recomputes from the smallest t. Dynamic programming
    over the sorted anchors finds the cheapest split with m * end <= budget per chunk.
    """
    end = int(sites.last[row]) + 1
    first_probe = int(sites.positions[row, 0]) - lead
    ts = anchors.nonzero().flatten().tolist()
    max_copies = max(1, budget // end)
    best = [0.0] + [float("inf")] * len(ts)
    cut = [0] * (len(ts) + 1)
    for j in range(1, len(ts) + 1):
        for i in range(max(0, j - max_copies), j):
            cost = best[i] + overhead + (j - i) * (end - max(min(ts[i] - lead, first_probe), 0))
            if cost < best[j]:
                best[j], cut[j] = cost, i
    chunks, j = [], len(ts)
    while j > 0:
        i = cut[j]
        chunks.append(_Chunk(index, max(min(ts[i] - lead, first_probe), 0), end, tuple(ts[i:j])))
        j = i
    return chunks[::-1]


def pack_chunks(chunks: list[_Chunk], budget: int, overhead: float,
                mixed: bool) -> list[list[_Chunk]]:
    """Group chunks (of any rows) into forwards, widest window first.

    A chunk joins the current forward when the forward still fits the budget and the padding
    its narrower window adds, m * (Q - width) recomputed tokens, costs less than the forward
    it saves. Without `mixed` every chunk is its own forward.
    """
    if not mixed:
        return [[chunk] for chunk in chunks]
    forwards: list[list[_Chunk]] = []
    rows = prefix = 0
    for chunk in sorted(chunks, key=lambda c: -c.width):
        copies = len(chunk.positions)
        if forwards:
            window = forwards[-1][0].width
            new_prefix = max(prefix, chunk.start)
            fits = (rows + copies) * (new_prefix + window) <= budget
            if fits and copies * (window - chunk.width) <= overhead:
                forwards[-1].append(chunk)
                rows, prefix = rows + copies, new_prefix
                continue
        forwards.append([chunk])
        rows, prefix = copies, chunk.start
    return forwards


def _score_forward(model, clean: Clean, chunks: list[_Chunk], probe: str,
                   pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batched forward of R perturbed copies, each masking its anchor's unit
    (`Clean.perturbed`).

    Returns (index, anchors, importances), (R,) each: the copy's row within the group, its
    anchor and its unit's I."""
    device = clean.input_ids.device
    spec = [(c.row, c.start, c.end, t) for c in chunks for t in c.positions]
    row, start, end, pos = torch.tensor(spec, device=device).unbind(dim=1)  # (R,) each
    at = clean.perturbed(row, pos)  # (R, W), every position >= its anchor
    inputs, slots, copy_sites = window_inputs(clean, row, start, end, at, int(start.max()),
                                              pad_token_id)
    logits = logits_at(model, copy_sites.positions, **with_cache(model, slots), use_cache=True,
                       **inputs)  # (R, K, V)
    value = probe_values(logits, copy_sites, probe)
    return row, pos, probe_importance(clean.value[row], value, probe)


def window_inputs(clean: Clean, row: torch.Tensor, start: torch.Tensor, end: torch.Tensor,
                  at: torch.Tensor, prefix: int, pad_token_id: int):
    """Model inputs of R perturbed copies: each row is [left pad | clean cache of [0, s) |
    new tokens [s, end) with clean.replace on the positions `at` | right pad], P = `prefix`
    cache slots, Q new tokens; `pad_token_id` fills the (masked) padding. With clean.delete
    the positions `at` are left out instead and the later tokens close up
    (`masks.window_columns`).

    row, start, end: (R,) long; at: (R, W) bool over the clean positions, all >= start.
    Returns (forward kwargs, DynamicCache of P slots, the copies' ProbeSites (R, K) as indices
    into the new tokens).
    """
    device = row.device
    width = clean.input_ids.shape[1]
    src, new_valid, upto = window_columns(start, end, at if clean.delete else None, width)
    counts = new_valid.sum(dim=1)  # (R,)
    j = torch.arange(src.shape[1], device=device)[None, :]
    col = start[:, None] + torch.minimum(j, counts[:, None] - 1)  # (R, Q) positions; padding
    input_ids = torch.where(new_valid, clean.input_ids[row[:, None], src], pad_token_id)
    if not clean.delete:
        masked = new_valid & at.gather(1, src)  # (R, Q)
        input_ids = torch.where(masked, clean.replace[row[:, None], src], input_ids)
    new_mask = new_valid & clean.attention_mask[row[:, None], src].bool()  # (R, Q)

    slot = torch.arange(prefix, device=device)[None, :] - (prefix - start)[:, None]  # (R, P)
    cache_valid = slot >= 0
    slot = slot.clamp_min(0)
    cache_mask = cache_valid & clean.attention_mask[row[:, None], slot].bool()  # (R, P)
    attention_mask = torch.cat([cache_mask, new_mask], dim=1).long()  # (R, P + Q)

    cache = DynamicCache()
    if prefix > 0:
        # (G, H, W, D) -> (R, H, P, D); left-padding slots hold finite copies of position 0
        # (masked), never NaN-producing garbage that a zero attention weight would not stop.
        cache = DynamicCache(ddp_cache_data=[
            (keys.transpose(1, 2)[row[:, None], slot].transpose(1, 2),
             values.transpose(1, 2)[row[:, None], slot].transpose(1, 2))
            for keys, values in clean.kv
        ])
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=col)
    return inputs, cache, window_sites(clean.sites.select(row), upto)
