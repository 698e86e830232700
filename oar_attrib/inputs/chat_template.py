"""Chat templates rendered in a sandbox with a time and a memory bound.

A chat template is code that comes with a model. transformers renders it in Jinja's immutable
sandbox, which stops object access but not work: a nested `range` loop runs for hours,
`{{ 'x' * 300000000 }}` fills memory, a template's own `raise_exception` ends in a traceback.
`chat_ids` renders the tokenizer's template the way `apply_chat_template` does (transformers'
own sandbox configuration, filters and globals, the same template variables, then the text
tokenised without special tokens) in a sandbox that also bounds it:

- time: every line the template runs is counted (a trace function, this thread only) and the
  render stops past `TemplateLimits.seconds`;
- size: `*`, `**`, `%` and `+`, every call, filter and `~` join are checked before (from their
  operands, so no huge value is ever built) or after (what they built) against
  `TemplateLimits.max_chars`, integers against `max_int_bits`, and the output as it streams;
- memory: the process's resident memory may grow by `max_memory` at most while it renders.

A template that fails on a prompt is one `ChatTemplateError` naming the model and what went
wrong; one that does not compile or runs past a bound is a `TemplateRefusedError` (the template
is at fault, not the prompt: callers stop rather than try every prompt).
Ctrl-C interrupts a render like any Python code. transformers' private helpers are reached
through `compat.transformers` (a missing one is one `LibraryVersionError` line).
"""
from __future__ import annotations

import functools
import math
import os
import re
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Mapping, Sequence

from jinja2 import TemplateError
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import InputError, LibraryVersionError, TokenizerError
from ..compat.transformers import sandbox_environment, template_variables


class ChatTemplateError(InputError):
    """A model's chat template that fails on a prompt (its own `raise_exception`, a missing
    key): that prompt cannot be encoded, others may."""


class TemplateRefusedError(ChatTemplateError):
    """A model's chat template that cannot be used at all: it does not compile, or it ran past
    the sandbox's time or memory bound. Callers stop here rather than try the next prompt."""


# For a tokenizer without a chat template of its own: each message as a "role: content" line,
# then "assistant: " (the generation prompt). `oar import` renders chat prompts with it, and says
# so, rather than skip them; the run records it (`"chat_template": ROLE_TEMPLATE_NAME`) so that
# `oar attribute --store` encodes them the same way.
ROLE_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
ROLE_TEMPLATE_NAME = "roles"


@dataclass(frozen=True)
class TemplateLimits:
    """How far a chat template may go on one prompt."""

    seconds: float = 2.0  # wall time of one render
    max_chars: int = 4 << 20  # the longest string, list or output it may build
    max_int_bits: int = 1 << 16  # the largest integer it may build
    max_memory: int = 512 << 20  # bytes the process may grow by while it renders


class _Budget:
    """The bounds of one render, checked by the sandbox's hooks and the trace function."""

    def __init__(self, limits: TemplateLimits, model: str):
        self.limits, self.model, self.ticks = limits, model, 0
        self.deadline = time.monotonic() + limits.seconds
        self.memory = _resident()

    def over(self, what: str) -> TemplateRefusedError:
        return TemplateRefusedError(f"the chat template of {self.model} {what}; it is refused (a "
                                  "template may not run that long or build that much); fix or "
                                  "replace the model's chat template")

    def tick(self, frame=None, event=None, arg=None):
        self.ticks += 1
        if time.monotonic() > self.deadline:
            raise self.over(f"ran for more than {self.limits.seconds:g} s")
        if self.ticks % 256 == 0 and self.memory is not None:
            grown = (_resident() or 0) - self.memory
            if grown > self.limits.max_memory:
                raise self.over(f"grew memory by {grown >> 20} MB")
        return self.tick

    def size(self, value) -> None:
        """Raise when `value` (or what it holds, one level down) is larger than allowed."""
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > self.limits.max_int_bits:
                raise self.over(f"built an integer of more than {self.limits.max_int_bits} bits")
        elif _weight(value) > self.limits.max_chars:
            raise self.over(f"built a value of more than {self.limits.max_chars} characters")


def _resident() -> int | None:
    """The process's resident memory in bytes (Linux), else None (the size checks remain)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _weight(value) -> int:
    """Characters or items of a value, with the strings it holds one level down."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return len(value) + sum(len(v) for v in value if isinstance(v, (str, bytes)))
    return 0


_WIDE = re.compile(r"\d{8,}")  # a width or precision of 10^7 or more in a format string
# The budget of the render running in this thread (compiled templates are shared).
_BUDGET: ContextVar[_Budget] = ContextVar("chat_template_budget")


def _check_args(args, kwargs) -> None:
    """Refuse, before the work, a count or width (an int argument) or a format string that
    asks for more than the budget allows, and arguments already too large."""
    budget = _BUDGET.get()
    budget.tick()
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > budget.limits.max_chars:
            raise budget.over(f"was asked for a width or count of {value}")
        if isinstance(value, str) and ("%" in value or "{" in value) and _WIDE.search(value):
            raise budget.over("was asked to format a string wider than it may build")
        budget.size(value)


class _Bounded(ImmutableSandboxedEnvironment):
    """transformers' chat template sandbox, every operation checked against `budget`."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def call_binop(self, context, operator, left, right):
        budget = _BUDGET.get()
        budget.tick()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and not isinstance(seq, (int, float)) and n > 0:
                    if _weight(seq) * n > budget.limits.max_chars:
                        raise budget.over(f"built a value of more than {budget.limits.max_chars} characters")
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > budget.limits.max_int_bits:
                    raise budget.over(f"built an integer of more than {budget.limits.max_int_bits} bits")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if abs(left) > 1 and right * math.log2(abs(left)) > budget.limits.max_int_bits:
                raise budget.over(f"built an integer of more than {budget.limits.max_int_bits} bits")
        elif operator == "%" and isinstance(left, str):
            _check_args((left, *(right if isinstance(right, tuple) else (right,))), {})
        result = super().call_binop(context, operator, left, right)
        budget.size(result)
        return result

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's signature
        # str.format (the sandbox wraps it), .center, .replace, ...: the string is checked too
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        _check_args((*args, owner) if isinstance(owner, str) else args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        _BUDGET.get().size(result)
        return result

    @staticmethod
    def checked(value):
        """A `~` join's result (the code generator wraps every one in this call)."""
        _BUDGET.get().size(value)
        return value


class _Generator(CodeGenerator):
    """Jinja's code generator, with each `~` join passed through `environment.checked`."""

    def visit_Concat(self, node, frame):  # noqa: N802 - Jinja's visitor name
        self.write("environment.checked(")
        super().visit_Concat(node, frame)
        self.write(")")


_Bounded.code_generator_class = _Generator


def _filter(func):
    """A filter of the sandbox, its arguments and result checked like a call's."""
    @functools.wraps(func)  # keeps Jinja's pass_context / pass_environment marks
    def checked(*args, **kwargs):
        _check_args(args, kwargs)
        result = func(*args, **kwargs)
        _BUDGET.get().size(result)
        return result
    return checked


@functools.lru_cache(maxsize=8)
def _compiled(template: str):
    """The template compiled in its own bounded sandbox (built like transformers' own: its
    extensions, filters and globals), or the TemplateError of a template that does not."""
    base = sandbox_environment()  # transformers' sandbox configuration
    env = _Bounded(trim_blocks=base.trim_blocks, lstrip_blocks=base.lstrip_blocks,
                   extensions=[type(e) for e in base.extensions.values()])
    env.globals.update(base.globals)
    env.filters.update({name: _filter(f) for name, f in base.filters.items()})
    return env.from_string(template)


def _template_data(tokenizer, messages: Sequence[Mapping]) -> dict:
    """The variables transformers gives a template for `messages` with a generation prompt."""
    return template_variables(messages, tokenizer.special_tokens_map)


def render_chat(tokenizer, messages: Sequence[Mapping], limits: TemplateLimits = TemplateLimits()) -> str:
    """The text of `messages` in the tokenizer's chat template, with the generation prompt,
    rendered within `limits`; ChatTemplateError (one line, naming the model) when the
    template fails on them, TemplateRefusedError when it does not compile or runs past a
    bound, TokenizerError when the tokenizer has no template (the bundled model's)."""
    model = getattr(tokenizer, "name_or_path", "") or "this model"
    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        raise TokenizerError("the tokenizer has no chat template, so a chat prompt (a list of messages) cannot "
                             "be encoded; pass the prompt as text, use a model with a chat template (--model), "
                             "or set tokenizer.chat_template")
    try:
        template = _compiled(tokenizer.chat_template)
    except TemplateError as err:
        raise TemplateRefusedError(f"the chat template of {model} does not compile ({_why(err)}); "
                                   "fix or replace the model's chat template") from None
    budget = _Budget(limits, model)
    before, token = sys.gettrace(), _BUDGET.set(budget)
    out, length = [], 0
    sys.settrace(budget.tick)
    try:
        for chunk in template.generate(**_template_data(tokenizer, messages)):
            length += len(chunk)
            if length > limits.max_chars:
                raise budget.over(f"wrote more than {limits.max_chars} characters")
            out.append(chunk)
    except (ChatTemplateError, LibraryVersionError):  # not the template's failure
        raise
    except (MemoryError, RecursionError) as err:
        raise budget.over(f"failed: {type(err).__name__}") from None
    except Exception as err:  # noqa: BLE001 - whatever the template's code raised is its failure
        raise ChatTemplateError(f"the chat template of {model} failed on this prompt ({_why(err)}); "
                                "pass the prompt in a form the template accepts, or fix the "
                                "model's chat template") from None
    finally:
        sys.settrace(before)
        _BUDGET.reset(token)
    return "".join(out)


def _why(err: Exception) -> str:
    text = " ".join(str(err).split())
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def chat_ids(tokenizer, messages: Sequence[Mapping], limits: TemplateLimits = TemplateLimits()) -> list[int]:
    """The token ids of `messages` as `tokenizer.apply_chat_template(messages,
    add_generation_prompt=True, tokenize=True)` gives them, rendered within `limits`
    (`render_chat`)."""
    return list(tokenizer(render_chat(tokenizer, messages, limits), add_special_tokens=False)["input_ids"])
