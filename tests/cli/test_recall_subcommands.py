"""`oar recall`'s subcommands (`world`, `steps`, `data`, `graded`, `advantage`): each has the
flags of its settings dataclass only, a flag of another one is the parser's refusal (exit 2),
and the one-command spelling of before (`oar recall --sets advantage ...`) parses to exactly
the settings of its subcommand's, with one note on stderr and nothing on stdout."""
import argparse
import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from oar_attrib import cli
from oar_attrib.cli.recall_settings import (MODES, AdvantageRecall, GradedRecall, RecallSettings, new_spelling,
                                            settings_of)
from oar_attrib.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
NOTE = "the old spelling works until 0.3"

# (the old spelling, the new one) of each mode, as the docs and the tests wrote them.
SPELLINGS = [
    ("recall --model arith-tiny --n 8", "recall world --model arith-tiny --n 8"),
    ("recall", "recall world"),
    ("recall --sets direct counterfactual --granularity token --cf-positions 8 --replace resample",
     "recall world --sets direct counterfactual --cf-positions 8 --replace resample"),
    ("recall --granularity step --n 6 --methods oar_p_step random --json --no-progress --intervention-samples 2",
     "recall steps --n 6 --methods oar_p_step random --json --no-progress --intervention-samples 2"),
    ("recall --granularity=step --step-pool sum", "recall steps --step-pool sum"),
    ("recall --data q.jsonl --n 2 --methods random --cf-positions 2 --cf-cache cf.jsonl --json",
     "recall data --data q.jsonl --n 2 --methods random --cf-positions 2 --cf-cache cf.jsonl --json"),
    ("recall --model arith-tiny --n 8 --sets graded --json", "recall graded --model arith-tiny --n 8 --json"),
    ("recall --model smollm2-135m --data wordworld:tiny --n 50 --sets graded --graded-k 8 --cf-positions 12 "
     "--oar-g-n-noise 8 --group-samples 8 --cf-cache graded.jsonl --json",
     "recall graded --model smollm2-135m --data wordworld:tiny --n 50 --graded-k 8 --positions 12 "
     "--oar-g-n-noise 8 --group-samples 8 --cf-cache graded.jsonl --json"),
    ("recall --model arith-tiny --n 8 --sets advantage --json", "recall advantage --model arith-tiny --n 8 --json"),
]


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def _run_sh_argv() -> list[str]:
    """The argv of docs/experiments/advantage/run.sh's `oar recall` (its shell variables filled in)."""
    text = (ROOT / "docs/experiments/advantage/run.sh").read_text()
    line = " ".join(part.strip().rstrip("\\") for part in text.split("$OAR ", 1)[1].split("\n")[:3])
    line = line.split(">")[0].replace("$n", "8").replace("$METHODS", "oar_p entropy random")
    return shlex.split(line.replace("$OUT", "docs/experiments/advantage"))


@pytest.mark.parametrize("old, new", SPELLINGS, ids=[old for old, _ in SPELLINGS])
def test_an_old_spelling_parses_as_its_subcommand_with_one_note_on_stderr(old, new, capsys):
    rewritten = new_spelling(old.split())
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and NOTE in err and err.startswith("oar recall: note: `")
    assert rewritten == new.split()
    assert vars(_parse(rewritten)) == vars(_parse(new.split()))
    assert settings_of(_parse(rewritten)) == settings_of(_parse(new.split()))
    assert new_spelling(new.split()) == new.split() and capsys.readouterr() == ("", "")  # the new one: no note


def test_the_note_names_what_the_old_spelling_is_now(capsys):
    new_spelling(["recall", "--sets", "advantage", "--n", "8"])
    assert capsys.readouterr().err == ("oar recall: note: `oar recall --sets advantage` is now "
                                       f"`oar recall advantage`; {NOTE}\n")
    new_spelling(["recall", "--n", "8"])
    assert "`oar recall` without a subcommand is now `oar recall world`" in capsys.readouterr().err
    new_spelling(["recall", "--data", "q.jsonl", "--sets", "graded", "--cf-positions", "4"])
    assert "`oar recall --sets graded --cf-positions` is now `oar recall graded --positions`" in capsys.readouterr().err


def test_the_advantage_experiment_script_parses_as_the_advantage_subcommand(capsys):
    """docs/experiments/advantage/run.sh (a long run) parses, in the new spelling, with no note."""
    argv = _run_sh_argv()
    assert argv[:2] == ["recall", "advantage"] and "--sets" not in argv
    settings = settings_of(_parse(new_spelling(argv)))
    assert capsys.readouterr() == ("", "")
    assert isinstance(settings, AdvantageRecall) and settings.data == "wordworld:tiny"
    assert (settings.group_samples, settings.continuations, settings.max_new_tokens, settings.min_steps) == (4, 16, 128, 5)


def test_graded_keeps_cf_positions_as_its_positions(capsys):
    settings = settings_of(_parse(new_spelling(["recall", "graded", "--cf-positions=12"])))
    assert isinstance(settings, GradedRecall) and settings.positions == 12
    assert "`oar recall graded --cf-positions` is now `oar recall graded --positions`" in capsys.readouterr().err


def test_other_commands_are_left_as_they_are(capsys):
    for argv in (["attribute", "--sets", "graded"], ["recall", "--help"], ["recall", "-h"], [],
                 ["recall", "world", "--n", "3"], ["recall", "advantage", "--n", "3"]):
        assert new_spelling(argv) == argv
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("argv", [
    "recall world --graded-k 8", "recall world --cf-cache c.jsonl", "recall world --data q.jsonl",
    "recall world --granularity step", "recall steps --sets direct", "recall steps --cf-positions 8",
    "recall data --n 2", "recall data --data q.jsonl --step-pool sum", "recall data --data q.jsonl --sets graded",
    "recall graded --replace pad", "recall graded --sets direct", "recall graded --continuations 4",
    "recall advantage --graded-k 2", "recall advantage --granularity step", "recall advantage --sets advantage",
    "recall world --sets advantage", "recall world --sets upstream",
])
def test_a_flag_of_another_mode_is_the_parsers_refusal(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parse(argv.split())
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_an_old_spelling_the_one_command_refused_is_still_refused(capsys):
    """`--sets advantage --granularity step` (advantage scores steps itself) and graded beside
    other sets were `say(...); return 2`: now the parser's exit 2, after the note."""
    for argv in (["recall", "--sets", "advantage", "--granularity", "step"], ["recall", "--sets", "direct", "graded"],
                 ["recall", "--data", "q.jsonl", "--granularity", "step"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        out, err = capsys.readouterr()
        assert out == "" and NOTE in err and "error:" in err


def test_oar_recall_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["recall", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MODES) and "--n" not in out
    for name in MODES:  # each subcommand's own help
        with pytest.raises(SystemExit):
            cli.main(["recall", name, "--help"])
        assert f"usage: oar recall {name}" in capsys.readouterr().out


def _flags(mode: str) -> set[str]:
    parser = cli.subcommands(cli.subcommands(cli.build_parser())["recall"])[mode]
    return {a.option_strings[-1] for a in parser._actions if a.option_strings} - {"--help"}


def test_each_mode_has_its_settings_flags_and_the_shared_ones_once():
    shared = {"--model", "--n", "--seed", "--methods", "--probe", "--json", "--no-progress", "--device", "--dtype",
              "--max-batch-tokens", "--ig-n-steps", "--ig-internal-batch-size", "--oar-g-n-noise", "--oar-g-noise-std"}
    own = {"world": {"--preset", "--sets", "--cf-positions", "--replace"},
           "steps": {"--preset", "--step-pool", "--resample-samples", "--intervention-samples"},
           "data": {"--data", "--sets", "--cf-positions", "--replace", "--max-new-tokens", "--cf-cache"},
           "graded": {"--preset", "--data", "--positions", "--graded-k", "--max-new-tokens", "--cf-cache",
                      "--group-samples"},
           "advantage": {"--preset", "--data", "--group-samples", "--continuations", "--temperature", "--min-steps", "--label",
                         "--max-new-tokens", "--cf-cache"}}
    for mode, flags in own.items():
        assert _flags(mode) == shared | flags, mode
    for cls in MODES.values():  # every shared field is the base's (declared once)
        assert {f.name for f in dataclasses.fields(RecallSettings)} <= {f.name for f in dataclasses.fields(cls)}
        assert cls.__dataclass_params__.frozen


def test_settings_check_their_counts_on_construction():
    with pytest.raises(InputError, match="--n must be from 1"):
        settings_of(_parse(["recall", "world", "--n", "0"]))
    with pytest.raises(InputError, match="--positions must be from 1"):
        settings_of(_parse(["recall", "graded", "--positions", "0"]))
    with pytest.raises(InputError, match="--seed must be from 0 to 2\\*\\*32 - 1"):
        settings_of(_parse(["recall", "steps", "--seed", str(2**32)]))
    with pytest.raises(InputError, match="--resample-samples must be >= 1"):
        settings_of(_parse(["recall", "steps", "--resample-samples", "0"]))


def test_old_spelling_json_stays_the_last_stdout_line(capsys):
    """`oar recall --n 2 --methods random --json` on the bundled model: the note goes to stderr,
    stdout is the JSON object alone (scripts read its last line)."""
    assert cli.main(["recall", "--n", "2", "--methods", "random", "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["record"]["recall"]["granularity"] == "token" and report["record"]["recall"]["sets"] == [
        "direct", "chain"]
    assert len(out.strip().splitlines()) == 1 and NOTE in err and NOTE not in out
