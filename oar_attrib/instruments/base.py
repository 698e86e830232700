"""The instruments' registry and small base: what every oracle/recall instrument shares.

An instrument is a settings dataclass (`InstrumentSettings` and its own fields, each a flag
made by `commands.option`) and a function that takes that object, runs the steps records ->
answers -> attribution -> oracle -> per-trace metrics -> summary (`analysis.stats`) -> reading
in words, prints its report and returns the exit status. It registers with

    @register_instrument("graded", GradedRecall, "the graded counterfactual oracle (...)")
    def run(settings: GradedRecall) -> int: ...

and `oar recall <name>` is generated from the registry (`cli.recall`): one subcommand per
instrument with exactly its settings' flags and the method knobs it offers, whose parsed
settings object is what the function receives. `unknown names` are refused with the list.

Every instrument takes `--shard K/N` (`shard.Shard`): the units of its deterministic order
(traces, records, groups) whose index i has i % N == K - 1, written to a cache of its own
(`shard.shard_path`), merged by `oar recall merge` (`shard.merge`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable

from ..commands import INT_RANGES, MAX_COUNT, SEED, check_bounds, option
from ..defaults import DEFAULT_MODEL, PROBE, PROBES
from ..errors import InputError, unknown_name
from .shard import Shard

if TYPE_CHECKING:
    from .cache import OracleCache


def _method_name(name: str) -> str:
    from ..cli.choices import method_name

    return method_name(name)


def _probe_name(name: str) -> str:
    from ..cli.choices import probe_name

    return probe_name(name)


@dataclass(frozen=True, kw_only=True)
class InstrumentSettings:
    """What every instrument takes: the model, how many units, the methods and their knobs, the
    probe, the output, the shard. Checked on construction (the fields' bounds, the ones the
    parser checks too: `commands.check_bounds`)."""

    model: str = option(DEFAULT_MODEL, "bundled name or local checkpoint folder")
    n: int = option(200, "number of held-out problems", bounds=(1, MAX_COUNT))
    seed: int = option(0, "seed of problems, sampling and bootstrap", bounds=SEED)
    methods: tuple[str, ...] | None = option(None, "methods (default: all registered)", type=_method_name)
    probe: str = option(PROBE, f"outcome probe (METHOD.md 3): one of {', '.join(PROBES)}", type=_probe_name)
    json: bool = option(False, "print one JSON object", action="store_true")
    no_progress: bool = option(False, "hide the progress bar", action="store_true")
    shard: Shard | None = option(None, "run shard K of N: the units (traces, records or groups) whose index i in "
                                       "the instrument's order has i %% N == K - 1, kept in a cache of their own "
                                       "beside --cf-cache; `oar recall merge` joins the shards' caches",
                                 type=Shard.parse, metavar="K/N")
    # Where and how the model loads: the flags every command shares (`commands.add_model_args`).
    device: str | None = option(None, "torch device (default: CPU)", flag=None)
    dtype: str = option("float32", "dtype of the model's weights and activations", flag=None)
    max_batch_tokens: int | None = option(None, "OAR-P: tokens in one forward", flag=None,
                                          bounds=INT_RANGES["max_batch_tokens"])
    method_params: dict | None = option(None, flag=None)  # the method knobs given (`--oar-g-n-noise 8`)

    def __post_init__(self) -> None:
        for f in fields(self):  # argparse's lists as tuples: the settings stay frozen all through
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        check_bounds(self)

    def params(self, budget: bool = True) -> dict | None:
        """The methods' keyword arguments: the knobs given and, with `budget`, the token budget
        of every method that takes one (`--max-batch-tokens`)."""
        from ..cli.choices import budget_params

        base = budget_params(self.max_batch_tokens) if budget else None
        out = {m: dict(p) for m, p in (base or {}).items()}
        for method, given in (self.method_params or {}).items():
            out.setdefault(method, {}).update(given)
        return out or None

    @property
    def progress(self) -> bool:
        return not self.no_progress


@dataclass(frozen=True)
class InstrumentSpec:
    """A registered instrument: its settings class, the function that runs it, its line in
    `oar recall --help`, and the method knobs it sets itself (their flags are not offered)."""

    name: str
    settings: type
    run: Callable[[InstrumentSettings], int]
    summary: str
    own_knobs: tuple[str, ...] = ()


_INSTRUMENTS: dict[str, InstrumentSpec] = {}


def register_instrument(name: str, settings: type, summary: str, *, own_knobs: tuple[str, ...] = ()):
    """Decorator: register `run(settings) -> exit status` as instrument `name` (module docstring)."""
    if not (isinstance(settings, type) and issubclass(settings, InstrumentSettings)):
        raise ValueError(f"instrument {name!r}: its settings must subclass InstrumentSettings")

    def wrap(run: Callable[[InstrumentSettings], int]):
        if name in _INSTRUMENTS:
            raise ValueError(f"instrument {name!r} is registered twice; pick another name")
        _INSTRUMENTS[name] = InstrumentSpec(name, settings, run, summary, tuple(own_knobs))
        return run

    return wrap


def registered(name: str | None = None):
    """The registry as it stands: every spec by name, or `name`'s (UnknownNameError listing the
    names). `instruments.instrument_spec` loads the built-in instruments first."""
    if name is None:
        return dict(_INSTRUMENTS)
    if name not in _INSTRUMENTS:
        raise unknown_name("instrument", name, _INSTRUMENTS)
    return _INSTRUMENTS[name]


def settings_of(cls: type, settings, keywords: dict, caller: str, aliases: dict | None = None,
                hint: str = ""):
    """The `cls` a Python call runs on (an instrument's settings, an oracle's): `settings`, or
    one made of `keywords`, its fields (`aliases`: other spellings of a field; `progress` is
    `not no_progress`), checked as any settings object is. TypeError for both at once, for a
    settings object of another class (`hint`: where its values go now) or an unknown keyword."""
    if settings is not None:
        if keywords:
            raise TypeError(f"{caller}: pass settings or keywords, not both ({', '.join(keywords)})")
        if not isinstance(settings, cls):
            raise TypeError(f"{caller}: settings is a {cls.__name__}, not a {type(settings).__name__}"
                            + (f"; {hint}" if hint else ""))
        return settings
    given = {(aliases or {}).get(k, k): v for k, v in keywords.items()}
    if "progress" in given and "no_progress" in {f.name for f in fields(cls)}:
        given["no_progress"] = not given.pop("progress")
    unknown = sorted(set(given) - {f.name for f in fields(cls) if f.init})
    if unknown:
        raise TypeError(f"{caller}: no setting named {', '.join(unknown)} (the fields of {cls.__name__}"
                        + (f"; {hint}" if hint else "") + ")")
    return cls(**given)


class OracleSettings:
    """What an oracle's settings dataclass shares: `record()`, the fields that decide its
    results (those that key its cache and that a report states), leaving out the ones made
    with `option(..., record=False)` (how it decodes: the same results either way)."""

    def record(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("record", True)}


def need_cache(settings) -> None:
    """InputError when a `--shard` run has no `--cf-cache` to keep its units in."""
    if settings.shard is not None and getattr(settings, "cf_cache", None) is None:
        raise InputError("--shard needs --cf-cache: a shard's results are kept in a cache of their own beside "
                         "it, for `oar recall merge`")


@dataclass
class Run:
    """What every step of one instrument's run shares: the model and its tokenizer, the run's
    cache (`OracleCache`), the oracle's settings (their `seed` seeds what the run samples; None
    for a run that only reads answers) and whether to show progress bars. An instrument's run
    adds what it tallies across the steps (`graded`: the decode work of the oracles read back;
    `advantage`: each boundary's seconds when it was made)."""

    model: object
    tokenizer: object
    cache: "OracleCache"
    settings: object = None
    progress: bool = False

    def record(self, **extra) -> dict:
        """The record keying a model output that is not a method's scores (an answer, a group,
        an oracle): the model's identity and dtype, and `extra`."""
        from ..records.settings_record import model_dtype, model_identity

        return {"model": model_identity(self.model), "dtype": model_dtype(self.model), **extra}
