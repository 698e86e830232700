"""The published baselines inside the trainer: what the loss receives is the paper's token
advantage, computed here again from the batch the loss saw (METHOD.md section 7).

- KTAE: A_{i,t} = A_i + k(y_{i,t}), k from the rollouts of row i's group (the rows of one
  prompt: TRL shuffles the rows before the loss), right = total reward > 0;
- GRAIL: the reasoning of a rollout with A_i > 0 keeps weight 1 (wrong rollouts only);
- entropy: every row is scored, rows whose advantage is 0 too (the 80/20 cut-off is over the
  whole batch's response tokens).
"""
import pytest
import torch

from oar_attrib.methods.baselines.ktae import key_token_values
from oar_attrib.training.rewards import world_reward
from oar_attrib.training.toy import world_tokenizer
from models import GROUP, tiny_trainer, train_world


@pytest.fixture(scope="module")
def tok():
    return world_tokenizer()


@pytest.fixture(scope="module")
def world():
    return train_world()


def _rows(tok, inputs):
    """Prompts (text), completion id lists and texts of a recorded loss call."""
    prompt_rows = [ids[m.bool()].tolist() for ids, m in zip(inputs["prompt_ids"], inputs["prompt_mask"])]
    lengths = inputs["completion_mask"].sum(dim=1).tolist()
    completions = [ids[:n].tolist() for ids, n in zip(inputs["completion_ids"], lengths)]
    return tok.batch_decode(prompt_rows), completions, tok.batch_decode(completions, skip_special_tokens=True)


def test_ktae_adds_each_groups_key_token_values_to_the_advantage(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, record=True, oar_method="ktae")
    trainer.train()
    (inputs,) = trainer.loss_inputs
    prompts, completions, texts = _rows(tok, inputs)
    answers = {p.prompt: str(p.answer) for p in world[0]}
    rewards = torch.tensor(world_reward(prompts, texts, answer=[answers[p] for p in prompts]))
    adv = torch.zeros(len(prompts))
    expected = torch.zeros(inputs["completion_ids"].shape)
    for prompt in set(prompts):
        rows = [i for i, p in enumerate(prompts) if p == prompt]
        assert len(rows) == GROUP
        r = rewards[rows]
        adv[rows] = (r - r.mean()) / (r.std() + 1e-4)
        values = key_token_values([torch.tensor(completions[i]) for i in rows], r > 0, tok.pad_token_id)
        for i in rows:
            expected[i, :len(completions[i])] = torch.tensor([values[t] for t in completions[i]])
    expected = adv[:, None] + expected
    mask = inputs["completion_mask"].bool()
    assert (expected[mask] != adv[:, None].expand_as(expected)[mask]).any()  # some values are not 0
    torch.testing.assert_close(inputs["advantages"][mask], expected[mask], atol=1e-4, rtol=1e-4)
    assert (trainer.last_token_weights.weights == 1).all()


def test_grail_keeps_right_rollouts_reasoning_at_weight_one(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="grail", oar_skip_zero_advantage=False)
    trainer.train()
    tw = trainer.last_token_weights  # rows in TRL's group order (before its shuffle)
    prompts = tok.batch_decode([p.prompt_ids for p in tw.pairs])
    answers = {p.prompt: str(p.answer) for p in world[0]}
    rewards = torch.tensor(world_reward(prompts, [p.text for p in tw.pairs],
                                        answer=[answers[p] for p in prompts]))
    sequence = rewards - rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)  # sign of A_i
    reasoning = torch.stack([torch.tensor([lab == "reasoning" for lab in p.labels] +
                                          [False] * (tw.weights.shape[1] - len(p.labels)))
                             for p in tw.pairs]) & tw.span_found[:, None]
    answer = torch.stack([torch.tensor([lab == "answer" for lab in p.labels] +
                                       [False] * (tw.weights.shape[1] - len(p.labels)))
                          for p in tw.pairs]) & tw.span_found[:, None]
    right, wrong = sequence > 0, sequence < 0
    assert right.any() and wrong.any()
    assert (tw.weights[right[:, None] & reasoning] == 1).all()
    assert (tw.weights[wrong[:, None] & reasoning] != 1).any()
    assert (tw.weights[answer] == 5).all()


def test_entropy_scores_rows_whose_advantage_is_zero(tmp_path, tok, world):
    trainer = tiny_trainer(tmp_path, tok, world, oar_method="entropy")
    trainer.train()
    tw = trainer.last_token_weights
    assert tw.attributed.all()  # oar_skip_zero_advantage stays on, yet every row takes part
    kept = tw.weights[tw.scored]
    assert set(kept.unique().tolist()) <= {0.0, 1.0}
    assert int(kept.sum()) == pytest.approx(0.2 * int(tw.scored.sum()), abs=1.0)
