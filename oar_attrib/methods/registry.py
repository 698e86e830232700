"""The registry of importance methods: the decorator members register with, and lookups.

This module imports none of its members (each imports it to register), so there is no cycle;
`methods` is the catalogue every caller reads: its first lookup imports the built-in members
(`methods.members`), so its lookups see them.

An importance method is a plain function

    fn(model, batch: ScoringBatch, *, probe: str = defaults.PROBE, generator=None, **params)
        -> torch.Tensor  # (B, L) float32, >= 0 on its positions, exactly 0 elsewhere

Its positions are its `scope`'s: by default the scored reasoning S of rows with an answer span
(rows without one get all zeros). A method registers with `@register_method("name", ...)`,
declaring what the attribution and the trainer need to run it:

- weighting:      the weighting (`weightings.register_weighting`) its importances go through
                  unless the caller picks another (METHOD.md 6-7);
- random:         it draws random numbers and, given a list of B generators, draws row b's
                  numbers from generators[b] exactly as it would for row b alone (so a row's
                  scores do not depend on the rows batched with it; the trainer relies on this);
- token_budget:   it takes `max_batch_tokens`, the size of one forward in tokens;
- analysis_only:  it explains a trace but cannot reshape training (too slow, or needs data a
                  training step does not have): `attribute` runs it, the trainer refuses it;
- needs_tokenizer: it reads text (e.g. sampled answers): `attribute` passes its tokenizer as
                  `tokenizer=` unless the caller's method_params give one;
- uniform:        its weights are 1 everywhere and it never calls the model (`none`, plain
                  GRPO): the pipeline skips the forward and the trainer leaves advantages as
                  they are;
- scope:          the positions it scores and its weighting weighs: "reasoning" (S, rows with
                  an answer span) or "response" (every response token of every row,
                  `batch.response_mask`: the published entropy and GRAIL baselines);
- grouped:        it compares the rollouts of a prompt's group (KTAE): it reads
                  `batch.outcomes` (each row's group and correctness), runs once on the whole
                  batch (rows are neither deduplicated nor split, which would change its
                  counts) and needs no model; without outcomes it raises;
- signed:         its scores may be negative (a direction, KTAE's key-token value): a ranking
                  reads their magnitude (`ranking_scores`);
- variant_of:     it has the scores of the method named here on S and differs only in its
                  positions or weighting (e.g. `grail_all`): analysis lists leave it out, as it
                  would rank every trace exactly as that method does;
- speed_params:   keyword arguments that change speed, memory, display or a guard, never the
                  scores (e.g. `packing`, `internal_batch_size`): they stay out of the settings
                  record (`records.settings_record`), so changing one does not refuse a resume.
                  Every other keyword is in the record with the value used; the token budget
                  of a `token_budget` method and `progress` are speed for every method
                  (`RUN_ONLY`);
- knobs:          its settings a user may change, a frozen dataclass whose fields (`knob`)
                  are keywords of the function: default (the function's own, which it reads
                  from the field), help text, parser and, where analysis reads another value,
                  the analysis default (`methods.knobs`). The command line's flags
                  (`--oar-g-n-noise`) and `oar align`'s `oar_g:n_noise=8` are made from them,
                  and `MethodSpec.analysis_params` are their analysis defaults: what
                  `attribute`, `oar attribute`, the live page and recall read unless the
                  caller's method_params say otherwise (OAR-G reads with 8 noise draws, trains
                  with the paper's 1). A knob that a reshaping setting also sets (`setting`:
                  OAR-G's `noise_std`, `ReshapeSettings.noise_std`, `oar_noise_std` in training)
                  takes that setting's value in every run unless the method params give it:
                  the one road by which a knob reaches the method, in analysis and in training
                  alike (`MethodSpec.kwargs`), its value checked by the knob's bounds. None: no
                  knobs (a plugin's method, most baselines);
- draws:          it averages random draws and takes `return_draws=True`, which returns the
                  (n, B, L) per-draw importances instead of their mean (`methods.draws`): the
                  pipeline averages them itself and judges the ranking's stability from them;
- unit:           what it scores, "token" or "step" (a step method gives every token of a step
                  the step's score: the web app's note on token recall, `UNITS`);
- cost:           "cheap" (under a second a trace on the bundled model: a quick look may run
                  it) or "costly" (`COSTS`; a plugin's method is costly until measured);
- defaults:       the roles it is a default for (`ROLES`): "reading" (the cheap reading set a
                  real model's traces are attributed with), "training" (what `oar train`
                  reshapes with), "alignment" (what `oar align` compares), "demo" (what the web
                  app's demo attributes a real model with), "api" (what `attribute()` runs when
                  no method is named), "live" (what the web app's live page runs when the request
                  names none); `default_methods(role)` lists them;
- listed:         where it stands when a role's defaults are listed (lower first, then by name).

Every fact about a method lives here, so a new method touches its own file and nothing else:
`default_methods`, `step_methods` and `cheap_methods` are what every list reads.

`get_method` / `method_spec` raise an error that lists the known names.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import MISSING, dataclass
from typing import Any, Callable

from ..errors import InputError, unknown_name

ImportanceFn = Callable[..., "torch.Tensor"]  # noqa: F821


@dataclass(frozen=True)
class MethodSpec:
    """A registered importance method and what running it needs (see the module docstring)."""

    name: str
    fn: ImportanceFn
    weighting: str = "bilevel"
    random: bool = False
    token_budget: bool = False
    analysis_only: bool = False
    needs_tokenizer: bool = False
    uniform: bool = False
    scope: str = "reasoning"
    grouped: bool = False
    signed: bool = False
    variant_of: str | None = None
    speed_params: tuple[str, ...] = ()
    knobs: type | None = None
    draws: bool = False
    unit: str = "token"
    cost: str = "costly"
    defaults: tuple[str, ...] = ()
    listed: int = 100

    @property
    def analysis_params(self) -> dict:
        """The knobs analysis reads with another value than the function's default (their
        `analysis` defaults): OAR-G's {"n_noise": 8}."""
        return analysis_defaults(self.knobs)

    def analysis_kwargs(self, params: dict | None = None) -> dict:
        """The method's keyword arguments in analysis: its `analysis_params` under `params`."""
        return {**self.analysis_params, **(params or {})}

    def check_knobs(self, values: dict) -> None:
        """InputError naming the knob when a number in `values` ({knob: value}) is outside the
        knob's bounds (what its flag and `oar align`'s `name:key=value` are held to)."""
        from ..defaults import bounds_problem

        fields = {f.name: f for f in knob_fields(self.knobs)}
        for name, value in values.items():
            if name not in fields or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            problem = bounds_problem(value, fields[name].metadata.get("bounds"),
                                     float if isinstance(value, float) else int)
            if problem:
                raise InputError(f"method {self.name!r}: {name} {problem}")

    @property
    def setting_knobs(self) -> dict[str, str]:
        """{knob: the reshaping setting that gives it its value} (module docstring, `knobs`)."""
        return {f.name: f.metadata["setting"] for f in knob_fields(self.knobs) if "setting" in f.metadata}

    def kwargs(self, values: dict, max_batch_tokens: int | None = None, longest: int = 0,
               generators=None) -> dict:
        """Keyword arguments of `fn`: the knobs a setting gives (`setting_knobs`) taken from the
        plain mapping of the settings `values`, the token budget (None: the method sizes it; a
        row of `longest` tokens is scored alone rather than failing on it), and `generators`,
        one per row, when the method is random."""
        settings = self.setting_knobs
        missing = [setting for setting in settings.values() if setting not in values]
        if missing:
            raise ValueError(f"method {self.name!r} takes {', '.join(missing)} from the settings, which have "
                             f"no such field; known: {', '.join(sorted(values))}")
        out = {knob: values[setting] for knob, setting in settings.items()}
        self.check_knobs(out)
        if self.token_budget:
            out["max_batch_tokens"] = None if max_batch_tokens is None else max(int(max_batch_tokens), longest)
        if self.random and generators is not None:
            out["generator"] = list(generators)
        return out


def knob(default, help: str, kind: type | Callable[[str], Any], *, analysis=MISSING,
         bounds: tuple | None = None, setting: str | None = None) -> Any:
    """A field of a method's knobs (module docstring), made by the one field helper
    (`commands.option`): the keyword's `default` (the function's default is this field,
    `n_noise: int = OarGKnobs.n_noise`), its `help` text (the flag's), how a value given as
    text is read (`kind`: int or float, a number > 0; else a parser of its own that raises
    argparse.ArgumentTypeError, `knobs.mask_choice`), the `bounds` of a number beyond > 0 (what
    the computation can hold: `commands.number_problem` checks them for the flag and for
    `oar align`'s `name:key=value`), where analysis reads another value, its `analysis`
    default and, where a reshaping setting gives it its value in a run, that `setting`'s name
    (`MethodSpec.setting_knobs`)."""
    from ..defaults import option

    extra = {"analysis": analysis} if analysis is not MISSING else {}
    if setting is not None:
        extra["setting"] = setting
    return option(default, help, kind=kind, **extra, **({"bounds": bounds} if bounds else {}))


def knob_fields(knobs: type | None) -> tuple[dataclasses.Field, ...]:
    """The fields of a method's knobs class, in their order (None: no knobs)."""
    return dataclasses.fields(knobs) if knobs is not None else ()


def analysis_defaults(knobs: type | None) -> dict:
    """{keyword: analysis default} of the knobs that analysis reads with another value."""
    return {f.name: f.metadata["analysis"] for f in knob_fields(knobs) if "analysis" in f.metadata}


def _check_knobs(name: str, fn: ImportanceFn, knobs: type | None) -> None:
    """ValueError unless every knob is declared with `knob` and is a keyword of `fn` whose
    default is the knob's (the function reads its default from the field), so a knob cannot
    name a keyword that is not there nor drift from the default the function runs with."""
    if knobs is None:
        return
    if not (isinstance(knobs, type) and dataclasses.is_dataclass(knobs)):
        raise ValueError(f"knobs={knobs!r} of method {name!r}: give a dataclass of the method's knobs")
    keywords = inspect.signature(fn).parameters
    for f in knob_fields(knobs):
        if not {"help", "kind"} <= set(f.metadata):
            raise ValueError(f"knob {f.name!r} of method {name!r}: declare it with "
                             "oar_attrib.methods.registry.knob(default, help, kind)")
        if f.name not in keywords:
            raise ValueError(f"knob {f.name!r} of method {name!r} is not a keyword of its function; "
                             f"its keywords: {', '.join(keywords)}")
        if keywords[f.name].default != f.default:
            raise ValueError(f"knob {f.name!r} of method {name!r}: the function's default "
                             f"{keywords[f.name].default!r} is not the knob's {f.default!r}; write "
                             f"`{f.name}={knobs.__name__}.{f.name}` in its signature")


_METHODS: dict[str, MethodSpec] = {}

# Keywords no method's scores depend on: the pipeline fills `generator` from the settings' seed
# (recorded there) and `tokenizer` from the model (recorded by its identity); `progress` only
# draws a bar; `max_batch_tokens` sizes forwards, and a method registered with `token_budget`
# promises the same scores under every budget (its fast == reference tests hold it to that);
# `return_draws` (the pipeline's, for a `draws` method) returns the draws whose mean it is.
RUN_ONLY = ("generator", "tokenizer", "progress", "max_batch_tokens", "return_draws")


SCOPES = ("reasoning", "response")
UNITS = ("token", "step")
COSTS = ("cheap", "costly")
ROLES = ("reading", "training", "alignment", "demo", "api", "live")


def _check_facts(name: str, scope: str, unit: str, cost: str, defaults: tuple[str, ...]) -> None:
    """ValueError naming the allowed values when a declared fact of method `name` is not one."""
    for what, value, allowed in (("scope", scope, SCOPES), ("unit", unit, UNITS), ("cost", cost, COSTS)):
        if value not in allowed:
            raise ValueError(f"{what}={value!r} of method {name!r}: choose one of {', '.join(allowed)}")
    unknown = [role for role in defaults if role not in ROLES]
    if unknown:
        raise ValueError(f"defaults={unknown!r} of method {name!r}: roles are {', '.join(ROLES)}")


def register_method(name: str, *, weighting: str = "bilevel", random: bool = False,
                    token_budget: bool = False, analysis_only: bool = False, needs_tokenizer: bool = False,
                    uniform: bool = False, speed_params: tuple[str, ...] = (),
                    knobs: type | None = None, scope: str = "reasoning",
                    grouped: bool = False, signed: bool = False, variant_of: str | None = None,
                    draws: bool = False, unit: str = "token", cost: str = "costly",
                    defaults: tuple[str, ...] = (), listed: int = 100) -> Callable[[ImportanceFn], ImportanceFn]:
    """Decorator: register `fn` as importance method `name` (see the module docstring)."""
    _check_facts(name, scope, unit, cost, tuple(defaults))

    def wrap(fn: ImportanceFn) -> ImportanceFn:
        if name in _METHODS:
            raise ValueError(f"importance method {name!r} is registered twice; pick another name")
        _check_knobs(name, fn, knobs)
        _METHODS[name] = MethodSpec(name, fn, weighting, random, token_budget, analysis_only,
                                    needs_tokenizer, uniform, scope=scope, grouped=grouped,
                                    signed=signed, variant_of=variant_of, speed_params=tuple(speed_params),
                                    knobs=knobs, draws=draws, unit=unit, cost=cost, defaults=tuple(defaults),
                                    listed=listed)
        return fn

    return wrap


def unregister_method(name: str) -> None:
    """Remove a registered method (for tests and notebooks that register their own)."""
    _METHODS.pop(name, None)


def method_spec(name: str) -> MethodSpec:
    if name not in _METHODS:
        raise unknown_name("importance method", name, _METHODS)
    return _METHODS[name]


def get_method(name: str) -> ImportanceFn:
    return method_spec(name).fn


def available_methods(uniform: bool = False, *, variants: bool = False,
                      grouped: bool = False) -> list[str]:
    """The registered importance methods that explain a trace on their own, analysis-only ones
    included (what recall and the web app list by default). With `uniform`, also the uniform
    ones (`none`), which have no importances to explain but which `attribute` and the trainer
    accept; with `variants`, the variants of another method (same scores on S); with
    `grouped`, the methods that need a group's rollouts and outcomes (KTAE)."""
    return sorted(n for n, spec in _METHODS.items()
                  if (uniform or not spec.uniform) and (variants or spec.variant_of is None)
                  and (grouped or not spec.grouped))


def registered_methods() -> list[str]:
    """Every registered name: `available_methods` with uniform methods, variants and grouped
    methods (what a setting may name)."""
    return available_methods(uniform=True, variants=True, grouped=True)


def ranking_scores(method: str, scores):
    """The scores a ranking reads: their magnitude for a `signed` method (a direction is not
    an importance), as they are otherwise (also for names not registered here)."""
    spec = _METHODS.get(method)
    return abs(scores) if spec is not None and spec.signed else scores


def default_methods(role: str) -> list[str]:
    """The registered methods that are a default for `role` (`ROLES`), in their `listed` order
    (then by name): one of `ROLES`."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: choose one of {', '.join(ROLES)}")
    return [s.name for s in sorted(_METHODS.values(), key=lambda s: (s.listed, s.name)) if role in s.defaults]


def step_methods() -> list[str]:
    """The registered methods that score steps (`unit` "step"): every token of a step gets the
    step's score."""
    return sorted(n for n, spec in _METHODS.items() if spec.unit == "step")


def cheap_methods() -> list[str]:
    """The registered methods whose `cost` is "cheap" (a quick look on the bundled model runs them)."""
    return sorted(n for n, spec in _METHODS.items() if spec.cost == "cheap")


def trainable_methods() -> list[str]:
    """Registered methods the trainer can reshape advantages with (not analysis-only), `none`
    (plain GRPO) included."""
    return sorted(n for n, spec in _METHODS.items() if not spec.analysis_only)
