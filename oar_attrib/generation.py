"""Batched decoding of responses (greedy or sampled), left-padded, stopping at EOS."""
from __future__ import annotations

import torch
from tqdm.auto import tqdm


@torch.no_grad()
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
    cut after the first EOS (kept) and without padding."""
    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    torch.manual_seed(seed)
    out: list[list[int]] = []
    starts = range(0, len(prompts), batch_size)
    for start in tqdm(starts, desc="generate", disable=not progress):
        chunk = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts[start : start + batch_size]]
        width = max(len(ids) for ids in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(chunk):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        gen = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            temperature=temperature if do_sample else None,
            top_k=None,
            top_p=None,
            num_return_sequences=num_return_sequences,
            pad_token_id=pad,
            eos_token_id=eos,
        )
        for row in gen[:, width:].tolist():
            cut = row.index(eos) + 1 if eos in row else len(row)
            out.append(row[:cut])
    return out


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) left-padded ids and attention mask: generation continues every row at L."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        attn[b, width - len(r) :] = 1
    return ids.to(device), attn.to(device)


def eos_ids(model, tokenizer) -> set[int]:
    """The ids that end a generation: the model's generation config, else the tokenizer's."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return set() if eos is None else {int(e) for e in (eos if isinstance(eos, list) else [eos])}
