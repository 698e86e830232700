"""Held-out accuracy during training, logged beside TRL's metrics and kept as a curve file.

The accuracy is greedy: for world data, `oar_attrib.world.evaluation.evaluate_world` on 'test'
problems (the numbers `oar eval` prints); for JSONL data, the mean reward of greedy answers to
a held-out set. With `samples` > 0 the mean accuracy of that many sampled answers per problem
is logged too (`accuracy_sampled`): RL raises the probability of right answers, which greedy
accuracy shows only where the most likely answer itself changes. Sampling is seeded, so two
evaluations differ only by the model. Each evaluation is appended to
`<output_dir>/eval_curve.jsonl` and queued as `eval/accuracy` for TRL's next log line. Runs on
the main process only (not under ZeRO-3, whose sharded parameters need every rank for a
forward).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback

from oar_attrib.models.generation import continue_rows
from oar_attrib.inputs.chat_template import chat_ids
from oar_attrib.jsonl import LogOwner, append_jsonl
from oar_attrib.world.evaluation import evaluate_world

from .compat import metrics


# eval_curve.jsonl: one evaluation a line (a file there that is not one is refused, left as it is).
CURVE = LogOwner("an evaluation curve of oar train (a step and its accuracy a line)",
                 lambda v: isinstance(v, dict) and type(v.get("step")) is int and "accuracy" in v)


class AccuracyCallback(TrainerCallback):
    """Every `every` optimizer steps (and before the first), the held-out accuracy."""

    def __init__(self, evaluate, every: int, output_dir: str):
        self.evaluate = evaluate  # model -> dict with at least "accuracy"
        self.every = every
        self.path = Path(output_dir) / "eval_curve.jsonl"
        self.trainer = None  # set by `attach`; metrics go through its queue

    def attach(self, trainer) -> "AccuracyCallback":
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def _run(self, state, model) -> None:
        if self.every <= 0 or not state.is_world_process_zero:
            return
        start = time.perf_counter()
        # Evaluation seeds its own sampling; the training's random streams must not notice.
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            result = self.evaluate(model)
        row = {"step": state.global_step, **result, "seconds": round(time.perf_counter() - start, 2)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, [row], owner=CURVE)
        shown = ", ".join(f"{k} {v:.3f}" for k, v in result.items() if k.startswith("accuracy"))
        print(f"[eval] step {state.global_step}: {shown}", flush=True)
        if self.trainer is not None:
            for key, value in result.items():
                if key.startswith("accuracy"):
                    metrics(self.trainer)[f"eval/{key}"].append(value)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0:
            self._run(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every > 0 and state.global_step % self.every == 0:
            self._run(state, model)


def world_evaluator(tokenizer, presets: str | list[str] = "default", n: int = 200, seed: int = 0,
                    samples: int = 0, temperature: float = 1.0):
    """model -> greedy accuracy and format rate on `n` held-out problems of each world preset;
    `accuracy` is the first preset's, `accuracy/<preset>` each one's, `outcomes/<preset>` whether
    each problem's greedy answer was right (1 or 0, problem order). With `samples` > 0 also
    `accuracy_sampled[/<preset>]`, the mean accuracy of that many answers per problem sampled at
    `temperature`."""
    presets = [presets] if isinstance(presets, str) else list(presets)

    def evaluate(model) -> dict:
        training = model.training
        model.eval()
        out = {}
        try:
            for preset in presets:
                res = evaluate_world(model, tokenizer, preset, n=n, seed=seed, group_size=samples,
                                     temperature=temperature, sample_batch_size=512)
                out.setdefault("accuracy", res.accuracy)
                out.setdefault("format_rate", res.format_rate)
                out[f"accuracy/{preset}"] = res.accuracy
                out[f"outcomes/{preset}"] = [int(c) for c in res.outcomes]
                if samples:
                    out.setdefault("accuracy_sampled", res.sampled_accuracy)
                    out[f"accuracy_sampled/{preset}"] = res.sampled_accuracy
        finally:
            model.train(training)
        return out

    return evaluate


def preset_evaluator(evaluators: dict):
    """model -> the results of several evaluators, one per preset name, keyed as
    `world_evaluator`'s are: `accuracy/<preset>` (and `accuracy_sampled/<preset>`) for each,
    the first preset's also as plain `accuracy` (`accuracy_sampled`)."""
    def evaluate(model) -> dict:
        out = {}
        for preset, fn in evaluators.items():
            for key, value in fn(model).items():
                out.setdefault(key, value)
                out[f"{key}/{preset}"] = value
        return out

    return evaluate


def reward_evaluator(tokenizer, dataset, reward_fn, max_new_tokens: int = 1024, batch_size: int = 16,
                     samples: int = 0, temperature: float = 1.0, seed: int = 0, progress: bool = False):
    """model -> mean reward of greedy completions of `dataset` (prompt and answer columns) and
    `outcomes`, each record's greedy reward in order; with `samples` > 0 `accuracy_sampled`,
    the mean reward of `samples` completions per record sampled at `temperature` (seeded by
    `seed`); `progress` shows a bar over the records."""
    def rewards(model, rows, n_samples: int) -> list[float]:
        """Rewards of greedy (n_samples=0) or n_samples sampled completions of each record."""
        texts = _complete(model, tokenizer, rows["prompt"], max_new_tokens, n_samples, temperature)
        repeat = max(n_samples, 1)  # generate keeps a prompt's completions together
        extra = {k: [v for v in vals for _ in range(repeat)] for k, vals in rows.items() if k != "prompt"}
        prompts = [p for p in rows["prompt"] for _ in range(repeat)]
        return reward_fn(prompts=prompts, completions=texts, **extra)

    def evaluate(model) -> dict:
        training = model.training
        model.eval()
        greedy, sampled = [], []
        bar = tqdm(total=len(dataset), desc="evaluate", unit="record", disable=not progress)
        try:
            torch.manual_seed(seed)
            for start in range(0, len(dataset), batch_size):
                rows = dataset[start : start + batch_size]
                greedy += rewards(model, rows, 0)
                if samples:
                    sampled += rewards(model, rows, samples)
                bar.update(len(rows["prompt"]))
                bar.set_postfix(accuracy=f"{sum(greedy) / len(greedy):.3f}")
        finally:
            bar.close()
            model.train(training)
        out = {"accuracy": sum(greedy) / max(len(greedy), 1), "outcomes": [float(r) for r in greedy]}
        if samples:
            out["accuracy_sampled"] = sum(sampled) / max(len(sampled), 1)
        return out

    return evaluate


def _complete(model, tokenizer, prompts, max_new_tokens: int, samples: int = 0,
              temperature: float = 1.0) -> list[str]:
    """Greedy completions (samples=0) or `samples` sampled ones per prompt, prompt-major."""
    def encode(prompt) -> list[int]:
        if isinstance(prompt, list):  # chat messages, in the bounded template sandbox
            return chat_ids(tokenizer, prompt)
        return tokenizer(prompt)["input_ids"]

    new = continue_rows(model, [encode(p) for p in prompts], tokenizer.pad_token_id,
                        max_new_tokens=max_new_tokens, do_sample=samples > 0, temperature=temperature,
                        num_return_sequences=max(samples, 1))
    return tokenizer.batch_decode(new, skip_special_tokens=True)
