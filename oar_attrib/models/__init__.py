"""The language model: which one (the catalogue, the cache of converted folders, GGUF headers),
loading it, and running it (logits and eval mode, memory per forward, batched decoding).

`catalogue` names the models `--model` accepts, `cache` checks a converted folder, `gguf` a
.gguf file's header, `loading` loads a model and its tokenizer (`load_model`) or builds a seeded
random Qwen2; `lm` is the plumbing the importance methods share, `budget` sizes a forward from
the memory and the model's shape, `generation` decodes. Names load on first use (PEP 562,
`lazy.lazy_exports`): `oar models` reads the catalogue without loading torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # every export; each loads on first use
    from .catalogue import bundled_path
    from .loading import (BUNDLED, check_device, check_pair, check_weights, load_model, load_tokenizer,
                          random_qwen2, resolve)

__all__ = ["BUNDLED", "bundled_path", "check_device", "check_pair", "check_weights", "load_model",
           "load_tokenizer", "random_qwen2", "resolve"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
