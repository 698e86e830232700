"""What a reading prints to run next is the run's own command: `commands.flags_line` renders a
settings object's flags so that the `oar` parser reads them back into the same settings (the
changed fields aside), and the advantage and intervention readings end with such a line."""
import shlex

import pytest

from oar_attrib.cli import build_parser, main
from oar_attrib.cli.recall import settings_from_args
from oar_attrib.commands import flags_line
from oar_attrib.instruments import instrument_spec

RUNS = {
    "intervention": ["--model", "my model dir", "--data", "wordworld:tiny", "--n", "240", "--seed", "3",
                     "--continuations", "16", "--temperature", "0.7", "--negative", "placebo", "--by", "2",
                     "--max-new-tokens", "96"],
    "advantage": ["--model", "smollm2-135m", "--data", "q's.jsonl", "--n", "128", "--seed", "1", "--group-samples",
                  "4", "--continuations", "16", "--temperature", "0.7", "--max-new-tokens", "128", "--min-steps", "5",
                  "--label", "scored", "--methods", "oar_p", "oar_g", "random"],
}
NAMES = {
    "intervention": ("model", "data", "n", "seed", "continuations", "temperature", "by", "negative", "max_new_tokens"),
    "advantage": ("model", "data", "n", "seed", "group_samples", "continuations", "temperature", "max_new_tokens",
                  "min_steps", "label", "methods"),
}


def parsed(name: str, argv: list[str]):
    return settings_from_args(instrument_spec(name).settings, build_parser().parse_args(["recall", name, *argv]))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_line_reads_back_into_the_same_settings(name):
    ran = parsed(name, RUNS[name])
    line = flags_line(ran, NAMES[name], n=2 * ran.n, continuations=32)
    again = parsed(name, shlex.split(line))
    assert again.n == 2 * ran.n and again.continuations == 32
    for field in NAMES[name]:
        if field not in ("n", "continuations"):
            assert getattr(again, field) == getattr(ran, field), field


@pytest.mark.parametrize("argv, continuations", [
    (["recall", "intervention", "--model", "arith-tiny", "--n", "6", "--continuations", "4", "--seed", "5"], 8),
    (["recall", "advantage", "--model", "arith-tiny", "--n", "2", "--group-samples", "2", "--continuations", "2",
      "--methods", "entropy", "random", "--max-new-tokens", "48", "--seed", "5"], 16)])  # at least 16
def test_a_reading_ends_with_the_runs_own_command(argv, continuations, capsys):
    assert main(argv + ["--no-progress"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"Next: oar {argv[0]} {argv[1]} ")
    command = shlex.split(last[len("Next: oar "):].split(" (")[0])
    ran, again = parsed(argv[1], argv[2:]), parsed(argv[1], command[2:])
    assert again.model == "arith-tiny" and again.seed == 5 and again.n == 40
    assert again.continuations == continuations
    assert again.temperature == ran.temperature and again.max_new_tokens == ran.max_new_tokens
    assert again.methods == ran.methods
