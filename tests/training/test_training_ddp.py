"""Two CPU processes (gloo), launched as the README launches training, with
`accelerate launch --config_file training/accelerate/ddp.yaml` (its multi-GPU launcher is
torchrun's, which runs gloo on CPU; `accelerate launch --cpu` would need mpirun), run one
reshaped GRPO step: `training/train.py` trains from a preset, and the worker below checks that
the same samples get the same weights on both ranks.

Both ranks receive the same prompt and the same four completions, in a different order per
rank, so equal weights need per-sample seeding (OAR-G draws noise) and a batch-independent
computation. This file is also the worker script the launcher runs.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {0: ("right", "wrong", "no_answer", "right"), 1: ("right", "no_answer", "right", "wrong")}

pytestmark = pytest.mark.heavy


def worker(out_dir: str) -> None:
    import gc

    import torch
    from datasets import concatenate_datasets
    from torch.nn.parallel import DistributedDataParallel

    from oar_attrib.world import generate_problems
    from oar_attrib.training.config import OARConfig
    from oar_attrib.training.data import world_dataset
    from oar_attrib.training.launch import end_distributed
    from oar_attrib.training.rewards import world_reward
    from oar_attrib.training.toy import ScriptedRollout, tiny_policy, world_tokenizer
    from oar_attrib.training.trainer import OARGRPOTrainer

    class RankRollout(ScriptedRollout):
        def __call__(self, prompts, trainer):
            self.variants = VARIANTS[trainer.accelerator.process_index]
            return super().__call__(prompts, trainer)

    tok = world_tokenizer()
    problems = generate_problems(1, "default", seed=5)
    one = world_dataset(1, "default", seed=5)
    args = OARConfig(
        output_dir=out_dir, per_device_train_batch_size=4, num_generations=4, max_steps=1,
        learning_rate=1e-2, report_to=[], bf16=False, activation_checkpointing=False, use_cpu=True,
        save_strategy="no", disable_tqdm=True, seed=0, logging_steps=1, oar_method="oar_g",
    )
    trainer = OARGRPOTrainer(model=tiny_policy(tok), reward_funcs=[world_reward], args=args,
                             train_dataset=concatenate_datasets([one, one]), processing_class=tok,
                             rollout_func=RankRollout(problems, tok))
    trainer.train()
    tw = trainer.last_token_weights
    checksum = sum(float(p.detach().double().sum()) for p in trainer.model.parameters())
    result = {
        "rank": trainer.accelerator.process_index, "world": trainer.accelerator.num_processes,
        "completions": [p.response_ids for p in tw.pairs], "weights": tw.weights.tolist(),
        "params": checksum, "logs": trainer.state.log_history[0], "threads": torch.get_num_threads(),
    }
    Path(out_dir, f"rank{result['rank']}.json").write_text(json.dumps(result))
    end_distributed(trainer)  # as `launch.train` does
    assert not [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]


def launch(script: str, *args: str) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file training/accelerate/ddp.yaml` of `script` on 2 CPU processes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "training" / "accelerate" / "ddp.yaml"), "--num_processes", "2",
           "--mixed_precision", "no", "--main_process_port", str(port), script, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.slow
def test_training_entry_script_trains_on_two_processes(tmp_path):
    proc = launch("training/train.py", "--preset", "arith-tiny", "max_steps=1", "eval_every=0",
                  "world_train_size=32", "per_device_train_batch_size=4", "num_generations=4",
                  "max_completion_length=32", "oar_store_every=0", "save_strategy=no", "use_cpu=true",
                  f"output_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    summaries = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"global_step"')]
    assert [s["global_step"] for s in summaries] == [1, 1]  # one summary per rank


@pytest.mark.slow
def test_two_process_step_gives_equal_weights_for_equal_samples(tmp_path):
    proc = launch(__file__, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["completions"] != ranks[1]["completions"]  # same samples, other order
    by_sample = {}
    for rank in ranks:
        for ids, weights in zip(rank["completions"], rank["weights"]):
            by_sample.setdefault(tuple(ids), []).append(weights)
    assert len(by_sample) == 3  # right, wrong, no answer
    for ids, seen in by_sample.items():
        assert all(w == seen[0] for w in seen), ids
    assert any(w != 1.0 for seen in by_sample.values() for w in seen[0])
    assert ranks[0]["params"] == ranks[1]["params"]  # DDP kept the replicas equal
    assert 0 < ranks[0]["logs"]["oar/ess_ratio"] <= 1


if __name__ == "__main__":
    worker(sys.argv[1])
