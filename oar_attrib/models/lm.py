"""Language-model plumbing shared by the importance methods.

Reading logits only where a probe needs them, running in eval mode without leaving a trace on
the model, checking that a batch fits the model's positions, the zero-outside-S contract of
importances, and seedable noise. Works with any Hugging Face causal LM
(`model(input_ids | inputs_embeds, attention_mask, ...) -> .logits`).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from ..compat.transformers import accepts_logits_to_keep, keeps_row_indices
from ..inputs.batch import ScoringBatch
from ..errors import InputError


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (where its inputs must live)."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next(model.parameters()).device


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run with dropout off, then give every submodule back its own training flag."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def check_positions(model: torch.nn.Module, batch: ScoringBatch) -> None:
    """Raise `InputError` if a row is longer than the model's position embeddings."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit is None or batch.input_ids.numel() == 0:
        return
    lengths = batch.lengths
    longest = int(lengths.max().item())
    if longest > limit:
        row = int(lengths.argmax().item())
        raise InputError(
            f"row {row} has {longest} tokens but the model has max_position_embeddings={limit}; "
            "truncate the response or drop that row before scoring"
        )


HALF_DTYPES = (torch.bfloat16, torch.float16)


@contextlib.contextmanager
def float32_head(model: torch.nn.Module) -> Iterator[None]:
    """Within the block the model projects to the vocabulary in float32 when its head is a
    half-precision linear layer (the hidden states stay the model's). The probes compare
    answer distributions that differ little (OAR-G's clean vs noisy KL is O(noise^2)): logits
    rounded to bf16 (steps of 0.0625 at 10) drowned OAR-G's signal, whose bf16 ranks agreed
    0.25 with float32 on SmolLM2 with the CPU's native bf16 kernels, 0.90 with this."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not (isinstance(head, torch.nn.Linear) and type(weight) is torch.nn.Parameter
            and weight.dtype in HALF_DTYPES):
        yield
        return

    def project(module, args, output):
        bias = None if module.bias is None else module.bias.float()
        return torch.nn.functional.linear(args[0].float(), module.weight.float(), bias)

    handle = head.register_forward_hook(project)
    try:
        yield
    finally:
        handle.remove()


def logits_at(model: torch.nn.Module, positions: torch.Tensor, **inputs) -> torch.Tensor:
    """Logits at chosen positions of each row, from one forward of `model(**inputs)`.

    positions: (B, K) long, indices into the sequence dimension of the forward's inputs.
    inputs:    keyword arguments of the model's forward (input_ids or inputs_embeds,
               attention_mask, position_ids, `compat.transformers.with_cache(model, cache)`, use_cache, ...).
    Returns (B, K, V), float32 (`float32_head`) or the model's dtype. Uses `logits_to_keep` so
    that only these positions are projected to the vocabulary (the projection is ~25% of a small
    model's forward); the model's own head runs, so soft-capping or scaling of logits is kept.
    """
    with float32_head(model):
        return _logits_at(model, positions, **inputs)


def _logits_at(model: torch.nn.Module, positions: torch.Tensor, **inputs) -> torch.Tensor:
    if accepts_logits_to_keep(model) and keeps_row_indices():
        return model(**inputs, logits_to_keep=positions).logits  # (B, K, V)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, torch.nn.Module):
        # Older transformers read a tensor `logits_to_keep` as one index for every row; instead
        # the head's input is gathered at each row's own positions before the projection.
        def gather(module, args):
            hidden = args[0]  # (B, L, D)
            kept = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
            return (kept, *args[1:])

        handle = head.register_forward_pre_hook(gather)
        try:
            return model(**inputs).logits  # (B, K, V)
        finally:
            handle.remove()
    logits = model(**inputs).logits  # (B, L, V)
    return logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))


def check_token_budget(max_batch_tokens) -> None:
    """Raise `InputError` unless `max_batch_tokens` is None (sized from memory) or an int >= 1."""
    if max_batch_tokens is not None and (not isinstance(max_batch_tokens, int)
                                         or isinstance(max_batch_tokens, bool) or max_batch_tokens < 1):
        raise InputError(f"max_batch_tokens={max_batch_tokens!r} must be a whole number of tokens "
                         ">= 1, or None to size it from the memory bound")


def input_embeddings(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, L, D) embeddings the model computes for `input_ids` (B, L), detached."""
    return model.get_input_embeddings()(input_ids).detach()


def scoreable(batch: ScoringBatch) -> torch.Tensor:
    """(B, L) bool: the positions an importance method fills, scored positions of rows that
    have an answer span. Every other position must be exactly 0."""
    return batch.scored_mask & batch.has_answer[:, None]


def keep_scoreable(values: torch.Tensor, batch: ScoringBatch) -> torch.Tensor:
    """`values` (B, L) as float32 on `scoreable(batch)`, exactly 0 elsewhere (even where
    `values` is NaN: a product with a 0/1 mask would keep the NaN)."""
    mask = scoreable(batch).to(values.device)
    return torch.where(mask, values.float(), torch.zeros((), device=values.device))


def draw_normal(shape, generator: torch.Generator | None, device, dtype) -> torch.Tensor:
    """Standard normal noise of `shape`, drawn on the generator's device (so a CPU generator
    gives the same numbers for a CUDA model), then moved to `device` / `dtype`."""
    source = generator.device if generator is not None else device
    noise = torch.randn(shape, generator=generator, device=source, dtype=torch.float32)
    return noise.to(device=device, dtype=dtype)


@contextlib.contextmanager
def embedding_override(model: torch.nn.Module, sentinel: int,
                       vector: torch.Tensor) -> Iterator[None]:
    """While open, the id `sentinel` (e.g. the vocabulary size, which has no row) embeds as
    `vector` (D,) in every forward of `model`: a pre-hook on the input-embedding module maps it
    to id 0 before the lookup, and a hook overwrites those rows of the output (B, L, D), after
    any scaling the module applies. Lets an id-based engine put an arbitrary embedding at a
    position. The hooks are removed on exit."""
    embedding = model.get_input_embeddings()
    hits: list[torch.Tensor] = []

    def before(module, args, kwargs):
        ids = args[0] if args else kwargs["input"]  # (B, L)
        hit = ids == sentinel
        hits.append(hit)
        ids = torch.where(hit, torch.zeros((), dtype=ids.dtype, device=ids.device), ids)
        return ((ids, *args[1:]), kwargs) if args else (args, {**kwargs, "input": ids})

    def after(module, args, output):
        hit = hits.pop()
        return torch.where(hit[..., None], vector.to(output), output)

    handles = [embedding.register_forward_pre_hook(before, with_kwargs=True),
               embedding.register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
