"""Every ```python and ```bash block of the README, the folder READMEs and the documentation
site's pages (docs/) runs as pasted.

The Python blocks of a page run in order in one fresh interpreter (as a notebook's cells do:
a block may use what an earlier block of its page defined), in an empty working directory;
tracebacks name the page and its line. Bash blocks run one by one, line by line with `set -e`,
each in an empty directory, with `oar` and `python` being this interpreter's (`python -m
oar_attrib.cli`), on the bundled model; `$OAR_TRAIN_OVERRIDES` (documented in the training
guide) makes each `oar train` a one-step run. A line that needs a GPU, ../shared, a large
checkpoint or a long run is listed below with the reason, and the test fails if a listed line
is no longer in the docs (the list cannot go stale) or if a block has a line neither run nor
listed. Python blocks that are not run are still compiled.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "training/README.md", "webapp/README.md",
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")
                if "hooks" not in p.relative_to(ROOT / "docs").parts))
SHORT_RUN = ("max_steps=1 eval_every=0 world_train_size=32 per_device_train_batch_size=8 "
             "num_generations=4 max_completion_length=48 oar_store_samples=4 save_steps=1")

GPU = "needs a GPU: the math-7b preset trains a 7B-class checkpoint in bf16"
MULTI_GPU = "needs several GPUs (accelerate launch of DDP / DeepSpeed)"
BENCH = "a benchmark: minutes of the whole machine, run alone for the page's figures"
# A command line's beginning -> why the test does not run it.
NOT_RUN = {
    "bash scripts/setup.sh && .venv/bin/oar demo":
        "creates the virtual environment and serves the demo until stopped",
    "bash scripts/setup.sh && .venv/bin/python -m pytest":
        "creates the virtual environment and runs this whole suite",
    "oar train --preset math-7b": GPU,
    "oar train --preset smollm2-gsm8k":
        "trains SmolLM2-135M on GSM8K from ../shared (minutes a step on a CPU); "
        "tests/training/test_training_config.py runs one real step of this preset",
    "oar train --preset smollm2-words":
        "one GRPO step of SmolLM2-135M-Instruct on the word-problem world (a CPU minute); "
        "tests/training/test_training_config.py runs one real step of the smollm2-gsm8k preset on the same model",
    "accelerate launch": MULTI_GPU,
    "oar web --store runs/oar-1.5b/runs.db": "a web server that runs until stopped, on a 1.5B run's store",
    "oar eval --model runs/oar-1.5b": "needs the trained 1.5B checkpoint of the commands above",
    "python -m torch.distributed.run":
        "two training processes over gloo; tests/training/test_training_ddp.py runs this path",
    "oar train --preset arith-tiny --method oar_g --output-dir runs/curve-oar_g":
        "the measured 300-step run (1010 s); the Run block's same command runs here",
    "oar train --preset arith-tiny --method none  --output-dir runs/curve-none":
        "the measured 300-step run (958 s); the Run block's same command runs here",
    "oar experiment run arith-tiny-grid":
        "18 training runs (6 methods x 3 seeds); tests/training/test_experiment.py runs the runner on a small grid",
    "oar experiment report arith-tiny-grid": "reports the 18 runs of the command above",
    "oar web --store runs/experiments.db": "a web server that runs until stopped, on the grid's store",
    "oar experiment run my-grid.yaml": "a grid file of the user's own (my-grid.yaml), not in the repository",
    "OAR_STORE=runs/train-arith-tiny/runs.db OAR_MODEL=arith-tiny":
        "a web server that runs until stopped; tests/test_root_folders.py builds the app from the factory",
    ".venv/bin/mkdocs": "serves or builds this documentation site; tests/test_docs.py builds it with --strict",
    "OMP_NUM_THREADS=1 python bench/": BENCH,
    "python bench/": BENCH,
    "MKL_CBWR=AUTO,STRICT python bench/": BENCH,
    "pip install 'oar-attrib": "installs into the running environment; tests/test_extras.py installs the core "
                               "alone into a fresh one and tests/test_release.py the built wheel",
    "python -m verl.trainer.main_ppo": "a verl training run: Ray, a GPU and verl's rollout engine; "
                                       "tests/training/verl_plugin runs its advantage step on a CPU, bench/gpu.sh "
                                       "has one step prepared",
    "bash bench/gpu.sh": "the GPU run: its preparation downloads wheels and the model, the run needs a GPU; "
                         "tests/test_gpu_script.py runs its --dry-run and its checks",
    "oar align --preset smollm2-words":
        "SmolLM2-135M-Instruct's gradients on 12 to 100 screened batches (hours on a CPU); "
        "tests/training/test_align.py runs oar align on the bundled model",
    "oar align --preset gsm8k-gpu": "needs a GPU, a 0.5B checkpoint and GSM8K's training file",
    "oar align --store runs/align/smollm2 --report":
        "reads the store of the measurement above, which is not run here; tests/training/test_align.py "
        "runs --report on a store it measures",
    "oar web --store runs.db --align": "a web server that runs until stopped; tests/webapp/test_align_page.py "
                                       "builds the /align pages",
    "nice -n 10 env OMP_NUM_THREADS=1 oar train --preset smollm2-words":
        "checkpoint 2 of the alignment plan: 15 GRPO steps of SmolLM2-135M-Instruct (hours on a CPU)",
    "nice -n 10 env OMP_NUM_THREADS=1 oar align --preset smollm2-words":
        "the alignment plan's measurements: 100 batches of SmolLM2-135M-Instruct per checkpoint (days on a CPU)",
    "git add docs/experiments/align/smollm2-base":
        "commits the measurement's batches into the repository as they come (the measurement above is not run here)",
    "oar align --store docs/experiments/align/smollm2-base --report":
        "reports the partial SmolLM2 run committed in the repository; tests/training/test_align.py runs --report "
        "on a store it measures",
    "oar align --store docs/experiments/align/arith-tiny-":
        "rewrites a committed summary from the result files committed beside it; "
        "tests/training/test_align.py runs --report on a store it measures",
    "oar align --model arith-tiny --methods none causal_oracle causal_scramble random":
        "the scramble control on two seeds (1.5 CPU-minutes each); tests/training/test_align_control.py "
        "runs both seeds in the heavy tier and test_align.py seed 0 in the default run",
    "python scripts/build_long_store.py":
        "builds a store of 4000-token traces (minutes); tests/webapp/test_webapp_long.py builds a small one",
}
# Python blocks that are compiled but not run, by a line they contain.
PYTHON_NOT_RUN = {
    'path = "/models/Qwen2.5-1.5B-Instruct"':
        "needs a local 1.5B checkpoint and a GPU (bf16, 1024-token completions, 500 steps); the "
        "block before it runs the same calls on the bundled model",
}


def code_blocks(doc: str) -> list[tuple[str, int, str]]:
    """(language, line number, code) of each ```python / ```bash block of `doc`."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(python|bash)\n(.*?)^```", text, flags=re.M | re.S):
        found.append((match.group(1), text[: match.start()].count("\n") + 1, match.group(2)))
    return found


def commands(code: str) -> list[str]:
    """The shell commands of a block: continuation lines joined, comments and blanks dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def reason_not_run(command: str) -> str | None:
    for start, reason in NOT_RUN.items():
        if command.startswith(start):
            return reason
    return None


BLOCKS = [(doc, *block) for doc in DOCS for block in code_blocks(doc)]
PYTHON_PAGES = sorted({doc for doc, lang, _, _ in BLOCKS if lang == "python"}, key=DOCS.index)
BASH_BLOCKS = [(doc, line, code) for doc, lang, line, code in BLOCKS if lang == "bash"]
# Runs a page's Python blocks in order in one namespace, each compiled with its page and line
# (so a traceback points into the markdown file).
DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, line, code in json.load(open(sys.argv[1])):
    exec(compile("\\n" * line + code, where, "exec"), namespace)
"""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OAR_")}
    return env | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OAR_TRAIN_OVERRIDES": SHORT_RUN,
                  "TQDM_DISABLE": "1"}


def _run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_the_docs_hold_the_blocks_this_test_knows():
    kinds = [lang for _, lang, _, _ in BLOCKS]
    assert kinds.count("python") >= 4 and kinds.count("bash") >= 5
    assert {"README.md", "docs/guide/attribution.md", "docs/guide/training.md"} <= set(PYTHON_PAGES)
    every_command = [c for _, _, code in BASH_BLOCKS for c in commands(code)]
    assert HEAVY_PAGES <= {doc for doc, _, _ in BASH_BLOCKS} and FIRST_PAGES <= set(PYTHON_PAGES)  # none stale
    for start in NOT_RUN:  # no stale entry: each one still names a documented command
        assert any(c.startswith(start) for c in every_command), start
    every_python = "\n".join(code for _, lang, _, code in BLOCKS if lang == "python")
    assert all(line in every_python for line in PYTHON_NOT_RUN)


# The first pages a newcomer reads stay in the default run; every other page's Python blocks
# (10-26 s each on 2 cores, one process per page) are in the heavy tier.
FIRST_PAGES = {"README.md", "docs/getting-started.md"}


@pytest.mark.parametrize("doc", [
    pytest.param(d, id=f"{d}:python", marks=[] if d in FIRST_PAGES else [pytest.mark.heavy])
    for d in PYTHON_PAGES])
def test_python_blocks_of_a_page_run_as_pasted(doc, tmp_path):
    blocks = []
    for _, lang, line, code in (b for b in BLOCKS if b[0] == doc):
        if lang != "python":
            continue
        compile(code, f"{doc}:{line}", "exec")
        if not any(marker in code for marker in PYTHON_NOT_RUN):  # else compiled only (the reason is listed)
            blocks.append((doc, line, code))
    if not blocks:
        return
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "driver.py").write_text(DRIVER)
    done = _run([sys.executable, "driver.py", "blocks.json"], tmp_path, timeout=900)
    assert done.returncode == 0, f"{doc} failed:\n{done.stderr[-3000:]}"


# Pages whose commands train, align or load a real model: each takes 25-135 s on 2 cores.
HEAVY_PAGES = {"docs/guide/training.md", "docs/guide/align.md", "docs/guide/one-model.md"}


@pytest.mark.parametrize("doc, line, code", [
    pytest.param(d, n, c, id=f"{d}:{n}", marks=[pytest.mark.heavy] if d in HEAVY_PAGES else [])
    for d, n, c in BASH_BLOCKS])
def test_bash_block_runs_as_pasted(doc, line, code, tmp_path):
    where = f"{doc}:{line}"
    script = ["set -euo pipefail",
              f'oar() {{ "{sys.executable}" -m oar_attrib.cli "$@"; }}',
              f'python() {{ "{sys.executable}" "$@"; }}']
    ran = 0
    for command in commands(code):
        reason = reason_not_run(command)
        if reason is None:
            script.append(command)
            ran += 1
        else:
            script.append(f": not run: {reason!r}")
    syntax = _run(["bash", "-n", "-c", "\n".join(script)], tmp_path)
    assert syntax.returncode == 0, f"{where}: {syntax.stderr}"
    if not ran:
        return  # every command is listed in NOT_RUN with its reason
    done = _run(["bash", "-c", "\n".join(script)], tmp_path, timeout=1200)
    assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
    assert any(tmp_path.glob("runs/*/model.safetensors")) or "oar train" not in code
