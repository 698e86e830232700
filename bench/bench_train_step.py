"""Time one training step of GRPO (TRL), OAR-G and OAR-P side by side, in one run; print ratios.

A step is one optimizer step (generation, rewards, attribution, loss, backward, update) of
TRL's own GRPOTrainer (the baseline) or of OARGRPOTrainer with oar_method none, oar_g or oar_p,
timed between the trainer's step callbacks. The learning rate is 0, so
every method sees the same policy and, with the same seed, the same completions at every step:
the ratios compare the same work. Methods run round-robin (`--rounds`) so that load from other
processes on the machine spreads over all of them; the first step of each run is a warm-up.

- CPU: the bundled `arith-tiny` model, sampling its own answers to the `arith-tiny` preset's
  prompts (world preset `default`; 8 prompts x 8 completions, up to 96 tokens). Without the
  bundled checkpoint, a random model of its shape with scripted completions (generation cost
  kept, see oar_attrib/training/toy.py).
- GPU (when CUDA is available): a Qwen2-0.5B-shaped random model in bfloat16; completions
  are scripted world solutions stretched to `--gpu-tokens` tokens, after the model has
  sampled as many tokens (so generation costs what it would).

    python bench/bench_train_step.py                 # CPU (and GPU if present)
    python bench/bench_train_step.py --steps 2 --rounds 1 --no-gpu   # smoke run
    python bench/bench_train_step.py --attribute-all   # also attribute zero-advantage completions
    python bench/bench_train_step.py --no-cpu --rounds 1 --steps 2 --json gpu.json   # GPU only
Targets: OAR-G <= 1.15x and OAR-P <= 2.5x the step of TRL's GRPOTrainer. By default the
trainer skips the completions whose advantage is 0 (A_i * w_t = 0 whatever w_t), as in
training; the share it attributes is printed, since the ratios depend on it.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from oar_attrib.world import generate_problems  # noqa: E402
from oar_attrib.training.config import OARConfig  # noqa: E402
from oar_attrib.training.data import world_dataset  # noqa: E402
from oar_attrib.training.rewards import world_reward  # noqa: E402
from oar_attrib.training.toy import ScriptedRollout, tiny_policy, variant_text, world_tokenizer  # noqa: E402
from oar_attrib.training.trainer import OARGRPOTrainer  # noqa: E402

METHODS = ("trl", "none", "oar_g", "oar_p")
# `trl` is TRL's own GRPOTrainer, the baseline of the targets; `none` is OARGRPOTrainer with
# oar_method=none (same loss, plus the answer-span search its logs and run store use).
LABELS = {"trl": "TRL GRPO", "none": "OAR none", "oar_g": "OAR-G", "oar_p": "OAR-P"}
TARGETS = {"oar_g": 1.15, "oar_p": 2.5}
WORLD_PRESET = "default"  # the prompts of the arith-tiny training preset


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


class StretchedRollout(ScriptedRollout):
    """Scripted completions whose reasoning repeats the solution's steps up to `tokens` tokens."""

    def __init__(self, problems, tokenizer, tokens: int):
        super().__init__(problems, tokenizer, generate_tokens=tokens)
        self.tokens = tokens

    def completion_ids(self, prompt: str, index: int) -> list[int]:
        problem = self.by_prompt[prompt]
        text = variant_text(problem, self.variants[index % len(self.variants)])
        steps, _, tail = text.rpartition(" ####")
        ids = self.tokenizer(steps + " ")["input_ids"]
        ids = (ids * (self.tokens // max(len(ids), 1) + 1))[: max(self.tokens - 8, 1)]
        end = self.tokenizer(" ####" + tail)["input_ids"] if tail else []
        return ids + end + [self.tokenizer.eos_token_id]


def cpu_setup(model: str):
    """(model factory, tokenizer, rollout or None, description)."""
    from oar_attrib.models import bundled_path, load_model

    if model != "arith-tiny" or (bundled_path() / "config.json").is_file():
        return (lambda: load_model(model)[0]), load_model(model)[1], None, f"{model}, sampling its answers"
    tok = world_tokenizer(320)
    problems = generate_problems(2000, WORLD_PRESET, seed=0)  # covers every run's prompts
    rollout = ScriptedRollout(problems, tok, generate_tokens=48)
    make = lambda: tiny_policy(tok, hidden=128, layers=4, heads=4, init_std=0.02)  # noqa: E731
    return make, tok, rollout, "random model of arith-tiny's shape + scripted completions (no bundled model)"


def gpu_setup(tokens: int):
    from oar_attrib.models import random_qwen2

    tok = world_tokenizer(320)

    def make():
        return random_qwen2(151936, hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2,
                            max_positions=32768, init_std=0.02, pad_id=tok.pad_token_id,
                            eos_id=tok.eos_token_id, dtype=torch.bfloat16)

    problems = generate_problems(2000, WORLD_PRESET, seed=0)  # covers every run's prompts
    desc = f"Qwen2-0.5B shape, bf16, {tokens}-token completions"
    return make, tok, StretchedRollout(problems, tok, tokens), desc


def step_config(method: str, out: Path, steps: int, cpu: bool, batch: int, completion: int,
                attribute_all: bool) -> OARConfig:
    """The training arguments of one timed run (the learning rate is 0: every method sees the
    same policy)."""
    return OARConfig(
        output_dir=str(out), oar_method="none" if method == "trl" else method, learning_rate=0.0,
        max_steps=steps + 1,
        per_device_train_batch_size=batch, num_generations=8, max_completion_length=completion,
        temperature=1.0, top_k=0, seed=0, logging_steps=1, report_to=[], save_strategy="no",
        disable_tqdm=True, use_cpu=cpu, bf16=not cpu,
        answer_format="gsm8k", dataloader_num_workers=0, oar_skip_zero_advantage=not attribute_all,
    )


def run(method: str, make_model, tok, rollout, steps: int, out: Path, cpu: bool, batch: int,
        completion: int, attribute_all: bool) -> dict:
    args = step_config(method, out, steps, cpu, batch, completion, attribute_all)
    timer = StepTimer()
    trainer_class = GRPOTrainer if method == "trl" else OARGRPOTrainer
    trainer = trainer_class(model=make_model(), reward_funcs=[world_reward], args=args,
                            train_dataset=world_dataset(batch * (steps + 1), WORLD_PRESET, seed=0),
                            processing_class=tok, rollout_func=rollout, callbacks=[timer])
    forward_s, backward_s = [], []
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    _time_calls(trainer, "compute_loss", forward_s, sync)
    _time_calls(trainer.accelerator, "backward", backward_s, sync)
    trainer.train()
    history = trainer.state.log_history
    attr = [h["oar/time_s"] for h in history if "oar/time_s" in h]
    lengths = [float(h["completions/mean_length"]) for h in history if "completions/mean_length" in h]
    found = [h["oar/span_found_rate"] for h in trainer.state.log_history if "oar/span_found_rate" in h]
    rate = [h["oar/attributed_rate"] for h in trainer.state.log_history if "oar/attributed_rate" in h]
    loss = [f + b for f, b in zip(forward_s, backward_s)]
    return {"steps": timer.times[1:], "attr": attr[1:], "span_found": found[1:], "attributed": rate[1:],
            "loss_fb": loss[1:], "completion_tokens": [n * batch for n in lengths[1:]]}


def _time_calls(owner, name: str, sink: list, sync) -> None:
    """Append the seconds of every call of owner.name to `sink` (device work included)."""
    real = getattr(owner, name)

    def timed(*args, **kwargs):
        sync()
        start = time.perf_counter()
        out = real(*args, **kwargs)
        sync()
        sink.append(time.perf_counter() - start)
        return out

    setattr(owner, name, timed)


def bench(name: str, setup, rounds: int, steps: int, cpu: bool, batch: int, completion: int, out: Path,
          attribute_all: bool = False) -> dict:
    make_model, tok, rollout, desc = setup
    times = {m: [] for m in METHODS}
    attr = {m: [] for m in METHODS}
    loss_fb = {m: [] for m in METHODS}
    tokens = {m: [] for m in METHODS}
    spans, attributed = [], []
    for r in range(rounds):
        for method in METHODS:
            res = run(method, make_model, tok, rollout, steps, out / f"{name}-{method}-{r}", cpu,
                      batch, completion, attribute_all)
            times[method] += res["steps"]
            attr[method] += res["attr"]
            loss_fb[method] += res["loss_fb"]
            tokens[method] += res["completion_tokens"]
            spans += res["span_found"]
            attributed += res["attributed"] if method in TARGETS else []
    med = {m: statistics.median(times[m]) for m in METHODS}
    attr_s = {m: statistics.median(attr[m]) if attr[m] else 0.0 for m in METHODS}
    # Step medians move with the machine's load; the attribution time (span search included)
    # is measured directly, so 1 + its seconds / (TRL step) is the steadier estimate of the ratio.
    estimate = {m: 1.0 + attr_s[m] / med["trl"] for m in METHODS}
    # Per 1k completion tokens: attribution beside the loss's forward + backward, the ratio
    # that generation's cost (HF generate inflates it) does not hide.
    per_1k = {m: 1000.0 / statistics.median(tokens[m]) if tokens[m] else float("nan") for m in METHODS}
    attr_1k = {m: attr_s[m] * per_1k[m] for m in METHODS}
    loss_1k = {m: statistics.median(loss_fb[m]) * per_1k[m] if loss_fb[m] else float("nan")
               for m in METHODS}
    result = {"device": name, "model": desc, "step_s": med, "ratio": {m: med[m] / med["trl"] for m in METHODS},
              "ratio_to_oar_none": {m: med[m] / med["none"] for m in METHODS},
              "ratio_from_attribution": estimate, "attribution_s": attr_s,
              "n_steps": {m: len(times[m]) for m in METHODS}, "span_found_rate": statistics.mean(spans),
              "attributed_rate": statistics.mean(attributed), "attribute_all": attribute_all,
              "attribution_s_per_1k_tokens": attr_1k, "loss_fwd_bwd_s_per_1k_tokens": loss_1k}
    print(f"\n== {name}: {desc}")
    print(f"   span found in {result['span_found_rate']:.0%} of completions, "
          f"{result['attributed_rate']:.0%} attributed ({'all' if attribute_all else 'zero-advantage skipped'}); "
          f"median of {result['n_steps']['none']} steps per method")
    for m in METHODS:
        target = f"  (target <= {TARGETS[m]:.2f}x: {'met' if result['ratio'][m] <= TARGETS[m] else 'MISSED'})" \
            if m in TARGETS else ""
        print(f"   {LABELS[m]:<8} {med[m]:7.3f} s/step  attribution {attr_s[m]:6.3f} s  "
              f"{result['ratio'][m]:5.2f}x of TRL (from attribution time {estimate[m]:4.2f}x; "
              f"{result['ratio_to_oar_none'][m]:4.2f}x of OAR none){target}")
    print("   per 1k completion tokens: " + "; ".join(
        f"{LABELS[m]} attribution {attr_1k[m]:.3f} s, loss fwd+bwd {loss_1k[m]:.3f} s"
        + (f" ({attr_1k[m] / loss_1k[m]:.2f}x)" if loss_1k[m] > 0 and m in TARGETS else "")
        for m in METHODS))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="arith-tiny", help="CPU model: bundled name or checkpoint folder")
    parser.add_argument("--rounds", type=int, default=2, help="round-robin rounds over the methods")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--gpu-tokens", type=int, default=512, help="completion length on the GPU")
    parser.add_argument("--gpu-batch", type=int, default=16, help="completions per GPU step")
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU part")
    parser.add_argument("--no-cpu", action="store_true",
                        help="skip the CPU part (a GPU run under a time limit: bench/gpu.sh)")
    parser.add_argument("--attribute-all", action="store_true",
                        help="attribute every completion, also those with advantage 0 (analysis mode)")
    parser.add_argument("--out", default="runs/bench-train-step", help="scratch output folder")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--config-only", action="store_true",
                        help="build every run's training arguments (CPU, and GPU when CUDA is "
                             "present) and exit: checks them against the installed libraries")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.config_only:
        kinds = [(True, 64, 96)] + ([(False, args.gpu_batch, args.gpu_tokens + 16)]
                                    if torch.cuda.is_available() else [])
        for cpu, batch, completion in kinds:
            for method in METHODS:
                step_config(method, out, args.steps, cpu, batch, completion, args.attribute_all)
        print(f"step bench configs build: {len(kinds) * len(METHODS)} runs "
              f"({'cpu' if len(kinds) == 1 else 'cpu and gpu'})")
        return
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {args.threads} threads")
    results = [] if args.no_cpu else [bench("cpu", cpu_setup(args.model), args.rounds, args.steps,
                                            True, 64, 96, out, args.attribute_all)]
    if torch.cuda.is_available() and not args.no_gpu:
        results.append(bench("gpu", gpu_setup(args.gpu_tokens), args.rounds, args.steps, False,
                             args.gpu_batch, args.gpu_tokens + 16, out, args.attribute_all))
    elif not args.no_gpu:
        print("\n== gpu: skipped (no CUDA device)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
