"""bench/gpu.sh, the prepared GPU run, checked without a GPU: its dry run (stages, flags, the
file plan under 64 MiB per call), its one-line refusals, its file checks and the JSON a run on
a machine without CUDA writes."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def gpu_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def gpu_sh(*args, env=None):
    env = {**(env or os.environ), "PYTHON": sys.executable}  # the interpreter of this test run
    return subprocess.run(["bash", "bench/gpu.sh", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.heavy
@pytest.mark.slow
def test_dry_run_prints_the_plan_and_passes():
    done = gpu_sh("--dry-run")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.strip().splitlines()[-1] == "dry-run: ok"
    limits = {m[0]: int(m[1]) for m in re.findall(r"^plan: stage (\w+) limit (\d+) s", out, re.M)}
    assert {"oar_p_steps", "train_step"} <= set(limits)
    assert list(limits) == ["oar_p_steps", "advantage", "train_step", "model", "align", "verl_step"]
    assert sum(v for k, v in limits.items() if k != "verl_step") <= 9 * 60 - 40  # setup and the JSON fit
    assert limits["verl_step"] <= 9 * 60 - 40  # a call of its own
    assert "bench/bench_steps.py --models qwen2-0.5b --lengths 2048" in out
    assert "bench/bench_train_step.py --no-cpu" in out
    assert ("bench/bench_advantage.py --model qwen2-0.5b --device cuda --dtype bfloat16 --samples 16 "
            "--new-tokens 128") in out
    calls = re.findall(r"^carry: call (\d): (\[.*?\]) ([\d.]+) MiB \+ tree = ([\d.]+) MiB (\S+) 64.0 MiB",
                       out, re.M)
    assert [c[0] for c in calls] == ["1", "2"]
    for _, carry, carried, total, verdict in calls:
        assert json.loads(carry) and verdict == "<=" and float(total) <= 64.0
        assert float(carried) > 40  # each call carries about half of the 93.8 MiB model


def test_the_verl_stage_is_planned_alone_and_its_flags_exist():
    gpu = gpu_module()
    args = gpu.main.__globals__["argparse"].Namespace(train_steps=2, train_tokens=512, align_batches=6,
                                                       align_pool=4, stages=("verl_step",))
    (stage,) = gpu.selected(args)
    assert stage.name == "verl_step" and stage.argv[1] == "bench/bench_verl_step.py"
    assert gpu.check_stages([stage]) == []  # its script's --help names --work and --json
    args.stages = gpu.DEFAULT_STAGES + ("verl_step",)
    with pytest.raises(gpu.PlanError, match=r"more than one call's 500 s: run them in two calls"):
        gpu.selected(args)
    done = gpu_sh("--dry-run", "--stages", "verl_step,nope")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--stages names nope; known: " in done.stderr


def test_the_verl_stage_without_verl_says_what_is_missing(tmp_path):
    """On a machine without verl's stack the stage stops at once with a result, not a trace."""
    from importlib.metadata import distributions

    if any(d.metadata["Name"] == "verl" for d in distributions()):
        pytest.skip("this checks the machine without verl (the default environment)")
    done = subprocess.run([sys.executable, "bench/bench_verl_step.py", "--work", str(tmp_path / "w"), "--json",
                           str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ran"] is False and result["missing"][:2] == ["verl", "transfer_queue"]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == result and not (tmp_path / "w").exists()


def test_wrong_argument_is_one_line_and_fails():
    done = gpu_sh("--bogus")
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "--bogus" in done.stderr
    done = gpu_sh("--dry-run", "--align-pool", "1")
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1
    assert "--align-pool" in done.stderr


def test_bench_steps_help_names_the_hierarchical_method():
    done = subprocess.run([sys.executable, "bench/bench_steps.py", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "oar_p_hier" in done.stdout and "--top-steps" in done.stdout


def test_the_dry_run_finds_a_flag_a_script_lacks():
    gpu = gpu_module()
    stage = gpu.Stage("oar_p_steps", 1, [sys.executable, "bench/bench_steps.py"], "its --help only",
                      flags=["--steps", "--top", "--no-such-flag"])  # --top only as part of --top-steps
    assert gpu.check_stages([stage]) == ["oar_p_steps: its --help names no --top",
                                         "oar_p_steps: its --help names no --no-such-flag"]


def test_file_plan_refuses_a_tree_too_large(monkeypatch):
    gpu = gpu_module()
    monkeypatch.setattr(gpu, "read_manifest", lambda folder: None)  # the estimated plan
    monkeypatch.setattr(gpu, "tree_bytes", lambda: 10 * MIB)
    plan = gpu.file_plan()
    assert plan["fits"] and plan["calls"][0]["bytes"] == gpu.LIMIT - gpu.MARGIN
    # the rest of the model and the wheels in call 2
    assert plan["calls"][1]["bytes"] == 10 * MIB + gpu.GGUF_BYTES - plan["calls"][0]["carried_bytes"] \
        + gpu.WHEELS_ESTIMATE
    monkeypatch.setattr(gpu, "tree_bytes", lambda: 25 * MIB)  # 93.8 MiB + 2 trees > 2 x 64 MiB
    assert not gpu.file_plan()["fits"]


def test_a_part_is_checked_by_size_and_sha256(tmp_path):
    gpu = gpu_module()
    path = tmp_path / "part"
    path.write_bytes(b"abc")
    part = {"bytes": 3, "sha256": gpu.sha256(path)}
    gpu.check_part(path, part)
    path.write_bytes(b"abd")
    with pytest.raises(gpu.PlanError, match="not the part prepared"):
        gpu.check_part(path, part)
    with pytest.raises(gpu.PlanError, match="missing"):
        gpu.check_part(tmp_path / "absent", part)


def test_a_run_without_cuda_writes_the_json_with_its_error(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the refusal on a machine without CUDA")
    env = {**os.environ, "OAR_GPU_WORK": str(tmp_path / "work"), "OUT": str(tmp_path)}
    done = gpu_sh(env=env)
    assert done.returncode == 1
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["error"].startswith("no CUDA device")
    assert report["stages"] == {}  # refused before any stage
    assert report["device"]["cuda"] is False and report["device"]["torch"] == torch.__version__
    assert report["setup"]["status"] in ("ok", "error")


def test_a_stage_is_killed_at_its_limit_and_the_next_one_reads(tmp_path):
    """run_stage: the figures of a stage that ends (its last stdout line, or its result file),
    the error of one that fails, and a stage past its limit killed with its children."""
    gpu = gpu_module()
    py = sys.executable
    ok = gpu.Stage("a", 5, [py, "-c", "print('warming up'); print('{\"x\": 1.5}')"], "prints figures")
    row = gpu.run_stage(ok, dict(os.environ), 20, tmp_path / "a.log")
    assert row["status"] == "ok" and row["result"] == {"x": 1.5}
    result = tmp_path / "r.json"
    into_file = gpu.Stage("b", 5, [py, "-c", f"open({str(result)!r}, 'w').write('[2]')"], "writes a file",
                          result_file=result)
    assert gpu.run_stage(into_file, dict(os.environ), 20, tmp_path / "b.log")["result"] == [2]
    failing = gpu.Stage("c", 5, [py, "-c", "raise SystemExit('no figures: the model is missing')"], "fails")
    row = gpu.run_stage(failing, dict(os.environ), 20, tmp_path / "c.log")
    assert row["status"] == "error" and row["log_tail"] == ["no figures: the model is missing"]
    marker = tmp_path / "late"
    child = f"import time; time.sleep(3); open({str(marker)!r}, 'w')"
    slow = gpu.Stage("d", 1, [py, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, "
                                        f"'-c', {child!r}]); time.sleep(30)"], "outlives its limit")
    start = time.perf_counter()
    row = gpu.run_stage(slow, dict(os.environ), 1, tmp_path / "d.log")
    assert row["status"] == "timeout" and time.perf_counter() - start < 10
    time.sleep(4)
    assert not marker.exists()  # its child was killed with it
