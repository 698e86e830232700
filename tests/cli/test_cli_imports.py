"""`oar --help`, `oar <command> --help` for every command and `oar models` answer at once: they
import none of the stack (torch, transformers, TRL, the web framework, pandas, plotly) before a
command needs it. Checked by import inspection in a fresh interpreter, not by timing."""
import json
import subprocess
import sys

# What a command may import only once it runs: the scientific and the web stack.
HEAVY = ("torch", "transformers", "trl", "fastapi", "pandas", "plotly", "datasets", "accelerate",
         "captum", "uvicorn", "gguf", "safetensors")

# In a fresh interpreter: build the parser, then run each argv through `oar`'s main, and print
# after each the heavy modules loaded so far. PLANT (a module name) adds a command whose parser
# imports it, to show the check finds such a command.
_CHECK = r"""
import contextlib, io, json, sys
from oar_attrib import cli

heavy, runs, plant = json.loads(sys.argv[1])
if plant:
    plain = cli._add_plugin_commands

    def with_plant(sub):
        plain(sub)
        __import__(plant)
        sub.add_parser("planted", help="a command whose parser loads a heavy module")

    cli._add_plugin_commands = with_plant

def loaded():
    return sorted({m for m in sys.modules if m.split(".")[0] in heavy or m in heavy})

parser = cli.build_parser()
report = {"build_parser": [0, loaded(), 0]}
commands = sorted(cli.subcommands(parser))
for argv in [[c, "--help"] for c in commands] + runs:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as done:
            code = done.code
    report[" ".join(argv)] = [code, loaded(), len(out.getvalue())]
print(json.dumps({"commands": commands, "report": report}))
"""


def check(heavy=HEAVY, runs=(), plant=None) -> dict:
    """{"commands": every `oar` subcommand, "report": {argv: [exit status, heavy modules loaded
    after it, characters printed]}} from a fresh interpreter (`_CHECK`)."""
    args = json.dumps([list(heavy), [list(r) for r in runs], plant])
    done = subprocess.run([sys.executable, "-c", _CHECK, args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def offenders(result: dict) -> dict:
    """argv -> the heavy modules loaded by the time it was done, where any were."""
    return {argv: got[1] for argv, got in result["report"].items() if got[1]}


def test_help_of_every_command_and_oar_models_import_no_stack():
    runs = [["--help"], ["models"], ["models", "--json"], ["experiment", "run", "--help"],
            ["experiment", "report", "--help"]]
    result = check(runs=runs)
    assert {"attribute", "recall", "models", "import", "web", "demo", "train", "eval", "generate",
            "experiment"} <= set(result["commands"])
    assert offenders(result) == {}
    report = result["report"]
    # Each argv really ran: --help exits 0 after printing the command's help, `oar models`
    # prints the catalogue.
    assert all(report[f"{c} --help"][0] == 0 and report[f"{c} --help"][2] > 200 for c in result["commands"])
    assert report["--help"][0] == 0 and report["models"][0] == 0 and report["models"][2] > 100


def test_the_check_finds_a_command_that_loads_a_heavy_module():
    """A planted command whose parser imports a module named heavy (a standard-library module
    nothing else imports stands in for torch) is caught at parser build and after every argv."""
    stand_in = "xml.dom.minidom"
    result = check(heavy=(*HEAVY, stand_in), plant=stand_in)
    assert "planted" in result["commands"]
    found = offenders(result)
    assert found["build_parser"] == [stand_in] and found["models --help"] == [stand_in]
