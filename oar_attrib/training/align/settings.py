"""What a gradient-alignment run measures: `AlignSettings` and the methods it compares.

A method of `oar align` is a registered importance method and the values of its knobs it runs
with (`methods.knobs`, the knobs its command-line flags are made from), written `name` or
`name:key=value,key=value` (`oar_g:n_noise=8` is OAR-G averaging 8 noise draws):
`MethodChoice.parse`. Every setting here, the preset's trainer and run settings
and the methods' keywords go into the store's settings record (`store.align_record`), and a
resume with any of them changed is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from oar_attrib.commands import option
from oar_attrib.defaults import NO_METHOD as BASELINE

from ..errors import AlignError

QUICK = {"batches": 3, "pool_batches": 2}
# Controls: analysis-only methods align measures as if a trainer used them, to check the
# instrument (never trained with). Name -> the training data whose causal tokens it knows.
CONTROLS = {"causal_oracle": "world", "causal_scramble": "world"}


def register_controls() -> None:
    """Register the control methods (`control`: not in `methods`, which knows nothing of the world)."""
    from . import control  # noqa: F401  (registration)


def check_controls(methods: list["MethodChoice"], data: str | None) -> None:
    """AlignError when a control method is asked for on training data whose causal tokens it
    does not know (before anything is written or a model loaded)."""
    for choice in methods:
        needs = CONTROLS.get(choice.name)
        if needs is not None and data != needs:
            raise AlignError(f"method {choice.label!r} is a control built on the causal tokens "
                             f"of the arithmetic world only; this preset trains on {data!r} data: use "
                             "--preset arith-tiny (or another world preset), or leave it out of --methods")


MAX_PROMPTS = 4096  # prompts per batch: past this a batch's rollouts outgrow any accelerator


@dataclass(frozen=True)
class MethodChoice:
    """One compared method: `label` as written, the registered `name`, its `params`."""

    label: str
    name: str
    params: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "MethodChoice":
        """`name` or `name:key=value,key=value` (YAML values: `n_noise=8` is the int 8)."""
        from ..launch import parse_value

        name, sep, rest = text.strip().partition(":")
        params = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise AlignError(f"method {text!r}: {item!r} must look like key=value "
                                 "(e.g. oar_g:n_noise=8)")
            params[key.strip()] = parse_value(value.strip(), f"{name}:{key.strip()}")
        if not name or (sep and not params):
            raise AlignError(f"method {text!r} must be a registered name or name:key=value,... "
                             "(e.g. oar_g:n_noise=8)")
        label = name if not params else name + ":" + ",".join(f"{k}={v}" for k, v in params.items())
        return cls(label, name, params)

    def check(self) -> None:
        """AlignError unless the method is registered, trainable and these are its knobs, each
        with a value the knob takes (`knob_problem`)."""
        from oar_attrib.methods import method_spec, trainable_methods
        from oar_attrib.methods.registry import knob_fields

        register_controls()
        if self.name not in trainable_methods() and self.name not in CONTROLS:
            raise AlignError(f"method {self.name!r} is not one the trainer can reshape with; choose "
                             f"among {', '.join(trainable_methods())}")
        knobs = {f.name: f for f in knob_fields(method_spec(self.name).knobs)}
        unknown = sorted(set(self.params) - set(knobs))
        if unknown:
            raise AlignError(f"method {self.label!r}: {self.name} takes no {', '.join(unknown)}; "
                             f"its knobs: {', '.join(knobs) or 'none'}")
        for key, value in self.params.items():
            problem = knob_problem(knobs[key], value)
            if problem:
                raise AlignError(f"method {self.label!r}: {key} {problem} (e.g. oar_g:n_noise=8)")


def knob_problem(knob, value) -> str | None:
    """Why `value` (as `parse` read it) cannot stand for the method knob `knob` (a field of its
    knobs, `registry.knob`), or None: the knob's kind reads it as its command-line flag does. An
    int or float knob's value must be one, finite, > 0 and a bounded count (`commands.
    number_problem`); a knob with a parser of its own (a mask) takes the value's text."""
    import argparse

    from oar_attrib.commands import number_problem

    kind = knob.metadata["kind"]
    if kind in (int, float):
        return number_problem(value, kind, knob.metadata.get("bounds"))
    try:
        kind(str(value))
    except (argparse.ArgumentTypeError, ValueError) as err:
        return str(err)
    return None


def default_method_texts() -> list[str]:
    """The default comparison, from the registry: every trainable method that is a default for
    alignment (`default_methods("alignment")`: GRPO, OAR-G, token and step OAR-P, the published
    baselines, the random-weights floor), each as trained and, where analysis reads it with
    other knob values (`MethodSpec.analysis_params`: OAR-G's eight draws), also as read."""
    from oar_attrib.methods import default_methods, method_spec, trainable_methods

    texts = []
    for name in default_methods("alignment"):
        if name in trainable_methods():
            read = method_spec(name).analysis_params
            texts += [name] + ([name + ":" + ",".join(f"{k}={v}" for k, v in read.items())] if read else [])
    return texts


def resolve_methods(texts: tuple[str, ...] | list[str] | None) -> list[MethodChoice]:
    """The compared methods, GRPO (`none`) first: the given ones (each checked), or the
    registry's defaults for alignment (`default_method_texts`)."""
    if not texts:
        texts = default_method_texts()
    choices = [MethodChoice.parse(t) for t in texts]
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels):
        raise AlignError(f"methods {' '.join(labels)} name one method twice; give each once")
    for choice in choices:
        choice.check()
    baseline = [c for c in choices if c.label == BASELINE]
    return (baseline or [MethodChoice(BASELINE, BASELINE)]) + [c for c in choices if c.label != BASELINE]


@dataclass(frozen=True)
class AlignSettings:
    """A gradient-alignment run: which trainer, which methods, how many batches (docs/guide/align.md)."""

    # Every field is a flag of `oar align` but four, which the command line spells its own way
    # (`cli.AlignCommand`): the settings after --methods join the overrides, --quick and --pilot
    # fill in the sizes, and --no-mean-gradients is named for what it turns off.
    preset: str = option("arith-tiny", "Training preset (or YAML file) whose trainer measures the gradients: "
                         "model, data, prompt template, reward, sampling, loss type and the reshaping knobs "
                         "(`oar train`'s).")
    model: str | None = option(None, "Checkpoint whose gradients are measured: a catalogue name or a folder "
                               "(default: the preset's).")
    overrides: tuple[str, ...] = option((), "key=value settings of the preset, as `oar train` takes them "
                                        "(temperature=0.5, num_generations=8, max_completion_length=96, ...).",
                                        flag=None)
    methods: tuple[str, ...] = option((), "Methods compared with GRPO ('none', always included): registered "
                                      "names or name:key=value (oar_g:n_noise=8). Default: the registry's defaults for "
                                      "alignment, each as trained and, where analysis reads it otherwise, as read "
                                      "(none oar_g oar_g:n_noise=8 oar_p oar_p_step grail entropy random ktae).")
    batches: int = option(100, "Training batches B: each is measured under every method, on the same "
                          "rollouts.", flag=None)
    batch_prompts: int = option(2, "Prompts per batch; a batch is batch_prompts x num_generations completions.")
    pool_batches: int = option(16, "Batches of the reference pool, disjoint from the training batches; g* is "
                               "the mean of their GRPO gradients. Raise it for a steadier g* (its split-half "
                               "cosine says how steady).", flag=None)
    mean_gradients: bool = option(True, "Keep each method's running sums of its batch gradients (gigabytes on "
                                  "a real model) for the bias-or-variance estimates; without them the run's "
                                  "result files alone resume it on a fresh machine.", flag=None)
    seed: int = option(0, "Seed of the prompts' order, the sampling of each screening call and the methods' "
                       "random numbers.")

    def __post_init__(self) -> None:
        from oar_attrib.commands import MAX_COUNT

        for name, high in (("batches", MAX_COUNT), ("batch_prompts", MAX_PROMPTS), ("pool_batches", MAX_COUNT)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
                raise AlignError(f"{name} must be an integer from 1 to {high}, got {value!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            raise AlignError(f"seed must be an integer from 0 to 2**32 - 1, got {self.seed!r}")
        if self.pool_batches < 2:
            raise AlignError("pool_batches must be >= 2: g*'s split-half reliability needs two halves")
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "methods", tuple(self.methods))

    @property
    def groups_needed(self) -> int:
        """Mixed-reward groups the screen must find: the pool's and the batches'."""
        return (self.pool_batches + self.batches) * self.batch_prompts
