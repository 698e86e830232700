"""Training at step granularity: step pooling and gating, and a GRPO step with
oar_granularity='step'."""
import pytest
import torch

from oar_attrib.weights.gating import bilevel_weights
from oar_attrib.weights.step_gating import pool_step_tensor, step_weights
from oar_attrib.inputs.steps import pool_steps
from oar_attrib.training.config import OARConfig
from oar_attrib.training.errors import TrainingConfigError
from oar_attrib.training.toy import world_tokenizer
from models import TRAIN_ARGS, tiny_trainer, train_world

STEP_IDS = torch.tensor([[0, 0, 1, 1, 1, 2, -1, -1], [-1, 0, 0, 1, 2, 2, 2, -1]])
IMPORTANCE = torch.tensor([[1.0, 3.0, 0.5, 0.5, 2.0, 4.0, 9.0, 9.0],
                           [9.0, 0.2, 0.2, 5.0, 1.0, 2.0, 3.0, 9.0]])


@pytest.mark.parametrize("how", ["sum", "mean", "max"])
def test_pool_step_tensor_equals_pool_steps(how):
    pooled, valid = pool_step_tensor(IMPORTANCE, STEP_IDS, how)
    for row, ranges in enumerate([[(0, 2), (2, 5), (5, 6)], [(1, 3), (3, 4), (4, 7)]]):
        assert pooled[row].tolist() == pytest.approx(pool_steps(IMPORTANCE[row].tolist(), ranges, how))
    assert valid.all()


def test_step_weights_by_hand():
    scored = STEP_IDS >= 0
    w = step_weights(IMPORTANCE, scored, STEP_IDS, "mean")
    for row in range(2):
        ids = STEP_IDS[row]
        steps = sorted(set(ids.tolist()) - {-1})
        means = torch.tensor([IMPORTANCE[row][ids == k].mean() for k in steps])
        per_step = bilevel_weights(means)
        sizes = torch.tensor([(ids == k).sum() for k in steps]).float()
        scale = sizes.sum() / (per_step * sizes).sum()
        for k in steps:
            assert torch.allclose(w[row][ids == k], per_step[k] * scale)
        assert w[row][scored[row]].mean() == pytest.approx(1.0, abs=1e-6)
        assert (w[row][~scored[row]] == 1).all()
    assert w[0, 5] > w[0, 2]  # the step of larger importance weighs more


@pytest.mark.parametrize("method", ["oar_p_step", "oar_p_hier", "oar_g"])
def test_a_grpo_step_at_step_granularity(tmp_path, method):
    trainer = tiny_trainer(tmp_path, world_tokenizer(), train_world(), record=True, oar_method=method,
                           oar_granularity="step", activation_checkpointing=False)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    tw = trainer.last_token_weights
    (inputs,) = trainer.loss_inputs
    gated = 0
    for row, pair in enumerate(tw.pairs):
        if not tw.attributed[row]:
            continue
        w = tw.weights[row]
        assert w[tw.scored[row]].mean().item() == pytest.approx(1.0, abs=1e-4)
        assert pair.steps and pair.steps[-1][1] == int(tw.scored[row].sum())
        for a, b in pair.steps:
            assert torch.all(w[a:b] == w[a])  # constant inside a step
        gated += len({round(float(w[a]), 5) for a, _ in pair.steps}) > 1
        # The loss sees A_i * w_t on this completion (rows of the loss may come reordered).
        n = len(pair.response_ids)
        match = [i for i, ids in enumerate(inputs["completion_ids"]) if ids[:n].tolist() == pair.response_ids]
        adv = inputs["advantages"][match[0], :n]
        torch.testing.assert_close(adv, adv[0] / w[0] * w[:n])
    assert gated > 0  # weights differ between steps somewhere: the gate acted
    if method == "oar_p_step":
        for row, pair in enumerate(tw.pairs):
            if tw.attributed[row]:
                imp = tw.importances[row]
                assert all(torch.all(imp[a:b] == imp[a]) for a, b in pair.steps)


def test_granularity_is_checked(tmp_path):
    with pytest.raises(TrainingConfigError, match="oar_granularity"):
        OARConfig(output_dir=str(tmp_path), oar_granularity="word", **TRAIN_ARGS)
    with pytest.raises(TrainingConfigError, match="oar_step_pool"):
        OARConfig(output_dir=str(tmp_path), oar_step_pool="median", **TRAIN_ARGS)
