"""One cell of an experiment, in its own process: train and write its curve to the store.

    python -m oar_attrib.training.experiment_cell STORE CELL_ID

The cell's settings are read from the store (written there by `oar experiment run`), so the
process needs nothing else. Its earlier points, if an attempt was interrupted, are removed
first. Per optimizer step the store gets the step's wall time (`step_seconds`, held-out
evaluation excluded), TRL's logged metrics (reward, entropy, ESS, top-10% mass, weight max,
the gradient norm before clipping `grad_norm`, ...) and `delta_theta`, the distance
||theta_t - theta_0|| of the trained parameters from where they started; at step 0, every
eval_every steps and the last step, the held-out accuracies (`eval/accuracy/<preset>`,
`eval/accuracy_sampled/<preset>`) and each held-out problem's greedy outcome
(`eval/problem/<preset>/<i>`, 1 right, 0 wrong).
"""
from __future__ import annotations

import sys
import time

import torch
from transformers import TrainerCallback

from oar_attrib.console import say
from oar_attrib.errors import OARError
from oar_attrib.store.experiments import STEP_KEY, ExperimentStore


class CurveRecorder(TrainerCallback):
    """Writes a cell's curve: step times, train metrics and ||theta_t - theta_0|| every step,
    evaluations (with each problem's outcome) when due."""

    def __init__(self, store: ExperimentStore, cell_id: int, evaluate, eval_steps: set[int], keys):
        self.store, self.cell_id, self.evaluate = store, cell_id, evaluate
        self.eval_steps, self.keys = set(eval_steps), tuple(keys)
        self._start = None
        self._theta0: list[torch.Tensor] | None = None  # float32 copy of the trained parameters

    def _eval(self, step: int, model) -> dict:
        if step not in self.eval_steps:
            return {}
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        start = time.perf_counter()
        with torch.no_grad(), torch.random.fork_rng(devices=devices):  # training RNG untouched
            result = self.evaluate(model)
        values = {f"eval/{k}": v for k, v in result.items() if k.startswith("accuracy")}
        for key, outcomes in result.items():
            if key.startswith("outcomes/"):  # one point per held-out problem
                preset = key.split("/", 1)[1]
                values |= {f"eval/problem/{preset}/{i}": float(o) for i, o in enumerate(outcomes)}
        values["eval_seconds"] = time.perf_counter() - start
        shown = ", ".join(f"{k} {v:.3f}" for k, v in values.items() if "/" in k)
        print(f"[eval] step {step}: {shown}", flush=True)
        return values

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._theta0 = [p.detach().float().clone() for p in model.parameters() if p.requires_grad]
        if state.global_step == 0:
            self.store.add_points(self.cell_id, 0, self._eval(0, model))

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        seconds = time.perf_counter() - self._start
        values = {STEP_KEY: seconds, "delta_theta": self.delta_theta(model), **self._eval(state.global_step, model)}
        self.store.add_points(self.cell_id, state.global_step, values)

    @torch.no_grad()
    def delta_theta(self, model) -> float:
        """||theta_t - theta_0||_2 over the parameters being trained (float32)."""
        trained = [p for p in model.parameters() if p.requires_grad]
        total = sum(float(((p.detach().float() - p0) ** 2).sum()) for p, p0 in zip(trained, self._theta0))
        return total ** 0.5

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = {k: float(v) for k, v in (logs or {}).items()
                  if k in self.keys and isinstance(v, (int, float))}
        if values and state.global_step > 0:
            self.store.add_points(self.cell_id, state.global_step, values)


def run_cell(store_path: str, cell_id: int) -> None:
    """Train one cell from its stored settings, writing its curve as it goes."""
    import copy

    from .experiment import TRAIN_KEYS
    from .launch import build_configs, build_trainer

    with ExperimentStore(store_path) as store:
        cell = store.cell(cell_id)
        settings = copy.deepcopy(cell.settings)
        world_seed = int(settings.pop("world_seed"))
        settings.pop("record", None)  # what the cell was set up with, checked by `oar experiment run`
        run, args = build_configs(settings)
        store.reset_cell(cell_id)
        # The data seed is the grid's, not the cell's: every cell sees the same problems in
        # order; rewards are bound as in `oar train` (answer format, 0 for a cut-off answer).
        trainer, evaluator = build_trainer(run, args, data_seed=world_seed, accuracy_callback=False)
        eval_steps = {0, args.max_steps, *range(run.eval_every, args.max_steps, run.eval_every)}
        trainer.add_callback(CurveRecorder(store, cell_id, evaluator, eval_steps, TRAIN_KEYS))
        print(f"cell {cell.method} seed {cell.seed}: {args.max_steps} steps", flush=True)
        trainer.train()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        say("usage: python -m oar_attrib.training.experiment_cell STORE CELL_ID")
        return 2
    try:
        run_cell(argv[0], int(argv[1]))
    except OARError as err:
        say(f"experiment cell: error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
