"""The documentation site (mkdocs.yml, docs/) builds with --strict: no broken link, no missing
page or anchor, no API object mkdocstrings cannot find; its API pages document the public
objects from their docstrings and its command-line reference lists every `oar` command from
the parsers. The README stays a door: short, the two commands first."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oar_attrib.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
from cli_reference import _commands, cli_reference  # noqa: E402  (the site's own hook)

FIRST_COMMANDS = ["bash scripts/setup.sh && .venv/bin/oar demo",
                  "bash scripts/setup.sh && .venv/bin/python -m pytest -q"]


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow
def test_the_api_pages_document_the_public_objects(site):
    api = site / "reference" / "api"
    pages = {name: _text(api / name / "index.html") for name in ("attribution", "weights", "training", "models")}
    wanted = {"attribution": ["attribute(", "Token importances, weights and credit metrics", "locate_answer"],
              "weights": ["ReshapeSettings", "score_and_weight", "bilevel_weights"],
              "training": ["OARGRPOTrainer", "OARConfig", "math_verify_reward"],
              "models": ["load_model(", "name_or_path"]}
    for name, phrases in wanted.items():
        squeezed = re.sub(r"\s+", "", pages[name])  # tags were spaces: compare without any
        for phrase in phrases:
            assert re.sub(r"\s+", "", phrase) in squeezed, (name, phrase)


@pytest.mark.slow
def test_the_cli_reference_lists_every_command_and_flag(site):
    page = _text(site / "reference" / "cli" / "index.html")
    parser = build_parser()
    commands = list(_commands(parser, ["oar"]))
    assert len(commands) >= 10
    for path, command, _ in commands:
        assert " ".join(path) in page
        for action in command._actions:
            for flag in action.option_strings:
                if flag.startswith("--"):
                    assert flag in page, (path, flag)


def test_the_cli_reference_generator_on_its_own():
    text = cli_reference(build_parser())
    section = text[text.index("## `oar attribute`"):]
    section = section[:section.index("\n## ", 1)]
    assert "| `--answer-format` | `auto` |" in section
    assert "usage: oar attribute" in section
    # the column gives the default; the help text does not say it again
    tau = next(line for line in section.splitlines() if line.startswith("| `--tau`"))
    assert "(default:" not in tau


def test_the_readme_is_a_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 220
    blocks = re.findall(r"^```(?:bash|python)\n(.*?)^```", readme, flags=re.M | re.S)
    assert [b.strip() for b in blocks[:2]] == FIRST_COMMANDS
    assert "mkdocs serve" in readme  # how to build and read the site locally
    for target in re.findall(r"\]\(((?:docs/)?[^)#:]+\.md)", readme):
        assert (ROOT / target).is_file(), target


def test_docstring_argument_lines_become_a_list_and_nothing_else_changes():
    from docstrings import as_list

    text = ("Summary line.\n\nprompts, responses: one or B of each\n    continued here.\n"
            "probe: the probe.\nNote: not an argument.\nA paragraph after.")
    assert as_list(text, {"prompts", "responses", "probe"}) == (
        "Summary line.\n\n- `prompts`, `responses`: one or B of each\n  continued here.\n"
        "- `probe`: the probe.\n\nNote: not an argument.\nA paragraph after.")
    assert as_list(text, set()) == text
