"""The verl plugin in verl's own environment, built fresh (heavy tier): torch first (the CPU
build, as scripts/setup.sh does), then `pip install -e '.[verl]'`, which resolves transformers
inside verl's pin (<5.11) and the project's range; there every test that needs verl runs
(tests/training/verl_plugin: the estimator through verl's compute_advantage, the trainer mode's
advantage step, the entry point, the worker design, the GPU stage's config), with the
verl-free plugin and importer tests at that transformers. verl is not in `dev` (its pin would
hold the default environment's transformers below the versions its tests run on), so this is
where its tests run; none may be skipped."""
import os
import re
import subprocess
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/training/verl_plugin", "tests/training/test_verl_step.py", "tests/importers/test_verl_uid.py"]
# The one expected failure there, a known gap of the core (tests/training/verl_plugin/test_compat.py).
XFAIL = "test_chat_prompts_encode_or_are_refused_in_one_line"


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=3600, **kw)


@pytest.mark.heavy
@pytest.mark.slow
def test_the_verl_tests_pass_in_verls_own_environment(tmp_path):
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    for argv in ([py, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"],
                 [py, "-m", "pip", "install", "-q", "--no-compile", "-e", f"{ROOT}[verl]", "pytest", "pytest-xdist"]):
        done = _run(argv, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    print(f"verl environment installed in {time.perf_counter() - start:.0f} s")
    done = _run([py, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "", "-rxs",
                 "-W", "ignore::UserWarning", *TESTS], env=env, cwd=ROOT)
    tail = done.stdout[-3000:]
    assert done.returncode == 0, tail + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", summary)}
    assert counts.get("passed", 0) >= 40 and not counts.get("skipped") and not counts.get("error"), summary
    assert counts.get("xfailed", 0) <= 1 and (not counts.get("xfailed") or XFAIL in done.stdout), tail
