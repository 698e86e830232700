"""The one weights pipeline (oar_attrib/weights): its settings, the gating defaults declared once,
and the same weights from attribute(), the trainer and the live page."""
import dataclasses
import inspect

import pytest
import torch

from oar_attrib import cli
from oar_attrib.attribution import attribute, compute_weights, resolve_settings
from oar_attrib.errors import InputError, UnknownNameError
from oar_attrib.weights.gating import bilevel_weights, entropy_topk_mask, gate
from oar_attrib.methods import method_spec
from oar_attrib.weights.step_gating import pool_step_tensor, step_weights
from oar_attrib.training.config import OARConfig
from oar_attrib.training.reshaping import token_weights
from oar_attrib.training.toy import ScriptedRollout, tiny_policy, world_tokenizer
from oar_attrib.webapp.live import LiveAttributor
from oar_attrib.weights.weightings import WeightingParams
from oar_attrib import defaults
from oar_attrib.weights import pipeline
from oar_attrib.weights.settings import ReshapeSettings, SettingError, generated_fields
from oar_attrib.world import generate_problems
from models import tiny_trainer, train_world


@pytest.fixture(scope="module")
def tok():
    return world_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_policy(tok).eval()


@pytest.fixture(scope="module")
def texts(tok):
    """Four (prompt, response) texts: right and wrong completions of two world problems."""
    problems = generate_problems(2, "default", seed=3)
    rollout = ScriptedRollout(problems, tok, variants=("right", "wrong"))
    pairs = [(p.prompt, rollout.completion_ids(p.prompt, i)) for p in problems for i in range(2)]
    return [(prompt, tok.decode(ids, skip_special_tokens=True)) for prompt, ids in pairs]


def trainer_weights(model, tok, texts, settings):
    """The trainer's path on the same pairs: token ids in, TRL's completion layout out."""
    prompts = [tok(p)["input_ids"] for p, _ in texts]
    completions = [tok(r, add_special_tokens=False)["input_ids"] for _, r in texts]
    return token_weights(model, tok, prompts, completions, max(map(len, completions)), settings)


# Analysis reads OAR-G with 8 noise draws, training with 1: compared with the trainer, attribute
# is given the trainer's draws.
TRAINING_DRAWS = {"oar_g": {"n_noise": 1}}


@pytest.mark.parametrize("method", ["oar_g", "oar_p"])
def test_attribute_at_step_granularity_gives_the_step_trainers_weights(model, tok, texts, method):
    settings = ReshapeSettings(method=method, granularity="step", step_pool="max", seed=5)
    tw = trainer_weights(model, tok, texts, settings)
    traces = attribute(model, tok, [p for p, _ in texts], [r for _, r in texts], [method], settings,
                       batch_size=3, method_params=TRAINING_DRAWS)
    assert tw.attributed.all()
    for b, trace in enumerate(traces):
        n = len(trace.token_ids)
        assert trace.token_ids == tw.pairs[b].response_ids  # the same tokens, so the same row
        weights = torch.tensor(trace.weights[method])
        torch.testing.assert_close(weights, tw.weights[b, :n], rtol=1e-5, atol=1e-6)
        steps = [weights[a:e] for a, e in trace.steps]
        assert len(steps) >= 2 and all((s == s[0]).all() for s in steps)  # one weight per step
        assert len({round(float(s[0]), 4) for s in steps}) >= 2  # and the steps differ
    token = attribute(model, tok, texts[0][0], texts[0][1], [method], ReshapeSettings(seed=5),
                      method_params=TRAINING_DRAWS)[0]
    assert token.weights[method] != traces[0].weights[method]  # granularity is not ignored


def test_oar_g_scores_of_a_trace_do_not_depend_on_its_batch_and_equal_the_trainers(model, tok, texts):
    prompts, responses = [p for p, _ in texts], [r for _, r in texts]
    settings = ReshapeSettings(method="oar_g", seed=3)
    batched = attribute(model, tok, prompts, responses, ["oar_g"], settings, batch_size=4,
                        method_params=TRAINING_DRAWS)
    tw = trainer_weights(model, tok, texts, settings)
    for b in range(len(texts)):
        alone = attribute(model, tok, prompts[b], responses[b], ["oar_g"], settings,
                          method_params=TRAINING_DRAWS)[0]
        n = len(alone.token_ids)
        torch.testing.assert_close(torch.tensor(batched[b].scores["oar_g"]),
                                   torch.tensor(alone.scores["oar_g"]), rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(tw.importances[b, :n], torch.tensor(alone.scores["oar_g"]),
                                   rtol=1e-4, atol=1e-7)
    other = attribute(model, tok, prompts[0], responses[0], ["oar_g"], ReshapeSettings(seed=4),
                      method_params=TRAINING_DRAWS)[0]
    assert other.scores["oar_g"] != batched[0].scores["oar_g"]  # the seed is used


def test_attribute_the_trainer_and_the_live_page_all_call_the_one_pipeline(tmp_path, model, tok, texts,
                                                                          monkeypatch):
    calls = []
    original = pipeline.score_and_weight

    def recording(model, batch, settings, **kwargs):
        calls.append(settings.method)
        return original(model, batch, settings, **kwargs)

    monkeypatch.setattr(pipeline, "score_and_weight", recording)
    attribute(model, tok, texts[0][0], texts[0][1], ["entropy"])
    assert calls == ["entropy"]
    LiveAttributor(model, tok, max_tokens=512, max_concurrent=1).run(*texts[0], ["random"], "as_mean")
    assert calls == ["entropy", "random"]
    trainer = tiny_trainer(tmp_path, tok, train_world(), oar_method="grail_reasoning", oar_granularity="step")
    trainer.train()
    assert calls == ["entropy", "random", "grail_reasoning"] and trainer.oar_batches == 1


def test_a_method_with_draws_hands_them_over_and_their_mean_is_the_methods_own(model, tok, texts):
    """OAR-G (registered draws=True) returns its 4 draws to the pipeline, which averages them
    itself: bit for bit the importances OAR-G returns when asked for its mean (a wrapper
    registered without draws, fed the same per-row generators)."""
    from oar_attrib.inputs.encoding import encode_pairs
    from oar_attrib.methods import register_method, unregister_method
    from oar_attrib.methods.draws import mean_of_draws
    from oar_attrib.methods.oar_g import oar_g

    batch, _ = encode_pairs(tok, [p for p, _ in texts], [r for _, r in texts])
    params = {"n_noise": 4}
    weighed = pipeline.score_and_weight(model, batch, ReshapeSettings(method="oar_g", seed=5),
                                        params=params)
    assert weighed.draws.shape == (4, *batch.input_ids.shape)
    assert torch.equal(weighed.importances, mean_of_draws(weighed.draws))
    assert (weighed.draws[:, ~weighed.scored] == 0).all() and weighed.draws[:, weighed.scored].abs().max() > 0
    register_method("test_oar_g_mean", random=True, token_budget=True)(
        lambda model, batch, **kwargs: oar_g(model, batch, **kwargs))
    try:
        mean = pipeline.score_and_weight(model, batch, ReshapeSettings(method="test_oar_g_mean", seed=5),
                                         params=params)
    finally:
        unregister_method("test_oar_g_mean")
    assert mean.draws is None and torch.equal(mean.importances, weighed.importances)
    assert torch.equal(mean.weights, weighed.weights)


def test_none_is_a_registered_uniform_method_that_runs_no_model(tok, texts):
    spec = method_spec("none")
    assert spec.uniform and spec.weighting == "uniform" and not spec.analysis_only
    tw = trainer_weights(None, tok, texts, ReshapeSettings(method="none"))  # no model at all
    assert (tw.weights == 1).all() and not tw.attributed.any() and tw.scored.any()
    trace = attribute(None, tok, texts[0][0], texts[0][1], ["none"])[0]
    assert set(trace.weights["none"]) == {1.0} and set(trace.scores["none"]) == {0.0}


@pytest.mark.parametrize("method", ["oar_p", "oar_g", "ig"])
def test_a_row_without_an_answer_span_reaches_no_method(model, tok, texts, method, monkeypatch):
    """Rows without an answer span cost nothing: the method is called on the other rows only
    (no forward for them), and they keep weight 1."""
    spec = method_spec(method)
    seen = []

    def counting(model, batch, **kwargs):
        seen.append(batch.input_ids.shape[0])
        return spec.fn(model, batch, **kwargs)

    monkeypatch.setattr(pipeline, "method_spec", lambda name: dataclasses.replace(spec, fn=counting))
    answerless = [(p, r.rsplit("####", 1)[0]) for p, r in texts[:2]]
    traces = attribute(model, tok, [p for p, _ in texts[2:] + answerless],
                       [r for _, r in texts[2:] + answerless], [method])
    assert sum(seen) == 2 and [t.span_found for t in traces] == [True, True, False, False]
    for trace in traces[2:]:
        assert "no_answer_span" in trace.flags and set(trace.weights[method]) == {1.0}
    seen.clear()
    attribute(model, tok, [p for p, _ in answerless], [r for _, r in answerless], [method])
    assert seen == []


# ------------------------------------------------------------------ settings and defaults


def test_settings_are_checked_on_construction_naming_the_allowed_values():
    with pytest.raises(UnknownNameError, match="method='oar_x'.*oar_g.*oar_p"):
        ReshapeSettings(method="oar_x")
    with pytest.raises(UnknownNameError, match="granularity='steps'.*token, step"):
        ReshapeSettings(granularity="steps")
    with pytest.raises(UnknownNameError, match="step_pool='median'.*sum, mean, max"):
        ReshapeSettings(step_pool="median")
    with pytest.raises(UnknownNameError, match="weighting='topk'.*bilevel.*grail.*top_rho"):
        ReshapeSettings(weighting="topk")
    for name, value in [("tau", 1.5), ("tau", float("nan")), ("beta", -1.0), ("w_min", 2.0), ("rho", 0.0),
                        ("noise_std", -0.1), ("max_batch_tokens", 0)]:
        with pytest.raises(SettingError, match=f"^{name}=") as err:
            ReshapeSettings(**{name: value})
        assert err.value.field == name and isinstance(err.value, InputError)
    with pytest.raises(SettingError, match="answer_pattern"):
        ReshapeSettings(answer_format="regex")
    assert all(f.metadata["help"] for f in dataclasses.fields(ReshapeSettings))


def test_oar_config_fields_and_the_cli_flags_are_generated_from_the_settings():
    config = {f.name: f for f in dataclasses.fields(OARConfig)}
    for f in generated_fields():
        twin = config[f.metadata["config"]]
        assert twin.default == f.default and twin.metadata["help"] == f.metadata["help"]
    assert {"oar_tau", "oar_w_min", "oar_entropy_rho", "oar_step_pool"} <= {f.metadata["config"] for f in generated_fields()}
    attribute_parser = cli.build_parser()._subparsers._group_actions[0].choices["attribute"]
    flags = {a.dest: a for a in attribute_parser._actions}
    for name in ("tau", "beta", "w_min", "rho", "granularity", "step_pool", "weighting"):
        field = ReshapeSettings.__dataclass_fields__[name]
        assert flags[name].default is field.default and field.metadata["help"] in flags[name].help


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_every_gating_default_is_the_settings_own_object():
    d = ReshapeSettings
    # attribute() takes one settings object: its default is ReshapeSettings() itself.
    assert _default(attribute, "settings") is None and resolve_settings(None, {}) == d()
    pairs = [(_default(compute_weights, "tau"), d.tau), (_default(bilevel_weights, "tau"), d.tau),
             (_default(bilevel_weights, "beta"), d.beta), (_default(bilevel_weights, "w_min"), d.w_min),
             (_default(gate, "beta"), d.beta), (_default(gate, "w_min"), d.w_min),
             (_default(entropy_topk_mask, "rho"), d.rho), (_default(step_weights, "how"), d.step_pool),
             (_default(pool_step_tensor, "how"), d.step_pool), (WeightingParams().tau, d.tau),
             (WeightingParams().w_min, d.w_min), (OARConfig.__dataclass_fields__["oar_tau"].default, d.tau)]
    assert all(got is want for got, want in pairs)
    assert (d.tau, d.beta, d.w_min, d.rho) == (defaults.TAU, defaults.BETA, defaults.W_MIN, defaults.RHO)
