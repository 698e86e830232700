"""The instruments: oracles and the recall instruments that measure whether a method's
importance finds the tokens or steps that decide the answer. One module per instrument
(`world`, `steps`, `data`, `graded`, `advantage`), each a settings dataclass and a function that
takes it, registered with `@register_instrument` (`base`); one cache (`cache.OracleCache`); one
way to split a run across processes (`shard`). `oar recall <name>` is generated from the
registry (`cli.recall`); docs/guide/instruments.md shows how to add one."""
from .base import InstrumentSettings, InstrumentSpec, register_instrument, registered
from .cache import OracleCache, cache_key
from .shard import Shard, merge


def instrument_spec(name: str) -> InstrumentSpec:
    """A registered instrument (the built-in ones registered first); UnknownNameError lists the names."""
    from . import members  # noqa: F401  (registration)

    return registered(name)


def available_instruments() -> list[str]:
    """The registered instruments: the built-in ones in `members.MEMBERS`' order (`oar recall
    --help`'s, whichever registered first), then any other in the order it registered."""
    from .members import MEMBERS

    order = [m.__name__.rsplit(".", 1)[1] for m in MEMBERS]
    names = list(registered())
    return sorted(names, key=lambda name: (order.index(name) if name in order else len(order), names.index(name)))


__all__ = ["InstrumentSettings", "InstrumentSpec", "OracleCache", "Shard", "available_instruments", "cache_key", "instrument_spec",
           "merge", "register_instrument"]
