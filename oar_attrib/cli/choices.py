"""Argument types that check a name against its registry when the command line is parsed, so
`oar` lists exactly what is registered (a method registered by a plugin or a test included),
and importing the command line loads no method module (nor torch) until a name is checked."""
from __future__ import annotations

import argparse

from ..errors import UnknownNameError


def method_name(name: str) -> str:
    """A registered importance method (`oar_attrib.available_methods()`)."""
    from ..methods import method_spec

    try:
        method_spec(name)
    except UnknownNameError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name


def probe_name(name: str) -> str:
    """An outcome probe (`oar_attrib.probes.PROBES`)."""
    from ..probes import check_probe

    try:
        check_probe(name)
    except UnknownNameError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return name
