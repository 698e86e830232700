"""Argument types that check a name against its registry when the command line is parsed, so
`oar` lists exactly what is registered (a method registered by a plugin or a test included),
and importing the command line loads no method (nor torch) until a name is checked: the method
knobs' flags are made from their declarations (`methods.knobs`), plain dataclasses."""
from __future__ import annotations

import argparse

from ..commands import number_problem
from ..defaults import ANSWER_FORMAT, PROBE, PROBES
from ..errors import UnknownNameError, unknown_name
from ..inputs.spans import ANSWER_FORMATS
from ..methods.knobs import KNOBS
from ..methods.registry import knob_fields


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


# The command line's method knobs, (method, keyword of its function, kind, help) each, made
# from the methods' knob declarations (`methods.knobs`, which import no method nor torch): the
# kind is int or float (a positive number) or a parser of its own (`knobs.mask_choice`). Each
# becomes `--<method>-<keyword>` (underscores as dashes) and lands in
# method_params[method][keyword] only when given, so the method's own default stays the one
# default.
METHOD_KNOBS: tuple[tuple[str, str, type, str], ...] = tuple(
    (method, f.name, f.metadata["kind"], f.metadata["help"]) for method, knobs in KNOBS.items()
    for f in knob_fields(knobs))
KNOB_BOUNDS = {(method, f.name): f.metadata.get("bounds") for method, knobs in KNOBS.items()
               for f in knob_fields(knobs)}


def knob_flag(method: str, param: str) -> str:
    return f"--{method}-{param}".replace("_", "-")


def _positive(kind: type, bounds: tuple | None = None):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        problem = number_problem(value, kind, bounds)  # NaN, inf, <= 0, a count past MAX_COUNT, its bounds
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
                               type=_positive(kind, KNOB_BOUNDS[method, param]) if number else kind,
                               default=None,
                               metavar=(kind.__name__ if number else param).upper(), help=help_text)


def method_params_from(args: argparse.Namespace, base: dict | None = None) -> dict | None:
    """`method_params` of the knobs given on the command line, merged into `base`."""
    params = {m: dict(p) for m, p in (base or {}).items()}
    for method, param, _, _ in METHOD_KNOBS:
        value = getattr(args, f"knob__{method}__{param}", None)
        if value is not None:
            params.setdefault(method, {})[param] = value
    return params or None


def default_methods(model: str) -> list[str]:
    """`oar attribute`'s methods when --methods is not given: BUNDLED_METHODS on the bundled
    model, the registry's reading set on any other (`defaults` says why)."""
    from ..defaults import BUNDLED_METHODS
    from ..methods import default_methods as role_defaults
    from ..models.catalogue import bundled

    return list(BUNDLED_METHODS) if bundled(model) else role_defaults("reading")


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
