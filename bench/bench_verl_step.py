"""One `oar_sync` step of verl on the bundled model, with verl's rollout engine (a GPU stage of
bench/gpu.sh; docs/guide/verl.md). Needs verl with its core extra and the rollout engine in
the machine's Python; without them it writes what is missing and stops (exit status 0).

    python bench/bench_verl_step.py --work DIR --json PATH     # on a GPU machine
    python bench/bench_verl_step.py --check-config             # anywhere verl is installed: the
                                                               # overrides against verl's config

It writes the model (arith-tiny, with a chat template that passes the prompt through: the model
was trained on bare prompts), a parquet of world problems in verl's layout and runs
`python -m verl.trainer.main_ppo` with `trainer.v1.trainer_mode=oar_sync`, the plugin loaded by
`VERL_USE_EXTERNAL_MODULES` (the tree is not installed there), a reward that is this file's
`compute_score`, and the rollout dumps to DIR/rollouts; then imports the dumps
(`oar import verl`). The JSON holds the step's seconds, its `oar/*` metrics read from verl's
console log, and what the import found.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "oar_attrib.training.verl.plugin"
PASS_THROUGH = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """verl's reward function: the world's exact reward (the integer after `####`)."""
    from oar_attrib.world import reward

    return float(reward(solution_str, int(ground_truth), "gsm8k"))


def overrides(args, work: Path) -> list[str]:
    """The hydra overrides of one oar_sync step (every key is checked by --check-config)."""
    prompts, n = args.prompts, args.n
    return [
        "algorithm.adv_estimator=oar_grpo", "trainer.use_v1=true", "trainer.v1.trainer_mode=oar_sync",
        f"+oar.method={args.method}", f"+oar.rows_per_call={args.rows_per_call}",
        f"data.train_files={work / 'train.parquet'}", f"data.val_files={work / 'train.parquet'}",
        f"data.train_batch_size={prompts}", "data.max_prompt_length=64",
        f"data.max_response_length={args.response_length}", "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={work / 'model'}", f"actor_rollout_ref.rollout.name={args.rollout}",
        f"actor_rollout_ref.rollout.n={n}", "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.enforce_eager=true",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={prompts * n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={prompts * n}",
        "actor_rollout_ref.actor.use_kl_loss=false", "algorithm.use_kl_in_reward=false",
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score", "reward.num_workers=1",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", f"trainer.total_training_steps={args.steps}",
        "trainer.total_epochs=1", "trainer.logger=[console]", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.rollout_data_dir={work / 'rollouts'}",
        f"trainer.default_local_dir={work / 'checkpoints'}",
    ]


def check_config(args) -> int:
    """Compose verl's own config with the overrides (no GPU, no Ray): a key verl does not have
    fails here, in one line."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides(args, Path(args.work)))
    assert config.trainer.v1.trainer_mode == "oar_sync" and config.oar.method == args.method
    print(f"config: ok, verl {verl.__version__}, {len(overrides(args, Path(args.work)))} overrides")
    return 0


def prepare(args, work: Path) -> None:
    """The model folder and the parquet of world problems verl's dataset reads."""
    import pandas as pd

    sys.path.insert(0, str(ROOT))
    from oar_attrib.models import load_model
    from oar_attrib.world.generator import generate_problems

    model, tokenizer = load_model("arith-tiny")
    tokenizer.chat_template = PASS_THROUGH
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    problems = generate_problems(args.prompts * 4, "default", seed=0)
    pd.DataFrame([{"data_source": "oar_world", "prompt": [{"role": "user", "content": p.prompt}],
                   "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
                   "extra_info": {"index": i}} for i, p in enumerate(problems)]).to_parquet(work / "train.parquet")


def oar_metrics(log: str) -> dict[str, float]:
    """The last logged value of each oar/* metric in verl's console log (`oar/x:1.23`)."""
    return {k: float(v) for k, v in re.findall(r"(oar/[\w.]+):\s*(-?[\d.]+(?:e-?\d+)?)", log)}


def run(args) -> dict:
    missing = [m for m in ("verl", "transfer_queue", "ray", args.rollout) if importlib.util.find_spec(m) is None]
    if missing:
        return {"ran": False, "missing": missing,
                "why": "verl's v1 trainer needs verl[verl-core] and its rollout engine in this Python"}
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    prepare(args, work)
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES=PLUGIN, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides(args, work)], env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    (work / "verl.log").write_text(done.stdout + done.stderr)
    out = {"ran": True, "exit": done.returncode, "seconds": round(seconds, 1),
           "metrics": oar_metrics(done.stdout + done.stderr)}
    if done.returncode != 0:
        return {**out, "log_tail": (done.stdout + done.stderr).splitlines()[-40:]}
    imported = subprocess.run([sys.executable, "-m", "oar_attrib.cli", "import", "verl", str(work / "rollouts"),
                               "--out", str(work / "runs.db"), "--model", str(work / "model")],
                              env=env, capture_output=True, text=True)
    return {**out, "import": {"exit": imported.returncode, "lines": imported.stderr.strip().splitlines()[-4:]}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="/tmp/oar-verl-step", help="scratch folder (model, data, dumps, log)")
    parser.add_argument("--json", help="write the result here too (else only the last stdout line)")
    parser.add_argument("--method", default="oar_p_step", help="oar.method (one that runs on verl)")
    parser.add_argument("--rollout", default="vllm", choices=("vllm", "sglang"), help="verl's rollout engine")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (data.train_batch_size)")
    parser.add_argument("--n", type=int, default=4, help="responses per prompt (rollout.n)")
    parser.add_argument("--response-length", type=int, default=48, help="data.max_response_length")
    parser.add_argument("--rows-per-call", type=int, default=256, help="oar.rows_per_call")
    parser.add_argument("--steps", type=int, default=1, help="trainer.total_training_steps")
    parser.add_argument("--check-config", action="store_true", help="only compose verl's config with the overrides")
    args = parser.parse_args(argv)
    if args.check_config:
        return check_config(args)
    result = run(args)
    line = json.dumps(result)
    if args.json:
        Path(args.json).write_text(line + "\n")
    print(line)
    return 0 if not result.get("ran") or result.get("exit") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
