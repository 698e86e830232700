"""OAR-P forwards without padding: the perturbed copies of a forward packed into one sequence.

The padded path (`perturb._score_forward`) gives every copy a row of its own: a left-padded clean
cache and a right-padded window. Here the copies' windows are concatenated into one row of N
new tokens, with their own position ids, on top of the clean key/value cache of the rows they
come from (once per row, not once per copy: C cache slots). A block mask says who sees what:

    new token of copy c (row r, window start s_c) sees
        cache slot j of row r        iff j < s_c (and slot j is a real token)
        new token m                  iff m is of copy c and m <= it

which is exactly the causal view of its own perturbed sequence, so the result equals the padded
path's and the reference's up to float rounding. Each copy starts at its own
s_c = min(t, q_1), t its anchor (the first position of its unit, `perturb`): nothing is
recomputed that the definition does not need.

The mask is a dense (N, C + N) tensor through the model's own attention (SDPA: boolean; eager:
additive), so attention does N * (C + N) work of which only the blocks are needed; forwards
hold the number of new tokens that balances that work against a forward's fixed cost (see
`packed_key_limit`). Models whose layers are not all plain causal attention, or whose
attention implementation takes no 4D mask, use the padded path (`mask_kind`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..models.budget import text_config
from ..compat.transformers import with_cache
from ..models.lm import logits_at
from .masks import window_columns, window_sites
from .probes import probe_importance, probe_values

_PACKABLE_ATTENTION = {"sdpa": "bool", "eager": "additive"}


@dataclass(frozen=True)
class Copy:
    """One perturbed copy: its unit masked (the unit of its anchor t), positions [start, end)
    recomputed on the row's cache."""

    row: int  # index into the row group
    start: int
    end: int
    t: int  # the anchor: the first position of the copy's unit

    @property
    def width(self) -> int:
        return self.end - self.start


def mask_kind(model) -> str | None:
    """How this model takes a packed mask ("bool" or "additive"), or None if it cannot:
    another attention implementation, or layers that are not all plain causal attention
    (sliding windows or chunks would need their limits in the mask)."""
    config = text_config(model)
    if config is None:
        return None
    layer_types = getattr(config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types):
        return None
    if getattr(config, "use_sliding_window", False) or getattr(config, "attention_chunk_size", None):
        return None
    return _PACKABLE_ATTENTION.get(getattr(config, "_attn_implementation", None))


def attention_ratio(model) -> float:
    """A: tokens of linear-layer work per query-key pair of attention work, 2 * (parameters of
    a layer) FLOPs per token over 4 * heads * head_dim FLOPs per pair and layer: ~8300 for
    Qwen2-0.5B, ~9000 for Qwen2.5-1.5B."""
    config = text_config(model)
    layers = int(config.num_hidden_layers)
    embedding = config.vocab_size * config.hidden_size
    per_layer = max(sum(p.numel() for p in model.parameters()) - embedding, 1) / layers
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return 2 * per_layer / (4 * heads * head_dim)


def packed_key_limit(model, cache: int, overhead: float) -> int:
    """Keys of a packed forward over `cache` clean slots: C + N with N = sqrt(overhead * A).

    In linear-token units a forward of N new tokens costs overhead + N + N * (C + N) / A (its
    dense attention sees every key); per new token that is overhead / N + 1 + (C + N) / A,
    least at N = sqrt(overhead * A): ~360 new tokens per forward on CPU, ~1460 on a GPU for
    Qwen2-0.5B."""
    return cache + max(1, int((overhead * attention_ratio(model)) ** 0.5))


def plan_copies(index: int, reachable: torch.Tensor, first_probe: int, end: int,
                lead: int = 0) -> list[Copy]:
    """The copies of one row (group index `index`): one per True position t of `reachable`
    (L,), each recomputing [max(min(t, q_1) - lead, 0), end) (`lead`: as for
    `perturb.plan_row`)."""
    return [Copy(index, max(min(t, first_probe) - lead, 0), end, t)
            for t in reachable.nonzero().flatten().tolist()]


def pack_copies(copies: list[Copy], row_width: int, limit: int,
                max_copies: int) -> list[list[Copy]]:
    """Consecutive copies grouped into forwards of at most `limit` keys (C = row_width per
    distinct row plus the copies' windows) and `max_copies` copies (their probe logits). A copy
    that alone exceeds the limit goes alone."""
    forwards: list[list[Copy]] = []
    rows: set[int] = set()
    keys = 0
    for copy in copies:
        extra = copy.width + (0 if copy.row in rows else row_width)
        if forwards and keys + extra <= limit and len(forwards[-1]) < max_copies:
            forwards[-1].append(copy)
            rows.add(copy.row)
            keys += extra
            continue
        forwards.append([copy])
        rows, keys = {copy.row}, row_width + copy.width
    return forwards


def score_packed(model, clean, copies: list[Copy], probe: str, kind: str):
    """One packed forward of R copies on the clean pass `clean` (`perturb.Clean`), each with
    clean.replace (its mask) on the positions of its unit (`Clean.perturbed`), or with them
    left out when clean.delete.

    Returns (index, anchors, importances), (R,) each: the copy's row within the group, its
    anchor t and its unit's I."""
    device = clean.input_ids.device
    rows = sorted({c.row for c in copies})
    slot = {row: i for i, row in enumerate(rows)}
    spec = torch.tensor([(c.row, slot[c.row], c.start, c.end, c.t) for c in copies], device=device)
    row, row_slot, start, end, pos = spec.unbind(dim=1)  # (R,) each
    n_copies, row_width = len(copies), clean.input_ids.shape[1]
    at = clean.perturbed(row, pos)  # (R, W), every position >= its anchor
    src, valid, upto = window_columns(start, end, at if clean.delete else None, row_width)
    width = valid.sum(dim=1)  # (R,)
    copy_of = torch.repeat_interleave(torch.arange(n_copies, device=device), width)  # (N,)
    offset = torch.cumsum(width, 0) - width  # (R,) first packed index of each copy
    col = start[copy_of] + torch.arange(copy_of.shape[0], device=device) - offset[copy_of]  # (N,)
    source = src[valid]  # (N,) the clean position of each packed token
    input_ids = clean.input_ids[row[copy_of], source]  # (N,)
    if not clean.delete:
        masked = at[copy_of, source]  # (N,)
        input_ids = torch.where(masked, clean.replace[row[copy_of], source], input_ids)
    real = clean.attention_mask[row[copy_of], source].bool()  # (N,)

    n_rows = len(rows)
    row_index = torch.tensor(rows, device=device)
    key_slot = torch.arange(n_rows, device=device).repeat_interleave(row_width)  # (C,)
    key_pos = torch.arange(row_width, device=device).repeat(n_rows)  # (C,)
    key_real = clean.attention_mask[row_index].flatten().bool()  # (C,)
    q_slot, q_start = row_slot[copy_of], start[copy_of]
    sees_cache = (key_slot[None, :] == q_slot[:, None]) & (key_pos[None, :] < q_start[:, None])
    sees_cache &= key_real[None, :]  # (N, C)
    index = torch.arange(copy_of.shape[0], device=device)
    sees_new = (copy_of[None, :] == copy_of[:, None]) & (index[None, :] <= index[:, None])
    sees_new &= real[None, :] | (index[None, :] == index[:, None])  # (N, N); never an empty row
    mask = torch.cat([sees_cache, sees_new], dim=1)[None, None]  # (1, 1, N, C + N)
    if kind == "additive":
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(
            ~mask, torch.finfo(dtype).min)
    cache = DynamicCache(ddp_cache_data=[
        tuple(t[row_index].transpose(0, 1).reshape(1, t.shape[1], -1, t.shape[-1])
              for t in (keys, values))
        for keys, values in clean.kv
    ])  # per layer (1, H, C, D): the rows' caches one after the other

    copy_sites = window_sites(clean.sites.select(row), upto).shifted(-offset)  # (R, K) packed
    logits = logits_at(model, copy_sites.positions.reshape(1, -1), input_ids=input_ids[None],
                       attention_mask=mask, position_ids=col[None], **with_cache(model, cache),
                       use_cache=True)  # (1, R * K, V)
    value = probe_values(logits.reshape(n_copies, -1, logits.shape[-1]), copy_sites, probe)
    return row, pos, probe_importance(clean.value[row], value, probe)
