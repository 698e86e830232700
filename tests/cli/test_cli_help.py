"""Every `oar` subcommand's --help shows each option's default."""
import argparse

import pytest

from oar_attrib import cli


def _subparsers():
    """Every subcommand by name, `oar recall`'s own as "recall MODE"."""
    found = cli.subcommands(cli.build_parser())
    return found | {f"recall {name}": sub for name, sub in cli.subcommands(found["recall"]).items()}


RECALL = ["recall world", "recall steps", "recall data", "recall graded", "recall advantage"]


@pytest.mark.parametrize("command", ["eval", "attribute", *RECALL, "train", "web", "demo"])
def test_help_shows_every_default(command, capsys):
    sub = _subparsers()[command]
    with pytest.raises(SystemExit):
        sub.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    formatter = sub._get_formatter()
    shown = []
    for action in sub._actions:
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
            continue
        default = action.default
        rendered = str(default) if not isinstance(default, float) else repr(default)
        # The option's help as printed (the formatter's "(default: X)" included) names the value;
        # an empty default is stated in words ("default: every registered method").
        printed = " ".join(formatter._expand_help(action).split())
        named = rendered in printed if default not in ((), []) else "(default: " in printed
        assert "default" in printed and named, (action.dest, printed)
        assert printed.replace(" ", "") in text.replace(" ", ""), action.dest  # and --help shows it
        shown.append(action.dest)
    assert shown, "no option with a default: the check above ran on nothing"


def _model_flags(parser: argparse.ArgumentParser) -> dict:
    keep = ("option_strings", "default", "type", "choices", "help", "nargs")
    return {a.dest: {k: getattr(a, k) for k in keep} for a in parser._actions
            if a.dest in ("device", "dtype", "max_batch_tokens")}


@pytest.mark.parametrize("command, budget", [("attribute", True), *((r, True) for r in RECALL), ("eval", False),
                                             ("web", None)])
def test_model_flags_are_one_shape_across_commands(command, budget):
    """--device, --dtype and --max-batch-tokens mean the same (default, type, choices, help)
    in every command that has them: those of `configs.add_model_args`. `oar web` loads its live
    model on the CPU (dtype only); `oar demo` takes its dtype from DemoConfig."""
    from oar_attrib.commands import add_model_args

    reference = argparse.ArgumentParser()
    add_model_args(reference, budget=bool(budget))
    want = _model_flags(reference)
    if budget is None:
        want = {"dtype": want["dtype"]}
    assert _model_flags(_subparsers()[command]) == want
    assert set(want) >= {"dtype"} and ("max_batch_tokens" in want) == bool(budget)
