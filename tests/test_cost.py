"""The cost estimate (`oar_attrib.methods.cost`, priced by `oar_attrib.models.cost`): the work
it counts is the tokens the methods pass through the model (counted by a hook on the model),
its words name the faster choice only when a run is long, and `oar attribute` says it before
the first trace is scored."""
import json

import pytest
import torch

from models import tiny_world
from oar_attrib import attribution, cli
from oar_attrib.cli.choices import default_methods
from oar_attrib.defaults import BUNDLED_METHODS
from oar_attrib.methods import default_methods as role_defaults
from oar_attrib.inputs.encoding import encode_pairs
from oar_attrib.methods import method_spec
from oar_attrib.methods.cost import Estimate, TraceShape, estimate_lines, method_work
from oar_attrib.models.cost import DecodeClock, Speed, Work, duration, measure_speed
from oar_attrib.weights.settings import ReshapeSettings
from oar_attrib.world import generate_problems


@pytest.fixture(scope="module")
def world():
    return tiny_world(n=4, seed=5)


def _counted(model) -> dict:
    """Tokens through the model's body, by grad mode, and its calls (a forward pre-hook)."""
    counts = {"forward": 0, "backward": 0, "calls": 0}

    def hook(module, args, kwargs):
        x = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("inputs_embeds")
        counts["backward" if torch.is_grad_enabled() else "forward"] += x.shape[0] * x.shape[1]
        counts["calls"] += 1

    return counts, model.model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("method", ["oar_p", "oar_p_step", "oar_p_hier", "oar_g", "ig", "grail", "entropy", "random"])
def test_the_work_is_the_tokens_the_method_runs(world, method):
    problems, tokenizer, model = world
    p = max(problems, key=lambda q: len(q.solution))
    _, (pair,) = encode_pairs(tokenizer, [p.prompt], [p.solution], answer_format="gsm8k")
    shape = TraceShape.of(pair)
    assert shape.scored and len(shape.steps) >= 2 and shape.end <= shape.length
    work = method_work(method, shape, method_spec(method).analysis_kwargs())
    counts, handle = _counted(model)
    try:
        attribution.attribute(model, tokenizer, [p.prompt], [p.solution], [method],
                              ReshapeSettings(answer_format="gsm8k"))
    finally:
        handle.remove()
    if method == "entropy":  # its logits are costed as a share of a forward, not as tokens
        assert work.forward / 1.3 == pytest.approx(counts["forward"], abs=1)
    elif method == "oar_p_hier":  # which steps are chosen depends on the scores: their mean share
        assert 0.6 * counts["forward"] <= work.forward <= 1.6 * counts["forward"]
    else:
        assert work.forward == pytest.approx(counts["forward"], rel=0.15, abs=2)
    assert work.backward == pytest.approx(counts["backward"], rel=0.15, abs=2)


def test_a_trace_without_an_answer_costs_the_span_methods_nothing(world):
    problems, tokenizer, _ = world
    _, (pair,) = encode_pairs(tokenizer, [problems[0].prompt], ["no answer here"], answer_format="gsm8k")
    shape = TraceShape.of(pair)
    assert method_work("oar_p", shape) == Work() and method_work("oar_g", shape) == Work()
    assert method_work("entropy", shape).forward > 0  # it scores every response token
    assert method_work("resample", shape) == Work()  # no step to resample


def test_the_speed_is_measured_on_this_model():
    speed = measure_speed(tiny_world(n=2)[2], 64)
    assert speed.per_token > 0 and speed.fixed >= 0
    assert Speed(fixed=0.5, per_token=0.01).seconds(Work(forward=100, backward=10, calls=2)) == \
        pytest.approx(1.0 + 0.01 * (100 + 2.4 * 10))


def test_the_words_name_the_faster_choice_only_when_a_trace_is_long():
    slow = Estimate({"oar_p": 360.0, "oar_g": 6.0}, traces=24, tokens=240)
    reading = Estimate({"oar_p_hier": 18.0, "oar_g": 6.0, "entropy": 1.0}, traces=24, tokens=240)
    first, second = estimate_lines("oar attribute", slow, "smollm2-135m", reading)
    assert first == ("oar attribute: 24 traces with oar_p, oar_g on smollm2-135m: about 6 min a trace here, "
                     "measured on the first (240 tokens; oar_p 6 min, oar_g 6.0 s; longer traces take longer), "
                     "about 2.4 h in all; each trace is written when it is done and Ctrl-C keeps those")
    assert second == ("oar attribute: a long run (oar_p 6 min a trace here); the reading set, --methods "
                      "oar_p_hier oar_g entropy, takes about 25 s a trace (10 min in all)")
    assert len(estimate_lines("oar attribute", reading, "smollm2-135m", None)) == 1
    quick = Estimate({"oar_p": 20.0}, traces=3, tokens=100)
    assert len(estimate_lines("oar attribute", quick, "m", reading)) == 1  # a short run: nothing to advise
    assert [duration(s) for s in (0.01, 3.21, 42, 400, 7200, 400000)] == \
        ["under 0.1 s", "3.2 s", "42 s", "7 min", "2.0 h", "5 days"]


def test_a_real_model_defaults_to_the_reading_set_and_the_bundled_one_keeps_its_own():
    assert default_methods("arith-tiny") == list(BUNDLED_METHODS) == ["oar_p", "oar_g"]
    for model in ("smollm2-135m", "/models/Qwen2.5-1.5B", "my.gguf"):
        assert default_methods(model) == role_defaults("reading") and set(role_defaults("reading")) == {"oar_p_hier", "oar_g", "entropy"}


def test_oar_attribute_says_the_estimate_before_the_first_trace(tmp_path, monkeypatch, capsys):
    problems = generate_problems(3, "default", seed=3, split="test")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"prompt": p.prompt, "response": p.solution}) + "\n" for p in problems))
    said_before: list[str] = []
    real = attribution._attribute_batch

    def first_call(*args, **kwargs):
        said_before.append(capsys.readouterr().err)
        return real(*args, **kwargs)

    monkeypatch.setattr(attribution, "_attribute_batch", first_call)
    assert cli.main(["attribute", "--input", str(src), "--out", str(tmp_path / "out.jsonl"), "--no-progress"]) == 0
    assert said_before[0].count("oar attribute: 3 traces with oar_p, oar_g on arith-tiny: about ") == 1
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [sorted(r["scores"]) for r in records] == [["oar_g", "oar_p"]] * 3  # the bundled model's defaults


def test_the_decode_clock_says_the_run_once_after_its_first_steps(monkeypatch):
    said, now = [], iter([0.0, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0])  # prefill 2 s, then 0.5 s a step
    monkeypatch.setattr("oar_attrib.models.cost.time.perf_counter", lambda: next(now))
    clock = DecodeClock("oar generate", batches=3, max_new_tokens=320, tell=said.append, shorter="use less")
    for _ in range(7):
        clock.step()
    assert said == ["oar generate: at most about 8 min here: 3 batches of up to 320 decoding steps, 0.5 s a "
                    "step (measured on the first; a batch ends when its answers do)"]
    assert clock.line(0.5, 2.0) == said[0]  # 3 x (2 + 320 x 0.5) = 486 s: not long enough to advise
    assert clock.line(2.0, 2.0).endswith("a batch ends when its answers do); use less")
