"""The OAR-P mask: what a perturbed position holds (METHOD.md section 4 uses the pad token).

The pad token is the paper's choice, but on models whose pad is the end-of-turn token (the
eos `<|im_end|>` of SmolLM2-Instruct) it ends the turn mid-reasoning, a degenerate
perturbation. `oar_p`, `oar_p_step` and their references take `mask`:

- "pad" (default): the batch's pad token id, as in the paper;
- an int: that token id (`attribute()` and the command line also take the names "eos" and
  "unk" and resolve them with the tokenizer, `resolve_token_name`);
- "zero": the position's input embedding is the zero vector;
- "mean": the mean input embedding over the vocabulary (the mean row of the embedding
  matrix, times any scale the embedding module applies);
- "resample": a token drawn from the model's own clean next-token distribution at the
  position, p(x_t | x_<t) from the clean logits at t - 1 (`resample_ids`), one draw per
  position from `generator`, shared by the fast engine and the reference;
- "delete": the token is dropped and the gap closed: the rest of the row moves one place left,
  positions and probe sites with it.

The fast engines are id-based: `substitute` gives every position the id it takes when it is
perturbed; an embedding mask puts a sentinel id there (the vocabulary size) which
`lm.embedding_override` turns into the mask vector inside the model. For "delete" a copy's
window of new tokens leaves the position out and the later tokens take the positions one
place earlier (`window_columns`, `window_sites`): the clean cache before the window is still
exact, since nothing before t moves, and the window starts one position before min(t, q_1),
where the first probe site lands when t = q_1. The references build their inputs
independently (`perturbed_row`: `inputs_embeds` for an embedding mask, the row with the token
cut out for "delete"), so fast == reference is a real check.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..errors import InputError
from ..inputs.batch import ScoringBatch
from ..models.lm import embedding_override, eval_mode, logits_at, scoreable
from .probes import ProbeSites

MASKS: tuple[str, ...] = ("pad", "zero", "mean", "resample", "delete")
EMBEDDING_MASKS = frozenset({"zero", "mean"})
TOKEN_NAMES: tuple[str, ...] = ("eos", "unk")  # resolved with a tokenizer (`resolve_token_name`)
_VOCAB_CHUNK = 4096  # embedding rows per lookup when averaging the vocabulary


def check_mask(mask) -> str | int:
    """`mask` if it is one of MASKS or a token id (an int >= 0), else a one-line InputError."""
    is_id = isinstance(mask, int) and not isinstance(mask, bool) and mask >= 0
    if not is_id and not (isinstance(mask, str) and mask in MASKS):
        raise InputError(f"mask={mask!r} is not one of {', '.join(MASKS)} or a token id "
                         "(an int >= 0)")
    return mask


def resolve_token_name(mask, tokenizer) -> str | int:
    """`mask` with the names "eos" / "unk" replaced by the tokenizer's token id; a one-line
    InputError when the tokenizer has no such token. Other values are returned checked."""
    if isinstance(mask, str) and mask in TOKEN_NAMES:
        token_id = getattr(tokenizer, f"{mask}_token_id", None)
        if not isinstance(token_id, int):
            raise InputError(f"mask={mask!r}: the tokenizer has no {mask} token; pass a token id "
                             f"or one of {', '.join(MASKS)}")
        return token_id
    return check_mask(mask)


def resolve_mask_names(method_params: dict, tokenizer) -> dict:
    """`method_params` ({method: {keyword: value}}) with every `mask` resolved by
    `resolve_token_name`; the other values as given (a new dict, the input untouched)."""
    return {method: ({**params, "mask": resolve_token_name(params["mask"], tokenizer)}
                     if "mask" in params else params)
            for method, params in method_params.items()}


@dataclass(frozen=True)
class Substitute:
    """What every position of a (B, L) batch takes when it is perturbed.

    ids:      (B, L) long, the id put at a perturbed position: a token id, or `sentinel` for
              an embedding mask (read only at perturbed positions).
    vector:   (D,) the embedding of an embedding mask ("zero", "mean"), else None.
    sentinel: the id standing for `vector` (the vocabulary size), else None.
    delete:   the position is dropped instead ("delete"; `ids` then holds the pad id).
    """

    ids: torch.Tensor
    vector: torch.Tensor | None = None
    sentinel: int | None = None
    delete: bool = False

    def override(self, model):
        """The context in which the fast engine's forwards read `sentinel` as `vector`."""
        if self.vector is None:
            return contextlib.nullcontext()
        return embedding_override(model, self.sentinel, self.vector)


def substitute(model, batch: ScoringBatch, mask="pad", generator=None) -> Substitute:
    """The Substitute of `mask` on `batch` (rows on the model's device). "resample" draws one
    token for every scoreable position (`lm.scoreable`) with `generator`: one
    torch.Generator, or B of them (row b draws from generator[b] as it would alone)."""
    check_mask(mask)
    ids = batch.input_ids
    vocab = model.get_input_embeddings().weight.shape[0]
    if isinstance(mask, int):
        if mask >= vocab:
            raise InputError(f"mask={mask} is not a token id of this model (its vocabulary has "
                             f"{vocab} ids)")
        return Substitute(torch.full_like(ids, mask))
    if mask == "resample":
        return Substitute(resample_ids(model, batch, scoreable(batch), generator))
    if mask in EMBEDDING_MASKS:
        return Substitute(torch.full_like(ids, vocab), mask_vector(model, mask), vocab)
    return Substitute(torch.full_like(ids, batch.pad_token_id), delete=mask == "delete")


def mask_vector(model, mask: str) -> torch.Tensor:
    """(D,) the input embedding of an embedding mask, in the model's dtype: zeros for "zero";
    for "mean" the float32 mean of the embedding module's output over every id."""
    embedding = model.get_input_embeddings()
    vocab, dim = embedding.weight.shape
    if mask == "zero":
        return torch.zeros(dim, dtype=embedding.weight.dtype, device=embedding.weight.device)
    total = torch.zeros(dim, dtype=torch.float32, device=embedding.weight.device)
    with torch.no_grad():
        for start in range(0, vocab, _VOCAB_CHUNK):
            chunk = torch.arange(start, min(start + _VOCAB_CHUNK, vocab), device=total.device)
            total += embedding(chunk).float().sum(dim=0)
    return (total / vocab).to(embedding.weight.dtype)


def resample_ids(model, batch: ScoringBatch, positions: torch.Tensor,
                 generator=None) -> torch.Tensor:
    """(B, L) long: at each True position t of `positions` (B, L) bool, a token drawn from
    softmax(clean logits at t - 1) (float32); the pad id elsewhere and at t = 0, which has no
    prefix to predict it. One forward per row over its prefix; row b draws its positions in
    order from `generator` (one torch.Generator, or B of them; None: torch's global RNG)."""
    n_rows = batch.input_ids.shape[0]
    if isinstance(generator, (list, tuple)) and len(generator) != n_rows:
        raise InputError(f"{len(generator)} generators for {n_rows} rows; pass one generator, "
                         "or one per row")
    generators = list(generator) if isinstance(generator, (list, tuple)) else [generator] * n_rows
    out = torch.full_like(batch.input_ids, batch.pad_token_id)
    with torch.no_grad(), eval_mode(model):
        for row, gen in enumerate(generators):
            ts = positions[row].nonzero().flatten()
            ts = ts[ts > 0]
            if ts.numel() == 0:
                continue
            width = int(ts.max())  # the logits at t - 1 read tokens [0, t) only
            ids = batch.input_ids[row:row + 1, :width]
            attention = batch.attention_mask[row:row + 1, :width]
            logits = logits_at(model, (ts - 1)[None], input_ids=ids, attention_mask=attention)
            probs = torch.softmax(logits[0].float(), dim=-1)  # (n, V) from logits (1, n, V)
            source = gen.device if gen is not None else probs.device
            drawn = torch.multinomial(probs.to(source), 1, generator=gen).flatten()  # (n,)
            out[row, ts] = drawn.to(out.device)
    return out


def perturbed_row(model, sub: Substitute, row: int, ids: torch.Tensor,
                  attention_mask: torch.Tensor, at: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """The reference's inputs of one row with the positions `at` perturbed, built without the
    fast engine's hooks.

    ids, attention_mask: (1, L) the clean row; at: (L,) bool. Returns (keyword arguments of
    the model's forward, (L,) long index of each clean position in the perturbed sequence):
    the identity, or for "delete" the kept positions renumbered (a deleted position gets its
    predecessor's index; the caller must not read it).
    """
    index = torch.arange(ids.shape[1], device=ids.device)
    if sub.delete:
        keep = ~at
        return (dict(input_ids=ids[:, keep], attention_mask=attention_mask[:, keep]),
                torch.cumsum(keep.long(), 0) - 1)
    if sub.vector is not None:
        embeds = model.get_input_embeddings()(ids)  # (1, L, D)
        embeds = torch.where(at[None, :, None], sub.vector.to(embeds), embeds)
        return dict(inputs_embeds=embeds, attention_mask=attention_mask), index
    perturbed = ids.clone()
    perturbed[0, at] = sub.ids[row, at]
    return dict(input_ids=perturbed, attention_mask=attention_mask), index


# --------------------------------------------------------------------------------------------
# Windows of the fast engines: which clean positions a copy recomputes, and where its probe
# sites land, with or without deleted positions.
# --------------------------------------------------------------------------------------------

def window_columns(start: torch.Tensor, end: torch.Tensor, drop: torch.Tensor | None,
                   width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The new tokens of R copies: the clean positions [start, end) of each, less `drop`.

    start, end: (R,) long; drop: (R, W) bool, positions each copy deletes (all >= its start),
    or None; width: W, the clean rows' width.
    Returns (src, valid, upto): src (R, Q) long, the clean position of each new token (padding
    repeats the copy's last one); valid (R, Q) bool, real new tokens; upto (R, W) long, the
    copy's new tokens at clean positions <= p. New token j of a copy sits at position
    start + j: a position after a deleted one moves one place left per deletion.
    """
    cols = torch.arange(width, device=start.device)[None, :]  # (1, W)
    keep = (cols >= start[:, None]) & (cols < end[:, None])  # (R, W)
    if drop is not None:
        keep &= ~drop
    upto = keep.long().cumsum(dim=1)  # (R, W)
    counts = upto[:, -1]  # (R,)
    # Q >= 1 even when a copy deleted its whole window (`window_sites` then refuses it).
    j = torch.arange(max(int(counts.max()), 1), device=start.device)[None, :]  # (1, Q)
    valid = j < counts[:, None]  # (R, Q)
    copies, kept = keep.nonzero(as_tuple=True)
    src = torch.zeros(valid.shape, dtype=torch.long, device=start.device)
    src[copies, upto[copies, kept] - 1] = kept
    last = src.gather(1, (counts - 1).clamp_min(0)[:, None])  # (R, 1)
    return torch.where(valid, src, last), valid, upto


def window_sites(sites: ProbeSites, upto: torch.Tensor) -> ProbeSites:
    """ProbeSites (R, K) of R copies as indices into their new tokens: q_k -> (new tokens at
    clean positions <= q_k) - 1, the place of the token before a_k once the copy's deletions
    closed up. `upto`: (R, W) from `window_columns`. Raises InputError if a site fell before
    the window (every position before the answer was deleted)."""
    positions = upto.gather(1, sites.positions) - 1  # (R, K)
    if bool((positions < 0)[sites.valid].any()):
        raise InputError("mask='delete' would delete every token before the answer; score "
                         "fewer positions or use another mask")
    return ProbeSites(positions.clamp_min(0), sites.targets, sites.valid)
