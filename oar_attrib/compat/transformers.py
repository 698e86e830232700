"""Compatibility with transformers: the range supported (`TRANSFORMERS_MIN`, `TRANSFORMERS_MAX`,
pyproject.toml's), the private names the project reaches, all behind this one seam, and the
adaptors between the versions in that range.

transformers may rename a private name in any release; here each is listed, reached (the chat
template sandbox calls the functions below, never transformers' own private names) and
checked (`missing`, `check`), so that a rename is one line naming the names and the versions
this seam was checked on, not an AttributeError deep inside every encoding:

- `transformers.utils.chat_template_utils._compile_jinja_template`: the sandbox configuration
  (extensions, filters, globals) that `inputs.chat_template` copies into its bounded sandbox;
- `..._normalize_chat_messages`, `..._plain_template_data`, `..._alias_reasoning_fields`: the
  variables `apply_chat_template` gives a template (`template_variables`). They came later than
  the floor (`TEMPLATE_HELPERS`: 5.24.0, 5.22.2 and 5.21.0, so 5.0-5.20 has none of them, and
  verl's range 5.5.3-5.10 none); where one is missing the same function written here stands in
  (`_normalize`, `_plain`, `_alias`: 5.24.0's, tested equal to transformers' own), so a template
  sees the same variables on every version of the range;
- `transformers.Trainer._issue_warnings_after_load`: overridden by the trainer
  (`training.trainer.OARGRPOTrainer`, quiet about the weights it ties itself).

A GGUF conversion (`models.catalogue`) also drops a config's `_name_or_path` and
`_model_name_or_path` where it has them (absent ones are skipped, so they need no check);
a model's source is read through the public `config.name_or_path`.

The adaptors: the keyword a forward and `generate` take a KV cache by (`with_cache`: `cache`
since 5.24, `past_key_values` before) and the one an output returns it by (`cache_of`), the
per-layer keys and values of a cache (`plain_kv`), and whether a forward projects only chosen
positions of each row (`accepts_logits_to_keep`, `keeps_row_indices`).

`compat.private_names_missing` is the check every seam shares (`training.compat` lists TRL's).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Mapping, Sequence

from packaging.version import Version

from ..errors import LibraryVersionError
from . import private_names_missing, version_line

TRANSFORMERS_MIN, TRANSFORMERS_MAX = Version("5.0"), Version("6")  # supported: pyproject.toml's range
TRANSFORMERS_CHECKED_ON = "5.24.0"  # the transformers versions every name below was read against
CHAT_TEMPLATE_UTILS = "transformers.utils.chat_template_utils"
TRANSFORMERS_NAMES = (  # needed: a missing one is refused (`check`)
    f"{CHAT_TEMPLATE_UTILS}:_compile_jinja_template",
    "transformers:Trainer._issue_warnings_after_load",
)
# The template-variable helpers: reached where this transformers has them, else stood in for by
# this module's own (`_helper`); each with the first release that has it (read in the wheels of
# 5.0.0-5.24.0: `_plain_template_data` is in 5.22.2 but not 5.22.0 or 5.22.1).
TEMPLATE_HELPERS = {
    "_normalize_chat_messages": "5.24.0",
    "_plain_template_data": "5.22.2",
    "_alias_reasoning_fields": "5.21.0",
}


def check(names: Sequence[str] = TRANSFORMERS_NAMES) -> None:
    """LibraryVersionError, in one line, when the installed transformers lacks one of `names`."""
    missing = private_names_missing(names)
    if missing:
        raise LibraryVersionError(version_line("transformers", TRANSFORMERS_CHECKED_ON, missing))


def _chat_utils(*names: str) -> list:
    check([f"{CHAT_TEMPLATE_UTILS}:{name}" for name in names])
    module = importlib.import_module(CHAT_TEMPLATE_UTILS)
    return [getattr(module, name) for name in names]


def sandbox_environment():
    """The Jinja environment transformers compiles chat templates in (its configuration)."""
    (compile_template,) = _chat_utils("_compile_jinja_template")
    return compile_template("").environment


def template_variables(messages: Sequence[Mapping], special_tokens: Mapping) -> dict[str, Any]:
    """The variables transformers (5.24) gives a chat template for `messages` with a generation
    prompt, `special_tokens` (the tokenizer's special_tokens_map) among them."""
    normalize, plain, alias = (_helper("_normalize_chat_messages"), _helper("_plain_template_data"),
                               _helper("_alias_reasoning_fields"))
    chat = alias(plain(normalize(list(messages))))
    return {"messages": chat, "tools": None, "documents": None, "add_generation_prompt": True,
            **plain(dict(special_tokens))}


def _helper(name: str):
    """transformers' own `name` (one of TEMPLATE_HELPERS) where it has it, else this module's."""
    own = getattr(importlib.import_module(CHAT_TEMPLATE_UTILS), name, None)
    return own if own is not None else _STAND_INS[name]


# ------------------------------------------------------------------ the helpers, as 5.24.0 has them
# Written here for the versions before each (`TEMPLATE_HELPERS`); tests/test_compat.py holds
# each equal to transformers' own on the installed version.

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # the first: what templates read


def _alias(chat: list) -> list:
    """`_alias_reasoning_fields`: a message's reasoning under any of its names is also given as
    `reasoning_content` and `thinking` (gpt-oss templates read that)."""
    out = []
    for message in chat:
        if isinstance(message, dict):
            reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _dicts(value: Any) -> Any:
    """`_message_objects_to_dicts`: dataclasses and pydantic models (`model_dump`) as dicts, all
    the way down; anything else as it is."""
    import dataclasses

    if isinstance(value, Mapping):
        return {key: _dicts(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dicts(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_dicts(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _dicts(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _dicts(value.model_dump())
    return value


def _normalize(conversation: Any) -> list[dict]:
    """`_normalize_chat_messages`: the messages as dicts, the keys whose value is None dropped."""
    out = []
    for message in _dicts(getattr(conversation, "messages", conversation)):
        if not isinstance(message, dict):
            raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
        out.append({key: value for key, value in message.items() if value is not None})
    return out


def _plain(value: Any) -> Any:
    """`_plain_template_data`: what a template sees rebuilt of plain JSON types (a subclass of
    str, int or float as its base type, a numpy scalar as its item, a dataclass or pydantic
    model as a dict), anything else an inert "<TypeName>" (the sandbox does not know which
    methods of a rich object are dangerous)."""
    import dataclasses

    import numpy as np

    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, np.generic):
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


_STAND_INS = {"_normalize_chat_messages": _normalize, "_plain_template_data": _plain,
              "_alias_reasoning_fields": _alias}


# ------------------------------------------------------------------ adaptors between versions

def _forward_takes(model, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def accepts_logits_to_keep(model) -> bool:
    """Whether `model.forward` can project only selected positions to the vocabulary."""
    return _forward_takes(model, "logits_to_keep")


@functools.cache
def keeps_row_indices() -> bool:
    """Whether this transformers reads a (B, K) `logits_to_keep` as per-row positions (it
    gained `slice_logits_to_keep` for that); earlier versions index every row with all B * K."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep  # noqa: F401
    except ImportError:
        return False
    return True


def with_cache(model, cache) -> dict:
    """The keyword argument that hands `model` (its forward and `generate`) a KV cache: `cache`
    since transformers 5.24, `past_key_values` before it and in models written against it."""
    return {"cache" if _forward_takes(model, "cache") else "past_key_values": cache}


def cache_of(output):
    """The KV cache a forward returned (`output.cache` since transformers 5.24, whose
    `output.past_key_values` is a deprecated alias; `past_key_values` before)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def plain_kv(cache, width: int) -> list[tuple] | None:
    """Per layer the (B, H, width, D) keys and values a forward over `width` columns left in
    `cache`; None when a layer is not a plain key/value cache of every column (a sliding
    window that dropped keys, a recurrent state), which a prefix cannot be reused from."""
    import torch

    kv = []
    for layer in getattr(cache, "layers", None) or [None]:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or keys.dim() != 4 or keys.shape[-2] != width:
            return None
        kv.append((keys, values))
    return kv
