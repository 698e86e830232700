"""Rollouts (`oar_attrib.rollouts`) and `oar generate`: batched group decoding against a one-row
greedy loop, TRL's group advantages, resuming a killed run, bad question lines, and the output
read by `oar attribute`."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

from models import greedy_reference, tiny_qwen2
from oar_attrib import cli
from oar_attrib.models.generation import continue_groups, continue_rows
from oar_attrib.rollouts import Question, group_advantages, graded_group, read_questions
from oar_attrib.cli import generate as generate_cli
from oar_attrib.world import generate_problems


def cut(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


ROWS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [18]]


@pytest.mark.parametrize("samples", [0, 3])
def test_group_decoding_greedy_rows_equal_a_one_row_loop(samples):
    model, eos = tiny_qwen2(1).eval(), 3
    torch.manual_seed(0)
    out = continue_groups(model, ROWS, 0, max_new_tokens=10, samples=samples, eos_token_id=eos).tolist()
    assert len(out) == len(ROWS) * (1 + samples)
    for b, row in enumerate(ROWS):
        assert cut(out[b * (1 + samples)], eos) == greedy_reference(model, row, 10, eos)
    # Sampled rows are continuations too: a group's samples are not all its greedy answer.
    if samples:
        assert any(out[i] != out[i - i % 4] for i in range(len(out)) if i % 4)


def test_group_sampling_equals_generate_per_prompt_in_distribution_of_first_token():
    """Sampled rows see the same next-token distribution as continue_rows' sampled rows: the
    first sampled token's frequencies agree (one prompt, many samples)."""
    model = tiny_qwen2(2).eval()
    torch.manual_seed(0)
    a = continue_groups(model, [[5, 6, 7]], 0, max_new_tokens=1, samples=400, greedy=False)[:, 0]
    torch.manual_seed(1)
    b = continue_rows(model, [[5, 6, 7]], 0, max_new_tokens=1, do_sample=True, num_return_sequences=400)[:, 0]
    probs = torch.softmax(model(torch.tensor([[5, 6, 7]])).logits[0, -1].float(), -1).detach()
    top = int(probs.argmax())
    for draws in (a, b):  # the most likely token's share within 4 binomial sds of its probability
        p = float(probs[top])
        assert abs(float((draws == top).float().mean()) - p) < 4 * (p * (1 - p) / 400) ** 0.5 + 1e-3


def test_group_decoding_on_the_real_model(smollm2):
    model, tok = smollm2
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    prompts = [[{"role": "user", "content": "What is 2+3?"}],
               [{"role": "user", "content": "Name a colour of the sky on a clear day."}]]
    rows = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for p in prompts]
    assert len(rows[0]) != len(rows[1])  # the batch really is left-padded
    out = continue_groups(model, rows, tok.pad_token_id, max_new_tokens=6, samples=1, eos_token_id=eos).tolist()
    for b, row in enumerate(rows):
        assert cut(out[2 * b], eos) == greedy_reference(model, row, 6, eos)


def test_group_advantages_hand_computed_and_trl():
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    a = 0.5 / (3 ** -0.5 + 1e-4)
    expected = torch.tensor([[a, -a, -a, a], [0.0] * 4, [-0.25 / 0.5001] * 3 + [0.75 / 0.5001]])
    assert torch.allclose(group_advantages(rewards), expected, atol=1e-6)
    # TRL's own rule (scale_rewards="group"): (r - mean) / (nanstd + 1e-4) per group.
    trl = (rewards - rewards.mean(1, keepdim=True)) / (nanstd(rewards, dim=1)[:, None] + 1e-4)
    assert torch.allclose(group_advantages(rewards), trl, atol=1e-6)
    assert group_advantages(torch.tensor([[1.0], [0.0]])).tolist() == [[0.0], [0.0]]


def test_graded_group_grades_the_span_and_zeroes_cut_off_answers():
    q = Question(3, "q", "18", "x.jsonl:4")
    records = graded_group(q, [("so \\boxed{18}", 6, False), ("so \\boxed{18}", 9, True),
                               ("I think 18", 4, False), ("\\boxed{17}", 5, False)], "boxed")
    assert [r["reward"] for r in records] == [1.0, 0.0, 0.0, 0.0]
    assert [r["why"] for r in records] == ["correct", "truncated", "no_answer", "wrong"]
    a = 0.75 / (0.5 + 1e-4)
    assert [round(r["advantage"], 6) for r in records] == [round(a, 6)] + [round(-0.25 / 0.5001, 6)] * 3
    assert {(r["group"], r["source"], r["gold"]) for r in records} == {(3, "x.jsonl:4", "18")}


# ------------------------------------------------------------------ oar generate


def world_questions(path, n: int = 6, bad: bool = False) -> list:
    problems = generate_problems(n, "default", seed=0, split="test")
    lines = [json.dumps({"prompt": p.prompt, "answer": str(p.answer)}) for p in problems]
    if bad:
        lines[1:1] = ["{not json", json.dumps({"prompt": "x=1. find x.\n"}),
                      json.dumps({"prompt": [{"role": 1}], "answer": "2"})]
    path.write_text("\n".join(lines) + "\n")
    return problems


def generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    generate_cli.add_parser(parser.add_subparsers())
    return cli.run_command(parser.parse_args(["generate", *argv]), "generate")


def flags(data, out, *extra) -> list[str]:
    return ["--model", "arith-tiny", "--data", str(data), "--out", str(out), "--samples", "3", "--greedy",
            "--max-new-tokens", "48", "--answer-format", "gsm8k", "--batch-size", "2", "--no-progress", *extra]


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generate_writes_graded_groups_and_oar_attribute_reads_them(tmp_path, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    problems = world_questions(data, 4)
    assert generate(flags(data, out)) == 0
    records = lines(out)
    assert sorted((r["group"], r["sample"]) for r in records) == [(g, s) for g in range(4) for s in range(3)]
    for r in records:
        assert r["gold"] == str(problems[r["group"]].answer) and r["source"] == f"q.jsonl:{r['group'] + 1}"
        assert r["prompt"] == problems[r["group"]].prompt  # no chat template: the string itself
        assert r["reward"] == float(r["correct"]) and r["greedy"] == (r["sample"] == 0)
    assert any(r["correct"] for r in records)  # the bundled model solves world problems
    for g in range(4):
        group = sorted((r for r in records if r["group"] == g), key=lambda r: r["sample"])
        expected = group_advantages(torch.tensor([[r["reward"] for r in group]]))[0]
        assert torch.allclose(torch.tensor([r["advantage"] for r in group]), expected)
    attributed = tmp_path / "attributed.jsonl"
    argv = ["attribute", "--model", "arith-tiny", "--input", str(out), "--out", str(attributed),
            "--methods", "oar_g", "random", "--answer-format", "gsm8k", "--no-progress"]
    assert cli.main(argv) == 0
    assert len(lines(attributed)) == len(records)


def test_generate_resumes_a_killed_run_writing_each_group_once(tmp_path, monkeypatch):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    world_questions(data, 6)
    real_write, calls = generate_cli._write, []

    def killed_in_the_second_write(handle, groups):
        calls.append(len(groups))
        if len(calls) == 2:  # half of the batch's text reaches the file, then the process dies
            text = "".join(json.dumps(r) + "\n" for g in groups for r in g)
            with open(handle.path, "a", encoding="utf-8") as raw:  # past the log: a torn write
                raw.write(text[: len(text) // 2])
            raise KeyboardInterrupt
        real_write(handle, groups)

    monkeypatch.setattr(generate_cli, "_write", killed_in_the_second_write)
    assert generate(flags(data, out)) == cli.INTERRUPTED
    first = [json.loads(line) for line in out.read_text().splitlines()[:6]]  # the first batch, whole
    monkeypatch.setattr(generate_cli, "_write", real_write)
    assert generate(flags(data, out)) == 0
    records = lines(out)
    assert sorted((r["group"], r["sample"]) for r in records) == [(g, s) for g in range(6) for s in range(3)]
    assert records[:6] == first
    assert generate(flags(data, out)) == 0 and lines(out) == records  # complete: nothing appended


def test_generate_writes_the_groups_in_the_order_of_its_input(tmp_path):
    """Longest prompt first: batches sorted by length would write the last question first
    (and `oar attribute` would meet a no-signal group before the first question's)."""
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    problems = [*generate_problems(2, "hard", seed=0, split="test"), *generate_problems(2, "medium", seed=0, split="test"),
                generate_problems(1, "default", seed=0, split="test")[0]]
    assert len(problems[0].prompt) > len(problems[2].prompt) > len(problems[4].prompt)
    data.write_text("".join(json.dumps({"prompt": p.prompt, "answer": str(p.answer)}) + "\n" for p in problems))
    assert generate(flags(data, out)) == 0
    order = list(dict.fromkeys((r["source"], r["group"]) for r in lines(out)))
    assert order == [(f"q.jsonl:{i + 1}", i) for i in range(5)]


def test_generate_says_what_it_will_do_before_the_first_model_call(tmp_path, monkeypatch, capsys):
    import oar_attrib.rollouts as rollouts

    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    world_questions(data, 5)
    said_before, real = [], rollouts.decode_answers

    def first_call(*args, **kwargs):
        said_before.append(capsys.readouterr().err)
        return real(*args, **kwargs)

    monkeypatch.setattr(rollouts, "decode_answers", first_call)
    assert generate(flags(data, out)) == 0
    assert ("oar generate: 15 answers to 5 questions, up to 48 tokens each, 2 questions at a time; how long "
            "it takes is said after the first decoding steps") in said_before[0]
    said = "".join(said_before) + capsys.readouterr().err
    assert said.count("oar generate: at most about ") == 1 and "3 batches of up to 48 decoding steps" in said


def test_generate_reports_bad_lines_and_answers_the_rest(tmp_path, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    world_questions(data, 3, bad=True)
    assert generate(flags(data, out)) == 2
    err = capsys.readouterr().err
    assert f"{data}:2: skipped (not_json)" in err and f"{data}:3: skipped (fields)" in err
    assert f"{data}:4: skipped (bad_chat)" in err and "3 bad lines skipped" in err
    assert sorted({r["source"] for r in lines(out)}) == ["q.jsonl:1", "q.jsonl:5", "q.jsonl:6"]


def test_generate_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    world_questions(data, 1)
    assert generate(flags(data, tmp_path / "o.jsonl", "--samples", "0")) == 2
    assert generate(flags(tmp_path / "missing.jsonl", tmp_path / "o.jsonl")) == 2
    assert generate(flags(data, tmp_path / "o.jsonl", "--answer-format", "latex")) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("oar generate: error: ") for line in err)


def test_read_questions_formats_the_instruction_and_chat(tmp_path):
    from oar_attrib.models import load_model

    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "What is 2+2?", "answer": 4}) + "\n")
    _, tok = load_model("arith-tiny")
    (q,) = read_questions(path, tok, "boxed")
    assert q.prompt.startswith("What is 2+2?\nPlease reason") and "\\boxed{}" in q.prompt and q.gold == "4"
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (q,) = read_questions(path, tok, "answer_is")
    assert q.prompt == [{"role": "user", "content": "What is 2+2?\nPlease reason step by step, and end "
                                                     "with a final line 'The answer is <answer>.'"}]


def test_generate_says_when_no_group_carries_a_grpo_signal(tmp_path, capsys):
    """Questions whose recorded answer the model never gives: every group all wrong, every
    advantage 0; the command says so in one line with what to do, and `oar attribute` too."""
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    problems = generate_problems(3, "default", seed=0, split="test")
    data.write_text("".join(json.dumps({"prompt": p.prompt, "answer": "-12345"}) + "\n" for p in problems))
    assert generate(flags(data, out)) == 0
    err = capsys.readouterr().err
    assert all(r["advantage"] == 0 and not r["correct"] for r in lines(out))
    assert ("oar generate: no group carries a GRPO signal (3 with every answer wrong, 0 with every "
            "answer right)") in err and "--temperature" in err
    for attributed in ("a.jsonl", "a.db"):  # read back from the JSONL and from the store's run
        argv = ["attribute", "--model", "arith-tiny", "--input", str(out), "--out", str(tmp_path / attributed),
                "--methods", "random", "--answer-format", "gsm8k", "--no-progress"]
        assert cli.main(argv) == 0
        assert "oar attribute: no group carries a GRPO signal (3 with every answer wrong" in capsys.readouterr().err
