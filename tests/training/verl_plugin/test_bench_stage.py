"""bench/gpu.sh's verl_step stage, as far as a CPU goes: its hydra overrides compose with verl's
own config (every key exists in this verl), the files it writes are what verl's dataset reads
(prompts through the tokenizer's pass-through chat template), and its reward is the world's."""
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import bench_verl_step as stage  # noqa: E402


def test_the_overrides_compose_with_verls_config():
    done = subprocess.run([sys.executable, "-W", "ignore", "bench/bench_verl_step.py", "--check-config"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("config: ok, verl 0.9.")


def test_verls_dataset_reads_the_prepared_files_and_the_reward_is_the_worlds(tmp_path):
    args = stage.main.__globals__["argparse"].Namespace(prompts=2, n=4)
    stage.prepare(args, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    config = OmegaConf.create({"max_prompt_length": 64, "prompt_key": "prompt", "truncation": "error",
                               "filter_overlong_prompts": False, "return_raw_chat": True})
    data = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, config)
    assert len(data) == 8
    chat = data[0]["raw_prompt"]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert text == chat[0]["content"] and text.endswith(".\n")  # the bare prompt the model was trained on
    answer = data[0]["reward_model"]["ground_truth"]
    assert stage.compute_score("oar_world", f"x=1. #### {answer}", answer) == 1.0
    assert stage.compute_score("oar_world", f"#### {int(answer) + 1}", answer) == 0.0


def test_the_metrics_are_read_from_verls_console_line():
    line = "step:1 - actor/entropy:2.1 - oar/ess_ratio:0.83 - oar/top10_mass:1.2e-01 - oar/time_s:4"
    assert stage.oar_metrics(line) == {"oar/ess_ratio": 0.83, "oar/top10_mass": 0.12, "oar/time_s": 4.0}
