"""Hostile `oar generate` (and `--data` elsewhere), round 3: reruns with another data file of
the same name, a higher --samples, an interrupted rerun, another temperature; prompts longer
than the model; numeric flags that are 0, negative, nan or inf; `--data` naming a folder, a
FIFO, or records of the wrong type. A rerun resumes by the questions' content and the
sampling settings, never loses an answer it has, and every refusal is one line before the
model loads."""
import json
import math
import os
from pathlib import Path

import pytest
import torch

from hostile_helpers import _after_estimate, _run, _one_line_error


from oar_attrib.rollouts import group_advantages
from oar_attrib.cli import generate as generate_cli
from oar_attrib.world import generate_problems


def _questions(path: Path, first: int, n: int) -> list[str]:
    """n world questions (problems first .. first + n - 1 of a fixed draw) as JSONL at `path`."""
    problems = generate_problems(first + n, "default", seed=0, split="test")[first:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": p.prompt, "answer": str(p.answer)}) + "\n"
                            for p in problems))
    return [p.prompt for p in problems]


def _generate(data, out, *extra) -> list[str]:
    return ["generate", "--model", "arith-tiny", "--data", str(data), "--out", str(out),
            "--samples", "2", "--max-new-tokens", "8", "--answer-format", "gsm8k",
            "--temperature", "1",  # every sampling flag given: no line about catalogue defaults
            "--batch-size", "4", "--no-progress", *map(str, extra)]  # a flag in extra wins


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _check_groups(records: list[dict], samples: int) -> None:
    """Each group holds samples 0 .. samples - 1 once, with the GRPO advantages of its rewards."""
    groups = {}
    for r in records:
        groups.setdefault(r["group"], []).append(r)
    for group in groups.values():
        group.sort(key=lambda r: r["sample"])
        assert [r["sample"] for r in group] == list(range(samples))
        want = group_advantages(torch.tensor([[r["reward"] for r in group]]))[0].tolist()
        assert [r["advantage"] for r in group] == want


# ------------------------------------------------------------------ resumed by content


def test_a_rerun_resumes_by_the_questions_content_not_the_file_name(tmp_path, capsys):
    out = tmp_path / "traces.jsonl"
    first = _questions(tmp_path / "a" / "q.jsonl", 0, 3)
    second = _questions(tmp_path / "b" / "q.jsonl", 3, 3)  # same name, other questions
    assert _run(_generate(tmp_path / "a" / "q.jsonl", out), capsys)[0] == 0
    code, err = _run(_generate(tmp_path / "b" / "q.jsonl", out), capsys)
    assert code == 0 and err[-1].startswith(f"wrote 6 answers to 3 questions to {out}")
    records = _records(out)
    assert {r["prompt"] for r in records} == set(first + second)
    assert sorted({r["group"] for r in records}) == list(range(6))
    _check_groups(records, 2)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "copy.jsonl").write_text((tmp_path / "a" / "q.jsonl").read_text())
    code, err = _run(_generate(tmp_path / "c" / "copy.jsonl", out), capsys)
    assert code == 0 and "wrote 0 answers to 0 questions" in err[-1] and "3 questions already there" in err[-1]
    assert _records(out) == records


def test_a_higher_samples_adds_to_each_group_and_keeps_every_answer(tmp_path, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    _questions(data, 0, 3)
    assert _run(_generate(data, out), capsys)[0] == 0
    before = _records(out)
    code, err = _run(_generate(data, out, "--samples", "3"), capsys)
    assert code == 0 and err[-1].startswith(f"wrote 3 answers to 3 questions to {out}")
    after = _records(out)
    kept = [{k: v for k, v in r.items() if k != "advantage"} for r in after[:6]]
    assert kept == [{k: v for k, v in r.items() if k != "advantage"} for r in before]
    assert [r["sample"] for r in after[6:]] == [2, 2, 2]
    _check_groups(after, 3)  # the earlier answers' advantages are those of the grown groups
    code, err = _run(_generate(data, out, "--samples", "1"), capsys)  # fewer: nothing removed
    assert code == 0 and "3 questions already there" in err[-1] and _records(out) == after


def test_an_interrupted_rerun_keeps_the_file(tmp_path, capsys, monkeypatch):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    _questions(data, 0, 3)
    assert _run(_generate(data, out), capsys)[0] == 0
    before = out.read_bytes()

    def interrupted(handle, groups):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_cli, "_write", interrupted)
    code, err = _run(_generate(data, out, "--samples", "4"), capsys)
    assert code == 130 and _after_estimate(err) == [f"oar generate: interrupted; the 0 answers written to {out} are "
                                   "kept, rerun the same command to resume"]
    assert out.read_bytes() == before


def test_answers_sampled_otherwise_are_never_mixed_in(tmp_path, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    _questions(data, 0, 2)
    assert _run(_generate(data, out), capsys)[0] == 0
    before = out.read_bytes()
    _one_line_error(_generate(data, out, "--temperature", "0.5"), capsys,
                    f"--out {out} was made with other settings (--temperature: 1.0 there, 0.5 here)",
                    "pass a new --out")
    assert out.read_bytes() == before


# ------------------------------------------------------------------ prompts checked against the model


def test_a_prompt_longer_than_the_model_is_skipped_before_generating(tmp_path, capsys):
    data, out = tmp_path / "q.jsonl", tmp_path / "traces.jsonl"
    prompts = _questions(data, 0, 2)
    long = {"prompt": "a=1. " * 200 + "find a.\n", "answer": "1"}  # > 512 tokens of arith-tiny
    huge = {"prompt": "a=1. " * 300_000 + "find a.\n", "answer": "1"}  # 1.5 MB: never tokenised
    with data.open("a") as f:
        f.write(json.dumps(long) + "\n" + json.dumps(huge) + "\n")
    code, err = _run(_generate(data, out), capsys)
    assert code == 2
    assert err[0].startswith(f"{data}:3: skipped (too_long): the prompt has ")
    assert err[0].endswith("tokens; with --max-new-tokens 8 that is more than the model's 512 positions")
    assert err[1] == f"{data}:4: skipped (too_long): the prompt has {len(huge['prompt'])} bytes, more than 1048576"
    assert {r["prompt"] for r in _records(out)} == set(prompts)


# ------------------------------------------------------------------ numeric flags


@pytest.mark.parametrize("flags, words", [
    (("--temperature", "0", "--samples", "3"), "--temperature 0 is greedy decoding: all --samples 3 answers"),
    # the range every command's numbers are held to first (commands.check_flag_numbers)
    (("--temperature", "-1"), "--temperature must be a finite number >= 0, got -1.0"),
    (("--temperature", "nan"), "--temperature must be a finite number >= 0, got nan"),
    (("--temperature", "inf"), "got inf"),
    (("--seed", "-1"), "--seed must be an integer from 0 to 2**32 - 1, got -1"),
    (("--seed", str(2**70)), "--seed must be an integer from 0 to 2**32 - 1"),
    (("--samples", "1000", "--batch-size", "1000"), "is more than 65536; lower --batch-size"),
])
def test_bad_numeric_flags_are_one_line_before_the_model_loads(tmp_path, no_model, capsys, flags, words):
    data = tmp_path / "q.jsonl"
    _questions(data, 0, 1)
    _one_line_error(_generate(data, tmp_path / "o.jsonl", *flags), capsys, words)
    assert not (tmp_path / "o.jsonl").exists()


def test_temperature_zero_is_greedy_decoding(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    _questions(data, 0, 3)
    zero, greedy = tmp_path / "zero.jsonl", tmp_path / "greedy.jsonl"
    assert _run(_generate(data, zero, "--temperature", "0", "--samples", "1"), capsys)[0] == 0
    assert _run(_generate(data, greedy, "--greedy", "--samples", "1"), capsys)[0] == 0
    assert [r["response"] for r in _records(zero)] == [r["response"] for r in _records(greedy)]
    assert all(r["greedy"] and r["sampling"]["temperature"] == 0 for r in _records(zero))
    assert not math.isnan(_records(zero)[0]["advantage"])


# ------------------------------------------------------------------ --data checked for what it is


def test_data_naming_a_folder_or_a_fifo_says_what_it_is(tmp_path, no_model, capsys):
    folder = tmp_path / "questions"
    folder.mkdir()
    _one_line_error(_generate(folder, tmp_path / "o.jsonl"), capsys,
                    f"--data {folder} is a folder, not a regular file")
    _one_line_error(["recall", "data", "--data", str(folder), "--no-progress"], capsys,
                    f"--data {folder} is a folder, not a regular file")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.jsonl")
        _one_line_error(_generate(tmp_path / "fifo.jsonl", tmp_path / "o.jsonl"), capsys,
                        "is a FIFO (named pipe), not a regular file")
    assert not (tmp_path / "o.jsonl").exists()


def test_recall_data_of_the_wrong_type_is_one_line_naming_the_line(tmp_path, no_model, capsys):
    data = tmp_path / "traces.jsonl"
    data.write_text(json.dumps({"prompt": "a=1. find a.\n", "response": "a=1. #### 1"}) + "\n"
                    + json.dumps({"prompt": "a=1. find a.\n", "response": 5}) + "\n")
    _one_line_error(["recall", "data", "--data", str(data), "--no-progress"], capsys,
                    f"{data}:2: `response` is int, not text")
