"""How many tokens one attribution forward may hold: the auto budget of OAR-P.

`max_batch_tokens=None` means: size the forwards from the device's free memory and the model's
shape. The rule (all sizes in bytes, `b` the model dtype's item size):

    per token  = cache + activations + logits
    cache      = layers * 2 * kv_heads * head_dim * b     every layer's key/value of the token
    activations= (4 * hidden + 3 * intermediate) * b      one layer's working set (no autograd)
    logits     = K * vocab * (b + 12) / shortest_window   the probe sites' logits of a copy (model
                 dtype, plus float32 copies for the softmax), spread over the copy's tokens,
                 at least `shortest_window` of them
    budget     = FRACTION * free / per token, between the longest row and MAX_BATCH_TOKENS

FRACTION = 0.5 leaves room for the clean pass's cache, which lives beside the forwards, and for
the allocator's fragmentation. On a CUDA device `free` is `torch.cuda.mem_get_info` plus the
memory torch's allocator has reserved but not allocated; elsewhere
(CPU, where a larger forward is no faster) the budget is CPU_BATCH_TOKENS.
"""
from __future__ import annotations

import torch

CPU_BATCH_TOKENS = 16384
MAX_BATCH_TOKENS = 1 << 20  # beyond this a forward is not faster, only the planner slower
FRACTION = 0.5
_FLOAT32_WORK = 12  # bytes per logit beyond the model dtype: float32 copy, log-softmax, terms


def free_memory(device: torch.device) -> int | None:
    """Free bytes on `device`, or None where there is no such figure (CPU). On CUDA: what the
    driver has free plus what torch's allocator holds but does not use (it is reused first)."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + int(cached)
    return None


def text_config(model):
    """The model's (text) config: the language model's own for multimodal models."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config


def bytes_per_token(model, probe_width: int, shortest_window: int) -> float:
    """Bytes one token of an OAR-P forward takes (see the module docstring).

    probe_width: K, the most probe sites of a row; shortest_window: the fewest tokens a copy
    brings (cache + window), at least 1.
    """
    config = text_config(model)
    itemsize = next(model.parameters()).element_size()
    hidden = int(config.hidden_size)
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    cache = config.num_hidden_layers * 2 * kv_heads * head_dim * itemsize
    activations = (4 * hidden + 3 * intermediate) * itemsize
    logits = probe_width * config.vocab_size * (itemsize + _FLOAT32_WORK) / max(shortest_window, 1)
    return float(cache + activations + logits)


def auto_batch_tokens(model, device, probe_width: int, shortest_window: int,
                      longest_row: int) -> int:
    """The token budget of one forward on `device` (see the module docstring); never below
    `longest_row`, since one copy of the longest row must fit whatever the memory."""
    free = free_memory(device)
    if free is None:
        return max(CPU_BATCH_TOKENS, longest_row)
    tokens = int(FRACTION * free / bytes_per_token(model, probe_width, shortest_window))
    return max(min(tokens, MAX_BATCH_TOKENS), longest_row)
