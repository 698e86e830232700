"""OARConfig validation, the TRL version pin, run files, overrides, the CLI and the datasets."""
import argparse
import json
from pathlib import Path

import pytest
import yaml

from oar_attrib.world import generate_problems
from oar_attrib.training.cli import add_train_command, main
from oar_attrib.training.config import OARConfig, check_trl_version
from oar_attrib.training.data import (format_prompt, math_dataset, problem_from_json, read_jsonl, word_dataset,
                                      world_dataset)
from oar_attrib.training.errors import DataError, TrainingConfigError, UnsupportedTRLError
from oar_attrib.training.launch import build_configs, parse_value, resolve

from shared_data import data_file, qwen_dir
CPU = dict(output_dir="unused", use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=8,
           num_generations=4)


@pytest.mark.parametrize("field, value, words", [
    ("oar_method", "captum", ["none", "oar_p", "oar_g", "entropy", "grail", "ig", "random"]),
    ("oar_probe", "mean", ["lt", "as_mean", "as_joint"]),
    ("answer_format", "latex", ["boxed", "gsm8k", "auto"]),
    ("oar_weighting", "topk", ["bilevel", "grail", "top_rho"]),
])
def test_config_rejects_unknown_names_listing_the_allowed(field, value, words):
    with pytest.raises(TrainingConfigError) as err:
        OARConfig(**CPU, **{field: value})
    assert all(w in str(err.value) for w in words)


@pytest.mark.parametrize("field, value", [
    ("oar_tau", 1.5), ("oar_tau", float("nan")), ("oar_beta", -1.0), ("oar_w_min", 2.0),
    ("oar_noise_std", -0.1), ("oar_max_batch_tokens", 0), ("oar_probe_warmup_steps", -1),
    ("oar_entropy_rho", 0.0), ("oar_store_every", -1),
])
def test_config_rejects_out_of_range_values(field, value):
    with pytest.raises(TrainingConfigError, match=field):
        OARConfig(**CPU, **{field: value})


def test_config_regex_needs_a_pattern_and_warmup_picks_the_probe():
    with pytest.raises(TrainingConfigError, match="answer_pattern"):
        OARConfig(**CPU, answer_format="regex")
    cfg = OARConfig(**CPU, oar_probe="as_joint", oar_probe_warmup_steps=3)
    assert [cfg.probe_at(s) for s in (0, 2, 3, 10)] == ["lt", "lt", "as_joint", "as_joint"]


def test_trl_version_pin(monkeypatch):
    monkeypatch.delenv("OAR_ALLOW_UNTESTED_TRL", raising=False)
    check_trl_version("1.16.0")
    for version in ("1.15.2", "1.17.0", "2.0.0"):
        with pytest.raises(UnsupportedTRLError, match=r"trl>=1\.16\.0,<1\.17\.0"):
            check_trl_version(version)
    monkeypatch.setenv("OAR_ALLOW_UNTESTED_TRL", "1")
    check_trl_version("1.17.0")


def test_trainer_needs_an_oar_config():
    from trl import GRPOConfig

    from oar_attrib.training.toy import tiny_policy, world_tokenizer
    from oar_attrib.training.trainer import OARGRPOTrainer

    tok = world_tokenizer()
    with pytest.raises(TrainingConfigError, match="OARConfig"):
        OARGRPOTrainer(model=tiny_policy(tok), reward_funcs=[lambda **k: [0.0]], processing_class=tok,
                       args=GRPOConfig(**CPU), train_dataset=world_dataset(4, "default"))


# ------------------------------------------------------------------ run files and the CLI


def test_resolve_merges_preset_file_and_overrides(tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("run:\n  eval_n: 17\ntrainer:\n  oar_tau: 0.3\n  max_steps: 9\n")
    settings = resolve("arith-tiny", str(extra), ["oar_tau=0.5", "learning_rate=3e-4", "run.eval_every=0",
                                                  "trainer.seed=4"])
    assert settings["run"]["eval_n"] == 17 and settings["run"]["eval_every"] == 0
    assert settings["trainer"]["oar_tau"] == 0.5 and settings["trainer"]["max_steps"] == 9
    assert settings["trainer"]["learning_rate"] == 3e-4 and settings["trainer"]["seed"] == 4
    run, args = build_configs(settings)
    assert run.model == "arith-tiny" and isinstance(args, OARConfig) and args.oar_method == "oar_g"


def test_overrides_fail_clearly():
    with pytest.raises(TrainingConfigError, match="did you mean oar_tau"):
        resolve("arith-tiny", None, ["oar_taux=1"])
    with pytest.raises(TrainingConfigError, match="key=value"):
        resolve("arith-tiny", None, ["oar_tau"])
    with pytest.raises(TrainingConfigError, match="arith-tiny, gsm8k-gpu, math-7b, smollm2-gsm8k"):
        resolve("no-such-preset", None, [])
    with pytest.raises(TrainingConfigError, match="eval_samples"):
        build_configs(resolve("arith-tiny", None, ["eval_samples=-1"]))
    assert parse_value("3e-4") == 3e-4 and parse_value("[world, gsm8k]") == ["world", "gsm8k"]
    assert parse_value("no") == "no" and parse_value("false") is False and parse_value("null") is None


def test_math_preset_validates_with_cpu_overrides():
    run, args = build_configs(resolve("math-7b", None, ["bf16=false", "use_cpu=true"]))
    assert run.reward == ["math_verify"] and args.answer_format == "boxed"
    assert Path(run.data).name == "gsm8k_train.jsonl"


def test_cli_dry_run_and_subcommand(capsys):
    assert main(["--dry-run", "--method", "oar_p", "--max-steps", "3", "oar_beta=1.5"]) == 0
    out = capsys.readouterr().out
    assert "oar_method: oar_p" in out and "max_steps: 3" in out and "oar_beta: 1.5" in out
    assert main(["--dry-run", "oar_method=captum"]) == 2
    assert "oar_method='captum' is not allowed" in capsys.readouterr().err
    parser = argparse.ArgumentParser(prog="oar")
    add_train_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "--preset", "arith-tiny", "--resume", "latest", "oar_tau=0.2"])
    assert args.resume == "latest" and args.overrides == ["oar_tau=0.2"] and callable(args.func)


# ------------------------------------------------------------------ data


def test_world_dataset_carries_the_problem():
    ds = world_dataset(5, "default", seed=2)
    problems = generate_problems(5, "default", seed=2)
    assert ds["prompt"] == [p.prompt for p in problems] and ds["answer"] == [str(p.answer) for p in problems]
    back = problem_from_json(ds["problem"][0])
    assert back == problems[0] and back.oracle() == problems[0].oracle() and back.answer == problems[0].answer
    assert set(ds["prompt"]).isdisjoint(world_dataset(50, "default", seed=2, split="test")["prompt"])


def test_word_dataset_asks_the_world_problems_with_the_template():
    """data=words: the word-problem world's questions under the prompt template, gold answers
    as strings, the same problems for the same seed, test disjoint from train."""
    from oar_attrib.world.words import generate_word_problems

    ds = word_dataset(6, "tiny", None, "answer_is", seed=3)
    problems = generate_word_problems(6, "tiny", seed=3, split="train")
    assert ds["prompt"] == [format_prompt(p.question, None, "answer_is") for p in problems]
    assert ds["answer"] == [str(p.answer) for p in problems]
    assert all("The answer is" in prompt for prompt in ds["prompt"])
    assert word_dataset(6, "tiny", None, "answer_is", seed=3)["prompt"] == ds["prompt"]
    assert word_dataset(6, "tiny", None, "answer_is", seed=4)["prompt"] != ds["prompt"]
    test = word_dataset(60, "tiny", None, "answer_is", seed=3, split="test")["prompt"]
    assert set(word_dataset(200, "tiny", None, "answer_is", seed=3)["prompt"]).isdisjoint(test)


def test_words_data_evaluates_each_held_out_preset(monkeypatch):
    """data=words with eval_every: one reward evaluator per word preset on its 'test'
    problems (whatever the run's seed), keyed accuracy/<preset> with the first also plain."""
    from oar_attrib.training import callbacks, launch

    seen = []

    def fake_reward_evaluator(tokenizer, dataset, reward_fn, max_new_tokens, samples=0, temperature=1.0):
        seen.append((list(dataset["id"]), max_new_tokens, samples))
        rate = 0.25 if "distractor" in dataset["id"][0] else 0.5
        return lambda model: {"accuracy": rate, **({"accuracy_sampled": rate / 2} if samples else {})}

    monkeypatch.setattr(callbacks, "reward_evaluator", fake_reward_evaluator)
    run, _ = build_configs(resolve("arith-tiny", None, [
        "data=words", "world_preset=tiny", "world_train_size=5", "eval_every=2", "eval_n=3",
        "eval_preset=[tiny, tiny-distractor]", "eval_samples=2", "prompt_template=answer_is",
        "reward=[gsm8k]", "eval_max_new_tokens=64"]))
    train, evaluate = launch.build_datasets(run, None, seed=7)
    assert train["id"] == [f"tiny-train-7-{i}" for i in range(5)]
    assert seen == [([f"tiny-test-0-{i}" for i in range(3)], 64, 2),
                    ([f"tiny-distractor-test-0-{i}" for i in range(3)], 64, 2)]
    assert evaluate(None) == {"accuracy": 0.5, "accuracy/tiny": 0.5, "accuracy_sampled": 0.25,
                              "accuracy_sampled/tiny": 0.25, "accuracy/tiny-distractor": 0.25,
                              "accuracy_sampled/tiny-distractor": 0.125}


def test_math_dataset_prompts(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps({"problem": "What is 2+2?", "answer": 4}) + "\n\n"
                    + json.dumps({"question": "And 3+3?", "answer": "6", "id": "q"}) + "\n")
    ds = math_dataset(path)
    assert ds["answer"] == ["4", "6"] and ds["id"] == ["0", "q"]
    assert ds["prompt"][0].startswith("What is 2+2?\n") and "\\boxed{}" in ds["prompt"][0]
    from transformers import AutoTokenizer

    chat = math_dataset(path, AutoTokenizer.from_pretrained(str(qwen_dir())), system="Be brief.")
    assert chat["prompt"][1] == [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": format_prompt("And 3+3?")}]


def test_data_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "x", "answer": "1"}\n{not json}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2"):
        read_jsonl(path)
    path.write_text('{"question": "x"}\n')
    with pytest.raises(DataError, match="answer"):
        math_dataset(path)
    with pytest.raises(DataError, match="does not exist"):
        read_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="boxed, gsm8k, answer_is, plain"):
        format_prompt("x", template="latex")


def test_shared_math_sets_load():
    for name in ("gsm8k_test", "math500_test", "aime24", "aime25", "amc23"):
        ds = math_dataset(data_file(name), limit=5)
        assert len(ds) == 5 and all(ds["answer"])


def test_cli_trains_end_to_end(tmp_path, capsys):
    """`python -m oar_attrib.training` on a saved tiny model: a step, an evaluation, a checkpoint, the store."""
    from oar_attrib.training.toy import tiny_policy, world_tokenizer

    tok = world_tokenizer()
    model_dir = tmp_path / "tiny"
    tiny_policy(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "run"
    argv = ["--preset", "arith-tiny", "--model", str(model_dir), "--output-dir", str(out), "--max-steps", "1",
            "world_train_size=16", "eval_every=1", "eval_n=4", "eval_samples=2", "threads=0", "per_device_train_batch_size=8",
            "num_generations=4", "max_completion_length=12", "save_steps=1", "oar_store_every=1",
            "oar_store_samples=4"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["global_step"] == 1
    curve = [json.loads(line) for line in (out / "eval_curve.jsonl").read_text().splitlines()]
    assert [row["step"] for row in curve] == [0, 1] and all(0 <= row["accuracy"] <= 1 for row in curve)
    assert all(row["accuracy"] == row["accuracy/default"] and "accuracy/recall" in row for row in curve)
    assert all(0 <= row["accuracy_sampled/recall"] <= 1 for row in curve)
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-1" / "model.safetensors").is_file()
    assert (out / "runs.db").is_file() and (out / "run_settings.yaml").is_file()


def test_evaluation_leaves_the_training_random_stream_alone(tmp_path):
    import torch
    from transformers import TrainerState

    from oar_attrib.training.callbacks import AccuracyCallback

    def evaluate(model):
        torch.manual_seed(0)  # as oar_attrib.models.generation.generate does
        return {"accuracy": 0.5}

    callback = AccuracyCallback(evaluate, every=1, output_dir=str(tmp_path))
    before = torch.get_rng_state()
    callback.on_step_end(None, TrainerState(global_step=3), None, model=None)
    assert torch.equal(before, torch.get_rng_state())
    assert json.loads((tmp_path / "eval_curve.jsonl").read_text())["step"] == 3


def test_cli_takes_trl_spellings_and_overrides_anywhere(capsys):
    from oar_attrib import cli as oar_cli

    argv = ["--dry-run", "--output_dir", "runs/x", "--learning_rate=3e-6", "run.eval_every=0",
            "--method", "oar_p", "trainer.seed=3", "--bf16", "false", "--use_cpu", "--max-steps", "7",
            "--num-generations", "4", "oar_tau=0.25"]
    for entry in (main, lambda a: oar_cli.main(["train", *a])):
        assert entry(argv) == 0
        settings = yaml.safe_load(capsys.readouterr().out)
        run, trainer = settings["run"], settings["trainer"]
        assert run["eval_every"] == 0 and trainer["output_dir"] == "runs/x"
        assert trainer["learning_rate"] == 3e-6 and trainer["seed"] == 3 and trainer["bf16"] is False
        assert trainer["use_cpu"] is True and trainer["max_steps"] == 7 and trainer["num_generations"] == 4
        assert trainer["oar_method"] == "oar_p" and trainer["oar_tau"] == 0.25
    assert main(["--dry-run", "--learnin_rate", "1e-5"]) == 2
    assert "unknown setting 'learnin_rate'; did you mean learning_rate?" in capsys.readouterr().err


def test_resume_latest_without_a_checkpoint_fails_before_loading(tmp_path, monkeypatch, capsys):
    from oar_attrib.training import launch

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the resume check")

    monkeypatch.setattr(launch, "build_trainer", no_loading)
    (tmp_path / "run").mkdir()
    for out in (tmp_path / "run", tmp_path / "missing"):
        assert main(["--output-dir", str(out), "--resume", "latest"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "has no checkpoint-N folder" in err[0] and str(out) in err[0]


def test_config_from_python_works_on_this_machine_without_warnings(tmp_path):
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = OARConfig(output_dir=str(tmp_path), oar_method="oar_g")
        explicit = OARConfig(output_dir=str(tmp_path), gradient_checkpointing=False, bf16=False)
    assert not [w for w in caught if "checkpointing" in str(w.message)]
    cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert args.bf16 is cuda_bf16 and not args.fp16  # fp32 on a CPU machine, as the presets
    assert args.gradient_checkpointing is True  # TRL's default, kept under either name
    assert getattr(args, "activation_checkpointing", True) is True
    assert explicit.gradient_checkpointing is False and explicit.bf16 is False
    assert OARConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is False


def test_math_dataset_takes_trl_prompt_formats(tmp_path):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    path = tmp_path / "trl.jsonl"

    def load(*records):
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        return math_dataset(path)

    standard = load({"prompt": "What is 3+3? Put it in \\boxed{}.", "answer": "6"},
                    {"question": "And 5+5?", "answer": "10"})
    assert standard["prompt"][0] == "What is 3+3? Put it in \\boxed{}."  # TRL's standard format, as is
    assert standard["prompt"][1] == format_prompt("And 5+5?") and standard["answer"] == ["6", "10"]
    conversational = load({"prompt": chat, "answer": 4})
    assert conversational["prompt"] == [chat] and conversational["answer"] == ["4"]
    with pytest.raises(DataError, match="record 2's prompt is chat messages but others are strings"):
        load({"prompt": "x", "answer": 1}, {"prompt": chat, "answer": 2})
    path.write_text(json.dumps({"prompt": [{"role": "user"}], "answer": "1"}) + "\n")
    with pytest.raises(DataError, match="record 1: 'prompt' must be"):
        math_dataset(path)
    path.write_text(json.dumps({"text": "x", "answer": "1"}) + "\n")
    with pytest.raises(DataError, match="needs a 'prompt'"):
        math_dataset(path)


def test_old_knob_names_are_refused_naming_the_new_one(tmp_path):
    """0.1.0 removed oar_min_weight (CHANGELOG.md); oar_w_min is the one name."""
    with pytest.raises(TypeError, match="oar_min_weight"):
        OARConfig(output_dir=str(tmp_path), oar_min_weight=0.3)
    new = OARConfig(output_dir=str(tmp_path), oar_w_min=0.2)
    assert new.oar_w_min == 0.2 and OARConfig(output_dir=str(tmp_path)).oar_w_min == 0.1
    with pytest.raises(TrainingConfigError, match="unknown setting .oar_min_weight.; did you mean .*oar_w_min"):
        build_configs(resolve("arith-tiny", None, ["oar_min_weight=0.05"]))
    run, args = build_configs(resolve("arith-tiny", None, ["oar_w_min=0.05"]))
    assert args.oar_w_min == 0.05


# ------------------------------------------------------------------ presets follow the device


def test_fit_to_device_on_cpu_says_what_it_changes():
    from oar_attrib.training.config import fit_to_device

    settings = {"run": {"dtype": "bfloat16"}, "trainer": {"bf16": True}}
    said = fit_to_device(settings, cuda=False)
    assert settings == {"run": {"dtype": "float32"}, "trainer": {"bf16": False, "use_cpu": True}}
    assert len(said) == 2 and all("\n" not in line for line in said)
    assert any("bf16=true needs a GPU" in line for line in said)
    gpu = {"run": {"dtype": "bfloat16"}, "trainer": {"bf16": True}}
    assert fit_to_device(gpu, cuda=True) == [] and gpu["run"]["dtype"] == "bfloat16"
    fp32 = {"run": {"dtype": "float32"}, "trainer": {"bf16": False, "use_cpu": True}}
    assert fit_to_device(fp32, cuda=False) == []


def test_math_preset_starts_on_a_cpu_without_overrides(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    run, args = build_configs(resolve("math-7b", None, []))
    assert (run.dtype, args.bf16, args.use_cpu) == ("float32", False, True)
    assert "bf16=true needs a GPU" in capsys.readouterr().err
    assert main(["--preset", "math-7b", "--dry-run"]) == 0


@pytest.mark.heavy
@pytest.mark.slow  # 140 s on 2 shared CPU cores, most of it TRL's generation
def test_smollm2_preset_trains_a_step_with_oar_on_and_reloads(smollm2, tmp_path):
    """One step of the smollm2-gsm8k preset at its smallest (2 completions) on the real model:
    OAR finds the answer span in some completion, the reward reads the same span, and the saved
    checkpoint loads back through load_model with the trained weights."""
    import torch

    from oar_attrib.models import load_model
    from oar_attrib.training.launch import build_trainer

    # A one-step question keeps the completions short (a GSM8K answer of this model runs to
    # 150+ tokens; generating them is most of a step's time on a CPU).
    sample = tmp_path / "easy.jsonl"
    sample.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    run, args = build_configs(resolve("smollm2-gsm8k", None, [
        f"data={sample}", "max_steps=1", "num_generations=2",
        "per_device_train_batch_size=2", "max_completion_length=64", "temperature=0.3",
        f"output_dir={tmp_path}", "save_strategy=no", "learning_rate=1e-4"]))
    trainer, _ = build_trainer(run, args)
    trainer.train()
    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert logs["oar/span_found_rate"] > 0
    trainer.save_model(str(tmp_path))
    model, tok = load_model(str(tmp_path))
    assert tok.chat_template is not None
    trained = dict(trainer.model.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, trained[name].detach().cpu()), name
    base = smollm2[0].model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(model.model.layers[0].self_attn.q_proj.weight, base)  # it did train
