"""Every `oar` subcommand's --help shows each option's default."""
import argparse

import pytest

from oar_attrib import cli


def _subparsers():
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


@pytest.mark.parametrize("command", ["eval", "attribute", "recall", "train", "web", "demo"])
def test_help_shows_every_default(command, capsys):
    sub = _subparsers()[command]
    with pytest.raises(SystemExit):
        sub.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    shown = 0
    for action in sub._actions:
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
            continue
        default = action.default
        rendered = str(default) if not isinstance(default, float) else repr(default)
        # The formatter's "(default: X)", or a help text that states the default itself.
        assert f"(default: {rendered})" in text or "default" in (action.help or ""), action.dest
        shown += 1
    assert shown > 0 or command in ("train",)
