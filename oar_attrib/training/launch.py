"""A training run from a YAML file: preset -> config file -> command-line overrides -> trainer.

A run file has two sections: `run` (the fields of `RunConfig`: model, data, rewards, held-out
evaluation) and `trainer` (the fields of `OARConfig`: every GRPOConfig field plus oar_*).
Overrides are `key=value` with YAML values; a bare key is looked up in RunConfig first, then in
OARConfig (`learning_rate=1e-5`), a dotted one names its section (`trainer.seed=3`).
"""
from __future__ import annotations

import dataclasses
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import TrainingConfigError

PRESET_DIR = Path(__file__).resolve().parent / "presets"
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class RunConfig:
    """What to train and on what; the optimisation itself is the `trainer` section."""

    model: str = field(default="arith-tiny", metadata={"help": "Bundled model name or local checkpoint folder."})
    dtype: str = field(default="float32", metadata={"help": f"Weights dtype: one of {', '.join(DTYPES)}."})
    data: str = field(default="world", metadata={"help": "'world' (the arithmetic world) or a JSONL file."})
    world_preset: str = field(default="default", metadata={"help": "World preset of the training prompts."})
    world_train_size: int = field(default=20000, metadata={"help": "Number of world training problems."})
    world_answer_format: str = field(default="gsm8k", metadata={"help": "World answer marker: gsm8k or boxed."})
    data_limit: int | None = field(default=None, metadata={"help": "Use only the first N JSONL records."})
    prompt_template: str = field(default="boxed", metadata={"help": "JSONL prompt template: boxed, gsm8k, answer_is, plain."})
    system_prompt: str | None = field(default=None, metadata={"help": "Optional system message (chat models)."})
    reward: list[str] = field(default_factory=lambda: ["world"],
                              metadata={"help": "Rewards: world, gsm8k, math_verify or module:function."})
    eval_every: int = field(default=0, metadata={"help": "Held-out accuracy every N steps (0: never)."})
    eval_n: int = field(default=200, metadata={"help": "Held-out problems (world) or records (JSONL)."})
    eval_preset: str | list[str] = field(default="default", metadata={
        "help": "World preset(s) of the held-out problems; eval/accuracy is the first one's."})
    eval_samples: int = field(default=0, metadata={
        "help": "Also sample this many answers per held-out problem at the training temperature and "
                "log their mean accuracy as eval/accuracy_sampled[/<preset>] (0: greedy only)."})
    eval_data: str | None = field(default=None, metadata={"help": "JSONL held-out set for non-world data."})
    eval_max_new_tokens: int = field(default=1024, metadata={"help": "Greedy tokens per held-out answer (JSONL)."})
    threads: int = field(default=0, metadata={"help": "torch CPU threads (0: torch's default)."})

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise TrainingConfigError(f"dtype={self.dtype!r} is not allowed; choose one of {', '.join(DTYPES)}")
        if isinstance(self.reward, str):
            self.reward = [self.reward]
        if not self.reward:
            raise TrainingConfigError("reward needs at least one reward function")
        for name in ("world_train_size", "eval_n", "eval_max_new_tokens"):
            if getattr(self, name) < 1:
                raise TrainingConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every < 0 or self.threads < 0 or self.eval_samples < 0:
            raise TrainingConfigError("eval_every, eval_samples and threads must be >= 0")
        if self.data != "world" and self.eval_every > 0 and not self.eval_data:
            raise TrainingConfigError("eval_every > 0 with JSONL data needs eval_data, a held-out JSONL file")


def preset_path(name: str) -> Path:
    """A preset by name (oar_attrib/training/presets/<name>.yaml) or a path to a YAML file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    found = PRESET_DIR / f"{name}.yaml"
    if not found.is_file():
        known = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
        raise TrainingConfigError(f"unknown preset {name!r}; known: {', '.join(known)} (or a path to a .yaml)")
    return found


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise TrainingConfigError(f"{path} is not a text file (not UTF-8); pass a YAML file") from None
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TrainingConfigError(f"{path} is not valid YAML ({first}); fix it or pass another file") from None
    if not isinstance(data, dict):
        raise TrainingConfigError(f"{path}: must be a mapping with 'run' and 'trainer' sections, "
                                  f"got a {type(data).__name__}")
    unknown = set(data) - {"run", "trainer"}
    if unknown:
        raise TrainingConfigError(f"{path}: top-level keys must be 'run' and 'trainer', got {sorted(unknown)}")
    return {"run": dict(data.get("run") or {}), "trainer": dict(data.get("trainer") or {})}


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def _section_of(key: str, trainer_fields: set[str]) -> tuple[str, str]:
    if "." in key:
        section, _, name = key.partition(".")
        if section not in ("run", "trainer"):
            raise TrainingConfigError(f"override {key!r}: the section must be 'run' or 'trainer'")
        return section, name
    if key in _field_names(RunConfig):
        return "run", key
    if key in trainer_fields:
        return "trainer", key
    close = difflib.get_close_matches(key, sorted(_field_names(RunConfig) | trainer_fields), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise TrainingConfigError(f"unknown setting {key!r}{hint}")


def apply_overrides(config: dict, overrides: list[str], trainer_fields: set[str]) -> dict:
    """`key=value` strings (YAML values) applied to a {'run': ..., 'trainer': ...} dict."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TrainingConfigError(f"override {item!r} must look like key=value")
        section, name = _section_of(key.strip(), trainer_fields)
        config[section][name] = parse_value(value)
    return config


_YAML11_WORDS = {"yes", "no", "on", "off", "y", "n"}


def parse_value(text: str):
    """A YAML value, except that numbers YAML 1.1 leaves as strings (`3e-4`) are numbers and
    its boolean words other than true/false (`no`, `on`, ...) stay strings (`save_strategy=no`)."""
    if text.strip().lower() in _YAML11_WORDS:
        return text.strip()
    value = yaml.safe_load(text)
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def resolve(preset: str | None, config_file: str | None, overrides: list[str]) -> dict:
    """The merged {'run': ..., 'trainer': ...} settings (not yet validated)."""
    from .config import OARConfig, fit_to_device

    merged = {"run": {}, "trainer": {}}
    for path in [preset_path(preset) if preset else None, Path(config_file) if config_file else None]:
        if path is None:
            continue
        if not path.is_file():
            raise TrainingConfigError(f"config file {path} does not exist")
        data = read_yaml(path)
        merged["run"].update(data["run"])
        merged["trainer"].update(data["trainer"])
    merged = apply_overrides(merged, overrides, _field_names(OARConfig))
    for line in fit_to_device(merged):
        print(f"oar train: {line}", file=sys.stderr)
    return merged


def build_configs(settings: dict):
    """(RunConfig, OARConfig) from merged settings; unknown keys are errors."""
    from .config import OARConfig

    for section, cls in (("run", RunConfig), ("trainer", OARConfig)):
        unknown = set(settings[section]) - _field_names(cls)
        if unknown:
            raise TrainingConfigError(f"unknown {section} setting(s): {', '.join(sorted(unknown))}")
    from .typecheck import check_types

    run, trainer = (check_types(cls, settings[section], section)
                    for section, cls in (("run", RunConfig), ("trainer", OARConfig)))
    try:
        return RunConfig(**run), OARConfig(**trainer)
    except (TypeError, ValueError) as err:
        if isinstance(err, TrainingConfigError):
            raise
        raise TrainingConfigError(str(err)) from None


# ------------------------------------------------------------------ building the run


def build_datasets(run: RunConfig, tokenizer, seed: int, temperature: float = 1.0):
    """(train dataset, held-out evaluator or None); sampled evaluation runs at `temperature`."""
    from .callbacks import reward_evaluator, world_evaluator
    from .data import math_dataset, world_dataset

    if run.data == "world":
        train = world_dataset(run.world_train_size, run.world_preset, seed=seed, split="train",
                              answer_format=run.world_answer_format)
        evaluator = (world_evaluator(tokenizer, run.eval_preset, run.eval_n, samples=run.eval_samples,
                                     temperature=temperature) if run.eval_every else None)
        return train, evaluator
    train = math_dataset(run.data, tokenizer, run.prompt_template, run.system_prompt, run.data_limit)
    evaluator = None
    if run.eval_every:
        held_out = math_dataset(run.eval_data, tokenizer, run.prompt_template, run.system_prompt, run.eval_n)
        evaluator = reward_evaluator(tokenizer, held_out, build_rewards(run)[0], run.eval_max_new_tokens,
                                     samples=run.eval_samples, temperature=temperature)
    return train, evaluator


def build_rewards(run: RunConfig, args=None, stop: list[int] | None = None) -> list:
    """The run's reward functions; given the trainer's settings, each grades the answer in the
    trainer's answer_format (the span OAR reshapes around), and given the stop ids (EOS, pad)
    a completion cut off at the length limit earns 0 (`rewards.bind_reward`)."""
    from .rewards import bind_reward, get_reward

    fns = [get_reward(name) for name in run.reward]
    if args is None:
        return fns
    settings = {"answer_format": args.answer_format, "answer_pattern": args.answer_pattern, "stop_ids": stop}
    return [bind_reward(fn, **settings) for fn in fns]


def build_trainer(run: RunConfig, args, rollout_func=None):
    """The OARGRPOTrainer of a run (model loaded from safetensors, offline)."""
    import torch

    from oar_attrib.generation import stop_ids
    from oar_attrib.models import load_model

    from .callbacks import AccuracyCallback
    from .trainer import OARGRPOTrainer

    if run.threads:
        torch.set_num_threads(run.threads)
    model, tokenizer = load_model(run.model, dtype=run.dtype)
    train, evaluator = build_datasets(run, tokenizer, args.seed, args.temperature)
    stop = sorted({*stop_ids(model, tokenizer), tokenizer.pad_token_id} - {None})
    trainer = OARGRPOTrainer(model=model, reward_funcs=build_rewards(run, args, stop), args=args,
                             train_dataset=train, processing_class=tokenizer, rollout_func=rollout_func)
    if evaluator is not None:
        AccuracyCallback(evaluator, run.eval_every, args.output_dir).attach(trainer)
    return trainer


def end_distributed(trainer) -> None:
    """Free the trainer's DDP wrapper, then destroy the process group: in this order, and before
    the interpreter exits.

    A gloo group freed by the wrapper's reducer (the group's last owner once the group is
    destroyed) joins its worker threads while holding the GIL; a worker still freeing its last
    collective needs the GIL, and the rank hangs after its work is done (seen under CPU load).
    Left to the interpreter's exit instead, the same worker can abort the rank. Freed while the
    group is still registered, the reducer leaves the last reference to `destroy_process_group`,
    whose binding releases the GIL before joining. The trainer keeps the unwrapped model.
    """
    import gc

    trainer.model_wrapped = trainer.model
    trainer.accelerator.free_memory()
    gc.collect()
    trainer.accelerator.end_training()


def check_checkpoint(folder: str | Path) -> None:
    """TrainingConfigError naming the file and what is wrong when a checkpoint folder cannot
    be resumed: trainer_state.json or config.json missing or not a JSON object, weights
    missing, damaged or of other shapes than config.json, a torch file (optimizer, scheduler,
    random states) that weights-only loading cannot read (damaged, or a pickle of code: never
    run). Reads what `Trainer` reads on resuming, the same way, before any model loads."""
    import json
    import pickle
    import warnings

    import torch
    from transformers import AutoConfig
    from transformers.trainer_pt_utils import safe_globals

    from oar_attrib.errors import ModelLoadError
    from oar_attrib.models import check_weights

    folder = Path(folder)

    def bad(name: str, why: str) -> TrainingConfigError:
        why = " ".join(str(why).split())[:200]  # one line, whatever the loader said
        return TrainingConfigError(f"--resume {folder}: {name} {why}; pass --resume another "
                                   "checkpoint, or train without --resume to start fresh")

    for name in ("trainer_state.json", "config.json"):
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise bad(name, "is missing") from None
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise bad(name, f"is not valid JSON ({err})") from None
        if not isinstance(value, dict):
            raise bad(name, "is not a JSON object")
    if not any(folder.glob("*.safetensors")):
        raise bad("model.safetensors", "is missing")
    try:
        check_weights(folder, AutoConfig.from_pretrained(folder))
    except (ModelLoadError, ValueError, OSError) as err:
        raise bad("the model", f"cannot be loaded ({err})") from None
    for path in sorted([*folder.glob("*.pt"), *folder.glob("*.pth")]):
        try:
            # safe_globals: the numpy types of the random states, as Trainer allows them; torch's
            # warnings on the pickle protocol would only add lines to the one below.
            with safe_globals(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # torch's text here advises weights_only=False: not ours
            raise bad(path.name, "cannot be read by weights-only loading: it holds objects other "
                      "than tensors (possibly code, which was not run)") from None
        except Exception as err:  # torch raises many types here: each means "cannot be read"
            raise bad(path.name, f"cannot be read by weights-only loading (damaged: {err})") from None


def train(run: RunConfig, args, resume: str | bool | None = None) -> dict:
    """Train, save the final model (safetensors) and the resolved settings; return a summary.
    A `resume` checkpoint folder is checked first (`check_checkpoint`)."""
    if isinstance(resume, (str, Path)):
        check_checkpoint(resume)
    trainer = build_trainer(run, args)
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    settings = {"run": dataclasses.asdict(run), "trainer": {
        f.name: getattr(args, f.name) for f in dataclasses.fields(args)
        if f.name.startswith("oar_") or f.name in ("learning_rate", "max_steps", "seed", "loss_type",
                                                    "num_generations", "per_device_train_batch_size")}}
    (Path(args.output_dir) / "run_settings.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    result = trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(args.output_dir)
    end_distributed(trainer)
    return {"global_step": trainer.state.global_step, "train_loss": result.training_loss,
            "output_dir": args.output_dir}
