"""How much memory one attribution forward or backward may take, and how many tokens that is.

Every method sizes its forwards from one memory bound and the model's actual shape, so that
memory follows the model (its layers, widths, vocabulary) and not a fixed token count:

    bound = FRACTION * free                         on CUDA (`free_memory`)
    bound = min(CPU_FRACTION * available RAM, CPU_MEMORY_CAP)      on CPU (`cpu_memory_bound`)

the bytes a method's working set may take beside the model's own weights. Per token, with
`b` the model dtype's item size and T the keys an attention row sees (the longest row):

    cache       = layers * 2 * kv_heads * head_dim * b          every layer's key/value
    activations = (4 * hidden + 3 * intermediate + 2 * heads * T) * b
                                                  one layer's working set without autograd
                                                  (attention scores and their softmax included)
    saved       = layers * (SAVED_HIDDEN * hidden + SAVED_INTERMEDIATE * intermediate) * b
                                                  what autograd keeps for a backward (fused
                                                  attention keeps no (T, T) scores)
    logits      = kept * vocab * (b + 12)        the kept logits (model dtype, plus float32
                                                  copies for the softmax) per token

- a no-grad forward (OAR-P, entropy) holds cache + activations + logits per token;
- a forward with backward (OAR-G, GRAIL, IG) holds cache + activations + saved + logits.
Tokens per pass = bound / bytes per token, at least the longest row (one row must fit whatever
the memory) and at most MAX_BATCH_TOKENS. On CUDA `free` is `torch.cuda.mem_get_info` plus
what torch's allocator holds but does not use; FRACTION = 0.5 leaves room for what lives beside
a pass (OAR-P's clean cache) and for fragmentation. On CPU the cap keeps a method's peak
resident memory near the model's size plus CPU_MEMORY_CAP whatever the machine (a larger
forward is no faster on a CPU).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

CPU_BATCH_TOKENS = 16384  # rows the scoring pipeline hands a method per call on CPU (tokens)
MAX_BATCH_TOKENS = 1 << 20  # beyond this a forward is not faster, only the planner slower
FRACTION = 0.5
CPU_FRACTION = 0.25
CPU_MEMORY_CAP = 1 << 30  # 1 GiB
_FLOAT32_WORK = 12  # bytes per logit beyond the model dtype: float32 copy, log-softmax, terms
# Tensors autograd keeps per token and layer of a decoder layer, in units of hidden and
# intermediate width: norms' inputs and outputs, q/k/v (and their rotated copies), the
# attention output, the MLP's gate, up, activation and product. Measured: 1.63 MB per token of
# a backward through a SmolLM2-135M-shaped Llama (30 layers, 576 / 1536) in float32 at 100 and
# 300 tokens, against 1.85 MB by this rule (cache and activations included).
SAVED_HIDDEN = 12
SAVED_INTERMEDIATE = 5


def free_memory(device: torch.device) -> int | None:
    """Free bytes on `device`, or None where there is no such figure (CPU). On CUDA: what the
    driver has free plus what torch's allocator holds but does not use (it is reused first)."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + int(cached)
    return None


def available_ram() -> int | None:
    """Bytes of RAM the system can still give (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_memory_bound() -> int:
    """Bytes a method's working set may take on CPU: CPU_FRACTION of the available RAM, at
    most CPU_MEMORY_CAP (the cap alone where the available RAM is unknown)."""
    ram = available_ram()
    return CPU_MEMORY_CAP if ram is None else int(min(CPU_FRACTION * ram, CPU_MEMORY_CAP))


def memory_bound(device) -> int:
    """Bytes a method's working set may take on `device` (module docstring)."""
    free = free_memory(device)
    return cpu_memory_bound() if free is None else int(FRACTION * free)


def text_config(model):
    """The model's (text) config: the language model's own for multimodal models."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config


@dataclass(frozen=True)
class Shape:
    """The sizes of a model that set its memory per token."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    itemsize: int

    @classmethod
    def of(cls, model) -> "Shape":
        config = text_config(model)
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        return cls(layers=int(config.num_hidden_layers), hidden=hidden,
                   intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
                   heads=heads, kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
                   head_dim=int(getattr(config, "head_dim", None) or hidden // heads),
                   vocab=int(config.vocab_size), itemsize=next(model.parameters()).element_size())

    def cache(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.itemsize

    def activations(self, keys: int) -> int:
        return (4 * self.hidden + 3 * self.intermediate + 2 * self.heads * keys) * self.itemsize

    def saved(self) -> int:
        width = SAVED_HIDDEN * self.hidden + SAVED_INTERMEDIATE * self.intermediate
        return self.layers * width * self.itemsize

    def logits(self, kept: float) -> float:
        return kept * self.vocab * (self.itemsize + _FLOAT32_WORK)


def bytes_per_token(model, probe_width: int, shortest_window: int, keys: int = 0) -> float:
    """Bytes one token of an OAR-P forward takes (no autograd; module docstring): its cache,
    activations over `keys` keys, and the K = `probe_width` probe logits of a copy spread over
    the copy's tokens, at least `shortest_window` (>= 1) of them."""
    shape = Shape.of(model)
    return float(shape.cache() + shape.activations(keys)
                 + shape.logits(probe_width / max(shortest_window, 1)))


def backward_bytes_per_token(model, keys: int, kept: float = 0.0) -> float:
    """Bytes one token of a forward with backward takes (module docstring), `kept` logits per
    token (the probe sites over the row's tokens) included."""
    shape = Shape.of(model)
    return float(shape.cache() + shape.activations(keys) + shape.saved() + shape.logits(kept))


def tokens_within(bound: int, per_token: float, longest_row: int) -> int:
    """Tokens of one pass within `bound` bytes at `per_token` bytes each, between the longest
    row and MAX_BATCH_TOKENS."""
    return max(min(int(bound / per_token), MAX_BATCH_TOKENS), longest_row)


def auto_batch_tokens(model, device, probe_width: int, shortest_window: int,
                      longest_row: int) -> int:
    """The token budget of one OAR-P forward on `device` (module docstring); never below
    `longest_row`, since one copy of the longest row must fit whatever the memory."""
    per_token = bytes_per_token(model, probe_width, shortest_window, keys=longest_row)
    return tokens_within(memory_bound(device), per_token, longest_row)


def backward_tokens(model, device, longest_row: int, probe_width: int = 1) -> int:
    """The token budget of one forward with backward on `device` for rows of up to
    `longest_row` tokens with `probe_width` probe sites each (OAR-G, GRAIL, IG)."""
    per_token = backward_bytes_per_token(model, longest_row, probe_width / max(longest_row, 1))
    return tokens_within(memory_bound(device), per_token, longest_row)


# The share of the memory bound entropy's logits are sized to: the allocator's own temporaries
# (softmax's, the cache's growth) took up to 1.2x the estimate on a 128 MiB bound, 1 run in 3.
LOGIT_SHARE = 0.5


def logit_tokens(model, device, longest_row: int) -> int:
    """The token budget of one no-grad forward that keeps every token's logits (entropy),
    sized to LOGIT_SHARE of the bound."""
    shape = Shape.of(model)
    per_token = shape.cache() + shape.activations(longest_row) + shape.logits(1)
    return tokens_within(int(LOGIT_SHARE * memory_bound(device)), per_token, 1)


def row_groups(rows: list[int], ends: list[int], budget: int) -> list[list[int]]:
    """Consecutive rows whose pass, right-padded to the group's longest (`ends[row]` tokens
    each), fits `budget` tokens; a row longer than the budget goes alone."""
    groups: list[list[int]] = []
    for row in rows:
        if groups and (len(groups[-1]) + 1) * max(ends[r] for r in groups[-1] + [row]) <= budget:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


# A batch of `oar attribute` never holds more traces than this, so that even a tiny model's
# results reach the output (and the progress bar) regularly.
MAX_TRACES_PER_BATCH = 64


def trace_work(length: int, scored: int) -> int:
    """Tokens the forwards of one trace take at most for one method: OAR-P's clean row and one
    copy of it per scored position (a gradient method's passes are fewer)."""
    return length * (scored + 1)


def trace_batch_full(model, works: list[int], longest_row: int, max_batch_tokens: int | None = None) -> bool:
    """Whether a batch of traces whose `trace_work`s are `works` fills one pass's token budget
    (`max_batch_tokens`, else `backward_tokens` on the model's device for rows of up to
    `longest_row` tokens) or MAX_TRACES_PER_BATCH: then it is attributed and written. A trace
    larger than one pass is a batch alone, so on a real model each trace is written as soon as
    it is done and memory stays the methods' own (they split their passes by the same budget)."""
    if len(works) >= MAX_TRACES_PER_BATCH:
        return True
    budget = max_batch_tokens or backward_tokens(model, next(model.parameters()).device, longest_row)
    return sum(works) >= budget
