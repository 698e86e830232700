"""The verl plugin's parts that need no verl, on the bundled model: step OAR-P from per-token
log-probabilities equals the project's own `oar_p_step` (probe as_joint), verl's entropies give
the project's entropy weights, the advantage step gives the TRL trainer's weights (the same
pipeline, the same rows skipped) and A_i * w_t, and the `oar` block is `ReshapeSettings`'.
verl's own side (its compute_advantage, the trainer mode, the entry point) is tested in
tests/training/verl_plugin, in verl's environment."""
import dataclasses
import importlib.util
import re

import pytest
import torch

import verl_rows as vr
from oar_attrib import defaults
from oar_attrib.errors import InputError, MissingExtraError
from oar_attrib.inputs.encoding import pairs_to_batch
from oar_attrib.methods.oar_p_step import oar_p_step
from oar_attrib.models import load_model
from oar_attrib.training.errors import TrainingConfigError
from oar_attrib.training.reshaping import encode_rows, nonzero_rows, token_weights
from oar_attrib.training.verl.scoring import oar_p_step_importances, step_copies, step_units_of
from oar_attrib.training.verl.settings import WORKER_ONLY, VerlOARSettings, block_keys
from oar_attrib.training.verl.step import VerlRows, advantage_step, sequence_advantages
from oar_attrib.weights.settings import ReshapeSettings


@pytest.fixture(scope="module")
def arith():
    model, tokenizer = load_model("arith-tiny")
    prompts, responses, rewards, uids = vr.rows_of(tokenizer)
    pad = tokenizer.pad_token_id
    mask = vr.response_mask(responses)
    rows = VerlRows(prompts, responses, mask, vr.grpo(rewards, uids, mask), rewards, uids,
                    vr.response_entropies(model, prompts, responses, pad))
    return model, tokenizer, rows


def _batch(tokenizer, rows):
    pairs = encode_rows(tokenizer, rows.prompts, rows.responses)
    return pairs_to_batch(pairs, tokenizer.pad_token_id)


def _reference(model, tokenizer, rows, settings: ReshapeSettings):
    """The TRL trainer's road: the project's pipeline with the model in this process."""
    sequence = sequence_advantages(rows.advantages, rows.response_mask)
    select = nonzero_rows(sequence, settings)
    return token_weights(model, tokenizer, rows.prompts, rows.responses, rows.response_mask.shape[1], settings,
                         select, rows.outcomes(sequence))


@pytest.mark.parametrize("rows_per_call", [1, 4, 1000])
def test_step_oar_p_from_log_probabilities_is_the_projects_own(arith, rows_per_call):
    model, tokenizer, rows = arith
    batch = _batch(tokenizer, rows)
    calls = []
    got = oar_p_step_importances(batch, vr.model_policy(model, tokenizer.pad_token_id, calls),
                                 list(range(len(rows.prompts))), rows_per_call)
    want = oar_p_step(model, batch, probe="as_joint")
    assert want.abs().max() > 0.01 and (want > 0).sum() > 10  # the comparison means something
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-4)
    copies = step_copies(batch, step_units_of(batch), list(range(len(rows.prompts))))
    # one clean row and one per step, for the rows with a span (not the one without)
    assert copies.units.count(-1) == int(batch.has_answer.sum()) == 7
    assert len(copies.rows) == int(batch.has_answer.sum()) + sum(
        len(set(step_units_of(batch)[r].tolist()) - {-1}) for r in range(len(rows.prompts)))
    assert [len(c) for c in calls] == [min(rows_per_call, len(copies.rows) - i)
                                       for i in range(0, len(copies.rows), rows_per_call)]


def test_a_copy_masks_exactly_its_steps_reachable_scored_tokens(arith):
    _, tokenizer, rows = arith
    batch = _batch(tokenizer, rows)
    units = step_units_of(batch)
    copies = step_copies(batch, units, [1])  # "a=4. b=7. c=a+b=4+7=11. #### 11": three steps
    clean = copies.ids[0]
    assert copies.units == [-1, 0, 1, 2] and clean == batch.input_ids[1, : len(clean)].tolist()
    for ids, unit in zip(copies.ids[1:], copies.units[1:]):
        changed = [t for t, (a, b) in enumerate(zip(clean, ids)) if a != b]
        assert changed == (units[1] == unit).nonzero().flatten().tolist()
        assert all(ids[t] == tokenizer.pad_token_id for t in changed)


def test_the_advantage_step_gives_the_trl_trainers_weights_and_a_times_w(arith):
    model, tokenizer, rows = arith
    settings = VerlOARSettings(rows_per_call=5)
    step = advantage_step(rows, settings, tokenizer, vr.model_policy(model, tokenizer.pad_token_id))
    want = _reference(model, tokenizer, rows, settings.reshape_settings())
    torch.testing.assert_close(step.weights.weights, want.weights, atol=1e-5, rtol=1e-5)
    for name in ("scored", "span_found", "attributed", "nonfinite"):
        assert torch.equal(getattr(step.weights, name), getattr(want, name)), name
    assert step.weights.attributed.tolist() == [True] * 5 + [False] * 3  # no span; equal rewards
    sequence = sequence_advantages(rows.advantages, rows.response_mask)
    torch.testing.assert_close(step.advantages, sequence[:, None] * step.weights.weights * rows.response_mask)
    assert (step.advantages[rows.response_mask == 0] == 0).all()
    scored = step.weights.scored & step.weights.attributed[:, None]
    means = (step.weights.weights * scored).sum(1) / scored.sum(1).clamp_min(1)
    torch.testing.assert_close(means[step.weights.attributed], torch.ones(5))  # mass preserved
    assert set(step.metrics) == {"oar/ess_ratio", "oar/top10_mass", "oar/span_found_rate", "oar/nonfinite_rows",
                                 "oar/attributed_rate", "oar/weight_max", "oar/time_s"}
    assert step.metrics["oar/span_found_rate"] == 7 / 8 and step.metrics["oar/attributed_rate"] == 5 / 8
    assert 0 < step.metrics["oar/ess_ratio"] < 1


@pytest.mark.parametrize("method", ["entropy", "entropy_reasoning"])
def test_verl_entropies_give_the_projects_entropy_weights(arith, method):
    model, tokenizer, rows = arith
    settings = VerlOARSettings(method=method)
    step = advantage_step(rows, settings, tokenizer, policy=None)  # no model call
    want = _reference(model, tokenizer, rows, settings.reshape_settings())
    torch.testing.assert_close(step.weights.importances, want.importances, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step.weights.weights, want.weights)
    assert step.weights.importances.abs().max() > 0.1


def test_plain_grpo_keeps_verls_advantages_and_logs_the_spans(arith):
    _, tokenizer, rows = arith
    step = advantage_step(rows, VerlOARSettings(method="none"), tokenizer, policy=None)
    assert step.advantages is None  # verl's stay as they are, bit for bit
    assert (step.weights.weights == 1).all() and step.metrics["oar/ess_ratio"] == 1.0
    assert step.metrics["oar/span_found_rate"] == 7 / 8


def test_a_tool_turn_inside_a_response_keeps_the_row_at_weight_one(arith):
    model, tokenizer, rows = arith
    mask = rows.response_mask.clone()
    mask[1, 2:4] = 0  # tokens a tool wrote between the model's
    holed = dataclasses.replace(rows, response_mask=mask, advantages=rows.advantages * mask)
    step = advantage_step(holed, VerlOARSettings(), tokenizer, vr.model_policy(model, tokenizer.pad_token_id))
    assert holed.holed().tolist() == [False, True] + [False] * 6
    assert not step.weights.attributed[1] and (step.weights.weights[1] == 1).all()
    assert step.weights.attributed[0]


def test_an_advantage_that_varies_along_a_response_is_one_line(arith):
    _, _, rows = arith
    varying = rows.advantages.clone()
    varying[2, 0] += 1.0
    with pytest.raises(InputError, match=r"^the advantages of row 2 vary along its response: .*adv_estimator=oar_grpo"):
        sequence_advantages(varying, rows.response_mask)


def test_the_oar_block_is_generated_from_reshape_settings():
    keys = {key: (default, text) for key, default, text in block_keys()}
    fields = {f.name: f for f in dataclasses.fields(ReshapeSettings)}
    assert set(keys) == (set(fields) - set(WORKER_ONLY)) | {"rows_per_call"}
    for name, (default, text) in keys.items():
        if name in fields:
            assert text == fields[name].metadata["help"]
            assert default == {"method": defaults.VERL_METHOD, "probe": defaults.VERL_PROBE}.get(name, fields[name].default)
    settings = VerlOARSettings.from_block({"method": "entropy", "tau": 0.5, "beta": 2, "weighting": None})
    assert settings.reshape_settings() == ReshapeSettings(method="entropy", probe=defaults.VERL_PROBE, tau=0.5, beta=2.0)
    assert VerlOARSettings.from_block(None) == VerlOARSettings()


@pytest.mark.parametrize("block, line", [
    ({"tau": 1.5}, "oar.tau=1.5 must be in [0, 1]"),
    ({"tau": "high"}, "oar.tau='high' must be float"),
    ({"beta": True}, "oar.beta=True must be float"),
    ({"method": "no_such"}, "oar.method='no_such' is not allowed; choose one of "),
    ({"method": "oar_g"}, "oar.method='oar_g' does not run on verl yet: "),
    ({"probe": "as_mean"}, "oar.probe='as_mean' reads whole next-token distributions, "),
    ({"rows_per_call": 0}, "oar.rows_per_call=0 must be an integer >= 1"),
    ({"taus": 0.4}, "oar.taus is not a key of the oar block; known: method, probe, tau, "),
    ({"noise_std": 0.1}, "oar.noise_std is not a key of the oar block; "),
])
def test_a_wrong_oar_key_or_value_is_one_line_naming_it(block, line):
    with pytest.raises(TrainingConfigError) as err:
        VerlOARSettings.from_block(block)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_the_plugin_package_imports_without_verl_and_names_the_extra(monkeypatch):
    import oar_attrib.training.verl as plugin

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a))
    monkeypatch.delitem(vars(plugin), "OARSyncTrainer", raising=False)
    assert plugin.VerlOARSettings is VerlOARSettings  # no verl needed
    with pytest.raises(MissingExtraError, match=r"^oar_attrib.training.verl.OARSyncTrainer needs the verl extra: "
                                                r"pip install 'oar-attrib\[verl\]'$"):
        plugin.OARSyncTrainer  # noqa: B018


def test_the_guide_lists_every_key_of_the_block_with_its_default():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "verl.md").read_text()
    rows = dict(re.findall(r"^\| `oar\.(\w+)` \| `([^`]*)` \|", page, flags=re.M))
    shown = {key: "null" if default is None else str(default) for key, default, _ in block_keys()}
    assert rows == shown
