"""The private names of transformers the project reaches, all behind this one seam.

transformers may rename a private name in any release; here each is listed, reached (the chat
template sandbox calls the functions below, never transformers' own private names) and
checked (`missing`, `check`), so that a rename is one line naming the names and the versions
this seam was checked on, not an AttributeError deep inside every encoding:

- `transformers.utils.chat_template_utils._compile_jinja_template`: the sandbox configuration
  (extensions, filters, globals) that `inputs.chat_template` copies into its bounded sandbox;
- `..._normalize_chat_messages`, `..._plain_template_data`, `..._alias_reasoning_fields`: the
  variables `apply_chat_template` gives a template (`template_variables`);
- `transformers.Trainer._issue_warnings_after_load`: overridden by the trainer
  (`training.trainer.OARGRPOTrainer`, quiet about the weights it ties itself).

A GGUF conversion (`models.catalogue`) also drops a config's `_name_or_path` and
`_model_name_or_path` where it has them (absent ones are skipped, so they need no check);
a model's source is read through the public `config.name_or_path`.

`private_names_missing` is the check both seams share (`training.trl_private` lists TRL's).
"""
from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Mapping, Sequence

from ..errors import LibraryVersionError

TRANSFORMERS_CHECKED_ON = "5.24.0"  # the transformers versions every name below was read against
CHAT_TEMPLATE_UTILS = "transformers.utils.chat_template_utils"
TRANSFORMERS_NAMES = (
    f"{CHAT_TEMPLATE_UTILS}:_compile_jinja_template",
    f"{CHAT_TEMPLATE_UTILS}:_normalize_chat_messages",
    f"{CHAT_TEMPLATE_UTILS}:_plain_template_data",
    f"{CHAT_TEMPLATE_UTILS}:_alias_reasoning_fields",
    "transformers:Trainer._issue_warnings_after_load",
)


def _owner(module: str, path: list[str]):
    owner = importlib.import_module(module)
    for part in path:
        owner = getattr(owner, part, None)
    return owner


def _present(name: str) -> bool:
    """Whether `module:Owner.attr` exists: an attribute of the module or the class, or an
    attribute the class's module assigns to its instances (`self.attr = ...`)."""
    module, dotted = name.split(":")
    *path, attr = dotted.split(".")
    owner = _owner(module, path)
    if owner is None:
        return False
    if hasattr(owner, attr):
        return True
    source = inspect.getsource(inspect.getmodule(owner)) if inspect.isclass(owner) else ""
    return re.search(rf"\bself\.{re.escape(attr)}\s*(:[^=\n]*)?=[^=]", source) is not None


def private_names_missing(names: Sequence[str]) -> list[str]:
    """The names of `names` (`module:attr` or `module:Class.attr`) the installed library lacks."""
    return [name for name in names if not _present(name)]


def version_line(library: str, checked_on: str, missing: Sequence[str]) -> str:
    """The one line a missing private name gets: which names, the installed version and the
    versions the seam was checked on."""
    installed = importlib.import_module(library).__version__
    return (f"{library} {installed} lacks {', '.join(missing)}, private names oar-attrib reaches "
            f"(checked on {library} {checked_on}); install a {library} version it was checked on")


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
    """The variables transformers gives a chat template for `messages` with a generation
    prompt, `special_tokens` (the tokenizer's special_tokens_map) among them."""
    alias, normalize, plain = _chat_utils("_alias_reasoning_fields", "_normalize_chat_messages",
                                          "_plain_template_data")
    chat = alias(plain(normalize(list(messages))))
    return {"messages": chat, "tools": None, "documents": None, "add_generation_prompt": True,
            **plain(dict(special_tokens))}
