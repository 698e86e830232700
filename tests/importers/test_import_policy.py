"""`oar import` with no flag but --out: the policy a TRL run folder holds (its tokenizer, its
newest checkpoint), else the bundled model with chat prompts rendered as `role: content`
lines (said once); `oar attribute --store` then scores the run as it was imported. TRL's run
folders are written here as GRPOTrainer writes them: the completion logs as pandas parquet
files of step, prompt, completion (chat messages), one column per reward function and
advantage, the model and tokenizer with `save_pretrained`."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from oar_attrib import cli
from oar_attrib.cli.provenance import Policy, run_policy
from oar_attrib.inputs.chat_template import ROLE_TEMPLATE, chat_ids
from oar_attrib.store import Store

SYSTEM = "Answer with a final line '#### N'."
TAG = "<think>"  # a token of the run's tokenizer (added), five of the bundled one's
COMPLETIONS = ["a=1+3=4. #### 4", f"{TAG}a=1+3=5. #### 5", "a=2+2=4. #### 4", f"{TAG}a=2+2=3. #### 3"]


def _chat(question: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def write_trl_logs(run: Path, step: int = 1) -> pd.DataFrame:
    """completions/completions_<step>.parquet as GRPOTrainer(log_completions=True) writes it
    for a conversational dataset (2 prompts x 2 generations)."""
    prompts = [_chat("a=1+3. find a.\n")] * 2 + [_chat("a=2+2. find a.\n")] * 2
    table = pd.DataFrame({"step": [step] * 4, "prompt": prompts,
                          "completion": [[{"role": "assistant", "content": c}] for c in COMPLETIONS],
                          "reward": [1.0, 0.0, 1.0, 0.0], "advantage": [0.7, -0.7, 0.7, -0.7]})
    (run / "completions").mkdir(parents=True, exist_ok=True)
    table.to_parquet(run / "completions" / f"completions_{step:05d}.parquet")
    return table


def chat_policy(marker: str = "|"):
    """The bundled model with a chat template (`<|role|>content` blocks, `marker` in the
    tags) and one added token (TAG), its embedding resized to take it."""
    from oar_attrib.models import load_model

    model, tok = load_model("arith-tiny")
    tok.add_tokens([TAG])
    model.resize_token_embeddings(len(tok))
    tok.chat_template = ("{% for m in messages %}<" + marker + "{{ m['role'] }}" + marker + ">{{ m['content'] }}\n"
                         "{% endfor %}{% if add_generation_prompt %}<" + marker + "assistant" + marker + ">{% endif %}")
    return model, tok


def oar(*argv) -> int:
    return cli.main([str(a) for a in argv])


def traces(db: Path) -> list:
    with Store(db, readonly=True) as store:
        return list(store.iter_traces(1))


def run_info(db: Path):
    with Store(db, readonly=True) as store:
        return store.run(1)


def test_a_conversational_trl_log_imports_every_row_with_the_run_folders_tokenizer(tmp_path, capsys):
    run = tmp_path / "trl-out"
    logs = write_trl_logs(run)
    _, tok = chat_policy()
    tok.save_pretrained(run)  # tokenizer_config.json, chat_template.jinja: no weights
    db = tmp_path / "x.db"
    assert oar("import", "trl", run, "--out", db) == 0
    err = capsys.readouterr().err
    assert f"oar import: the tokenizer of {run} (found in the run folder" in err and "skipped (" not in err
    records = traces(db)
    assert [r.response for r in records] == COMPLETIONS
    assert [json.loads(r.prompt) for r in records] == list(logs["prompt"])
    # The run folder's tokenizer split the responses: TAG is one token, not the bundled model's five.
    assert [r.token_ids for r in records] == [tok(c, add_special_tokens=False)["input_ids"] for c in COMPLETIONS]
    assert records[1].token_ids[0] == tok.convert_tokens_to_ids(TAG)
    info = run_info(db)
    assert info.model == str(run) and "chat_template" not in info.config  # its own template
    # No weights in the folder: scoring the run asks for the policy, in one line.
    assert oar("attribute", "--store", db, "--run", 1, "--methods", "entropy") == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"oar attribute: error: run 1 of {db} was imported with the tokenizer of {run}, which holds no "
        "weights; pass --model with the policy's checkpoint"]


def test_the_newest_checkpoint_is_the_policy_and_oar_attribute_scores_with_it(tmp_path, capsys):
    run = tmp_path / "trl-out"
    write_trl_logs(run)
    for step, marker in ((2, "!"), (10, "|")):  # checkpoint-10 is the newer, not the first in name order
        model, tok = chat_policy(marker)
        model.save_pretrained(run / f"checkpoint-{step}")
        tok.save_pretrained(run / f"checkpoint-{step}")
    db = tmp_path / "x.db"
    assert oar("import", "trl", run, "--out", db) == 0
    newest = run / "checkpoint-10"
    assert f"oar import: the model and tokenizer of {newest} (found in the run folder)" in capsys.readouterr().err
    assert run_info(db).model == str(newest)
    assert oar("attribute", "--store", db, "--run", 1, "--methods", "entropy") == 0
    attributed = run_info(db).config["attributed"]["entropy"]["model"]
    assert attributed["name"] == str(newest) and attributed["weights_sha256"]
    assert all(len(r.attributions["entropy"].scores) == len(r.token_ids) for r in traces(db))


def test_without_a_tokenizer_chat_prompts_get_a_role_template_said_once(tmp_path, capsys):
    from oar_attrib.models import load_model

    run = tmp_path / "trl-out"
    write_trl_logs(run, 1)
    write_trl_logs(run, 2)
    db = tmp_path / "x.db"
    assert oar("import", "trl", run, "--out", db) == 0
    err = capsys.readouterr().err
    assert err.count("has no chat template") == 1 and "'role: content' lines" in err
    assert "pass --model" in err and "skipped (" not in err and "imported 8 rollouts" in err
    assert run_info(db).config["chat_template"] == "roles" and run_info(db).model == "arith-tiny"
    # `oar attribute --store` renders them the same way, with no flag either.
    _, tok = load_model("arith-tiny")
    assert oar("attribute", "--store", db, "--run", 1, "--methods", "entropy") == 0
    records = traces(db)
    assert len(records) == 8 and all(len(r.attributions["entropy"].scores) == len(r.token_ids) for r in records)
    # The role template: each message a `role: content` line, then the assistant's turn.
    tok.chat_template = ROLE_TEMPLATE
    want = tok(f"system: {SYSTEM}\nuser: a=1+3. find a.\n\nassistant: ", add_special_tokens=False)["input_ids"]
    assert chat_ids(tok, _chat("a=1+3. find a.\n")) == want


def test_an_explicit_model_wins_over_the_run_folder(tmp_path, capsys):
    run = tmp_path / "trl-out"
    write_trl_logs(run)
    model, tok = chat_policy()
    model.save_pretrained(run / "checkpoint-1")
    tok.save_pretrained(run / "checkpoint-1")
    db = tmp_path / "x.db"
    assert oar("import", "trl", run, "--out", db, "--model", "arith-tiny") == 0
    assert run_info(db).model == "arith-tiny" and "found in the run folder" not in capsys.readouterr().err


def test_a_nan_reward_is_a_reward_function_that_did_not_apply(tmp_path):
    """TRL logs a reward function's None as NaN and sums the others (nansum)."""
    run = tmp_path / "trl-out"
    table = write_trl_logs(run)
    table["format"] = [0.5, float("nan"), float("nan"), 0.25]
    table["reward"] = [1.0, 0.0, float("nan"), 0.0]
    table.to_parquet(run / "completions" / "completions_00001.parquet")
    db = tmp_path / "x.db"
    assert oar("import", "trl", run, "--out", db) == 0
    assert [r.row.reward for r in traces(db)] == [1.5, 0.0, None, 0.25]


def _touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("{}")
    return folder


MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def test_run_policy_looks_where_trl_and_verl_save_it(tmp_path):
    run = tmp_path / "run"
    log = _touch(run / "completions", "completions_00001.parquet") / "completions_00001.parquet"
    assert run_policy([run]) is None and run_policy([log]) is None
    _touch(run, "tokenizer_config.json")
    assert run_policy([log]) == Policy(run, False)  # a log file names its output_dir
    _touch(run / "checkpoint-9", *MODEL_FILES)
    _touch(run / "checkpoint-10", *MODEL_FILES)
    _touch(run / "checkpoint-11", "config.json", "model.safetensors")  # no tokenizer: not a policy
    assert run_policy([run]) == Policy(run / "checkpoint-10", True)
    _touch(run, *MODEL_FILES)  # the final save_model at the top
    assert run_policy([run]) == Policy(run, True)
    verl = tmp_path / "verl"
    _touch(verl / "global_step_3" / "actor" / "huggingface", *MODEL_FILES)
    _touch(verl / "global_step_20" / "actor" / "huggingface", *MODEL_FILES)
    assert run_policy([verl]) == Policy(verl / "global_step_20" / "actor" / "huggingface", True)


def test_a_row_longer_than_the_model_names_the_flag(tmp_path, capsys):
    run = tmp_path / "trl-out"
    table = write_trl_logs(run)
    table.loc[0, "completion"] = [{"role": "assistant", "content": "a=1. " * 200 + "#### 1"}]
    table.to_parquet(run / "completions" / "completions_00001.parquet")
    assert oar("import", "trl", run, "--out", tmp_path / "x.db") == 2
    err = capsys.readouterr().err
    assert "completions_00001.parquet:1: skipped (too_long):" in err
    assert "more than the model's 512 positions (--model: the policy's)" in err
