"""An experiment: a grid of training cells (method x seed) from one YAML file, run and resumed.

An experiment file has three sections. `experiment` names the grid; `run` and `trainer` are
`oar train`'s sections, merged over the base preset for every cell:

    experiment:
      name: arith-tiny-grid
      preset: arith-tiny          # the base preset (or a YAML path) of every cell
      seeds: [0, 1, 2]
      steps: 80                   # optimizer steps of every cell
      eval_every: 20              # held-out evaluation at step 0, every N steps and the last
      eval_presets: [default, recall]   # the training preset first, then presets never trained on
      world_seed: 1234            # the training problems and their order, the same in every cell
      store: runs/experiments.db  # the one run store of every cell's curve
      output_dir: runs/experiments
      methods:                    # label -> trainer settings of the method
        none: {oar_method: none}
        oar_g: {oar_method: oar_g}
    run: {eval_n: 200}
    trainer: {learning_rate: 1.0e-4}

What every cell shares: the base checkpoint (run.model), the training problems and their order
(world_seed, and no shuffling: `shuffle_dataset: false`), the held-out problems and their
sampling seed. What the seed changes: the completions sampled during training, random weights
and OAR-G's noise. A cell runs as its own process (`python -m oar_attrib.training.experiment_cell`)
and writes its curve to the store as it trains; a cell counts as finished when its stored
curve is complete, so a rerun after an interruption skips exactly those (`ExperimentStore.finished_cells`).

One `run` per store at a time: it holds the store's writer lock (`oar_attrib.store.lock`) and
its cells end when it ends, however it ends (Ctrl-C, a kill, even SIGKILL: each cell asks the
kernel for SIGTERM at its parent's death), so that a rerun never trains a cell twice at once.
"""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from oar_attrib.defaults import option
from oar_attrib.store.experiments import STEP_KEY, ExperimentStore
from oar_attrib.store.lock import WriterLock
from oar_attrib.store.schema import identify

from .errors import TrainingConfigError
from .launch import _field_names, apply_overrides, build_configs, check_finite, parse_value, resolve

# The named grids live in the repository's training/experiments/ (a checkout); an installed
# wheel has none, and takes a grid's .yaml path.
EXPERIMENT_DIR = Path(__file__).resolve().parents[2] / "training" / "experiments"
# Train metrics kept per step (TRL's names); the report reads these.
TRAIN_KEYS = ("reward", "entropy", "loss", "grad_norm", "oar/ess_ratio", "oar/top10_mass", "oar/weight_max",
              "oar/time_s", "oar/attributed_rate", "completions/mean_length")


@dataclass
class ExperimentSpec:
    """The `experiment` section: what the grid is."""

    name: str = option(help="Name of the grid in the store (a changed grid needs a new one).")
    methods: dict[str, dict] = option(help="Label -> trainer settings; 'none' (GRPO) is required.")
    seeds: list[int] = option(help="Seeds of every method (an int N means 0..N-1).")
    steps: int = option(help="Optimizer steps of every cell.")
    preset: str = option("arith-tiny", "Base preset (or YAML) of every cell.")
    eval_every: int = option(20, "Held-out evaluation at 0, every N steps, the last.")
    eval_presets: list[str] = option(help="World presets of the held-out problems: the training preset first, then "
                                          "unseen ones.",
                                     default_factory=lambda: ["default", "recall"])
    world_seed: int = option(1234, "Seed of the training problems, shared by all cells.")
    store: str = option("runs/experiments.db", "The run store of every cell's curve.")
    output_dir: str = option("runs/experiments", "Cell logs and trainer output.")

    def __post_init__(self) -> None:
        if not self.methods or not isinstance(self.methods, dict):
            raise TrainingConfigError("experiment.methods must map a label to trainer settings, e.g. "
                                      "{none: {oar_method: none}, oar_g: {oar_method: oar_g}}")
        if "none" not in self.methods:
            raise TrainingConfigError("experiment.methods needs 'none' (GRPO): every method is compared with it")
        for label, settings in self.methods.items():
            if not isinstance(settings, dict):
                raise TrainingConfigError(f"experiment.methods.{label} must be a mapping of trainer settings")
        if isinstance(self.seeds, int):
            self.seeds = list(range(self.seeds))
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise TrainingConfigError(f"experiment.seeds must be distinct seeds, got {self.seeds!r}")
        if self.steps < 1 or self.eval_every < 1:
            raise TrainingConfigError("experiment.steps and experiment.eval_every must be >= 1")
        if isinstance(self.eval_presets, str):
            self.eval_presets = [self.eval_presets]

    def eval_steps(self) -> list[int]:
        """Steps with a held-out evaluation: 0, every eval_every, and the last."""
        return sorted({0, self.steps, *range(self.eval_every, self.steps, self.eval_every)})


def experiment_path(name: str) -> Path:
    """An experiment by name (training/experiments/<name>.yaml of a checkout) or a YAML path."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise TrainingConfigError(f"experiment file {path} does not exist")
        return path
    found = EXPERIMENT_DIR / f"{name}.yaml"
    if not found.is_file():
        known = sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml"))
        raise TrainingConfigError(f"unknown experiment {name!r}; known: {', '.join(known) or 'none here'} "
                                  "(named grids are in a checkout's training/experiments/; or pass a .yaml path)")
    return found


def load(path: str | Path, overrides: list[str] = ()) -> tuple[ExperimentSpec, dict]:
    """(spec, base settings {'run', 'trainer'}) of an experiment file with `key=value` overrides;
    `experiment.KEY=...` sets the experiment section, other keys as in `oar train`."""
    from .config import OARConfig

    path = experiment_path(str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise TrainingConfigError(f"{path} is not valid YAML: {err}") from None
    unknown = set(data) - {"experiment", "run", "trainer"} if isinstance(data, dict) else {"?"}
    if unknown or not isinstance(data.get("experiment"), dict):
        raise TrainingConfigError(f"{path}: needs an 'experiment' section (and optional 'run', 'trainer')")
    check_finite(data, str(path))
    section = dict(data["experiment"])
    rest = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if key.startswith("experiment.") and sep:
            section[key.split(".", 1)[1]] = parse_value(value, key)
        else:
            rest.append(item)
    section.setdefault("name", path.stem)
    known = set(ExperimentSpec.__dataclass_fields__)
    if set(section) - known:
        raise TrainingConfigError(f"unknown experiment setting(s): {', '.join(sorted(set(section) - known))}; "
                                  f"known: {', '.join(sorted(known))}")
    try:
        spec = ExperimentSpec(**section)
    except TypeError as err:
        raise TrainingConfigError(f"{path}: experiment section: {err}") from None
    base = resolve(spec.preset, None, [])
    base["run"].update(data.get("run") or {})
    base["trainer"].update(data.get("trainer") or {})
    return spec, apply_overrides(base, rest, _field_names(OARConfig))


def cell_settings(spec: ExperimentSpec, base: dict, method: str, seed: int) -> dict:
    """The full settings of one cell: base, then the method's, then what the grid fixes."""
    settings = copy.deepcopy(base)
    settings["trainer"].update(spec.methods[method])
    settings["run"].update(eval_every=spec.eval_every, eval_preset=list(spec.eval_presets))
    settings["trainer"].update(
        seed=int(seed), max_steps=spec.steps, shuffle_dataset=False, logging_steps=1,
        save_strategy="no", oar_store_every=0, report_to=[], disable_tqdm=True,
        output_dir=str(Path(spec.output_dir) / spec.name / f"{method}-s{seed}"),
    )
    build_configs(copy.deepcopy(settings))  # validates now, not in a child process later
    return settings


def eval_keys(spec: ExperimentSpec, base: dict) -> list[str]:
    """The evaluation keys a finished cell has at its last step."""
    keys = [f"eval/accuracy/{p}" for p in spec.eval_presets]
    if int(base["run"].get("eval_samples") or 0) > 0:
        keys += [f"eval/accuracy_sampled/{p}" for p in spec.eval_presets]
    return keys


def shared_spec(spec: ExperimentSpec, base: dict) -> dict:
    """What must not change for cells to stay comparable (methods and seeds may grow)."""
    return {"steps": spec.steps, "eval_every": spec.eval_every, "eval_presets": spec.eval_presets,
            "world_seed": spec.world_seed, "preset": spec.preset, "base": base}


# ------------------------------------------------------------------ running the grid


@dataclass
class PlannedCell:
    id: int
    method: str
    seed: int
    log: Path


def plan(spec: ExperimentSpec, base: dict) -> tuple[ExperimentStore, list[PlannedCell], set[int]]:
    """Register the experiment and its cells; (store, cells in run order, finished cell ids)."""
    store = ExperimentStore(spec.store)
    exp = store.ensure_experiment(spec.name, shared_spec(spec, base))
    cells = []
    for seed in spec.seeds:  # seed-major: a finished seed gives every method's paired difference
        for method in spec.methods:
            settings = cell_settings(spec, base, method, seed)
            run, args = build_configs(copy.deepcopy(settings))
            # What the cell trains with, model weights included: a changed one is refused by name.
            settings["record"] = args.settings_record(run.model, dtype=run.dtype)
            settings["world_seed"] = spec.world_seed
            cid = store.ensure_cell(exp, method, seed, settings)
            log = Path(spec.output_dir) / spec.name / f"{method}-s{seed}.log"
            cells.append(PlannedCell(cid, method, seed, log))
    finished = store.finished_cells(exp, spec.steps, eval_keys(spec, base) + ["reward"])
    return store, cells, finished


def _die_with_parent(parent: int):
    """A preexec_fn (Linux): SIGTERM this child when the process that started it dies."""
    def arm() -> None:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request was made
            os._exit(1)
    return arm


def tied_popen(cmd: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen of a child that ends with this process: in its own session (so
    that the terminal's Ctrl-C reaches only the parent, which stops it), and on Linux with a
    parent-death signal, so that even a SIGKILLed parent leaves no child running."""
    arm = _die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None
    return subprocess.Popen(cmd, preexec_fn=arm, start_new_session=True, **kwargs)


def _launch(store_path: str, cell: PlannedCell) -> subprocess.Popen:
    cell.log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    with cell.log.open("w", encoding="utf-8") as log:
        return tied_popen(
            [sys.executable, "-m", "oar_attrib.training.experiment_cell", str(store_path), str(cell.id)],
            stdout=log, stderr=subprocess.STDOUT, env=env)


def check_jobs(jobs: int) -> None:
    """TrainingConfigError unless 1 <= `jobs` <= 4 per core of this machine (each cell is a
    training process holding its own model)."""
    limit = 4 * (os.cpu_count() or 1)
    if not 1 <= jobs <= limit:
        raise TrainingConfigError(f"--jobs must be from 1 to {limit} (4 per core of this machine), got {jobs}")


def run(spec: ExperimentSpec, base: dict, jobs: int = 1, echo=print) -> dict:
    """Run every unfinished cell, `jobs` at a time, each in its own process; returns counts.
    A failed cell is reported (its log path) and the others go on."""
    check_jobs(jobs)
    identify(Path(spec.store))  # read-only: another program's file is refused unchanged
    Path(spec.store).parent.mkdir(parents=True, exist_ok=True)
    with WriterLock(spec.store, "experiment.store"):
        return _run_locked(spec, base, jobs, echo)


def _run_locked(spec: ExperimentSpec, base: dict, jobs: int, echo) -> dict:
    from oar_attrib.commands import Interrupted

    store, cells, finished = plan(spec, base)
    store.close()
    todo = [c for c in cells if c.id not in finished]
    echo(f"experiment {spec.name}: {len(cells)} cells, {len(cells) - len(todo)} finished, "
         f"{len(todo)} to run, {jobs} at a time; store {spec.store}")
    running: dict[int, tuple[PlannedCell, subprocess.Popen, float]] = {}
    failed: list[PlannedCell] = []
    previous = signal.signal(signal.SIGTERM, _raise_exit)
    try:
        _loop(spec, jobs, todo, running, failed, echo)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; every finished cell is kept in {spec.store}, rerun the "
                          "same command to resume") from None
    finally:  # stopped (Ctrl-C, kill): stop the cells too, so that a rerun never races them
        signal.signal(signal.SIGTERM, previous)
        for _, proc, _ in running.values():
            proc.terminate()
        for _, proc, _ in running.values():
            proc.wait()
    with ExperimentStore(spec.store) as store:
        exp = store.experiment(spec.name)[0]
        done = store.finished_cells(exp, spec.steps, eval_keys(spec, base) + ["reward"])
    return {"cells": len(cells), "finished": len(done), "failed": [f"{c.method}-s{c.seed}" for c in failed]}


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _loop(spec, jobs, todo, running, failed, echo) -> None:
    """Keep `jobs` cells running until none is left; a finished process leaves `running`."""
    while todo or running:
        while todo and len(running) < jobs:
            cell = todo.pop(0)
            running[cell.id] = (cell, _launch(spec.store, cell), time.time())
            echo(f"  start {cell.method} seed {cell.seed} (log {cell.log})")
        time.sleep(0.5)
        for cid, (cell, proc, start) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[cid]
            took = time.time() - start
            if proc.returncode == 0:
                echo(f"  done  {cell.method} seed {cell.seed} in {took:.0f} s")
            else:
                failed.append(cell)
                echo(f"  FAILED {cell.method} seed {cell.seed} (exit {proc.returncode}); see {cell.log}")


def dump_spec(spec: ExperimentSpec, base: dict) -> str:
    return yaml.safe_dump({"experiment": spec.__dict__, **json.loads(json.dumps(base))}, sort_keys=False)


__all__ = ["ExperimentSpec", "load", "cell_settings", "eval_keys", "plan", "run", "STEP_KEY", "TRAIN_KEYS"]
