"""Held-out evaluation: greedy and sampled accuracy, in `oar eval` and during training."""
import pytest
import torch
from datasets import Dataset

from oar_attrib import load_model
from oar_attrib.world.evaluation import evaluate_world
from oar_attrib.generation import generate
from oar_attrib.world import extract_answer, generate_problems
from oar_attrib.training.callbacks import reward_evaluator, world_evaluator


@pytest.fixture(scope="module")
def bundled():
    return load_model("arith-tiny")


def test_sampled_accuracy_is_the_mean_over_every_sampled_answer(bundled):
    model, tokenizer = bundled
    res = evaluate_world(model, tokenizer, "default", n=12, seed=3, group_size=4, sample_batch_size=16)
    problems = generate_problems(12, "default", seed=3, split="test")
    ids = generate(model, tokenizer, [p.prompt for p in problems], do_sample=True, num_return_sequences=4,
                   batch_size=4, seed=3)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    right = [[extract_answer(t) == p.answer for t in texts[4 * i: 4 * i + 4]] for i, p in enumerate(problems)]
    assert res.sampled_accuracy == pytest.approx(sum(map(sum, right)) / 48)
    assert res.mixed_group_rate == pytest.approx(sum(len(set(g)) == 2 for g in right) / 12)
    assert 0 < res.sampled_accuracy < 1  # the bundled model samples right and wrong answers
    assert evaluate_world(model, tokenizer, "default", n=12, seed=3).sampled_accuracy is None


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
    assert 0 <= out["accuracy_sampled"] <= 1
    torch.manual_seed(123)
    again = reward_evaluator(tokenizer, data, reward, max_new_tokens=96, batch_size=4, samples=3)(model)
    assert again == out  # seeded sampling: same model, same figures
