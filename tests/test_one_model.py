"""One model through the pipeline: `oar generate` names the model that wrote each answer (as
the settings record names it) and the settings it sampled with, takes a catalogue model's
answer format and sampling defaults, says when fewer than half the replies have an answer, and
counts answers and tokens as they are made; `oar attribute --input` on its output takes that
model and answer format without a flag. The chat model here is the bundled one with a chat
template, saved as a checkpoint folder."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from models import tiny_qwen2

from oar_attrib import cli
from oar_attrib.cli import generate as generate_cli
from oar_attrib.models.generation import continue_groups
from oar_attrib.records.settings_record import config_sha256, weights_sha256
from oar_attrib.world import generate_problems

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A checkpoint folder: the bundled model with its final norm's weights moved by 1e-3 (other
    weights, so another model by the settings record), its tokenizer with a chat template."""
    from oar_attrib.models import load_model

    folder = tmp_path_factory.mktemp("chat") / "policy"
    model, tok = load_model("arith-tiny")
    with torch.no_grad():
        model.model.norm.weight += 1e-3
    tok.chat_template = TEMPLATE
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def questions(path, n: int = 3) -> None:
    problems = generate_problems(n, "default", seed=0, split="test")
    path.write_text("".join(json.dumps({"prompt": p.prompt, "answer": str(p.answer)}) + "\n" for p in problems))


def oar(*argv) -> int:
    return cli.main([str(a) for a in argv])


def generate(model, data, out, *extra) -> int:
    return oar("generate", "--model", model, "--data", data, "--out", out, "--samples", 2,
               "--batch-size", 4, "--no-progress", *extra)


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_attribute_takes_the_model_and_answer_format_that_wrote_the_file(tmp_path, chat_model, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    questions(data)
    assert generate(chat_model, data, out, "--max-new-tokens", 48, "--answer-format", "gsm8k") == 0
    answers = lines(out)
    named = {"name": str(chat_model), "weights_sha256": weights_sha256(chat_model),
             "config_sha256": config_sha256(chat_model)}
    assert all(r["sampling"]["model"] == named and r["sampling"]["answer_format"] == "gsm8k" for r in answers)
    assert all(isinstance(r["prompt"], list) for r in answers)  # chat messages: the bundled model has no template
    capsys.readouterr()
    attributed = tmp_path / "attributed.jsonl"
    assert oar("attribute", "--input", out, "--out", attributed, "--methods", "entropy", "--no-progress") == 0
    err = capsys.readouterr().err
    assert f"oar attribute: --model {chat_model} --answer-format gsm8k, as traces.jsonl was generated" in err
    assert "skipped" not in err.replace("0 bad lines skipped", "")
    records = lines(attributed)
    assert len(records) == len(answers)
    for record in records:
        assert record["params"]["model"] == named and record["params"]["settings"]["answer_format"] == "gsm8k"
    # An explicit --answer-format wins, and the record says which was used.
    boxed = tmp_path / "boxed.jsonl"
    assert oar("attribute", "--input", out, "--out", boxed, "--methods", "entropy", "--answer-format",
               "boxed", "--no-progress") == 0
    err = capsys.readouterr().err
    assert f"oar attribute: --model {chat_model}, as traces.jsonl" in err and "--answer-format gsm8k" not in err
    assert {r["params"]["settings"]["answer_format"] for r in lines(boxed)} == {"boxed"}


def test_a_file_of_another_program_keeps_the_defaults(tmp_path, capsys):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "a=1+3. find a.\n", "response": "a=1+3=4. #### 4"}) + "\n")
    out = tmp_path / "out.jsonl"
    assert oar("attribute", "--input", path, "--out", out, "--methods", "entropy", "--no-progress") == 0
    assert "as pairs.jsonl was generated" not in capsys.readouterr().err
    (record,) = lines(out)
    assert record["params"]["model"]["name"] == "arith-tiny" and record["params"]["settings"]["answer_format"] == "auto"


def test_a_rerun_by_another_model_is_refused_and_a_moved_folder_resumes(tmp_path, chat_model, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    questions(data, 2)
    flags = ("--max-new-tokens", 16, "--answer-format", "gsm8k")
    assert generate(chat_model, data, out, *flags) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert generate("arith-tiny", data, out, *flags) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"oar generate: error: --out {out} was made with other settings (--model: "
                           f"{chat_model} (weights ") and "arith-tiny (weights" in line
    moved = tmp_path / "moved"
    shutil.copytree(chat_model, moved)
    assert generate(moved, data, out, *flags) == 0 and out.read_bytes() == before  # complete: nothing added
    # A file written before the model carried its weights' hash names it by name alone.
    old = [{**r, "sampling": {**r["sampling"], "model": str(chat_model)}} for r in lines(out)]
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert generate(chat_model, data, out, *flags) == 0 and lines(out) == old


def test_catalogue_models_answer_with_their_own_defaults(tmp_path, capsys):
    def args(model, **given):
        return generate_cli.GenerateSettings(model=model, data="q.jsonl", out="a.jsonl", **given)

    smol, line = generate_cli.model_defaults(args("smollm2-135m"))
    assert (smol.answer_format, smol.temperature, smol.max_new_tokens) == ("answer_is", 0.5, 320)
    assert line == ("oar generate: smollm2-135m answers with --answer-format answer_is, --temperature 0.5, "
                    "--max-new-tokens 320 (its catalogue defaults; pass the flag to change one)")
    told, line = generate_cli.model_defaults(args("smollm2-135m", temperature=0.9))
    assert "--temperature" not in line and told.temperature == 0.9
    folder, line = generate_cli.model_defaults(args(str(tmp_path)))
    assert line is None
    assert (folder.answer_format, folder.temperature, folder.max_new_tokens) == ("boxed", 1.0, 512)
    # End to end on the bundled model: its world answers end "#### N".
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    questions(data, 2)
    assert generate("arith-tiny", data, out) == 0
    assert "oar generate: arith-tiny answers with --answer-format gsm8k" in capsys.readouterr().err
    sampling = lines(out)[0]["sampling"]
    assert (sampling["answer_format"], sampling["temperature"], sampling["max_new_tokens"]) == ("gsm8k", 1.0, 128)
    assert sum(r["why"] not in ("no_answer", "truncated") for r in lines(out)) >= 3


def summary_line(err: str) -> str:
    """The one line of `oar generate`'s summary that counts the replies with an answer."""
    [line] = [line for line in err.splitlines() if " replies have an answer" in line]
    return line


def test_few_answers_are_said_with_the_flag_to_change(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    questions(data, 2)
    # The bundled model never boxes its answer.
    assert generate("arith-tiny", data, tmp_path / "boxed.jsonl", "--answer-format", "boxed",
                    "--max-new-tokens", 64) == 0
    last = summary_line(capsys.readouterr().err)
    assert last.startswith("oar generate: only 0 of 4 replies have an answer in format 'boxed' (")
    assert "pass the --answer-format the model follows (gsm8k, answer_is)" in last
    assert generate("arith-tiny", data, tmp_path / "cut.jsonl", "--max-new-tokens", 4) == 0
    last = summary_line(capsys.readouterr().err)
    assert "(4 cut off at --max-new-tokens 4); most were cut off: raise --max-new-tokens (now 4)" in last
    assert generate("arith-tiny", data, tmp_path / "fine.jsonl", "--max-new-tokens", 64) == 0
    assert "replies have an answer" not in capsys.readouterr().err


def test_progress_hears_every_token_and_every_answer_that_ends(tmp_path):
    model, eos = tiny_qwen2(1).eval(), 3
    rows = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    steps = []
    torch.manual_seed(0)
    out = continue_groups(model, rows, 0, max_new_tokens=12, samples=3, eos_token_id=eos,
                          on_step=lambda tokens, ended: steps.append((tokens, ended))).tolist()
    lengths = [row.index(eos) + 1 if eos in row else len(row) for row in out]
    assert sum(t for t, _ in steps) == sum(lengths)  # each answer's tokens, its EOS included
    assert sum(e for _, e in steps) == sum(eos in row for row in out) > 0
    assert len(steps) == max(lengths) > 1  # one call per decoding step, not one per batch
