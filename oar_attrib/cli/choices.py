"""Argument types that check a name against its registry when the command line is parsed, so
`oar` lists exactly what is registered (a method registered by a plugin or a test included),
and importing the command line loads no method module (nor torch) until a name is checked."""
from __future__ import annotations

import argparse

from ..commands import number_problem
from ..defaults import ANSWER_FORMAT, PROBE, PROBES
from ..errors import UnknownNameError, unknown_name
from ..inputs.spans import ANSWER_FORMATS


def method_name(name: str) -> str:
    """A registered importance method (`oar_attrib.available_methods()`)."""
    from ..methods import method_spec

    try:
        method_spec(name)
    except UnknownNameError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def probe_name(name: str) -> str:
    """An outcome probe (`oar_attrib.defaults.PROBES`)."""
    if name not in PROBES:
        raise argparse.ArgumentTypeError(str(unknown_name("probe", name, PROBES)))
    return name


def add_probe_arg(parser: argparse.ArgumentParser) -> None:
    """`--probe NAME`: the outcome probe (`defaults.PROBES`, default `defaults.PROBE`)."""
    parser.add_argument("--probe", default=PROBE, type=probe_name,
                        help=f"outcome probe (METHOD.md 3): one of {', '.join(PROBES)}")


def add_answer_format_arg(parser: argparse.ArgumentParser, help_text: str = "where the final answer is",
                          default: str | None = ANSWER_FORMAT) -> None:
    """`--answer-format NAME`: how the span finder finds the answer (`spans.ANSWER_FORMATS` but
    `regex`, which needs a pattern the command line does not take). default None: the command
    fills it in from its input (`cli.provenance`)."""
    formats = [f for f in ANSWER_FORMATS if f != "regex"]
    parser.add_argument("--answer-format", default=default,
                        help=f"{help_text}: one of {', '.join(formats)} (auto: any of the others)")


def mask_choice(text: str) -> str | int:
    """An OAR-P mask (`oar_attrib.methods.masks`): a mask name, "eos" / "unk" (the tokenizer's
    token, resolved by `attribute`), or a token id."""
    from ..methods.masks import MASKS, TOKEN_NAMES

    if text.isdigit():
        return int(text)
    if text in MASKS or text in TOKEN_NAMES:
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(MASKS + TOKEN_NAMES)} "
                                     "or a token id")


# Method knobs reachable from the command line: (method, keyword of its function, type, help);
# the type is int or float (a positive number) or a parser of its own (`mask_choice`).
# Each becomes `--<method>-<keyword>` (underscores as dashes) and lands in
# method_params[method][keyword] only when given, so the method's own default stays the one
# default; tests/cli/test_cli_knobs.py holds every row to the method's signature.
METHOD_KNOBS: tuple[tuple[str, str, type, str], ...] = (
    ("ig", "n_steps", int, "integrated gradients: points on the path from the baseline"),
    ("ig", "internal_batch_size", int, "integrated gradients: path points per forward (memory)"),
    ("oar_g", "n_noise", int, "OAR-G: noise draws averaged"),
    ("oar_g", "noise_std", float, "OAR-G: noise scale (default: 0.1 x the RMS of the row's embeddings)"),
    ("resample", "n_samples", int, "resample: continuations per side and step"),
    ("oar_p", "mask", mask_choice, "OAR-P: what a perturbed token becomes: pad (the paper's), "
     "eos or unk (the tokenizer's), a token id, zero or mean (embedding), resample, delete"),
    ("oar_p_step", "mask", mask_choice, "step-level OAR-P: what a step's tokens become (as "
     "--oar-p-mask)"),
    ("oar_p_hier", "top_steps", int, "hierarchical OAR-P: steps per trace whose tokens are "
     "scored exactly (by count)"),
    ("oar_p_hier", "top_mass", float, "hierarchical OAR-P: choose steps by mass instead, the "
     "fewest largest carrying this share (0-1] of the trace's step importance"),
    ("oar_p_hier", "mask", mask_choice, "hierarchical OAR-P: what a perturbed step or token "
     "becomes (as --oar-p-mask)"),
)


def knob_flag(method: str, param: str) -> str:
    return f"--{method}-{param}".replace("_", "-")


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        problem = number_problem(value, kind)  # NaN, inf, <= 0, a count past MAX_COUNT
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__, parse.kind = kind.__name__, kind  # `kind`: what the parser's walkers read
    return parse


def add_method_knobs(parser: argparse.ArgumentParser, methods: tuple[str, ...] | None = None) -> None:
    """One flag per row of METHOD_KNOBS (of `methods`, default all), default: the method's."""
    group = parser.add_argument_group("method settings (default: each method's own)")
    for method, param, kind, help_text in METHOD_KNOBS:
        if methods is None or method in methods:
            number = kind in (int, float)
            group.add_argument(knob_flag(method, param), dest=f"knob__{method}__{param}",
                               type=_positive(kind) if number else kind, default=None,
                               metavar=(kind.__name__ if number else param).upper(), help=help_text)


def method_params_from(args: argparse.Namespace, base: dict | None = None) -> dict | None:
    """`method_params` of the knobs given on the command line, merged into `base`."""
    params = {m: dict(p) for m, p in (base or {}).items()}
    for method, param, _, _ in METHOD_KNOBS:
        value = getattr(args, f"knob__{method}__{param}", None)
        if value is not None:
            params.setdefault(method, {})[param] = value
    return params or None


def budget_params(max_batch_tokens: int | None) -> dict | None:
    """`method_params` giving every method that takes a token budget `max_batch_tokens`."""
    if max_batch_tokens is None:
        return None
    from ..methods import available_methods, method_spec

    return {m: {"max_batch_tokens": max_batch_tokens} for m in available_methods()
            if method_spec(m).token_budget}


def check_servable(model: str) -> None:
    """InputError, before the weights load, for a model `oar recall` cannot serve: its oracle
    sets come from world problems the world's tokenizer writes, and the counterfactual set
    regenerates them with the model, so a model with another tokenizer has nothing to be
    recalled (and a large one fills memory regenerating). The one place this is decided."""
    from transformers import AutoTokenizer

    from ..errors import InputError
    from ..models import resolve
    from ..world.tokenizer import not_the_worlds

    why = not_the_worlds(AutoTokenizer.from_pretrained(str(resolve(model))))
    if why is not None:
        raise InputError(
            f"--model {model}: its tokenizer {why}, so it is not an arithmetic-world model and "
            "`oar recall` has no oracle for it; attribute its own traces with `oar attribute` "
            "(or evaluate it with `oar eval --data`)")
