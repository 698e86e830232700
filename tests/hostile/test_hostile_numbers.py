"""Every number a command takes is checked before a model loads or a file is written: the
class, not the examples. The flags are read from the parser itself, so a flag added later is
tried here too: an integer flag gets -1 and 10**12, a number flag NaN and infinity, and each
command must end in one line and exit 2 with its folder unchanged. `key=value` settings of
the training commands (YAML values) get NaN and infinity the same way."""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from oar_attrib import cli
from oar_attrib.store import Store

ROOT = Path(__file__).resolve().parents[2]

# A command's smallest argv that gets past its other checks (files made by `_files`).
BASE = {
    "attribute": ["attribute", "--model", "arith-tiny", "--input", "in.jsonl", "--out", "out.jsonl",
                  "--no-progress"],
    "generate": ["generate", "--model", "arith-tiny", "--data", "q.jsonl", "--out", "gen.jsonl", "--no-progress"],
    "import": ["import", "jsonl", "rows.jsonl", "--out", "runs.db"],
    "recall world": ["recall", "world", "--model", "arith-tiny", "--no-progress"],
    "recall steps": ["recall", "steps", "--model", "arith-tiny", "--no-progress"],
    "recall data": ["recall", "data", "--model", "arith-tiny", "--data", "q.jsonl", "--no-progress"],
    "recall graded": ["recall", "graded", "--model", "arith-tiny", "--no-progress"],
    "recall advantage": ["recall", "advantage", "--model", "arith-tiny", "--no-progress"],
    "recall intervention": ["recall", "intervention", "--model", "arith-tiny", "--no-progress"],
    "align": ["align", "--model", "arith-tiny", "--store", "align", "--no-progress"],
    "eval": ["eval", "--model", "arith-tiny"],
    "train": ["train", "--preset", "arith-tiny", "--output-dir", "run"],
    "demo": ["demo", "--no-real", "--build-only", "--no-progress"],
    "web": ["web", "--store", "runs.db"],
    "experiment run": ["experiment", "run", "grid.yaml"],
}
# Values that are legal: a seed may be any integer in [0, 2**32) (`commands.SEED`).
LEGAL = {("--seed", "1000000000")}


def _numeric_flags():
    """(command, flag, kind) of every int or float option of every command and subcommand."""
    found = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])
            elif action.option_strings and action.type in (int, float):
                found.append((" ".join(path), action.option_strings[0], action.type))
            elif action.option_strings and getattr(action.type, "kind", None) in (int, float):
                found.append((" ".join(path), action.option_strings[0], action.type.kind))

    walk(cli.build_parser(), [])
    return found


FLAGS = _numeric_flags()
CASES = [(command, flag, value) for command, flag, kind in FLAGS
         for value in (("-1", "1000000000000") if kind is int else ("nan", "inf"))
         if (flag, value) not in LEGAL]


def test_every_command_with_numbers_is_tried():
    commands = {command for command, _, _ in FLAGS}
    assert commands <= set(BASE), sorted(commands - set(BASE))  # a new command: give it a BASE line
    assert len(CASES) > 100


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The command's files in a fresh folder (the working directory); nothing may start."""
    import oar_attrib.webapp.cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "response": "2"}) + "\n")
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "1 + 1 =", "response": "2", "reward": 1.0}) + "\n")
    shutil.copy(ROOT / "training" / "experiments" / "arith-tiny-grid.yaml", tmp_path / "grid.yaml")
    Store(tmp_path / "runs.db").close()

    def no_server(*args, **kwargs):
        raise AssertionError("a server started before the arguments were checked")

    def no_process(*args, **kwargs):
        raise AssertionError("a process started before the arguments were checked")

    monkeypatch.setattr(oar_attrib.webapp.cli, "serve", no_server)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    return tmp_path


@pytest.mark.parametrize("command, flag, value", CASES, ids=[f"{c}{f}={v}" for c, f, v in CASES])
def test_a_bad_number_is_one_line_before_anything_starts(command, flag, value, folder, capsys, snapshot,
                                                        no_model):
    before = snapshot(folder)
    try:
        code = cli.main([*BASE[command], flag, value])
    except SystemExit as exit_:  # the parser's own refusal (its usage line, then the error)
        code = exit_.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in "\n".join(err), (code, err)
    mine = [line for line in err if not line.startswith(("usage:", " "))]
    names = (flag, flag.lstrip("-").replace("-", "_"))  # the flag, or the setting it fills
    assert len(mine) == 1 and any(name in mine[0] for name in names), err
    assert snapshot(folder) == before


@pytest.mark.parametrize("argv, words", [
    (["align", "--model", "arith-tiny", "--store", "align", "--no-progress", "temperature=nan"], "temperature=nan"),
    (["align", "--model", "arith-tiny", "--store", "align", "--methods", "none", "oar_g:n_noise=.inf"],
     "oar_g:n_noise=inf"),
    (["train", "--preset", "arith-tiny", "--output-dir", "run", "learning_rate=inf"], "learning_rate=inf"),
    (["experiment", "run", "grid.yaml", "run.temperature=nan"], "run.temperature=nan"),
    (["experiment", "run", "grid.yaml", "experiment.steps=-.inf"], "experiment.steps=-inf"),
])
def test_a_setting_that_is_not_finite_is_one_line_before_anything_starts(argv, words, folder, snapshot, refused,
                                                                         no_model):
    before = snapshot(folder)
    refused(*argv, words=(words, "finite"))
    assert snapshot(folder) == before


def test_a_settings_file_with_nan_is_refused_naming_the_file(folder, snapshot, refused, no_model):
    grid = folder / "grid.yaml"
    grid.write_text(grid.read_text() + "\ntrainer:\n  temperature: .nan\n" if "trainer:" not in grid.read_text()
                    else grid.read_text().replace("trainer:", "trainer:\n  temperature: .nan", 1))
    before = snapshot(folder)
    refused("experiment", "run", "grid.yaml", words=("trainer.temperature=nan", "grid.yaml", "finite"))
    assert snapshot(folder) == before
