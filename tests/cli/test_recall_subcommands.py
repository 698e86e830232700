"""`oar recall`'s subcommands are generated from the instrument registry: each registered
instrument has a subcommand with exactly its settings' flags (and the method knobs it offers),
the parser and the settings' `__post_init__` read the same bounds, and the one-command spelling
of before (`oar recall --sets graded ...`) is answered with one line naming the subcommand."""
import argparse
import dataclasses
import shlex
from pathlib import Path

import pytest

from oar_attrib import cli
from oar_attrib.cli.recall import knob_methods, old_spelling, settings_from_args
from oar_attrib.cli.choices import knob_flag, METHOD_KNOBS
from oar_attrib.commands import check_flag_numbers, command_parser
from oar_attrib.errors import InputError
from oar_attrib.instruments import InstrumentSettings, available_instruments, instrument_spec

ROOT = Path(__file__).resolve().parents[2]

# (the old spelling, the subcommand its one line names)
OLD = [("recall --model arith-tiny --n 8", "world"), ("recall", "world"),
       ("recall --sets direct counterfactual --granularity token --cf-positions 8", "world"),
       ("recall --granularity step --n 6 --methods oar_p_step random", "steps"),
       ("recall --granularity=step --step-pool sum", "steps"),
       ("recall --data q.jsonl --n 2 --methods random --cf-positions 2 --cf-cache cf.jsonl --json", "data"),
       ("recall --model arith-tiny --n 8 --sets graded --json", "graded"),
       ("recall --data wordworld:tiny --sets graded --graded-k 8 --cf-positions 12", "graded"),
       ("recall --model arith-tiny --n 8 --sets advantage --json", "advantage"),
       ("recall --sets advantage --cf-positions 8", "advantage")]


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def _settings(argv: list[str]):
    args = _parse(argv)
    return settings_from_args(instrument_spec(args.recall_mode).settings, args)


@pytest.mark.parametrize("old, mode", OLD, ids=[o for o, _ in OLD])
def test_an_old_spelling_is_one_line_naming_its_subcommand_and_exit_2(old, mode, capsys):
    assert cli.main(old.split()) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("oar recall: error: `oar recall")
    assert f"is now `oar recall {mode}`" in err and "Traceback" not in err
    if mode == "graded" and "--cf-positions" in old:
        assert "--cf-positions is --positions" in err


def test_graded_with_the_old_positions_flag_names_the_new_one(capsys):
    assert cli.main(["recall", "graded", "--cf-positions", "8"]) == 2
    assert capsys.readouterr().err == ("oar recall graded: error: --cf-positions is now --positions (tested "
                                       "positions per trace); see `oar recall graded --help`\n")


def test_other_command_lines_are_not_the_old_spelling():
    for argv in (["attribute", "--sets", "graded"], ["recall", "--help"], ["recall", "-h"], [],
                 ["recall", "world", "--n", "3"], ["recall", "advantage", "--n", "3"], ["recall", "merge", "a", "b"]):
        assert old_spelling(argv) is None


def _flags(mode: str) -> set[str]:
    parser = cli.subcommands(cli.subcommands(cli.build_parser())["recall"])[mode]
    return {a.option_strings[-1] for a in parser._actions if a.option_strings} - {"--help"}


def _field_flags(cls) -> set[str]:
    return {f.metadata.get("flag") or "--" + f.name.replace("_", "-") for f in dataclasses.fields(cls)
            if f.metadata.get("flag", True) is not None}


def test_every_registered_instrument_has_a_subcommand_with_exactly_its_flags():
    recall = cli.subcommands(cli.subcommands(cli.build_parser())["recall"])
    assert set(recall) == set(available_instruments()) | {"merge"}
    for name in available_instruments():
        spec = instrument_spec(name)
        knobs = {knob_flag(m, p) for m, p, _, _ in METHOD_KNOBS if m in knob_methods(spec.own_knobs)}
        model = {"--device", "--dtype", "--max-batch-tokens"}  # every command's (`commands.add_model_args`)
        assert _flags(name) == _field_flags(spec.settings) | knobs | model, name
        assert issubclass(spec.settings, InstrumentSettings) and spec.settings.__dataclass_params__.frozen
    assert "--resample-n-samples" not in _flags("steps") and "--resample-samples" in _flags("steps")


def test_the_advantage_experiment_script_parses_as_the_advantage_subcommand():
    """docs/experiments/advantage/run.sh (a long run) parses to the settings its README states."""
    text = (ROOT / "docs/experiments/advantage/run.sh").read_text()
    line = " ".join(part.strip().rstrip("\\") for part in text.split("$OAR ", 1)[1].split("\n")[:3])
    line = line.split(">")[0].replace("$n", "8").replace("$METHODS", "oar_p entropy random")
    settings = _settings(shlex.split(line.replace("$OUT", "docs/experiments/advantage")))
    assert settings.data == "wordworld:tiny" and settings.method_params == {"oar_g": {"n_noise": 8}}
    assert (settings.group_samples, settings.continuations, settings.max_new_tokens, settings.min_steps) == (4, 16, 128, 5)


def test_the_settings_object_is_what_the_parser_built():
    settings = _settings("recall graded --n 3 --positions 12 --oar-g-n-noise 4 --max-batch-tokens 512".split())
    assert (settings.n, settings.positions, settings.max_batch_tokens) == (3, 12, 512)
    assert settings.params()["oar_g"]["n_noise"] == 4 and settings.params()["oar_p"] == {"max_batch_tokens": 512}


# The parser's check (`check_flag_numbers`) and the settings' own (`__post_init__`) read one
# declaration of each bound: every bounded field is refused by both just past it, accepted at it.
def _bounded():
    for name in available_instruments():
        cls = instrument_spec(name).settings
        for f in dataclasses.fields(cls):
            low, high = f.metadata.get("bounds") or (None, None)
            yield from [(name, f, v, v == low or v == high) for v in (low, high) if v is not None]
            yield from [(name, f, v, False) for v in (
                None if low is None else low - 1, None if high is None else high * 10 + 1) if v is not None]


@pytest.mark.parametrize("name, f, value, ok", list(_bounded()), ids=lambda x: getattr(x, "name", str(x)))
def test_the_parser_and_the_settings_read_the_same_bounds(name, f, value, ok):
    flag = "--" + f.name.replace("_", "-")
    parser = cli.build_parser()
    base = ["recall", name] + (["--data", "q.jsonl"] if name == "data" else [])
    value = int(value) if isinstance(value, int) or float(value).is_integer() and f.type in ("int", "int | None") else value
    args = parser.parse_args(base + [flag, str(value)])
    problems = []
    for check in (lambda: check_flag_numbers(command_parser(parser, args), args),
                  lambda: settings_from_args(instrument_spec(name).settings, args)):
        try:
            check()
            problems.append(None)
        except InputError as err:
            problems.append(str(err))
    assert (problems[0] is None) == (problems[1] is None) == ok, problems
    if not ok:
        assert problems[0] == problems[1] and problems[0].startswith(flag)


def test_one_seed_bound_everywhere():
    from oar_attrib.commands import INT_RANGES, SEED
    from oar_attrib.training.align.settings import AlignSettings

    assert INT_RANGES["seed"] == SEED == (0, 2**32 - 1)
    assert {f.name: f for f in dataclasses.fields(InstrumentSettings)}["seed"].metadata["bounds"] == SEED
    with pytest.raises(Exception, match="2\\*\\*32 - 1"):
        AlignSettings(seed=2**32)
    with pytest.raises(InputError, match="--seed must be an integer from 0 to 2\\*\\*32 - 1"):
        _settings(["recall", "steps", "--seed", str(2**32)])
