"""`oar eval --data`: JSONL math sets checked by math-verify; the world refused for other models.

tests/data/gsm8k_test_sample.jsonl: six records of GSM8K's test split (openai/grade-school-math,
MIT licence) in ../shared/data's layout (id, question, answer, solution).
"""
import json
from pathlib import Path

import pytest

from oar_attrib import cli
from oar_attrib import rollouts
from oar_attrib.training.rewards import math_verify_reward

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "gsm8k_test_sample.jsonl"
RECORDS = [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def scripted(wrong: bool):
    """A `rollouts.decode_answers` that answers each question with its record's gold solution
    (or the same solution with the final answer off by one), `samples` times."""
    def decode(model, tokenizer, chunk, *, samples, **kwargs):
        answers = []
        for _, question in chunk:
            prompt = question.prompt
            text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            (record,) = [r for r in RECORDS if r["question"] in text]
            solution = record["solution"]
            if wrong:
                solution = solution.rsplit("####", 1)[0] + f"#### {int(record['answer']) + 1}"
            answers.append([(solution, 50, False)] * samples)
        return answers
    return decode


def test_gold_solutions_score_one_through_the_checker():
    solutions = [r["solution"] for r in RECORDS]
    answers = [r["answer"] for r in RECORDS]
    assert math_verify_reward(None, solutions, answer=answers) == [1.0] * len(RECORDS)
    off = [s.rsplit("####", 1)[0] + f"#### {int(a) + 1}" for s, a in zip(solutions, answers)]
    assert math_verify_reward(None, off, answer=answers) == [0.0] * len(RECORDS)


@pytest.mark.parametrize("wrong", [False, True])
def test_oar_eval_data_scores_gold_solutions_one(monkeypatch, capsys, wrong):
    monkeypatch.setattr(rollouts, "decode_answers", scripted(wrong))
    argv = ["eval", "--data", str(SAMPLE), "--samples", "3", "--batch-size", "4", "--json"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    expected = 0.0 if wrong else 1.0
    assert result["n"] == len(RECORDS) and result["samples"] == 3
    assert result["accuracy"] == expected and result["accuracy_sampled"] == expected
    assert f"{len(RECORDS)}/{len(RECORDS)} [" in captured.err  # the progress bar counts records
    assert cli.main(argv[:-3] + ["--n", "2", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 2


def test_oar_eval_refuses_the_world_for_another_tokenizer(tmp_path, monkeypatch, capsys):
    from oar_attrib import models

    folder = tmp_path / "chat-model"
    source = models.bundled_path()
    for file in source.iterdir():
        (folder / file.name).parent.mkdir(exist_ok=True)
        (folder / file.name).write_bytes(file.read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))

    def no_loading(*args, **kwargs):
        raise AssertionError("the weights were loaded before the tokenizer check")

    monkeypatch.setattr(models, "load_model", no_loading)
    assert cli.main(["eval", "--model", str(folder), "--n", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has a chat template" in err[0] and "--data" in err[0]
