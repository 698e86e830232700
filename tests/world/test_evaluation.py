"""Held-out evaluation: greedy and sampled accuracy, in `oar eval` and during training."""
import pytest
import torch
from datasets import Dataset

from oar_attrib.world import evaluation
from oar_attrib.world.evaluation import evaluate_world
from oar_attrib.world import extract_answer, generate_problems
from oar_attrib.training.callbacks import reward_evaluator, world_evaluator


def test_accuracies_of_scripted_answers(bundled, monkeypatch):
    """Answers written by a stand-in for `generate`, so every figure is counted by hand."""
    model, tokenizer = bundled
    problems = generate_problems(4, "default", seed=3, split="test")
    greedy = ["right", "wrong", "right", "none"]  # 2 of 4 right, 3 of 4 with an answer
    sampled = [["wrong"] * 4, ["right"] + ["wrong"] * 3, ["right"] * 4, ["right", "none", "right", "wrong"]]
    # right: 0 + 1 + 4 + 2 = 7 of 16; groups with a right and a wrong answer: the 2nd and 4th.

    def text(p, kind):
        return {"right": p.solution, "wrong": p.solution.replace(f"#### {p.answer}", f"#### {p.answer + 1}"),
                "none": p.solution.rsplit("####", 1)[0]}[kind]

    def fake_generate(model, tok, prompts, *, do_sample=False, num_return_sequences=1, **_):
        assert prompts == [p.prompt for p in problems]
        kinds = [[k] for k in greedy] if not do_sample else sampled
        assert all(len(k) == num_return_sequences for k in kinds)
        return [tok(text(p, k), add_special_tokens=False).input_ids for p, ks in zip(problems, kinds) for k in ks]

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    res = evaluate_world(model, tokenizer, "default", n=4, seed=3, group_size=4)
    assert (res.accuracy, res.format_rate) == (0.5, 0.75)
    assert (res.sampled_accuracy, res.mixed_group_rate) == (7 / 16, 0.5)
    plain = evaluate_world(model, tokenizer, "default", n=4, seed=3)
    assert plain.accuracy == 0.5 and plain.sampled_accuracy is None and plain.mixed_group_rate is None


def test_world_evaluator_logs_sampled_accuracy_per_preset(bundled):
    model, tokenizer = bundled
    out = world_evaluator(tokenizer, ["recall", "default"], n=8, samples=3)(model)
    for preset in ("recall", "default"):
        res = evaluate_world(model, tokenizer, preset, n=8, group_size=3, sample_batch_size=512)
        assert out[f"accuracy/{preset}"] == res.accuracy
        assert out[f"accuracy_sampled/{preset}"] == res.sampled_accuracy
    assert out["accuracy_sampled"] == out["accuracy_sampled/recall"] and out["accuracy"] == out["accuracy/recall"]
    assert not any(k.startswith("accuracy_sampled") for k in world_evaluator(tokenizer, "default", n=4)(model))


def test_reward_evaluator_pairs_each_sample_with_its_record(bundled):
    model, tokenizer = bundled
    problems = generate_problems(6, "default", seed=1, split="test")
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems], "answer": [str(p.answer) for p in problems]})
    calls = []

    def reward(prompts, completions, answer, **_):
        calls.append(len(completions))
        by_prompt = {p.prompt: str(p.answer) for p in problems}
        assert [by_prompt[p] for p in prompts] == answer  # every completion scored against its own record
        return [float(extract_answer(c) == int(a)) for c, a in zip(completions, answer)]

    out = reward_evaluator(tokenizer, data, reward, max_new_tokens=96, batch_size=4, samples=3)(model)
    assert calls == [4, 12, 2, 6]  # greedy then sampled, per batch of records
    world = evaluate_world(model, tokenizer, "default", n=6, seed=1)
    assert out["accuracy"] == pytest.approx(world.accuracy)
    # Sampling at a vanishing temperature is greedy decoding: the sampled mean is the greedy one.
    cold = reward_evaluator(tokenizer, data, reward, max_new_tokens=96, batch_size=4, samples=3,
                            temperature=1e-4)(model)
    assert cold["accuracy_sampled"] == pytest.approx(world.accuracy) == pytest.approx(cold["accuracy"])
    assert 0 < world.accuracy < 1, "the bundled model must answer some of these right and some wrong"
    torch.manual_seed(123)
    again = reward_evaluator(tokenizer, data, reward, max_new_tokens=96, batch_size=4, samples=3)(model)
    assert again == out  # seeded sampling: same model, same figures
